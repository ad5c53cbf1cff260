// The DPDK port's public face: options (options.h) and a factory, with no DPDK header in sight,
// so the engine (and everything else) builds without DPDK's compiler flags. See dpdk_port.h.
#pragma once

#include <memory>
#include <string>

#include "dpdk_port/options.h"
#include "ports/port.h"

namespace uroce::dpdk {

// Opens (probes, configures, starts) the DPDK port; initialises the EAL first if needed.
// nullptr and *err naming what failed.
std::unique_ptr<Port> open_port(const DpdkPortOptions& opt, PortCounters& counters,
                                std::string* err);

// True when uroce was built with DPDK (always, where this header's library is linked).
constexpr bool kAvailable = true;

}  // namespace uroce::dpdk

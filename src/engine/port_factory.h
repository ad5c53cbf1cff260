// The one place that knows every concrete port: opens the port a device's configuration names.
// Everything else in the engine sees only the Port interface (ports/port.h).
#pragma once

#include <memory>
#include <string>

#include "engine/config.h"
#include "ports/port.h"

namespace uroce {

// nullptr and *err (naming what failed) when the port cannot be opened.
std::unique_ptr<Port> open_port(const DeviceConfig& cfg, PortCounters& counters, std::string* err);

}  // namespace uroce

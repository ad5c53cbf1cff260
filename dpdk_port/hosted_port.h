// A client's view of a shared DPDK device (host_proto.h; share=1 in its dpdk(…) body): a Port
// whose frames go through the device's host process (uroce-dpdk-host), which owns the DPDK port.
// Its datapath is a SOCK_SEQPACKET socketpair with the host — one message per datagram, sent with
// sendmmsg and read with recvmmsg — so it is not a poll-mode port: its socket is its wait fd and
// a sleeping engine wakes for it. Its PortShare gives the slot's QPNs and comm IDs and asks the
// host for rdma_cm's claims. No DPDK header: built into the engine with or without DPDK.
#pragma once

#include <memory>
#include <string>

#include "dpdk_port/options.h"
#include "ports/port.h"

namespace uroce::dpdk {

// Joins the host of opt.dev, spawning it first when none runs (host_main.cc): nullptr and *err
// on failure.
std::unique_ptr<Port> open_hosted_port(const DpdkPortOptions& opt, PortCounters& counters,
                                       std::string* err);

// Where the host executable is: $UROCE_DPDK_HOST, else uroce-dpdk-host beside the binary or
// library this code is in (its bin/ or libexec/ sibling directories), else "" (PATH is searched).
std::string host_executable();

}  // namespace uroce::dpdk

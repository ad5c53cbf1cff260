// The path from a device to a peer, as a RoCE engineer checks it by hand: is the peer
// reachable and how far (ICMP echo, round trip), is UDP 4791 open (roce_probe.h), does a
// packet of the device's RoCE MTU fit the whole path (echo requests with DF at the size of each
// MTU's largest RoCE packet), and does the path keep DSCP and ECN (the TOS byte of an echo
// reply). Over IPv6 the same with ICMPv6 echo, unfragmented requests and the Traffic Class. The
// verdicts are pure functions of the probes' results, so the tests can give them every case;
// check_path() runs the probes.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "tools/doctor/icmp_probe.h"
#include "tools/doctor/report.h"
#include "tools/doctor/roce_probe.h"

namespace uroce::doctor {

// The IP packet that carries a full RoCEv2 packet of IB MTU m: m + IPv4 20 + UDP 8 + BTH 12 +
// RETH 16 + ImmDt 4 + ICRC 4 (a first RDMA WRITE with immediate, the largest headers), as in
// ib_mtu_for (tools/netdev.h); over IPv6 the header is 20 bytes longer (src/engine/device.cc
// gives an IPv6 device the active MTU of an interface 20 bytes smaller).
inline constexpr uint32_t kRoceIpOverhead = 64;
inline constexpr uint32_t kRoceIpv6Overhead = kRoceIpOverhead + 20;

struct PathOptions {
  // The device's address (probes leave from it) and the peer's, of one family: IPv4-mapped
  // (ICMP, UDP/IPv4) or IPv6 (ICMPv6, UDP/IPv6). scope_id: the interface of a link-local pair.
  wire::IpAddr src{};
  wire::IpAddr peer{};
  uint32_t scope_id = 0;
  uint32_t device_mtu = 0;  // the active IB MTU the device reports (256..4096)
  uint32_t if_mtu = 0;      // its interface's MTU (0: unknown)
  uint8_t dscp = 26;        // the DSCP the TOS probe carries (with ECT(0))
  int wait_ms = 500;        // per probe
  int attempts = 3;         // per probe that gets no answer
};

std::vector<Check> check_path(const PathOptions& o);

// ---- the verdicts (pure) -------------------------------------------------------------------

struct EchoSummary {
  int sent = 0, answered = 0;
  double min_rtt_us = 0, avg_rtt_us = 0;
  std::optional<IcmpError> error;  // the last one seen
};
Check reach_verdict(const wire::IpAddr& peer, const EchoSummary& e, const RoceProbeResult* roce);
Check udp_verdict(const wire::IpAddr& peer, const RoceProbeResult& r);

// One rung of the MTU ladder: the echo of the largest RoCE packet of ib_mtu.
struct MtuStep {
  uint32_t ib_mtu = 0;
  uint32_t ip_bytes = 0;
  bool answered = false;
  std::optional<IcmpError> error;
};
// ip_overhead: kRoceIpOverhead, or kRoceIpv6Overhead on an IPv6 path.
Check mtu_verdict(const std::vector<MtuStep>& steps, uint32_t device_mtu, uint32_t if_mtu,
                  uint32_t ip_overhead = kRoceIpOverhead);
// DSCP and ECN: the TOS byte sent on an echo request and the one its reply came back with.
Check dscp_verdict(uint8_t sent_tos, uint8_t reply_tos);
Check ecn_verdict(uint8_t sent_tos, uint8_t reply_tos);

}  // namespace uroce::doctor

// Is UDP 4791 open between here and a peer? A probe every RoCE peer's connection manager
// answers: a SIDR REQ (IBTA 12.11) in a RoCEv2 UD datagram to the peer's QP1 (the GSI, Q_Key
// 0x80010000), for a service ID nobody listens on. The peer's CM answers with a SIDR REP whose
// status is "service ID not supported" (uroce's CM agent, src/cm/agent.cc, and the kernel's
// cm_sidr_req_handler alike) — an answer that needs no listener and changes nothing there.
//
// What each outcome proves:
//   SIDR REP            a RoCE CM at the peer, UDP 4791 open both ways (conclusive);
//   ICMP port unreachable  the peer's host runs nothing on UDP 4791 (conclusive: the host said so);
//   other ICMP errors   host or network unreachable, or a filter that REJECTs (it names itself);
//   silence             inconclusive: a filter that DROPs UDP 4791 on the way there or back, or a
//                       peer with no CM on QP1 — a uroce process opens QP1 only while it uses
//                       rdma_cm, so a verbs-only program (ibv_rc_pingpong) is silent too.
// The REP comes back to this host's UDP 4791 (a RoCE answer goes to port 4791, whatever the
// request's source port): the probe listens there itself when nothing else does, else (a uroce
// process holds the port) reads a copy of every UDP datagram through a raw socket (root or
// CAP_NET_RAW), else it cannot see the answer and says so.
//
// Over IPv6 the probe is the same datagram in UDP/IPv6, its ICRC computed with the IPv6 rules
// (wire::Ipv6UdpFraming: Traffic Class, Flow Label and Hop Limit masked), and ICMPv6 errors read
// as ICMP ones are (port unreachable is ICMPv6 type 1 code 4).
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "transport/wire/ip.h"

namespace uroce::doctor {

// The service ID the probe asks for: in the RDMA IP CM range (Annex A11: 0x0000000001 PS port)
// with a port space no rdma_cm uses (0x00ff), so no listener can match it.
inline constexpr uint64_t kProbeServiceId = 0x0000000001ff0000ULL;

// The UDP payload of the probe (BTH, DETH, the SIDR REQ MAD, ICRC) as sent from src:src_port
// to dst:4791. IPv4(-mapped) addresses: with DF and IP ID 0 — what the kernel gives an
// unconnected DF datagram, which the ICRC covers (docs/wire-format.md); IPv6 ones: the ICRC of
// UDP/IPv6, which covers no field the kernel chooses. src and dst are of one family.
std::vector<uint8_t> build_sidr_probe(const wire::IpAddr& src, const wire::IpAddr& dst,
                                      uint16_t src_port, uint32_t request_id, uint64_t tid);

// The SIDR REP answering request_id in a RoCEv2 UDP payload, or nullopt when it is none.
struct SidrAnswer {
  uint8_t status = 0;  // cm::SidrStatus
};
std::optional<SidrAnswer> parse_sidr_answer(std::span<const uint8_t> udp_payload,
                                            uint32_t request_id);
const char* sidr_status_text(uint8_t status);

struct RoceProbeResult {
  enum class Outcome { kAnswered, kPortUnreachable, kIcmpError, kSilence, kCannotRun };
  Outcome outcome = Outcome::kCannotRun;
  uint8_t sidr_status = 0;
  double rtt_us = 0;      // kAnswered: request to answer
  uint8_t reply_tos = 0;  // kAnswered: the REP's IP TOS byte as it arrived
  std::string detail;     // ICMP error text and who sent it, or why it cannot run
  int attempts = 0;
};
// Sends the probe (up to `attempts` times, `wait_ms` apart) from src to dst (one family;
// scope_id: the interface of a link-local IPv6 pair) and waits for an answer.
RoceProbeResult probe_udp4791(const wire::IpAddr& src, const wire::IpAddr& dst, uint32_t scope_id,
                              int attempts, int wait_ms);

}  // namespace uroce::doctor

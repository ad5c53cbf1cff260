// A DPDK device shared by several processes (docs/architecture.md, "One device, many processes":
// the DPDK part): one host process (uroce-dpdk-host, host.h) owns the port; every application
// process that opens the device with share=1 is its client (hosted_port.h). This header is what
// the two sides agree on — no DPDK header, so the client side builds into the engine as it is.
//
// - The host listens on a SOCK_SEQPACKET unix socket in the abstract namespace, named by the
//   user, the network namespace and the device (socket_name): only processes of the namespace
//   reach it, and its name dies with the host, so no file is left behind by a kill -9.
// - Control: a client connects and sends a Request{kJoin}; the host answers a JoinReply with two
//   descriptors (SCM_RIGHTS): its end of a SOCK_SEQPACKET socketpair for the data, and a memfd
//   holding the Shared page. Later Requests (the CM's claims) get a Reply each, one at a time.
// - Data: one message per datagram on the socketpair: a TxHeader (client → host) or RxHeader
//   (host → client), then the UDP payload (IB packet and ICRC).
// - The client's death closes both its sockets: the host frees its slot and claims at once.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>

#include "dpdk_port/options.h"
#include "ports/port.h"
#include "ports/udp/steering.h"
#include "transport/wire/ip.h"

namespace uroce::dpdk::host {

inline constexpr uint32_t kMagic = 0x75724448;  // "urDH"
inline constexpr uint32_t kVersion = 1;

// The abstract socket's name (without its leading NUL): uid, network namespace inode and a hash
// of the device string (opt.dev), so two users or namespaces never meet.
std::string socket_name(const DpdkPortOptions& opt);

enum class Op : uint32_t {
  kJoin = 1,
  kClaim = 2,
  kRelease = 3,
  kListen = 4,
  kJoinGroup = 5,  // IPv4 multicast group (host order) for the client's UD QPs
  kLeaveGroup = 6
};

struct Request {
  uint32_t magic = kMagic;
  uint32_t version = kVersion;
  Op op = Op::kJoin;
  int32_t pid = 0;
  wire::IpAddr ip{};                  // kJoin: the device address the client was configured with
  uint16_t port_space = 0, port = 0;  // kClaim, kRelease, kListen
  uint8_t on = 0;                     // kListen
  uint8_t pad[3] = {};
  uint32_t group = 0;  // kJoinGroup, kLeaveGroup
};

struct JoinReply {
  uint32_t magic = kMagic;
  int32_t rc = 0;  // 0, or an errno (err says why)
  uint32_t slot = 0;
  uint32_t ip_mtu = 0;  // the port's caps
  uint8_t exact_icrc = 0, roce_v1 = 0, pad[2] = {};
  char err[240] = {};
};

struct Reply {
  int32_t rc = 0;
};

// Client → host: one datagram to send. The IB packet and ICRC follow.
struct TxHeader {
  wire::IpAddr dst_ip{};
  uint16_t src_port = 0;
  uint16_t ip_id = 0;  // what the client's ICRC covers
  uint8_t ecn = 0, dscp = 0, pcp = 0, roce_v1 = 0;
};
static_assert(sizeof(TxHeader) == 24);

// Host → client: one datagram received (RxFrame's fields). The UDP payload follows.
struct RxHeader {
  wire::IpAddr src_ip{}, dst_ip{};
  uint16_t src_port = 0, dst_port = 0;
  uint16_t ip_id = 0;
  uint8_t tos = 0, ip_id_known = 0, dont_fragment = 0, roce_v1 = 0, truncated = 0, pad = 0;
};
static_assert(sizeof(RxHeader) == 44);

// The page the host shares with its clients (a memfd, mapped read-write by both): the link, the
// NIC's view, and each slot's QPN counter, which outlives the client (a successor in its slot
// numbers on, as with the kernel-UDP port's registry). Fields are read and written atomically.
struct Shared {
  uint32_t magic;
  uint32_t link_up;
  NicInfo nic;
  uint32_t qpn_cursor[share::kSlots];
};

// Datagram buffers: the largest IB packet, its ICRC and a header.
inline constexpr size_t kMaxMessage = 4160 + 4 + sizeof(RxHeader) + 64;

}  // namespace uroce::dpdk::host

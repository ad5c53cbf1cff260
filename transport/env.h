// The narrow interfaces through which the deterministic transport core meets the world: time is a
// parameter, packets leave through a PacketSink, memory is reached through MemoryAccess (which
// enforces keys, PDs, bounds and access flags), completions leave through CompletionSink.
// Nothing in transport/ reads a clock, opens a socket or starts a thread.
#pragma once

#include <infiniband/verbs.h>

#include <cstddef>
#include <cstdint>
#include <limits>

#include "transport/wire/ip.h"

namespace uroce::transport {

// Nanoseconds on the caller's clock: CLOCK_MONOTONIC in the engine, virtual time in tests.
using Time = uint64_t;
inline constexpr Time kNever = std::numeric_limits<Time>::max();

// Largest IB packet (BTH..pad, no ICRC) the transport builds: 4096 B payload + headers.
inline constexpr size_t kMaxIbPacket = 4096 + 64;

// IP ECN codepoints (RFC 3168).
inline constexpr uint8_t kEcnNotEct = 0, kEcnEct1 = 1, kEcnEct0 = 2, kEcnCe = 3;

// Bytes in front of TxBuf::data that a port may fill with its own headers, so that a port that
// frames whole packets (Ethernet / 802.1Q / IPv4 / UDP: 46 bytes; / IPv6 / UDP: 66; RoCE v1's
// Ethernet / 802.1Q / GRH: 58) writes them in place and sends the buffer without a copy.
inline constexpr size_t kTxHeadroom = 72;
// The ICRC's four bytes, appended in place after the packet by the port layer.
inline constexpr size_t kTxTailroom = 4;

// The GID index of a device's RoCE v1 GID, where it has one (a DPDK device with roce_v1=1; the
// same IPv4-mapped value as index 0, the RoCEv2 GID, as ConnectX devices list both types).
inline constexpr uint8_t kRoceV1GidIndex = 1;

// DSCP value (RFC 2474) meaning "the port's configured default for data packets".
inline constexpr uint8_t kDscpPortDefault = 0xff;
// TxBuf::pcp when the packet has no 802.1p priority of its own: a tagging port picks one.
inline constexpr uint8_t kPcpPortDefault = 0xff;
// The DSCP a GRH traffic class asks for: RoCEv2 carries the traffic class in the IPv4 TOS byte
// (Annex A17.4.5.2), so its upper six bits are the DSCP; 0 (no class set) keeps the port's.
inline constexpr uint8_t dscp_of_traffic_class(uint8_t tclass) {
  return tclass == 0 ? kDscpPortDefault : static_cast<uint8_t>(tclass >> 2);
}

// One outgoing IB packet. The transport fills the routing fields and data[0, len); the port
// layer adds the ICRC at data[len] and whatever framing it needs in front of data (headroom).
// A TxBuf comes from PacketSink::tx_alloc, so it lives in the port's memory (for a DPDK port,
// inside the mbuf that goes on the wire).
struct TxBuf {
  // The destination: IPv4-mapped for an IPv4 peer (the only kind the ports send to today: the
  // engine drops any other as unroutable before a port sees it).
  wire::IpAddr dst_ip{};
  uint16_t src_port = 0;  // UDP source port (ECMP entropy, derived from the QPN)
  uint8_t ecn = kEcnNotEct;
  // DSCP of the packet, or kDscpPortDefault. Set by the transport for packets with a traffic
  // class of their own (CNPs, a QP's GRH traffic_class).
  uint8_t dscp = kDscpPortDefault;
  // 802.1p priority for a port that tags its frames (DPDK with a VLAN), or kPcpPortDefault. Set
  // for CNPs (cnp_802p_prio); a port that does not tag ignores it.
  uint8_t pcp = kPcpPortDefault;
  uint32_t len = 0;  // bytes used in data (BTH .. pad), without the ICRC
  // RoCE v1 (IBTA Annex A16: Ethernet and a GRH, no IP/UDP) instead of RoCEv2: the QP's AV (or
  // the UD AH) uses the device's RoCE v1 GID (kRoceV1GidIndex). Only ports with
  // PortCaps::roce_v1 carry it.
  bool roce_v1 = false;
  // The packet is an RC QP's, and that QP's peer takes ACK riders (wire::kBthExtRides): an ACK of
  // it may ride on a request of it in the same flush (ride_acks(), transport/ack_rider.h).
  bool acks_ride = false;
  // IPv4 Identification the packet leaves with, chosen by the port before the ICRC (which covers
  // it) is computed. Not the transport's business.
  uint16_t ip_id = 0;
  // Payload sent from where it lies, not copied into data (PacketSink::tx_gather_min): when
  // ext_len != 0 the packet is data[0, len) — its headers — followed by ext[0, ext_len), and the
  // ICRC still goes at data[len] (the port sends it after ext). ext points into registered
  // memory the transport resolved under the device lock; it is read by the flush that follows
  // the commit, in the same lock hold, and never after (a port that must keep a frame copies
  // the payload in first).
  const uint8_t* ext = nullptr;
  uint32_t ext_len = 0;
  // The IB packet's length (BTH .. pad, without the ICRC), wherever its payload lies.
  uint32_t ib_len() const { return len + ext_len; }
  alignas(8) uint8_t headroom[kTxHeadroom];
  uint8_t data[kMaxIbPacket + kTxTailroom];
};
// data follows headroom directly, so data - n (n <= kTxHeadroom) is where n bytes of headers go.
static_assert(offsetof(TxBuf, data) == offsetof(TxBuf, headroom) + kTxHeadroom);

// Where a packet goes and how it is marked: TxBuf's routing fields, which stamp_route() sets
// together on every packet the transport builds — a port reuses its buffers, and a field left
// alone would keep the last packet's value (a CNP's DSCP or priority on data).
struct Route {
  wire::IpAddr dst_ip{};  // the peer's address (its GID's), IPv4-mapped for IPv4
  uint16_t src_port = 0;  // the QP's (src_port_for_qpn)
  uint8_t ecn = kEcnNotEct;
  uint8_t dscp = kDscpPortDefault;
  uint8_t pcp = kPcpPortDefault;
  bool roce_v1 = false;
  bool acks_ride = false;  // TxBuf::acks_ride
};
inline void stamp_route(TxBuf* buf, const Route& r) {
  buf->dst_ip = r.dst_ip;
  buf->src_port = r.src_port;
  buf->ecn = r.ecn;
  buf->dscp = r.dscp;
  buf->pcp = r.pcp;
  buf->roce_v1 = r.roce_v1;
  buf->acks_ride = r.acks_ride;
}

class PacketSink {
 public:
  virtual ~PacketSink() = default;
  // A free buffer (its payload in it: ext_len 0), or nullptr when the port's transmit ring is
  // full: the caller keeps its state and sends on a later pump().
  virtual TxBuf* tx_alloc() = 0;
  // Queues a buffer from tx_alloc(); the port flushes queued packets in batches.
  virtual void tx_commit(TxBuf* buf) = 0;
  // The smallest payload the sink takes by reference (TxBuf::ext) instead of copied into the
  // buffer; 0: always copy. A sink whose port copies each frame anyway as it sends it (memif
  // into its shared ring, sendmmsg into the kernel) saves the transport's copy this way. Only
  // for packets whose memory cannot be handed back before the flush: an RC request (its WQE
  // completes on an ACK, after the flush) and a READ response (deregistering takes the device
  // lock). A UD or UC send completes as it is committed, and the application may poll that
  // completion and reuse its buffer before the flush: those copy.
  // (A plain field, not a virtual call: the requester asks for every packet.)
  uint32_t tx_gather_min() const { return gather_min_; }

 protected:
  void set_tx_gather_min(uint32_t bytes) { gather_min_ = bytes; }

 private:
  uint32_t gather_min_ = 0;
};

// What the port knows of a received packet beyond its bytes.
struct RxInfo {
  wire::IpAddr src_ip{};  // IPv4-mapped for a datagram that came over IPv4 (or RoCE v1's GIDs)
  wire::IpAddr dst_ip{};  // the device address, or the multicast group it was sent to
  uint16_t src_port = 0;
  uint8_t ecn = kEcnNotEct;
  bool roce_v1 = false;  // it came as RoCE v1 (GRH; src/dst are its GIDs)
};

// Result of resolving a memory key. Each failure is a distinct cause because the transport maps
// them to different completion statuses and NAKs.
enum class MemStatus : uint8_t {
  kOk = 0,
  kBadKey,  // no such key (or invalidated)
  kBadPd,   // key belongs to another protection domain
  kOutOfBounds,
  kNoAccess,  // the region lacks the requested access flag
  // An on-demand (ODP) region's pages are not mapped, or not with the access asked for, at the
  // moment the transport reaches them: what an RNIC's failed ODP page fault reports.
  kNotMapped,
};

struct MemRef {
  MemStatus status = MemStatus::kBadKey;
  uint8_t* ptr = nullptr;  // host address of the first byte, valid when status == kOk
};

// A BIND_MW work request (ibv_bind_mw(3) for type 1 windows, IBV_WR_BIND_MW for type 2): bind the
// window `mw` to [addr, addr + length) of the MR `mr_lkey` with IBV_ACCESS_REMOTE_* `access`,
// under the R_Key `new_rkey` (same window index; for type 2 the low 8 bits are the consumer's
// key, for type 1 the verbs layer increments them). length 0 unbinds a type 1 window.
struct MwBind {
  uint32_t mw = 0;  // the window's handle, as MemoryAccess gave it out
  uint32_t new_rkey = 0;
  uint32_t mr_lkey = 0;
  uint64_t addr = 0;
  uint64_t length = 0;
  unsigned access = 0;
};

class MemoryAccess {
 public:
  virtual ~MemoryAccess() = default;
  // Resolves [addr, addr + len) under `key` for `access` (IBV_ACCESS_* bits; 0 = local read),
  // checking that the key exists, is an lkey (local) or rkey (remote) of PD `pd`, covers the range
  // and grants the access. len == 0 succeeds for any existing key of the PD.
  virtual MemRef resolve_local(uint32_t lkey, uint32_t pd, uint64_t addr, uint64_t len,
                               int access) = 0;
  virtual MemRef resolve_remote(uint32_t rkey, uint32_t pd, uint64_t addr, uint64_t len,
                                int access) = 0;
  // Atomic operations go through here so they are atomic with respect to every other atomic on
  // the device (IBV_ATOMIC_HCA); `ptr` was resolved by resolve_remote and is 8-byte aligned.
  // Returns the original value.
  virtual uint64_t atomic_fetch_add(uint8_t* ptr, uint64_t add) = 0;
  virtual uint64_t atomic_cmp_swap(uint8_t* ptr, uint64_t compare, uint64_t swap) = 0;
  // IBTA 1.5 ATOMIC WRITE: the 8 bytes `value` holds (in memory order, as they came off the wire)
  // land with one 8-byte store that no reader sees half done, ordered after every earlier write
  // of the QP (a release store, as rxe's smp_store_release in rxe_resp.c atomic_write_reply).
  // `ptr` was resolved by resolve_remote and is 8-byte aligned.
  virtual void atomic_store(uint8_t* ptr, uint64_t value) = 0;

  // Memory windows and invalidation (IBTA 10.6.7). The defaults refuse, so a MemoryAccess without
  // windows (e.g. a test fake) makes BIND_MW / LOCAL_INV / SEND_WITH_INV fail as on a device
  // without them.
  //
  // Executes a BIND_MW work request posted on a QP of PD `qp_pd`: kOk, or the cause of the
  // IBV_WC_MW_BIND_ERR completion (bad window, MR or key; PD mismatch; MR without
  // IBV_ACCESS_MW_BIND; window outside the MR; rights the MR cannot back).
  virtual MemStatus bind_mw(const MwBind& bind, uint32_t qp_pd) {
    (void)bind;
    (void)qp_pd;
    return MemStatus::kBadKey;
  }
  // Invalidates `rkey` for a LOCAL_INV posted on a QP of PD `pd`, or for a SEND with invalidate
  // received on one (IBTA 9.4.1.1, 10.6.7.2): only a bound type 2 window of that PD can be
  // invalidated this way. kBadKey: no such valid key; kBadPd: another PD; kNoAccess: the key
  // exists but may not be invalidated (an MR, a type 1 window).
  virtual MemStatus invalidate(uint32_t rkey, uint32_t pd) {
    (void)rkey;
    (void)pd;
    return MemStatus::kBadKey;
  }
};

class CompletionSink {
 public:
  virtual ~CompletionSink() = default;
  // A completion for the CQ. Must not fail: the CQ reports its own overrun.
  virtual void push(const ibv_wc& wc) = 0;
  // True once the CQ has overrun: it lost a completion and takes no more (IBTA C11-37). A QP whose
  // completion it then loses enters ERR with IBV_EVENT_QP_FATAL (C9-218, qp.cc). A sink that
  // never overruns keeps the default.
  virtual bool overrun() const { return false; }
  // The same, saying whether the completion is "solicited": a receive completion of a message
  // whose last packet had BTH.SE set (IBTA 9.2.3). ibv_wc has no flag for it, yet a CQ armed with
  // ibv_req_notify_cq(cq, 1) must fire only for such completions (and for errors, which the CQ
  // sees in wc.status). The default forwards to push(wc), so sinks that don't care need nothing.
  virtual void push(const ibv_wc& wc, bool solicited) {
    (void)solicited;
    push(wc);
  }
};

// Asynchronous events a QP raises (IBV_EVENT_*), e.g. IBV_EVENT_COMM_EST or IBV_EVENT_QP_FATAL.
class EventSink {
 public:
  virtual ~EventSink() = default;
  virtual void qp_event(uint32_t qpn, ibv_event_type type) = 0;
};

}  // namespace uroce::transport

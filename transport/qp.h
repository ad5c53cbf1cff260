// A queue pair of the transport core: the IBTA QP state machine (ch. 10.3), the requester, the
// responder and the completer of one QP. The engine owns QPs, serialises every call on one QP
// and passes the current time into each call. See docs/architecture.md.
#pragma once

#include <infiniband/verbs.h>

#include <array>
#include <cstdint>
#include <memory>

#include "transport/cc/params.h"
#include "transport/env.h"
#include "transport/qp_counters.h"
#include "transport/recv_queue.h"
#include "transport/ring.h"
#include "transport/wqe.h"
#include "wire/wire.h"

namespace uroce::transport {

// READ/ATOMIC requests outstanding per QP, both ways: the largest max_rd_atomic (as requester)
// and max_dest_rd_atomic (responder resources, IBTA 9.5, 9.7.4.1.3.2) a QP accepts, reported as
// max_qp_rd_atom and max_qp_init_rd_atom. Linux rxe offers 128, and perftest sets its
// outstanding READs from the peer's figure, so anything less breaks unmodified ib_read_bw
// against rxe. Responder resources cost memory only as they are used (responder.h).
inline constexpr uint8_t kMaxRdAtomic = 128;
// The line rate congestion control works against when the device gives none: what uroce reports
// as the port's speed (ibv_query_port: 1X EDR, 25 Gb/s).
inline constexpr uint64_t kDefaultLineRateBps = 25'000'000'000ull;

class Srq;      // srq.h
class XrcSrqs;  // srq.h

// The QP types whose transport is reliable connected: RC, and XRC's send (initiator) and receive
// (target) halves (IBTA 9.2: XRC is RC's protocol with an XRCETH in each request).
constexpr bool is_reliable(ibv_qp_type t) {
  return t == IBV_QPT_RC || t == IBV_QPT_XRC_SEND || t == IBV_QPT_XRC_RECV;
}

struct QpInit {
  ibv_qp_type type = IBV_QPT_RC;
  uint32_t qpn = 0;
  uint32_t pd = 0;          // protection domain handle, as MemoryAccess knows it
  wire::IpAddr local_ip{};  // the device address (IPv4-mapped, or IPv6)
  uint32_t max_send_wr = 0, max_recv_wr = 0;
  uint32_t max_send_sge = 0, max_recv_sge = 0, max_inline_data = 0;
  bool sq_sig_all = false;
  CompletionSink* send_cq = nullptr;
  CompletionSink* recv_cq = nullptr;
  EventSink* events = nullptr;  // may be null
  // UD: the port's active MTU in bytes (256..4096), the largest UD message (IBTA C10-93.1.1);
  // UD QPs have no path MTU attribute.
  uint32_t port_mtu = 4096;
  // Shared receive queue (srq.h), or null. With one, post_recv is refused (EINVAL) and receive
  // WQEs come from the SRQ; the caller keeps the SRQ alive while the QP exists.
  Srq* srq = nullptr;
  // XRC receive (target) QPs: the XRC domain they belong to, and where the SRQ each request names
  // is looked up (its XRCETH). Such a QP has no PD, CQ or queue of its own: each message takes
  // its WQE from the SRQ, checks memory against the SRQ's PD and completes into the SRQ's CQ.
  uint32_t xrcd = 0;
  XrcSrqs* xrc_srqs = nullptr;
  // RC: resend from the oldest unacknowledged PSN when no ACK progress came for a probe timeout
  // derived from the measured round trip, well before the local ACK timeout (completer.h). Off,
  // only the IBTA ACK timer retransmits. The device sets it from DeviceConfig (default on,
  // UROCE_EARLY_RETRANSMIT); off here so a bare QpInit keeps the plain IBTA behaviour.
  bool early_retransmit = false;
  // RC without an SRQ: a SEND (or WRITE with immediate) that finds no receive WQE waits up to
  // min(this, the QP's min_rnr_timer) for the application to post one, with every request
  // behind it, before the RNR NAK (qp.cc, "RNR grace"). 0: the NAK at once, as IBTA 9.7.5.2.8
  // describes and an RNIC does. The device sets it from DeviceConfig (UROCE_RNR_GRACE); 0 here
  // so a bare QpInit keeps the plain IBTA behaviour.
  Time rnr_grace_ns = 0;
  // RC: the QP speaks selective repeat (docs/selective-repeat.md) and uses it with a peer that
  // shows it does too. It marks every packet it sends (wire::kBthExtSr); once a packet from its
  // peer carries the mark (QpContext::peer_sr), the responder places RDMA WRITE packets that
  // arrive ahead of the expected PSN (within kSrWindowPkts) and reports each with a SACK, and the
  // requester sends every packet of a multi-packet RDMA WRITE as a WRITE ONLY with its own RETH
  // and resends only the PSNs no SACK or ACK covers. With a peer that never marks (rxe, an RNIC,
  // uroce with it off) it is go-back-N: only the mark differs on the wire. Off, every byte is as
  // without it. Off in a bare QpInit; the device turns it on (UROCE_SR, default 1).
  bool selective_repeat = false;
  // RC: the QP takes ACKs riding on its peer's requests and, with a peer that shows it does too,
  // lets its own ACKs ride on its requests (transport/ack_rider.h): it marks every packet it
  // sends (wire::kBthExtRides), and once a packet from its peer carries the mark
  // (QpContext::peer_rides) its packets are TxBuf::acks_ride. Whether an ACK does ride is the
  // flush's business (ride_acks): an ACK and a request of the QP must leave together. A packet
  // carrying one (wire::kBthExtAck) is taken whatever this says. Off in a bare QpInit; the device
  // turns it on (UROCE_ACK_RIDERS, default 1).
  bool ack_riders = false;
  // RC with selective repeat: spread split RDMA WRITE packets over this many UDP source ports
  // (paths). 1: one. Once the peer shows it speaks selective repeat, each RDMA WRITE packet the
  // responder may place ahead goes on the next of `paths` UDP source ports (ECMP entropy values) in
  // turn, and a hole counts as lost only when a packet sent after it on its own path has arrived
  // (transport/multipath.h). 1 (and any QP without selective repeat): the QP's one source port,
  // as before. The device sets it from DeviceConfig (UROCE_PATHS, default 1); at most kMaxPaths.
  uint8_t paths = 1;
  // Congestion control (transport/cc, docs/congestion-control.md): the device's configuration,
  // copied per QP. The default, `none`, keeps the behaviour without it: no pacing, no CNPs.
  cc::CcConfig cc;
  // The rate congestion control starts from and caps at (rpg_max_rate may cap lower), bits/s.
  uint64_t line_rate_bps = kDefaultLineRateBps;
};

class Qp {
 public:
  Qp(const QpInit& init, PacketSink& tx, MemoryAccess& mem);
  ~Qp();
  Qp(const Qp&) = delete;
  Qp& operator=(const Qp&) = delete;

  uint32_t qpn() const;
  ibv_qp_type type() const;
  ibv_qp_state state() const;

  // Validates the transition and the attribute mask against IBTA's table of required and
  // optional attributes (ch. 10.3, as ibv_modify_qp(3) lists it) and the attribute values; applies
  // it on success. Returns 0 or EINVAL, like hardware providers. Moving to ERR flushes every
  // outstanding WQE with IBV_WC_WR_FLUSH_ERR; moving to RESET empties the queues silently.
  int modify(const ibv_qp_attr& attr, int mask, Time now);
  void query(ibv_qp_attr& attr, ibv_qp_init_attr& init) const;

  // Queue work. post_send: EINVAL in RESET/INIT/RTR, ENOMEM when the send queue is full; in ERR
  // the WQE completes with IBV_WC_WR_FLUSH_ERR. post_recv: EINVAL in RESET, ENOMEM
  // when full; flushed in ERR. post_send also returns EINVAL for what the transport does not
  // implement (today: anything but SEND, SEND_WITH_IMM, SEND_WITH_INV, RDMA_WRITE,
  // RDMA_WRITE_WITH_IMM, RDMA_READ, ATOMIC_CMP_AND_SWP, ATOMIC_FETCH_AND_ADD, LOCAL_INV and
  // BIND_MW on RC), for inline READ/ATOMIC, for an ATOMIC whose result is not one 8-byte SGE and
  // for a LOCAL_INV/BIND_MW with data; it ends with pump(now).
  int post_send(const SendWqe& wqe, Time now);
  // The one call that needs no serialisation with the others: any thread may post receives while
  // another runs the QP (recv_queue.h), as on an RNIC, so a receive pass never delays a repost.
  int post_recv(const RecvWqe& wqe);

  // A parsed packet addressed to this QP (the engine dispatches on BTH DestQP). RC accepts only
  // packets whose rx.src_ip is the connected peer (from ah_attr.grh.dgid); others, and packets in
  // RESET/INIT/ERR, are counted in dropped_pkts. Ends with pump(now), so ACKs and what an ACK
  // lets through leave at once.
  void receive(const wire::Packet& pkt, const RxInfo& rx, Time now);
  // receive() without its closing pump(): returns true when the caller owes the QP that pump.
  // For a caller handing over a run of packets for one QP (a burst of a message's packets, a
  // reply with the ACK beside it), which pumps once after the last: the ACK for the run is then
  // one ACK, and what the ACKs in it let through leaves in one go.
  [[nodiscard]] bool receive_deferring_pump(const wire::Packet& pkt, const RxInfo& rx, Time now);
  // Transmit what the send window, the rate and the port's buffers allow.
  void pump(Time now);
  // True when pump() has something it could send (used to re-pump after tx backpressure).
  bool wants_pump() const;
  // Whether requests wait for a receive WQE (RNR grace): a receive posted now lets them go at
  // the next pump(). Any thread, without the device lock (the poster's).
  bool waits_for_recv() const;
  // XRC receive QPs: the XRC SRQ `srq` goes away. A message in progress into it is abandoned (its
  // WQE dropped with the SRQ, as the SRQ's own WQEs are); its later packets are refused.
  void xrc_srq_gone(const Srq* srq);
  // Earliest time on_timer() must run (retransmission, RNR wait, ACK coalescing), or kNever.
  Time next_deadline() const;
  void on_timer(Time now);

  const QpCounters& counters() const;
  // The connected peer of an RC or UC QP, as its last modify set it (ah_attr's GID, dest_qp_num):
  // zeros for UD and before RTR. For listings (`uroce stats --qp`).
  struct Peer {
    uint32_t qpn = 0;
    wire::IpAddr ip{};  // the AV's DGID
  };
  Peer peer() const;
  // Congestion control's view of this QP: the rate it may send at (bits/s; the line rate while
  // not limited), whether that limits it, and DCQCN's alpha as of `now` (0 for the others).
  uint64_t cc_rate_bps() const;
  bool cc_limiting() const;
  double cc_alpha(Time now) const;

  struct Impl;  // transport-internal; defined in qp_impl.h

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace uroce::transport

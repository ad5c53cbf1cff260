// The state of one QP: its attributes, its queues and its three roles. qp.cc is the dispatcher:
// it runs the state machine, routes packets to the requester/responder/completer and carries the
// typed events (events.h) between them. Transport-internal.
#pragma once

#include <infiniband/verbs.h>

#include <atomic>
#include <deque>
#include <memory>
#include <vector>

#include "transport/cc/np.h"
#include "transport/cc/pacer.h"
#include "transport/cc/rate_control.h"
#include "transport/static_rate.h"
#include "transport/completer.h"
#include "transport/context.h"
#include "transport/qp.h"
#include "transport/requester.h"
#include "transport/responder.h"
#include "transport/send_queue.h"
#include "transport/unreliable_qp.h"

namespace uroce::transport {

// Stands between a QP's roles and one of its CQs: forwards every completion and notes when the
// CQ lost one to its overrun (IBTA C9-218: a Class F error — the CQ is full when a WQE must
// complete), so that the QP enters ERR once the call that completed it is over (Qp::Impl::
// check_cqs). Noted per QP: only the QPs that try to complete into an overrun CQ are affected
// (C11-37), not every QP that shares it.
class CqGuard : public CompletionSink {
 public:
  explicit CqGuard(CompletionSink* cq) : cq_(cq) {}
  void push(const ibv_wc& wc) override {
    if (cq_ == nullptr) return;  // an XRC receive QP between SRQs: it has no WQE to complete
    cq_->push(wc);
    lost_ = lost_ || cq_->overrun();
  }
  void push(const ibv_wc& wc, bool solicited) override {
    if (cq_ == nullptr) return;
    cq_->push(wc, solicited);
    lost_ = lost_ || cq_->overrun();
  }
  bool overrun() const override { return cq_ != nullptr && cq_->overrun(); }
  // An XRC receive QP completes into the CQ of the SRQ its current message takes from.
  void retarget(CompletionSink* cq) { cq_ = cq; }
  bool lost() const { return lost_; }
  void clear() { lost_ = false; }

 private:
  CompletionSink* cq_;
  bool lost_ = false;  // a completion of this QP was pushed into the overrun CQ
};

struct Qp::Impl {
  Impl(const QpInit& i, PacketSink& t, MemoryAccess& m)
      : send_guard(i.send_cq),
        recv_guard(i.recv_cq),
        init(guarded(i)),
        tx(t),
        mem(m),
        ctx{init, attr, mem, counters, service_for(i.type), i.pd},
        rq(i.max_recv_wr, i.recv_cq, i.qpn, RecvQueue::Gate::kClosed),
        rate(cc::make_rate_control(init.cc, init.line_rate_bps)),
        pacer(init.cc.pacer_burst) {}

  // The roles complete into these (init.send_cq and init.recv_cq point at them), never into the
  // CQs directly. Declared before `init`, which refers to them.
  CqGuard send_guard, recv_guard;
  const QpInit init;
  PacketSink& tx;
  MemoryAccess& mem;

  ibv_qp_state state = IBV_QPS_RESET;
  ibv_qp_attr attr{};  // every attribute ever set by modify(); state fields kept in `state`
  QpCounters counters;
  QpContext ctx;  // refers to init, attr, mem, counters; path fields set by modify()

  SendQueue sq;  // posted send WQEs, oldest first
  // Posted receive WQEs, oldest first. Its posting side is the one part of a QP that application
  // threads reach without the device lock (recv_queue.h); the QP opens, flushes and resets it.
  RecvQueue rq;
  Requester requester;
  Responder responder;
  Completer completer;
  UnreliableRoles unreliable;  // UD and UC QPs only (unreliable_qp.h)

  // XRC receive QPs: the XRC SRQ the message in progress (or the last one) takes from, and its
  // number — most requests name the SRQ the previous one did, and need no lookup.
  Srq* xrc_srq = nullptr;
  uint32_t xrc_srqn = 0;

  bool sq_drained_reported = false;  // IBV_EVENT_SQ_DRAINED raised for the current SQD period

  // RNR grace (qp.cc): the requests that arrived since a message found no receive WQE, in
  // order, each with a copy of its payload, replayed when a receive is posted or the grace of
  // the first ends. `waiting` mirrors !parked.empty() for post_recv's thread.
  struct Parked {
    wire::Packet pkt;  // payload empty: it lives in `payload`
    std::vector<uint8_t> payload;
    RxInfo rx;
    Time at = 0;  // arrival
  };
  std::deque<Parked> parked;
  size_t parked_bytes = 0;
  std::atomic<bool> waiting{false};
  // At most this much waits behind a message (a send window's worth); more is dropped, counted.
  static constexpr size_t kMaxParkedPackets = 1024;
  static constexpr size_t kMaxParkedBytes = 4u << 20;

  // Congestion control (transport/cc, docs/congestion-control.md). `rate` is this QP's reaction
  // point (DCQCN, TIMELY or none) and `pacer` holds its requests and READ responses to the rate
  // it allows; `np` decides which CE marks are answered with a CNP, and `cnp_pending` is a CNP
  // waiting for a transmit buffer (it is sent once, never retransmitted). RC and UC QPs send it
  // to their connected peer; a UD QP to the source of the marked datagram, which cnp_to holds.
  std::unique_ptr<cc::RateControl> rate;
  cc::Pacer pacer;
  cc::CnpLimiter np;
  bool cnp_pending = false;
  struct CnpTarget {
    wire::IpAddr ip{};
    uint32_t qpn = 0;
    bool roce_v1 = false;
    // The CNP's UDP source port. To a uroce peer (it marks its packets, QpContext::peer_sr), the
    // marked packet's own source port: with multipath that names the congested path
    // (PathSet::marked). To others the QP's port, as before.
    uint16_t src_port = 0;
  } cnp_to;

  // Dispatcher steps (qp.cc).
  // A request's way through the responder (receive, and the replay of parked requests).
  void request(const wire::Packet& pkt);
  // RNR grace: whether `pkt` would find no receive WQE (and so waits), keeping it, replaying.
  bool must_wait(const wire::Packet& pkt);
  void park(const wire::Packet& pkt, const RxInfo& rx, Time now);
  // The ACK riding on `pkt` (ack_rider.h), taken as the ACK packet it stands for.
  void take_rider(const wire::Packet& pkt, Time now);
  void release_parked(Time now);
  void drop_parked();
  // How long a message waits: min(init.rnr_grace_ns, the QP's min_rnr_timer).
  Time rnr_grace() const;
  Time parked_deadline() const { return parked.empty() ? kNever : parked.front().at + rnr_grace(); }
  void apply_attrs(const ibv_qp_attr& a, int mask);
  // ERR (IBTA 10.3.1): flush; a transport error (not a modify) also raises IBV_EVENT_QP_FATAL,
  // and a QP with an SRQ raises IBV_EVENT_QP_LAST_WQE_REACHED (11.6.3.1: it takes no more WQEs).
  void enter_error(bool transport_error = true);
  void flush();
  void handle(const CompleterOutcome& o, Time now);
  void handle(const RequesterOutcome& o, Time now);
  void raise(ibv_event_type ev) {
    if (init.events != nullptr) init.events->qp_event(init.qpn, ev);
  }
  bool reliable() const { return is_reliable(init.type); }
  // XRC receive QPs: finds the SRQ `pkt` names and points the responder's context at it.
  void xrc_route(const wire::Packet& pkt);
  bool sending_state() const { return state == IBV_QPS_RTS || state == IBV_QPS_SQD; }
  // Congestion control steps (qp.cc).
  void on_cnp(const RxInfo& rx, Time now);
  // A CE-marked packet accepted by the QP; `pkt` and `rx` say who sent it (UD: DETH's source QP).
  void on_marked(const wire::Packet& pkt, const RxInfo& rx, Time now);
  void write_cnp(TxBuf* buf);
  // Sends a pending CNP; false when the port has no buffer for it (it stays pending).
  bool send_pending_cnp();
  // After any rate-control hook, and when the application sets a rate limit (IBV_QP_RATE_LIMIT):
  // the pacer follows the lower of the congestion control's rate and the limit.
  void sync_pacer() {
    // IBV_QP_RATE_LIMIT in kbit/s, the path's static rate (RC, UC: ah_attr.static_rate) in
    // Mbit/s: the lower one that is set.
    uint64_t limit = uint64_t{attr.rate_limit} * 1000;
    if (init.type != IBV_QPT_UD) {
      const int mbps = static_rate_mbps(attr.ah_attr.static_rate);
      const uint64_t path = mbps > 0 ? uint64_t(mbps) * 1'000'000 : 0;
      if (path != 0 && (limit == 0 || path < limit)) limit = path;
    }
    if (limit != 0 && (!rate->limiting() || limit < rate->rate_bps()))
      pacer.set_rate(limit, true);
    else
      pacer.set_rate(rate->rate_bps(), rate->limiting());
  }
  // Whether a paced packet waits for its release time.
  bool paced_work() const;
  // After every call on the QP: a completion lost to an overrun CQ moves it to ERR (C9-218).
  void check_cqs();

 private:
  QpInit guarded(QpInit i) {
    if (i.send_cq != nullptr) i.send_cq = &send_guard;
    // An XRC receive QP completes through the guard too, into the CQ of each message's SRQ.
    if (i.recv_cq != nullptr || i.type == IBV_QPT_XRC_RECV) i.recv_cq = &recv_guard;
    return i;
  }
  static wire::Service service_for(ibv_qp_type t) {
    return t == IBV_QPT_XRC_SEND || t == IBV_QPT_XRC_RECV ? wire::Service::kXrc
                                                          : wire::Service::kRc;
  }
};

}  // namespace uroce::transport

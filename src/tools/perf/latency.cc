// The latency tests: one exchange outstanding per QP, timed from post to answer with now_ns().
//
//   send_lat   ping-pong of SENDs: the client sends, the server answers each receive with a
//              SEND; each side times the round trip (the client from its post to the answer,
//              the server between consecutive receives, as perftest does).
//   write_lat  ping-pong of RDMA WRITEs: each side polls the last byte of its target region for
//              the round number the peer writes there, then writes its own (perftest's
//              protocol, so a perftest peer plays along).
//   read_lat,  the client posts one READ or atomic and waits for its completion; the server
//   atomic_lat takes no part.
// Each worker drives its QPs independently, so -q/--threads run that many ping-pongs at once.
// The histogram holds round trips; the report halves them for SEND and WRITE (perftest's
// one-way convention).
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "tools/perf/datapath.h"

namespace uroce::perf {

namespace {

struct LatQp {
  QpCtx* q = nullptr;
  uint64_t sent = 0;      // operations posted (pings, or pongs on the responder)
  uint64_t answered = 0;  // answers seen (pongs, completions, or pings on the responder)
  uint64_t t0 = 0;        // when the outstanding operation was posted
  uint64_t last_rx = 0;   // responder: when the previous ping arrived
  bool pending = false;   // an operation waits for send-queue room
};

class LatencyLoop : private WorkerLoop<LatQp> {
 public:
  LatencyLoop(const RunSpec& s, int thread, WorkerResult* out) : WorkerLoop(s, thread, out) {
    // Signal often enough that the send queue never fills with unsignaled WRs.
    const int sq = qps_.all().empty() ? 2 : qps_.all()[0].q->sq_depth;
    sig_ = std::max(1, std::min(o_.cq_mod, sq / 2));
  }

  void run() {
    switch (o_.verb) {
      case Verb::kSend:
        send_lat();
        break;
      case Verb::kWrite:
        write_lat();
        break;
      case Verb::kRead:
      case Verb::kAtomic:
        if (s_.initiator) rdma_lat();
        break;
    }
    for (const LatQp& l : qps_.all()) {
      out_->sent[static_cast<size_t>(l.q->index)] = l.sent;
      out_->received[static_cast<size_t>(l.q->index)] = l.answered;
    }
  }

 private:
  // An initiator's round trip on l, answered at t. The first exchange of each QP is a warm-up
  // and not counted: it also waits for the peer to enter its loop (perftest calibrates its
  // clock there), so both sides end up with one sample fewer than iterations, like the
  // responder, which times the intervals between arrivals.
  void sample(const LatQp& l, uint64_t t) {
    if (l.answered > 0) out_->latency.record(t - l.t0);
  }

  // Whether the initiator starts another round on l.
  bool more(const LatQp& l) const {
    if (s_.iters) return l.sent < s_.iters;
    return now_ns() < s_.deadline;
  }
  bool last_round(const LatQp& l) const { return s_.iters && l.sent + 1 == s_.iters; }

  // The responder has answered everything the initiator will send.
  bool responder_done(const LatQp& l) const {
    if (s_.exact_counts) return l.answered >= s_.iters;
    return s_.ctl->peer_done.load(std::memory_order_acquire) &&
           l.answered >= s_.ctl->peer_sent[static_cast<size_t>(l.q->index)];
  }

  bool fail(std::string why) { return fail_run(s_, out_, std::move(why)); }

  bool check_abort_or_stall(const char* waiting_for) {
    if (s_.ctl->abort.load(std::memory_order_relaxed))
      return fail("stopped: another thread failed");
    if (o_.events ? stall_.stall_now() : stall_.stall()) {
      char buf[256];
      std::snprintf(buf, sizeof buf, "no progress for %.1f s while waiting for %s%s",
                    o_.stall_timeout, waiting_for,
                    o_.conn == Conn::kRC ? "" : " (UC and UD do not retransmit a lost message)");
      return fail(buf);
    }
    return true;
  }

  // Posts one operation of the test on l (the ping or pong). False when the run failed.
  bool post(LatQp& l) {
    QpCtx& q = *l.q;
    SendWr w;
    w.local_addr = reinterpret_cast<uintptr_t>(q.src);
    w.length = static_cast<uint32_t>(s_.size);
    w.remote_addr = q.remote.vaddr;
    bool force = false;
    if (o_.verb == Verb::kAtomic) {
      w.length = 8;
      // Both kinds return the round number k from a target that starts at 0 (--check).
      w.compare_add = o_.atomic_op == AtomicOp::kCmpAndSwap ? l.sent : 1;
      w.swap = l.sent + 1;
      force = true;
    } else if (o_.verb == Verb::kRead) {
      force = true;
    } else {
      force = s_.responder ? s_.exact_counts && l.sent + 1 == s_.iters : last_round(l);
    }
    // The clock starts before the post: a provider may do much of the work inside the call
    // (uroce can even receive the answer there), and perftest also stamps before posting.
    const uint64_t t0 = now_ns();
    int rc = post_counted(r_, q, &w, 1, sig_, force);
    if (rc == ENOMEM) {
      l.pending = true;  // posted once a send completion makes room
      return true;
    }
    if (rc) return fail("QP " + std::to_string(q.index) + ": posting failed: " + std::strerror(rc));
    l.pending = false;
    l.t0 = t0;
    if (!out_->tx_first) out_->tx_first = l.t0;
    ++l.sent;
    return true;
  }

  // Handles every completion in wc[0..n); receive completions go to on_recv.
  template <typename OnRecv, typename OnSend>
  bool handle(ibv_wc* wc, int n, OnRecv&& on_recv, OnSend&& on_send) {
    const uint64_t t = now_ns();
    for (int i = 0; i < n; ++i) {
      const int qi = wr_qp(wc[i].wr_id);
      if (wc[i].status != IBV_WC_SUCCESS) return fail(describe_wc_error(qi, wc[i]));
      LatQp* found = qps_.find(qi);
      if (!found) return fail("a completion for an unknown QP " + std::to_string(qi));
      LatQp& l = *found;
      if (wr_tag(wc[i].wr_id) == WrTag::kRecv) {
        if (!on_recv(l, wc[i], t)) return false;
      } else {
        complete_sends(*l.q, wc[i]);
        if (!on_send(l, t)) return false;
      }
    }
    // Operations that waited for send-queue room.
    for (LatQp& l : qps_.all())
      if (l.pending && !post(l)) return false;
    return true;
  }

  bool all(bool (LatencyLoop::*pred)(const LatQp&) const) const {
    for (const LatQp& l : qps_.all())
      if (!(this->*pred)(l)) return false;
    return true;
  }
  bool initiator_done(const LatQp& l) const {
    return !l.pending && l.answered == l.sent && !more(l);
  }

  void send_lat() {
    ibv_wc wc[16];
    if (s_.initiator)
      for (LatQp& l : qps_.all())
        if (more(l) && !post(l)) return;
    auto on_recv = [&](LatQp& l, const ibv_wc& w, uint64_t t) {
      // The slot goes back before the answer, as perftest: the peer's next message must find
      // a receive.
      if (!take_send(s_, *l.q, w, out_)) return false;
      if (s_.initiator) sample(l, t);
      ++l.answered;
      stall_.progress();
      if (s_.initiator) {
        out_->tx_last = t;
        if (more(l)) return post(l);
        return true;
      }
      if (l.last_rx) out_->latency.record(t - l.last_rx);
      l.last_rx = t;
      if (!out_->rx_first) out_->rx_first = t;
      out_->rx_last = t;
      return post(l);
    };
    auto on_send = [](LatQp&, uint64_t) { return true; };
    for (;;) {
      if (s_.initiator ? all(&LatencyLoop::initiator_done) : all(&LatencyLoop::responder_done))
        return;
      int n = poll_or_wait(cq_, 16, wc, o_.events, 100);
      if (n < 0) {
        fail("polling the CQ failed");
        return;
      }
      if (n == 0) {
        if (!check_abort_or_stall(s_.initiator ? "the server's answer" : "the client's message"))
          return;
        continue;
      }
      if (!handle(wc, n, on_recv, on_send)) return;
    }
  }

  void write_lat() {
    ibv_wc wc[16];
    const size_t at = s_.size - 1;  // the byte both sides poll and write
    auto round_byte = [](uint64_t k) { return static_cast<uint8_t>(k); };
    auto ping = [&](LatQp& l) {
      l.q->src[at] = round_byte(l.sent + 1);
      return post(l);
    };
    if (s_.initiator)
      for (LatQp& l : qps_.all())
        if (more(l) && !ping(l)) return;
    auto on_recv = [](LatQp&, const ibv_wc&, uint64_t) { return true; };
    auto on_send = [](LatQp&, uint64_t) { return true; };
    for (;;) {
      bool moved = false;
      for (LatQp& l : qps_.all()) {
        const uint8_t seen = __atomic_load_n(l.q->target + at, __ATOMIC_ACQUIRE);
        if (s_.initiator) {
          if (l.answered == l.sent || l.pending || seen != round_byte(l.sent)) continue;
          const uint64_t t = now_ns();
          sample(l, t);
          out_->tx_last = t;
          ++l.answered;
          moved = true;
          if (more(l) && !ping(l)) return;
        } else {
          if (l.pending || responder_done(l) || seen != round_byte(l.answered + 1)) continue;
          const uint64_t t = now_ns();
          if (l.last_rx) out_->latency.record(t - l.last_rx);
          l.last_rx = t;
          if (!out_->rx_first) out_->rx_first = t;
          out_->rx_last = t;
          ++l.answered;
          moved = true;
          if (!ping(l)) return;
        }
      }
      if (moved) stall_.progress();
      // The send completions (room in the send queue, and errors) arrive on the CQ.
      int n = ibv_poll_cq(cq_.cq, 16, wc);
      if (n < 0) {
        fail("polling the CQ failed");
        return;
      }
      if (n > 0 && !handle(wc, n, on_recv, on_send)) return;
      if (s_.initiator ? all(&LatencyLoop::initiator_done) : all(&LatencyLoop::responder_done))
        return;
      if (!moved && n == 0 &&
          !check_abort_or_stall(s_.initiator ? "the server's write" : "the client's write"))
        return;
    }
  }

  void rdma_lat() {
    ibv_wc wc[16];
    for (LatQp& l : qps_.all())
      if (more(l) && !post(l)) return;
    auto on_recv = [&](LatQp& l, const ibv_wc&, uint64_t) {
      return fail("QP " + std::to_string(l.q->index) + ": an unexpected receive completion");
    };
    auto on_send = [&](LatQp& l, uint64_t t) {
      sample(l, t);
      out_->tx_last = t;
      stall_.progress();
      if (o_.verb == Verb::kAtomic && s_.check) {
        uint64_t got;
        std::memcpy(&got, l.q->src, 8);
        if (got != l.answered)
          check_failure(out_, "QP " + std::to_string(l.q->index) + ": atomic " +
                                  std::to_string(l.answered) + " returned " + std::to_string(got));
        else
          out_->checked_bytes += 8;
      }
      ++l.answered;
      if (more(l)) return post(l);
      return true;
    };
    for (;;) {
      if (all(&LatencyLoop::initiator_done)) return;
      int n = poll_or_wait(cq_, 16, wc, o_.events, 100);
      if (n < 0) {
        fail("polling the CQ failed");
        return;
      }
      if (n == 0) {
        if (!check_abort_or_stall("a completion")) return;
        continue;
      }
      if (!handle(wc, n, on_recv, on_send)) return;
    }
  }

  int sig_ = 1;
};

}  // namespace

void run_latency_worker(const RunSpec& spec, int thread, WorkerResult* out) {
  LatencyLoop(spec, thread, out).run();
  if (spec.initiator) spec.ctl->initiators_running.fetch_sub(1, std::memory_order_acq_rel);
  spec.ctl->initiators_running.notify_all();
}

}  // namespace uroce::perf

// The bandwidth tests: each QP keeps up to -t work requests in flight, posted -l at a time,
// one in -Q signaled (and always the last), until -n per QP are done or -D runs out.
//
//   send_bw    the client SENDs; the server keeps -r receives posted per QP and counts them
//              (with -b both do both). Over UC and UD a receiver can fall behind and lose
//              messages; between two uroce-perf processes the receiver learns how many were
//              sent and reports the loss, where perftest would wait for ever.
//   write_bw,  the client WRITEs, READs or updates its peer's target region; the peer's CPU
//   read_bw,   takes no part (with -b both sides initiate).
//   atomic_bw
// The initiator's figures run from its first post to its last completion; the SEND receiver's
// from its first receive to its last.
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "tools/perf/datapath.h"

namespace uroce::perf {

namespace {

// After the peer is done, an unreliable receiver waits this long without a new message before
// it counts the rest as lost (a lost message never arrives; a late one is at most a few queue
// lengths behind).
constexpr uint64_t kDrainNs = 200'000'000;
// Marks kept per worker for the peak rate; beyond it, neighbours merge (coarser, same sum).
constexpr size_t kMaxMarks = 1 << 20;

struct BwQp {
  QpCtx* q = nullptr;
  uint64_t posted = 0;     // this run's WRs
  uint64_t completed = 0;  // this run's WRs known complete
  bool stopped = false;    // the last WR is posted
  uint64_t received = 0;   // SEND receiver: messages this run
};

class BandwidthLoop : private WorkerLoop<BwQp> {
 public:
  BandwidthLoop(const RunSpec& s, int thread, WorkerResult* out) : WorkerLoop(s, thread, out) {
    receiving_ = s_.responder && o_.verb == Verb::kSend;
    sending_ = s_.initiator;
    wrs_.resize(static_cast<size_t>(o_.post_list));
  }

  void run() {
    if (sending_ && o_.warm_up && o_.verb != Verb::kSend && !warm_up()) return finish();
    loop();
    finish();
  }

 private:
  uint32_t op_length() const {
    return o_.verb == Verb::kAtomic ? 8 : static_cast<uint32_t>(s_.size);
  }

  // The i-th WR of this run on b. Atomics move the target on by one each (--check: it ends at
  // the count): FETCH_AND_ADD adds 1, CMP_AND_SWAP compares with the value the ones before it
  // left (RC executes them in order) and swaps in the next. The warm-up leaves it unchanged.
  void fill(SendWr& w, const BwQp& b, uint64_t i, bool warm_up = false) const {
    w = {};
    w.local_addr = reinterpret_cast<uintptr_t>(b.q->src);
    w.length = op_length();
    w.remote_addr = b.q->remote.vaddr;
    if (o_.verb == Verb::kAtomic) {
      if (o_.atomic_op == AtomicOp::kCmpAndSwap) {
        w.compare_add = warm_up ? ~uint64_t{0} : i;
        w.swap = i + 1;
      } else {
        w.compare_add = warm_up ? 0 : 1;
      }
    }
  }

  bool fail(std::string why) { return fail_run(s_, out_, std::move(why)); }

  static void mark(std::vector<std::pair<uint64_t, uint32_t>>& m, uint64_t t, uint32_t n) {
    if (m.size() >= kMaxMarks) {
      size_t w = 0;
      for (size_t i = 0; i + 1 < m.size(); i += 2)
        m[w++] = {m[i + 1].first, m[i].second + m[i + 1].second};
      if (m.size() % 2) m[w++] = m.back();
      m.resize(w);
    }
    m.emplace_back(t, n);
  }

  // Posts what the send queues allow. Returns false when the run failed.
  bool post_some(bool* posted_any) {
    for (BwQp& b : qps_.all()) {
      while (!b.stopped) {
        const uint64_t in_flight = b.posted - b.completed;
        if (in_flight >= static_cast<uint64_t>(o_.tx_depth)) break;
        uint64_t room = static_cast<uint64_t>(o_.tx_depth) - in_flight;
        int n = static_cast<int>(std::min<uint64_t>(room, static_cast<uint64_t>(o_.post_list)));
        bool last = false;
        if (s_.iters) {
          n = static_cast<int>(std::min<uint64_t>(static_cast<uint64_t>(n), s_.iters - b.posted));
          last = b.posted + static_cast<uint64_t>(n) == s_.iters;
        } else if (now_ns() >= s_.deadline) {
          n = 1;  // time is up: one last, signaled WR covers whatever is unsignaled
          last = true;
        }
        for (int i = 0; i < n; ++i)
          fill(wrs_[static_cast<size_t>(i)], b, b.posted + static_cast<uint64_t>(i));
        int rc = post_counted(r_, *b.q, wrs_.data(), n, o_.cq_mod, last);
        if (rc == ENOMEM) break;  // the queue holds WRs of an earlier run still; completions come
        if (rc)
          return fail("QP " + std::to_string(b.q->index) +
                      ": posting failed: " + std::strerror(rc));
        if (!out_->tx_first) out_->tx_first = now_ns();
        b.posted += static_cast<uint64_t>(n);
        b.stopped = last;
        *posted_any = true;
      }
    }
    return true;
  }

  bool sending_done() const {
    for (const BwQp& b : qps_.all())
      if (!b.stopped || b.completed < b.posted) return false;
    return true;
  }

  bool receiving_done(uint64_t now) const {
    if (s_.exact_counts) {
      for (const BwQp& b : qps_.all())
        if (b.received < s_.iters) return false;
      return true;
    }
    if (!s_.ctl->peer_done.load(std::memory_order_acquire)) return false;
    bool all = true;
    for (const BwQp& b : qps_.all())
      if (b.received < s_.ctl->peer_sent[static_cast<size_t>(b.q->index)]) all = false;
    if (all) return true;
    // Unreliable services: what has not arrived a while after the sender finished never will.
    if (o_.conn == Conn::kRC) return false;
    if (!drain_from_) drain_from_ = now;
    const uint64_t since = std::max(drain_from_, out_->rx_last);
    return now - since > kDrainNs;
  }

  bool on_recv(BwQp& b, const ibv_wc& wc, uint64_t t) {
    if (!take_send(s_, *b.q, wc, out_)) return false;
    ++b.received;
    if (!out_->rx_first) out_->rx_first = t;
    out_->rx_last = t;
    return true;
  }

  void loop() {
    ibv_wc wc[16];
    bool send_finished = !sending_;
    if (send_finished) initiator_finished();
    for (;;) {
      bool posted = false;
      if (!send_finished && !post_some(&posted)) return;
      // With -e, sleep only when nothing can be posted.
      const bool sleep = o_.events && !posted;
      int n = poll_or_wait(cq_, 16, wc, sleep, 100);
      if (n < 0) {
        fail("polling the CQ failed");
        return;
      }
      const uint64_t t = n > 0 ? now_ns() : 0;
      uint32_t received = 0;
      for (int i = 0; i < n; ++i) {
        const int qi = wr_qp(wc[i].wr_id);
        if (wc[i].status != IBV_WC_SUCCESS) {
          fail(describe_wc_error(qi, wc[i]));
          return;
        }
        BwQp* found = qps_.find(qi);
        if (!found) {
          fail("a completion for an unknown QP " + std::to_string(qi));
          return;
        }
        BwQp& b = *found;
        if (wr_tag(wc[i].wr_id) == WrTag::kRecv) {
          if (!receiving_) {
            fail("QP " + std::to_string(qi) + ": an unexpected receive completion");
            return;
          }
          if (!on_recv(b, wc[i], t)) return;
          ++received;
        } else {
          const uint32_t covered = complete_sends(*b.q, wc[i]);
          // Completions of WRs an earlier run left unsignaled count for that run's queue only.
          const uint32_t mine =
              static_cast<uint32_t>(std::min<uint64_t>(covered, b.posted - b.completed));
          b.completed += mine;
          if (mine) {
            mark(out_->tx_marks, t, mine);
            out_->tx_last = t;
          }
        }
      }
      if (received) mark(out_->rx_marks, t, received);
      if (n > 0 || posted) stall_.progress();
      if (!send_finished && sending_done()) {
        send_finished = true;
        initiator_finished();
      }
      if (send_finished && (!receiving_ || receiving_done(n > 0 ? t : now_ns()))) return;
      if (n == 0 && !posted) {
        if (s_.ctl->abort.load(std::memory_order_relaxed)) {
          fail("stopped: another thread failed");
          return;
        }
        if (o_.events ? stall_.stall_now() : stall_.stall()) {
          char buf[200];
          std::snprintf(
              buf, sizeof buf, "no progress for %.1f s while waiting for %s%s", o_.stall_timeout,
              send_finished ? "messages" : "completions",
              o_.conn == Conn::kRC ? "" : " (UC and UD do not retransmit a lost message)");
          fail(buf);
          return;
        }
      }
    }
  }

  // --perform_warm_up: a send queue's worth of WRs per QP, completed before measuring.
  bool warm_up() {
    for (BwQp& b : qps_.all()) {
      int n = std::min(o_.tx_depth, o_.post_list);
      for (int i = 0; i < n; ++i) fill(wrs_[static_cast<size_t>(i)], b, 0, true);
      if (int rc = post_counted(r_, *b.q, wrs_.data(), n, o_.cq_mod, true))
        return fail("QP " + std::to_string(b.q->index) +
                    ": warm-up posting failed: " + std::strerror(rc));
    }
    ibv_wc wc[16];
    for (;;) {
      bool idle = true;
      for (const BwQp& b : qps_.all())
        if (b.q->sq_done < b.q->sq_posted) idle = false;
      if (idle) return true;
      int n = poll_or_wait(cq_, 16, wc, o_.events, 100);
      if (n < 0) return fail("polling the CQ failed");
      for (int i = 0; i < n; ++i) {
        if (wc[i].status != IBV_WC_SUCCESS)
          return fail(describe_wc_error(wr_qp(wc[i].wr_id), wc[i]));
        if (BwQp* b = qps_.find(wr_qp(wc[i].wr_id))) complete_sends(*b->q, wc[i]);
      }
      if (n > 0) stall_.progress();
      if (n == 0 && stall_.stall_now()) return fail("warm-up: no completion");
    }
  }

  void initiator_finished() {
    if (sending_ && !announced_) {
      announced_ = true;
      // The main thread reads the counts once it sees the decrement (acquire).
      for (const BwQp& b : qps_.all()) out_->sent[static_cast<size_t>(b.q->index)] = b.completed;
      s_.ctl->initiators_running.fetch_sub(1, std::memory_order_acq_rel);
      s_.ctl->initiators_running.notify_all();
    }
  }

  void finish() {
    initiator_finished();  // also on failure: the main thread must not wait for this worker
    for (const BwQp& b : qps_.all()) out_->received[static_cast<size_t>(b.q->index)] = b.received;
  }

  std::vector<SendWr> wrs_;
  bool receiving_ = false, sending_ = false, announced_ = false;
  mutable uint64_t drain_from_ = 0;
};

}  // namespace

void run_bandwidth_worker(const RunSpec& spec, int thread, WorkerResult* out) {
  BandwidthLoop(spec, thread, out).run();
}

}  // namespace uroce::perf

// What the latency and bandwidth loops share: the clock, the description of one run (one message
// size), how the main thread steers the polling threads, what each thread brings back, the data
// pattern --check verifies, and waiting on a CQ (polling, or sleeping on its channel with -e).
//
// Threads: the main thread owns the TCP set-up connection; each polling thread ("worker") owns a
// CQ and the QPs on it and touches nothing else. They meet only in RunControl (atomics) and in
// WorkerResult, which the main thread reads after joining the worker.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "tools/perf/histogram.h"
#include "tools/perf/options.h"
#include "tools/perf/resources.h"

namespace uroce::perf {

// CLOCK_MONOTONIC in nanoseconds: every time uroce-perf measures comes from here.
uint64_t now_ns();

// Steering of one run by the main thread.
struct RunControl {
  // Set by the main thread once the peer has said it stopped sending (uroce-perf peers only);
  // peer_sent (per QP, indexed by QP index) is written before the release store.
  std::atomic<bool> peer_done{false};
  std::vector<uint64_t> peer_sent;
  // Workers whose initiating part (pings, posted WRs) still runs; the main thread waits for 0.
  std::atomic<int> initiators_running{0};
  // A worker failed: every worker stops at its next look.
  std::atomic<bool> abort{false};
};

// One run: one message size, all QPs.
struct RunSpec {
  const Options* o = nullptr;
  Resources* res = nullptr;
  uint64_t size = 0;
  uint64_t iters = 0;        // per QP; 0 with -D
  uint64_t deadline = 0;     // -D: initiators stop posting at this now_ns(); 0 with -n
  bool initiator = false;    // this side posts the test's operations (client; both with -b)
  bool responder = false;    // this side answers (latency) or receives (SEND bandwidth)
  bool exact_counts = true;  // responders stop after `iters` per QP (else when the peer is done)
  bool check = false;        // --check
  bool client = false;
  RunControl* ctl = nullptr;
};

// What a worker measured. Times are now_ns().
struct WorkerResult {
  std::vector<uint64_t> sent, received;  // per QP index (all QPs; this worker fills its own)
  Histogram latency;                     // latency tests: one sample per round trip (ns)
  uint64_t tx_first = 0, tx_last = 0;    // first post, last completion of the initiating part
  uint64_t rx_first = 0, rx_last = 0;    // first and last receive (SEND responders)
  // Completions of the initiating part, and receives of a SEND receiver, as (time, messages
  // completed then): the peak rates.
  std::vector<std::pair<uint64_t, uint32_t>> tx_marks, rx_marks;
  // --check of received SENDs and of atomic results, done as they arrive.
  uint64_t checked_bytes = 0;
  uint64_t check_failures = 0;
  std::string check_error;  // the first failure, for the report
  std::string error;        // a failed WR or a stall: the run is void
};

// Watches a loop for progress: stall() is true once `timeout_s` pass without progress().
class StallWatch {
 public:
  explicit StallWatch(double timeout_s)
      : limit_(static_cast<uint64_t>(timeout_s * 1e9)), last_(now_ns()) {}
  // The clock is read lazily: the next look at it starts the idle period.
  void progress() {
    idle_ = 0;
    last_ = 0;
  }
  // Cheap enough for a spin loop: reads the clock once every 1024 calls.
  bool stall() {
    if (++idle_ & 1023) return false;
    return stall_now();
  }
  // For loops that sleep between looks (-e): reads the clock every time.
  bool stall_now() {
    uint64_t t = now_ns();
    if (last_ == 0) last_ = t;
    return t - last_ > limit_;
  }

 private:
  uint64_t limit_;
  uint64_t last_;
  uint64_t idle_ = 0;
};

// The QPs one worker drives, each with the loop's own state T (whose first member is the
// QpCtx*), and the way back from a completion's QP index to that state.
template <typename T>
class WorkerQps {
 public:
  WorkerQps(Resources& r, int thread) : by_index_(static_cast<size_t>(r.num_qps()), -1) {
    for (int i = 0; i < r.num_qps(); ++i) {
      if (r.qp(i).thread != thread) continue;
      by_index_[static_cast<size_t>(i)] = static_cast<int>(list_.size());
      list_.push_back(T{&r.qp(i)});
    }
  }
  std::vector<T>& all() { return list_; }
  const std::vector<T>& all() const { return list_; }
  // The state of QP `qp`, or nullptr when it is not this worker's (a corrupt wr_id).
  T* find(int qp) {
    if (qp < 0 || static_cast<size_t>(qp) >= by_index_.size() || by_index_[size_t(qp)] < 0)
      return nullptr;
    return &list_[static_cast<size_t>(by_index_[size_t(qp)])];
  }

 private:
  std::vector<T> list_;
  std::vector<int> by_index_;  // QP index -> position in list_, -1 for other workers' QPs
};

// What every worker loop holds: its run, its CQ, its QPs (with the loop's state T), where its
// figures go and its stall watch.
template <typename T>
class WorkerLoop {
 protected:
  WorkerLoop(const RunSpec& s, int thread, WorkerResult* out)
      : s_(s),
        o_(*s.o),
        r_(*s.res),
        cq_(s.res->cq(thread)),
        out_(out),
        stall_(s.o->stall_timeout),
        qps_(*s.res, thread) {}

  const RunSpec& s_;
  const Options& o_;
  Resources& r_;
  CqCtx& cq_;
  WorkerResult* out_;
  StallWatch stall_;
  WorkerQps<T> qps_;
};

// A worker's run failed: the first reason is kept and every worker stops. Returns false.
bool fail_run(const RunSpec& s, WorkerResult* out, std::string why);
// --check found bad data: counted, the first kept; the run goes on.
void check_failure(WorkerResult* out, std::string why);
// A received SEND: --check verifies its length and bytes (from slot `slot` of q), then the slot
// is posted again. False when reposting failed (the run failed).
bool take_send(const RunSpec& s, QpCtx& q, const ibv_wc& wc, WorkerResult* out);

// Entry points of the two families; each runs one worker's share of a run.
void run_latency_worker(const RunSpec& spec, int thread, WorkerResult* out);
void run_bandwidth_worker(const RunSpec& spec, int thread, WorkerResult* out);

// --check's data: byte i of the data a side sends on QP q, from a keyed generator so that
// shifted, stale or misdirected data does not match. `client_data` tells the two directions
// apart (the client's data differs from the server's).
uint8_t pattern_byte(bool client_data, int qp, uint64_t i);
void fill_pattern(uint8_t* p, uint64_t n, bool client_data, int qp);
// The first offset in [0, n) where p differs from the pattern, or n.
uint64_t find_mismatch(const uint8_t* p, uint64_t n, bool client_data, int qp);

// Polls up to n completions; with -e, sleeps on the channel (at most timeout_ms) when the CQ is
// empty. Returns what ibv_poll_cq returned (negative: the CQ failed).
int poll_or_wait(CqCtx& c, int n, ibv_wc* wc, bool events, int timeout_ms);

// Posts n WRs on q (filled in except wr_id and signaling): every sig-th WR counted from the
// last signaled one, and the last of these n when `last` is set, is signaled, and its wr_id
// tells how many WRs its completion covers. Returns 0, ENOMEM when the send queue has no room
// for n (nothing posted), or the provider's errno.
int post_counted(Resources& r, QpCtx& q, SendWr* wrs, int n, int sig, bool last);
// A successful send completion of q: the WRs it covers are done. Returns how many.
inline uint32_t complete_sends(QpCtx& q, const ibv_wc& wc) {
  const uint32_t n = wr_value(wc.wr_id);
  q.sq_done += n;
  return n;
}

// "QP 3: RDMA_WRITE failed: remote access error (vendor error 0x..)" for a failed completion.
std::string describe_wc_error(int qp, const ibv_wc& wc);

}  // namespace uroce::perf

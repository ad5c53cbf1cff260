// The workload: flows of RDMA WRITEs between two hosts of the fabric, each on an RC QP pair of
// its own. A flow posts messages of a given size from a start time, keeping `depth` of them
// outstanding, either a fixed number (incast, a transfer) or until a stop time (a long-lived
// stream). It measures per message the completion time (post to the send completion: the ACK
// of the last byte is back) and, at the receiver, the goodput — application bytes accepted in
// order (GoodputTap).
#pragma once

#include <cstdint>
#include <deque>
#include <string>
#include <vector>

#include "sim/event_queue.h"
#include "sim/host.h"
#include "sim/rng.h"

namespace uroce::sim {

struct FlowSpec {
  std::string name{};         // for reports ("f0", "elephant1"…); empty: "f<index>"
  uint32_t src = 0, dst = 0;  // host indices
  uint64_t msg_bytes = 1 << 20;
  uint64_t messages = 0;  // 0: a stream, posting until `stop`
  uint32_t depth = 2;     // messages outstanding at once, >= 1
  Time start = 0;         // first post
  Time stop = kNever;     // a stream posts nothing after this
  // Open loop: messages arrive at exponentially distributed gaps of this mean from `start` (a
  // Poisson process, seeded by `seed`); each is posted on arrival, or once fewer than `depth`
  // are outstanding, and its completion time counts from its arrival. 0: closed loop, a new
  // message as soon as fewer than `depth` are outstanding.
  Time mean_gap = 0;
  uint64_t seed = 1;
  // QPNs of the sending and receiving QP (the UDP source port, hence the ECMP path, follows
  // from the sender's: transport/context.h src_port_for_qpn); 0: the fabric assigns them.
  uint32_t src_qpn = 0, dst_qpn = 0;
  // A warm connection: one WRITE of kWarmupBytes at time 0, before the flow's messages (which
  // must start later; not counted among them). A QP with selective repeat splits a WRITE only
  // once its peer's first response showed the peer speaks it (docs/selective-repeat.md), so
  // without this the messages of a one-shot flow leave whole and recover as go-back-N does.
  bool warmup = false;
};

class Flow final : public QpUser, public EventHandler {
 public:
  static constexpr uint32_t kWarmupBytes = 64;

  // Creates and connects the QP pair; throws std::runtime_error if the transport refuses.
  // `finished` (may be null) is incremented once when the flow completes its messages or fails.
  Flow(EventQueue& q, const FlowSpec& spec, uint32_t index, Host& src, Host& dst,
       size_t* finished = nullptr);
  Flow(const Flow&) = delete;
  Flow& operator=(const Flow&) = delete;

  const FlowSpec& spec() const { return s_; }
  const std::string& name() const { return name_; }
  uint32_t index() const { return index_; }
  transport::Qp& sender() { return *sq_; }
  const transport::Qp& sender() const { return *sq_; }
  uint16_t src_port() const;
  Host& src_host() { return src_; }
  Host& dst_host() { return dst_; }
  const Host& src_host() const { return src_; }
  const Host& dst_host() const { return dst_; }

  // Application bytes the receiver accepted so far.
  uint64_t goodput_bytes() const { return tap_->bytes; }
  uint64_t posted() const { return posted_; }
  uint64_t completed() const { return completed_; }
  uint64_t errors() const { return errors_; }  // completions in error
  // Per completed message: post time and completion time.
  const std::vector<std::pair<Time, Time>>& messages() const { return msgs_; }
  // All `messages` completed (never for a stream).
  bool done() const { return s_.messages != 0 && completed_ == s_.messages; }

  void on_completion(const ibv_wc& wc, Time now) override;
  void on_event(Time now, uint64_t arg) override;  // the start, or an open-loop arrival

 private:
  void post_more(Time now);
  bool may_start_more(Time now) const;

  EventQueue& q_;
  FlowSpec s_;
  std::string name_;
  uint32_t index_;
  Host& src_;
  Host& dst_;
  transport::Qp* sq_ = nullptr;  // on src_
  transport::Qp* rq_ = nullptr;  // on dst_
  uint32_t lkey_ = 0, rkey_ = 0;
  GoodputTap* tap_ = nullptr;
  size_t* finished_;
  bool counted_ = false;  // *finished_ was incremented
  uint64_t posted_ = 0, completed_ = 0, errors_ = 0;
  std::vector<Time> post_times_;  // arrival (open loop) or post time of each posted message
  size_t post_head_ = 0;          // the oldest not yet completed (RC completes in order)
  Rng rng_;
  std::deque<Time> arrivals_;  // open loop: arrived, not yet posted
  uint64_t arrived_ = 0;
  std::vector<std::pair<Time, Time>> msgs_;
};

}  // namespace uroce::sim

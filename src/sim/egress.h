// The transmit side of one port (a switch port, a host's NIC): a FIFO per traffic class, a
// strict-priority scheduler (the highest class with a frame that is not paused goes next),
// serialisation at the link's rate, PFC PAUSE obeyed per class, and RED marking of ECN-capable
// frames on the queue's length (DCQCN's congestion point). PAUSE frames the node sends from this
// port jump every queue and ignore pauses (MAC control frames, 802.3 Annex 31B).
//
// A frame leaves its queue when its serialisation starts (EgressOwner::on_dequeue: the node
// frees its buffer), occupies the link for wire_bytes() at the rate, and is handed to the
// channel when its last bit has left. The port never preempts a frame: a PAUSE that arrives
// while one is on the wire holds the next one.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>

#include "sim/channel.h"
#include "sim/event_queue.h"
#include "sim/frame.h"
#include "sim/rng.h"
#include "sim/stats.h"

namespace uroce::sim {

// ECN marking on an egress queue (DCQCN §2 / util/red.h).
struct RedConfig {
  bool enabled = false;
  uint64_t kmin = 5 * 1024;    // bytes: no marking at or below
  uint64_t kmax = 200 * 1024;  // bytes: every ECT frame marked above
  double pmax = 0.01;          // probability at Kmax
  // Judge the queue a frame leaves behind as it starts transmission (dequeue) rather than the
  // queue it finds on arrival (enqueue): the mark then does not wait out the queue.
  bool at_dequeue = false;
};

// PFC counters of one class of one port, as a switch's `show interface … priority-flow-control`
// lists them.
struct PfcClassCounters {
  uint64_t rx_pause = 0;   // PAUSE frames received for the class with a non-zero time (XOFF)
  uint64_t rx_resume = 0;  // … with time 0 (XON)
  uint64_t tx_pause = 0;   // PAUSE frames the node sent from this port for the class (XOFF)
  uint64_t tx_resume = 0;  // … XON
  Time pause_ns = 0;       // time this port's transmission of the class was held by PAUSE
};

struct EgressCounters {
  uint64_t frames = 0;      // frames transmitted (PAUSE frames included)
  uint64_t bytes = 0;       // their frame bytes
  Time busy_ns = 0;         // link time spent transmitting (frame + preamble + gap)
  Time window_busy_ns = 0;  // of which inside the measurement window
  uint64_t marked = 0;      // frames this port marked CE
  PfcClassCounters pfc[kPriorities];
};

// The node a port belongs to.
class EgressOwner {
 public:
  virtual ~EgressOwner() = default;
  // `f` left port `port`'s queue at `now` (its transmission starts); the owner releases the
  // buffer it held.
  virtual void on_dequeue(uint32_t port, const Frame& f, Time now) = 0;
};

class EgressPort final : public EventHandler {
 public:
  // `out` carries what this port sends; `window` is the measurement window (for busy time and
  // queue statistics); `rng` draws RED's marks (may be null without RED).
  EgressPort(EventQueue& q, uint64_t rate_bps, Channel* out, EgressOwner* owner, uint32_t index,
             const Window* window, Rng* rng, const RedConfig& red);
  EgressPort(const EgressPort&) = delete;
  EgressPort& operator=(const EgressPort&) = delete;

  // Queues `f` in class f->prio (RED at enqueue marks here).
  void enqueue(Frame* f);
  // Sends a PAUSE next, ahead of every queue.
  void send_control(Frame* pause);
  // A PAUSE from the peer: each enabled class is held for its quanta (512 bit times each at
  // this port's rate) from now, or resumed at once for 0. Counted per class.
  void on_pause_frame(const Frame& pause);

  uint64_t rate_bps() const { return rate_bps_; }
  // Serialisation time of `wire_bytes` at the rate, ns (rounded up).
  Time tx_time(uint64_t wire_bytes) const;
  uint64_t queued_bytes(int prio) const { return bytes_[prio]; }
  uint64_t queued_bytes() const { return total_bytes_; }
  size_t queued_frames() const { return frames_; }
  bool paused(int prio) const { return paused_[prio]; }
  bool busy() const { return on_wire_ != nullptr; }
  const EgressCounters& counters() const { return c_; }
  const QueueStats& queue_stats() const { return qstats_; }
  // Closes pause and queue accounting at `now` (end of the run).
  void finish(Time now);
  // Counted by the owner when it sends a PAUSE from this port.
  PfcClassCounters& pfc(int prio) { return c_.pfc[prio]; }

  void on_event(Time now, uint64_t arg) override;

 private:
  static constexpr uint64_t kTxDone = kPriorities;  // event arg; 0..7 = a class's pause expiry
  void try_send(Time now);
  void mark(Frame& f, uint64_t queue_bytes);
  void resume(int prio, Time now);

  EventQueue& q_;
  uint64_t rate_bps_;
  Channel* out_;
  EgressOwner* owner_;
  uint32_t index_;
  const Window* window_;
  Rng* rng_;
  RedConfig red_;
  std::deque<Frame*> queue_[kPriorities];
  std::deque<Frame*> control_;
  uint64_t bytes_[kPriorities] = {};  // frame bytes queued per class
  uint64_t total_bytes_ = 0;
  size_t frames_ = 0;
  Frame* on_wire_ = nullptr;  // being serialised (its end is a kTxDone event)
  bool paused_[kPriorities] = {};
  Time paused_until_[kPriorities] = {};
  Time pause_start_[kPriorities] = {};
  std::unique_ptr<Timer> pause_timer_[kPriorities];
  EgressCounters c_;
  QueueStats qstats_;
};

}  // namespace uroce::sim

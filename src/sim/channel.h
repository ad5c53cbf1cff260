// One direction of a simulated link, from the moment a frame's last bit leaves the sender to its
// arrival at the far end: propagation delay, and optionally the impairments of a bad link —
// random loss, duplication and reordering (a detour of up to four propagation delays) — drawn
// from a seeded Rng. Serialisation (the link's rate) is the sending port's business
// (egress.h): a channel carries frames whenever they are handed to it.
//
// The fabric's links are a channel each way behind an egress port; the transport tests' two-node
// link (tests/transport/harness.h) is two channels with infinite rate. Frames arrive as
// EventClass::kArrival events at a FrameSink, which takes ownership (and returns them to the
// pool).
#pragma once

#include <cstdint>
#include <functional>

#include "sim/event_queue.h"
#include "sim/frame.h"
#include "sim/rng.h"

namespace uroce::sim {

class FrameSink {
 public:
  virtual ~FrameSink() = default;
  // `f` arrived at `now`; the sink owns it from here.
  virtual void on_frame(Frame* f, Time now) = 0;
};

// Sees every frame a channel carries, as it is handed over (capture: pcap.h).
class FrameTap {
 public:
  virtual ~FrameTap() = default;
  virtual void on_tx(const Frame& f, Time now) = 0;
};

struct ChannelParams {
  Time delay = 0;      // propagation, ns
  double loss = 0;     // probability a frame is lost
  double dup = 0;      // probability a frame arrives twice
  double reorder = 0;  // probability a frame takes a detour of up to 4 delays (overtaken)
};

struct ChannelCounters {
  uint64_t sent = 0;        // frames handed to the channel
  uint64_t lost = 0;        // dropped by drop_if or the loss draw
  uint64_t duplicated = 0;  // extra copies sent on
  uint64_t delivered = 0;   // arrivals at the sink (copies included)
};

class Channel final : public EventHandler {
 public:
  // `rng` drives the impairments (shared by the two directions of the transport tests' link,
  // whose draws interleave in one stream); untouched while every probability is 0.
  Channel(EventQueue& q, FramePool& pool, Rng& rng, const ChannelParams& p, FrameSink* dst)
      : q_(q), pool_(pool), rng_(rng), p_(p), dst_(dst) {}
  Channel(const Channel&) = delete;
  Channel& operator=(const Channel&) = delete;

  // Takes `f`, whose last bit left the sender now. Draws, in this order: loss (unless drop_if
  // dropped it), the detour, duplication, the copy's detour.
  void send(Frame* f);
  // A frame it returns true for is lost, before the random loss (tests pick packets to drop).
  std::function<bool(const Frame&)> drop_if;
  void set_tap(FrameTap* tap) { tap_ = tap; }
  void set_sink(FrameSink* dst) { dst_ = dst; }
  const ChannelParams& params() const { return p_; }
  const ChannelCounters& counters() const { return c_; }

  void on_event(Time now, uint64_t arg) override;

 private:
  Time delay();
  bool impaired() const { return p_.loss > 0 || p_.dup > 0 || p_.reorder > 0; }

  EventQueue& q_;
  FramePool& pool_;
  Rng& rng_;
  ChannelParams p_;
  FrameSink* dst_;
  FrameTap* tap_ = nullptr;
  ChannelCounters c_;
};

}  // namespace uroce::sim

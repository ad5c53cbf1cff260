// Deterministic fault injection for one direction (receive or transmit) of a port: loss, burst
// loss, corruption, duplication, reordering and delay, as configured by UROCE_FAULTS (see
// docs/configuration.md). The injector owns no socket and reads no clock: the port offers it each
// datagram with the current time and sends on (or hands up) whatever comes out, and asks for the
// time at which held datagrams fall due so the engine wakes for them even when nothing else
// arrives. Given the same seed, configuration and sequence of offers and times, it makes the same
// decisions, which is what makes a failing run reproducible.
//
// Pipeline, in this order for every offered datagram (each stage draws from the PRNG only when it
// is enabled, so enabling one fault does not change the decisions of a configuration without it;
// in particular `loss=p,seed=n` alone draws exactly one number per datagram, as it always has):
//   loss → burst loss → corruption → duplication → reordering → delay line → switch queue → out
// The switch queue (receive only) is a FIFO drained at a rate: it delays each datagram by the
// backlog ahead of it, drops what does not fit its buffer and marks CE by RED (config.h).
//
// Threading: none of its own; the caller serialises (the port: receive side under the engine's
// receive lock, transmit side under the device lock).
#pragma once

#include <cstdint>
#include <deque>
#include <vector>

#include "engine/config.h"
#include "engine/counters.h"
#include "transport/env.h"

namespace uroce {

// One datagram as the injector sees it: the bytes a UDP datagram carries (IB packet + ICRC) and
// opaque routing data the device's pipeline needs to send or deliver it later.
struct FaultFrame {
  std::vector<uint8_t> bytes;
  wire::IpAddr addr{};       // rx: source address; tx: destination address
  wire::IpAddr local{};      // rx: the address it was sent to (the device's, or a multicast group)
  uint16_t port = 0;         // rx: source port; tx: source port it leaves from
  uint16_t local_port = 0;   // rx: the UDP port it was sent to
  uint8_t tos = 0;           // IPv4 TOS byte (DSCP << 2 | ECN)
  bool ip_id_known = false;  // rx: the port saw the IP header (ip_id, dont_fragment are real)
  bool dont_fragment = true;
  uint16_t ip_id = 0;
  bool truncated = false;  // rx: the port cut it short (MSG_TRUNC)
  bool roce_v1 = false;    // RoCE v1 (GRH) rather than RoCEv2
};

// Counters one injector increments; any may be null. The owner keeps them alive.
struct FaultCounterRefs {
  Counter* drops = nullptr;         // every datagram dropped (loss and burst)
  Counter* burst_drops = nullptr;   // of which dropped inside a burst
  Counter* corrupted = nullptr;     // datagrams with flipped bits
  Counter* duplicated = nullptr;    // extra copies made
  Counter* reordered = nullptr;     // datagrams held back behind later ones
  Counter* delayed = nullptr;       // datagrams that went through the delay line
  Counter* queue_marked = nullptr;  // marked CE by the switch queue
  Counter* queue_drops = nullptr;   // dropped by the switch queue (buffer full)
  // Datagrams the switch queue took in, by the backlog they found: ≤ Kmin, on the ramp, > Kmax.
  Counter* queue_below_kmin = nullptr;
  Counter* queue_in_ramp = nullptr;
  Counter* queue_above_kmax = nullptr;
  Counter* ce_set = nullptr;  // datagrams `ce` set CE on (that were not CE already)
};

class FaultInjector {
 public:
  // A held-back datagram is released after at most this long even when fewer than its count of
  // later datagrams pass (e.g. the last packet of a burst), so reordering never turns into loss.
  static constexpr transport::Time kReorderMaxHoldNs = 1'000'000;  // 1 ms

  FaultInjector(const FaultSpec& spec, uint64_t seed, FaultCounterRefs counters);

  bool enabled() const { return spec_.enabled(); }

  // Offers one datagram at time `now`. Appends to `out` what passes now, in order: zero, one or
  // two copies of it and any held datagrams it releases. Also releases what fell due by `now`.
  void offer(FaultFrame&& f, transport::Time now, std::vector<FaultFrame>& out);
  // Appends held datagrams due by `now` (delay line expiry, reorder hold limit).
  void release_due(transport::Time now, std::vector<FaultFrame>& out);
  // When the next held datagram falls due; transport::kNever when none is held.
  transport::Time next_deadline() const;
  size_t held() const { return reorder_.size() + delay_.size() + queue_.size(); }
  // Frame bytes in the switch queue at `now` (the backlog a datagram arriving then would find).
  uint64_t queue_backlog(transport::Time now) const;

 private:
  struct Reordered {
    FaultFrame f;
    uint32_t left;             // datagrams still to pass before it
    transport::Time deadline;  // released by then regardless
  };
  struct Delayed {
    FaultFrame f;
    transport::Time due;
  };

  uint64_t next_u64();
  double next_unit();               // uniform in [0, 1)
  uint64_t next_below(uint64_t n);  // uniform in [0, n), n > 0
  bool chance(double p) { return p > 0.0 && next_unit() < p; }
  void corrupt(std::vector<uint8_t>& b);
  // The reorder stage: `f` passes it (or is held), releasing held datagrams it overtakes.
  void reorder_stage(FaultFrame&& f, transport::Time now, std::vector<FaultFrame>& out);
  // The delay line, FIFO: a link delay does not reorder (that is the reorder stage's job).
  void delay_stage(FaultFrame&& f, transport::Time now, std::vector<FaultFrame>& out);
  // The switch queue: `f` arrives at `at`; it leaves when the queue has sent what was ahead.
  void queue_stage(FaultFrame&& f, transport::Time at, std::vector<FaultFrame>& out);
  // RED: marks `f` CE (if ECN-capable) with the probability for a backlog of `backlog` bytes.
  void red_mark(FaultFrame& f, uint64_t backlog);
  static void bump(Counter* c) {
    if (c) c->add();
  }

  FaultSpec spec_;
  uint64_t prng_;            // splitmix64 state
  uint32_t burst_left_ = 0;  // datagrams still to drop in the current burst
  FaultCounterRefs c_;
  std::vector<Reordered> reorder_;        // in arrival order
  std::deque<Delayed> delay_;             // in release order (due is non-decreasing)
  std::deque<Delayed> queue_;             // the switch queue, in departure order
  transport::Time queue_busy_until_ = 0;  // when the queue has sent everything in it
};

}  // namespace uroce

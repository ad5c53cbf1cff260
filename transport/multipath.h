// Multipath spraying for an RC QP with selective repeat (docs/selective-repeat.md, "Multipath").
//
// RoCEv2's UDP source port is the entropy a switch's ECMP hash reads (Annex A17.5.1.2): one port
// per QP pins all of a QP's packets to one path, so a few elephants that hash onto one uplink
// collide however idle the others are. A QP with QpInit::paths = N > 1 keeps N entropy values
// (slots) and sends each packet the responder may place ahead of a gap (a split RDMA WRITE ONLY
// with the place bit) on the next slot in turn; every other packet (SENDs, READ and ATOMIC
// requests, WRITE with immediate) keeps slot 0, so its order relative to other such packets is
// the one path's.
//
// Spraying reorders by design, and a SACK that names a later PSN must then not count the PSNs
// before it as lost (DCP, SIGCOMM'25, shows IRN's rule misfiring under spraying). Instead of a
// reorder window in time, PathSet uses what ECMP guarantees: one path is FIFO. A packet is lost
// when a packet sent after it *on the same path* has arrived (RACK's "a later transmission was
// delivered", RFC 8985 §6.2, applied per path). Every transmission gets a transmit sequence
// number (TSN); each path remembers the highest TSN delivered on it (from SACKs and cumulative
// ACKs); a hole is lost when its path's mark is beyond the hole's TSN. Cross-path reordering, of
// any depth, then never triggers a resend; a loss is found one packet later on its own path,
// without a timer. What the rule cannot see — a path that delivers nothing after the loss (the
// last packet sent on it) — is left to the tail probe and the ACK timer, which declare every
// outstanding packet lost (expire_all).
//
// A path that loses is used less: the slot that lost a packet gets a fresh entropy value (UET's
// and UCCL's entropy rotation), so the next packets on that slot hash onto another route. A
// rotation starts a new generation of the slot; packets still in flight on an old route are
// judged by that route's mark (the last kGens routes of a slot are remembered), so stragglers of
// the old route are not taken for lost by deliveries on the new one. A path whose packets are
// CE-marked moves too (marked()): a uroce notification point sends its CNP from the marked
// packet's UDP source port, which names the path.
//
// Pure bookkeeping: no clock, no packets. Allocated only for QPs with paths > 1.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <vector>

#include "transport/psn.h"

namespace uroce::transport {

inline constexpr uint32_t kMaxPaths = 64;

class PathSet {
 public:
  // `paths` <= 1 turns spraying off (on() false). `base_port` is the QP's own UDP source port,
  // slot 0's first entropy value; `qpn` seeds the others.
  void reset(uint32_t qpn, uint16_t base_port, uint32_t paths);
  bool on() const { return st_ != nullptr; }
  uint32_t paths() const { return on() ? st_->n : 1; }

  // A transmission of `psn` (first or resent). `spray`: on the next slot in turn, else on slot 0.
  // `span` PSNs from `psn` share it (a READ request covers its responses' PSNs). Returns the UDP
  // source port the packet leaves from.
  uint16_t send(Psn psn, bool spray, uint32_t span = 1);
  // `psn` arrived at the responder (SACKed, or cumulatively acknowledged).
  void delivered(Psn psn);
  // `psn`, still missing at the responder, was sent before a packet its path has delivered.
  bool lost(Psn psn) const;
  // `psn` is lost: the route that lost it is replaced (once per route: a second loss on a route
  // already replaced changes nothing). Returns true when a slot got a new entropy value.
  bool rotate(Psn psn);
  // The tail probe or the ACK timer: every packet sent so far counts as lost.
  void expire_all();
  // The peer's CNP came from UDP source port `port`: a uroce notification point sends it from
  // the port of the CE-marked packet, so it names the congested path. The slot on that route gets
  // a new one — unless it was replaced before and its new route has delivered nothing yet, so
  // that a slot moves at most about once a round trip however many marks arrive. Returns true
  // when it moved.
  bool marked(uint16_t port);
  // The UDP source port of slot `i`'s current route (tests, stats).
  uint16_t port(uint32_t i) const { return st_->slot[i].port; }

 private:
  // A slot's routes: the current one and the kGens - 1 before it, each with the highest TSN
  // delivered on it (0: none), indexed by generation modulo kGens.
  static constexpr uint8_t kGens = 4;
  struct Slot {
    uint16_t port = 0;
    uint8_t gen = 0;  // +1 per rotation (wraps)
    std::array<uint32_t, kGens> mark{};
    uint32_t& current() { return mark[gen % kGens]; }
  };
  // What a PSN's latest transmission was: its slot, the slot's generation then, and its TSN.
  struct Sent {
    uint32_t tsn = 0;
    uint8_t slot = 0;
    uint8_t gen = 0;
  };
  // Indexed by PSN modulo its size: at most kSendWindowPkts (256) PSNs are unacknowledged (a READ
  // may overshoot; an entry overwritten then only makes a loss be found later or earlier).
  static constexpr uint32_t kRing = 1024;
  struct State {
    uint32_t n = 1;
    uint32_t next = 0;     // the slot the next sprayed packet takes
    uint32_t tsn = 0;      // the last TSN given (0 is never given)
    uint32_t entropy = 0;  // the last entropy value drawn
    uint32_t qpn = 0;
    uint32_t expired = 0;        // every TSN up to this one counts as lost (expire_all)
    uint32_t max_delivered = 0;  // the highest TSN delivered on any route
    std::array<Slot, kMaxPaths> slot{};
    std::array<Sent, kRing> sent{};
  };
  uint16_t draw_port();
  // A packet sent after `r` on r's route (one of the slot's last kGens routes) arrived.
  bool seen_behind(const Sent& r) const;
  void replace(Slot& sl);
  std::unique_ptr<State> st_;
};

}  // namespace uroce::transport

// The neighbour cache of a port that frames Ethernet itself (ARP, RFC 826, for IPv4; neighbour
// discovery, RFC 4861, for IPv6 — the same rules here): which MAC address a next hop has, and what
// to do with packets for a next hop not resolved yet. Pure logic: no frames, no clock, no DPDK —
// the port sends the requests it is told to and passes time in, so the rules are tested in virtual
// time.
//
// States of an entry (after Linux's neighbour states, simplified):
//   incomplete — a request went out; packets wait here (at most max_pending, then dropped).
//                Retried every retry_ns; after max_requests unanswered it fails.
//   resolved   — the MAC is known (an ARP request or reply from the neighbour, or a static entry);
//                any later ARP from it updates the MAC. Resolved entries do not expire: a MAC
//                that moves announces itself (gratuitous ARP) or answers our next request.
//   failed     — no answer: packets for it are dropped at once (counted by the port) for
//                failed_hold_ns, then the next packet starts a new resolution. So a QP whose
//                peer never resolves fails like one whose packets are lost (its retries run
//                out), never by hanging.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <limits>
#include <unordered_map>
#include <vector>

#include "transport/wire/ip.h"

namespace uroce::dpdk {

using Mac = std::array<uint8_t, 6>;
using Time = uint64_t;  // ns, the port's clock
inline constexpr Time kNever = std::numeric_limits<Time>::max();

class NeighbourTable {
 public:
  struct Params {
    Time retry_ns = 200'000'000;          // between requests for one neighbour (200 ms)
    uint32_t max_requests = 5;            // unanswered requests before it fails (~1 s)
    Time failed_hold_ns = 1'000'000'000;  // how long a failure is remembered (1 s)
    // Packets waiting for one neighbour. A QP's first burst goes out before its peer resolves
    // (the ARP exchange takes one round trip): a full send window of 4 KiB packets must wait
    // here, or the QP starts with a loss and an ACK timeout (64 dropped 192 of a 64 KiB
    // ib_write_bw's first 256). A quarter of the port's transmit pool (kTxPoolSize).
    size_t max_pending = 1024;
    size_t max_entries = 4096;  // learned entries (static ones do not count)
  };
  // What to do with a packet for `ip`.
  enum class Lookup {
    kResolved,  // *mac holds the address: send
    kPending,   // resolution under way: hold() it
    kFailed,    // the neighbour did not answer: drop it
  };

  NeighbourTable() : NeighbourTable(Params{}) {}
  explicit NeighbourTable(Params p) : p_(p) {}

  // A packet wants to go to `ip` at `now`. On kPending, *send_request tells whether the caller
  // must send an ARP request now (the first packet for an unknown neighbour).
  Lookup resolve(const wire::IpAddr& ip, Time now, Mac* mac, bool* send_request);
  // The common case of resolve(), needing no time: true and *mac when `ip` is resolved.
  bool lookup(const wire::IpAddr& ip, Mac* mac) const;
  // Keeps a packet (an opaque handle the caller owns again when it is released or dropped)
  // until `ip` resolves. false when the entry is not incomplete or its queue is full: the
  // caller drops the packet.
  bool hold(const wire::IpAddr& ip, void* pkt);
  // An ARP packet from `ip` at `mac` (a request or a reply). Updates an existing entry; with
  // `create` (a reply, or a request addressed to us — RFC 826's merge rule) adds a new one.
  // Packets that waited for it are appended to *released, in order.
  void learn(const wire::IpAddr& ip, const Mac& mac, Time now, bool create,
             std::vector<void*>* released);
  void add_static(const wire::IpAddr& ip, const Mac& mac);
  // Retries and failures due by `now`: addresses to send a request to, and held packets to drop.
  void poll(Time now, std::vector<wire::IpAddr>* requests, std::vector<void*>* dropped);
  // When poll() must run next; kNever when nothing is pending.
  Time next_deadline() const;
  size_t size() const { return entries_.size(); }
  // Entries that failed since the table was made.
  uint64_t failures() const { return failures_; }

 private:
  enum class State : uint8_t { kIncomplete, kResolved, kFailed };
  struct Entry {
    State state = State::kIncomplete;
    bool is_static = false;
    Mac mac{};
    uint32_t requests = 0;   // sent while incomplete
    Time deadline = kNever;  // incomplete: next retry; failed: end of the hold
    std::deque<void*> pending;
  };
  Params p_;
  std::unordered_map<wire::IpAddr, Entry> entries_;
  size_t learned_ = 0;  // non-static entries
  uint64_t failures_ = 0;
};

// Priority flow control and link PAUSE (IEEE 802.3 annex 31B; 802.1Qbb for per-priority
// PAUSE): which priorities a received PAUSE stopped, and until when. Pure, like the table above.
class PauseState {
 public:
  // A PAUSE frame at `now`: for every priority whose bit is set in `mask`, pause for quanta[p]
  // quanta of `quantum_ns` each (a quantum is 512 bit times at the link speed). 0 quanta
  // resumes the priority at once (XON). Link PAUSE (802.3x) is mask 0xff with one time for all.
  void on_pause(uint8_t mask, const uint16_t quanta[8], double quantum_ns, Time now);
  bool paused(int prio, Time now) const { return until_[prio] > now; }
  // False when `prio` was never paused or its pause ended by XON: then no clock is needed to
  // know it is not paused (the transmit path asks per packet).
  bool ever_paused(int prio) const { return until_[prio] != 0; }
  // The earliest end of a pause still running at `now`; kNever when none.
  Time next_expiry(Time now) const;

 private:
  Time until_[8] = {};
};

}  // namespace uroce::dpdk

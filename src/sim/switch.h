// A store-and-forward switch: a frame is forwarded once it has arrived whole. Forwarding looks
// the destination address up in a routing table of ECMP groups (the fabric fills it with every
// shortest path) and hashes the 5-tuple to pick one member (ecmp.h). The egress ports
// (egress.h) queue per traffic class and mark ECN by RED.
//
// Buffer: frames are held from arrival until their transmission starts, in one pool shared by
// every port or in a pool per egress port, of a given size (0: unlimited); a frame that does not
// fit is dropped and counted (per egress port and class).
//
// MTU: a port may have an IP MTU (0: none, i.e. jumbo enough for anything). A frame whose IPv4
// packet is longer than the MTU of the port it arrives on (an oversize frame, a "giant") or of the
// port it would leave by is dropped and counted there (`mtu_drops`): RoCEv2 sets DF and no
// Ethernet switch fragments, so a router's "fragmentation needed" is all a sender could get, and
// RoCE ignores it (the QP's path MTU is what the application chose).
//
// PFC (IEEE 802.1Qbb), for the lossless classes: the bytes held per (ingress port, class) are
// counted; when they reach XOFF the switch sends a PAUSE for the class out of that ingress port
// (upstream) with the configured quanta, refreshes it while the count stays above XON (every half
// pause time, so the sender never resumes in between), and sends a PAUSE with time 0 (XON) when
// the count falls to XON. The lossless classes still obey the buffer limit: with too little
// headroom above XOFF they drop, as a misconfigured switch would.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "sim/ecmp.h"
#include "sim/egress.h"

namespace uroce::sim {

struct PfcConfig {
  bool enabled = false;
  uint8_t classes = 1u << 3;  // lossless classes (bit per class): RoCE's class 3
  uint64_t xoff = 96 * 1024;  // bytes held per (ingress port, class) that send XOFF
  uint64_t xon = 64 * 1024;   // … that send XON once XOFF was sent; < xoff
  uint16_t quanta = 0xffff;   // pause time of an XOFF, 512-bit-time quanta
};

enum class BufferMode : uint8_t { kShared, kPerPort };

struct SwitchConfig {
  uint64_t buffer_bytes = 0;  // 0 = unlimited
  BufferMode buffer_mode = BufferMode::kShared;
  RedConfig red;  // on every egress queue
  PfcConfig pfc;
  EcmpHash hash = EcmpHash::kCrc32;
};

struct SwitchPortCounters {
  uint64_t rx_frames = 0;            // frames that arrived on the port (PAUSE included)
  uint64_t drops[kPriorities] = {};  // frames dropped for this egress: no buffer
  uint64_t no_route = 0;             // frames that arrived here for an unknown address
  uint64_t mtu_drops = 0;  // frames longer than this port's MTU, arriving or leaving (above)
};

class Switch;

// One port: its egress side, its channel out, the sink its incoming channel delivers to.
struct SwitchPort {
  struct In final : FrameSink {
    SwitchPort* port = nullptr;
    void on_frame(Frame* f, Time now) override;
  };
  Switch* sw = nullptr;
  uint32_t index = 0;
  In in;                         // the receive side: what the incoming channel delivers to
  std::unique_ptr<Channel> out;  // towards the peer
  std::unique_ptr<EgressPort> egress;
  std::string peer;  // the node at the other end (for reports)
  uint32_t mtu = 0;  // IP MTU, bytes (IPv4 header to the end of the UDP payload); 0: none
  SwitchPortCounters c;
  // PFC per class: bytes held that came in on this port, and whether XOFF is in force.
  uint64_t ingress_bytes[kPriorities] = {};
  bool xoff[kPriorities] = {};
  std::unique_ptr<Timer> refresh[kPriorities];
  uint64_t held_bytes = 0;  // frames queued at this egress (the per-port buffer's occupancy)
};

class Switch final : public EgressOwner, public EventHandler {
 public:
  Switch(EventQueue& q, FramePool& pool, std::string name, uint32_t id, const SwitchConfig& c,
         const Window* window, uint64_t seed);
  Switch(const Switch&) = delete;
  Switch& operator=(const Switch&) = delete;

  // Adds a port at `rate_bps` whose frames go through `out` (the link's channel towards the
  // peer). Returns its index; its receive side is sink(index).
  uint32_t add_port(uint64_t rate_bps, std::unique_ptr<Channel> out, const std::string& peer);
  FrameSink* sink(uint32_t port) { return &ports_[port]->in; }
  // Frames to `ip` leave through one of `ports` (an ECMP group when several).
  void set_route(uint32_t ip, std::vector<uint32_t> ports) { routes_[ip] = std::move(ports); }
  const std::vector<uint32_t>* route(uint32_t ip) const;

  // A frame arrived whole on `port`.
  void receive(uint32_t port, Frame* f, Time now);

  const std::string& name() const { return name_; }
  uint32_t id() const { return id_; }
  size_t port_count() const { return ports_.size(); }
  SwitchPort& port(uint32_t i) { return *ports_[i]; }
  const SwitchPort& port(uint32_t i) const { return *ports_[i]; }
  const SwitchConfig& config() const { return c_; }
  uint64_t buffer_used() const { return used_; }
  uint64_t buffer_peak() const { return peak_; }
  uint32_t hash_seed() const { return seed32_; }
  // The egress port a frame with this tuple leaves through (routing + ECMP), or -1.
  int64_t egress_for(const FiveTuple& t) const;

  void on_dequeue(uint32_t port, const Frame& f, Time now) override;
  // PFC refresh timers: arg = port << 3 | class.
  void on_event(Time now, uint64_t arg) override;

 private:
  bool lossless(int prio) const { return c_.pfc.enabled && (c_.pfc.classes & (1u << prio)); }
  void send_pause(uint32_t port, int prio, uint16_t quanta);

  EventQueue& q_;
  FramePool& pool_;
  std::string name_;
  uint32_t id_;
  SwitchConfig c_;
  const Window* window_;
  Rng rng_;          // RED's draws, for all ports (in event order: deterministic)
  uint32_t seed32_;  // the ECMP hash seed
  std::vector<std::unique_ptr<SwitchPort>> ports_;
  std::unordered_map<uint32_t, std::vector<uint32_t>> routes_;
  uint64_t used_ = 0;  // shared buffer occupancy, frame bytes
  uint64_t peak_ = 0;
};

}  // namespace uroce::sim

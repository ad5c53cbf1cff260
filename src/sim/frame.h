// What travels on a simulated link: an Ethernet frame, either a RoCEv2 datagram (IPv4 / UDP /
// IB packet / ICRC) or an 802.1Qbb priority-flow-control PAUSE. The simulator keeps the header
// fields as values and the UDP payload as bytes: the IB packet and its ICRC are exactly what
// uroce's send pipeline wrote, so the receiving host's pipeline checks the ICRC and parses them
// as on any port, and a capture shows real packets.
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>
#include <vector>

#include "transport/env.h"

namespace uroce::sim {

// Bytes of an Ethernet frame around an IPv4/UDP datagram: header (14) and FCS (4) (untagged:
// priority travels in the DSCP, "trust dscp", as RoCE deployments commonly configure it).
inline constexpr uint32_t kEthOverhead = 14 + 4;
inline constexpr uint32_t kIpUdpHeaders = 20 + 8;
inline constexpr uint32_t kMinFrame = 64;  // Ethernet's minimum frame, FCS included
// What a frame costs on the wire beyond its bytes: preamble and start delimiter (8) and the
// minimum inter-frame gap (12). A link's rate is spent on frame bytes plus this.
inline constexpr uint32_t kWireGap = 20;
inline constexpr int kPriorities = 8;  // 802.1p classes, each with its own egress queue and PFC

enum class FrameKind : uint8_t { kRoce, kPause };

struct Frame {
  FrameKind kind = FrameKind::kRoce;
  uint8_t prio = 0;  // the traffic class it is queued and paused in (0..7)
  // RoCEv2: the IPv4 and UDP header fields (host byte order) and the UDP payload.
  uint32_t src_ip = 0, dst_ip = 0;
  uint16_t src_port = 0, dst_port = 4791;
  uint8_t tos = 0;  // DSCP << 2 | ECN; switches set CE here
  uint16_t ip_id = 0;
  bool dont_fragment = true;
  std::vector<uint8_t> payload;  // IB packet + ICRC (the harness's nodes: the IB packet alone)
  // PAUSE (IEEE 802.1Qbb): the class-enable vector and a time per class, in quanta of 512 bit
  // times at the link's rate; 0 resumes the class at once (XON).
  uint8_t pause_enable = 0;
  uint16_t pause_quanta[kPriorities] = {};
  // Bookkeeping of the node currently holding the frame: the port it came in on.
  uint32_t ingress = 0;

  // Frame bytes (Ethernet header to FCS): what a buffer holds and what a pcap record shows.
  uint32_t bytes() const {
    if (kind == FrameKind::kPause) return kMinFrame;
    return std::max<uint32_t>(kMinFrame, kEthOverhead + kIpUdpHeaders + uint32_t(payload.size()));
  }
  // The IPv4 packet's bytes (header to the end of the UDP payload): what an IP MTU limits.
  uint32_t ip_bytes() const { return kIpUdpHeaders + uint32_t(payload.size()); }
  // Bytes of link time: the frame and its preamble and gap.
  uint32_t wire_bytes() const { return bytes() + kWireGap; }
};

// Frames are recycled rather than freed: a busy fabric moves millions of them, and a recycled
// frame keeps its payload's capacity.
class FramePool {
 public:
  Frame* get() {
    if (free_.empty()) {
      all_.push_back(std::make_unique<Frame>());
      return all_.back().get();
    }
    Frame* f = free_.back();
    free_.pop_back();
    return f;
  }
  void put(Frame* f) {
    f->kind = FrameKind::kRoce;
    f->pause_enable = 0;
    free_.push_back(f);
  }
  // A copy of `f` (a duplicated frame).
  Frame* clone(const Frame& f) {
    Frame* c = get();
    *c = f;
    return c;
  }
  size_t allocated() const { return all_.size(); }
  size_t in_use() const { return all_.size() - free_.size(); }

 private:
  std::vector<std::unique_ptr<Frame>> all_;
  std::vector<Frame*> free_;
};

}  // namespace uroce::sim

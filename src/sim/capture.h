// A capture of one link, both directions, as a tap on the cable would see it: Ethernet frames
// (engine/pcap.h, LINKTYPE_ETHERNET) stamped with the virtual time at which their last bit left
// the sender. RoCEv2 frames carry the IPv4/UDP headers rebuilt from the frame's fields and the
// IB packet and ICRC as sent — the ICRC verifies, and the ECN bits show each switch's marks;
// PFC PAUSE frames are 802.1Qbb MAC control frames (EtherType 0x8808, opcode 0x0101). MAC
// addresses are locally administered ones numbered by node. Wireshark and tshark decode both.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "engine/pcap.h"
#include "sim/channel.h"

namespace uroce::sim {

class LinkCapture {
 public:
  // Captures the link whose directions are `ab` and `ba`, between nodes numbered `a` and `b`
  // (for their MAC addresses). nullptr and *err if the file cannot be created.
  static std::unique_ptr<LinkCapture> open(const std::string& path, Channel& ab, Channel& ba,
                                           uint32_t a, uint32_t b, std::string* err);
  ~LinkCapture();
  uint64_t records() const { return pcap_->records(); }

 private:
  struct Tap final : FrameTap {
    LinkCapture* cap = nullptr;
    uint32_t from = 0, to = 0;  // node numbers
    void on_tx(const Frame& f, Time now) override { cap->write(f, now, from, to); }
  };
  LinkCapture() = default;
  void write(const Frame& f, Time now, uint32_t from, uint32_t to);

  std::unique_ptr<PcapWriter> pcap_;
  Channel* ab_ = nullptr;
  Channel* ba_ = nullptr;
  Tap tap_ab_, tap_ba_;
};

}  // namespace uroce::sim

#include "sim/capture.h"

#include "wire/wire.h"

namespace uroce::sim {
namespace {

// 02:00:5e:00:hi:lo — locally administered, unicast, numbered by node.
void put_mac(uint8_t* p, uint32_t node) {
  const uint8_t mac[6] = {0x02, 0x00, 0x5e, uint8_t(node >> 16), uint8_t(node >> 8), uint8_t(node)};
  for (int i = 0; i < 6; ++i) p[i] = mac[i];
}

}  // namespace

std::unique_ptr<LinkCapture> LinkCapture::open(const std::string& path, Channel& ab, Channel& ba,
                                               uint32_t a, uint32_t b, std::string* err) {
  std::unique_ptr<LinkCapture> c(new LinkCapture);
  c->pcap_ = PcapWriter::open(path, err, PcapWriter::LinkType::kEthernet);
  if (!c->pcap_) return nullptr;
  c->ab_ = &ab;
  c->ba_ = &ba;
  c->tap_ab_ = Tap{};
  c->tap_ab_.cap = c.get();
  c->tap_ab_.from = a;
  c->tap_ab_.to = b;
  c->tap_ba_.cap = c.get();
  c->tap_ba_.from = b;
  c->tap_ba_.to = a;
  ab.set_tap(&c->tap_ab_);
  ba.set_tap(&c->tap_ba_);
  return c;
}

LinkCapture::~LinkCapture() {
  if (ab_) ab_->set_tap(nullptr);
  if (ba_) ba_->set_tap(nullptr);
}

void LinkCapture::write(const Frame& f, Time now, uint32_t from, uint32_t to) {
  uint8_t eth[14];
  put_mac(eth + 6, from);
  if (f.kind == FrameKind::kPause) {
    // IEEE 802.1Qbb: to the MAC control address, opcode 0x0101, class-enable vector, eight
    // times; padded to the 60-byte minimum (without FCS).
    static constexpr uint8_t kPauseDst[6] = {0x01, 0x80, 0xc2, 0x00, 0x00, 0x01};
    for (int i = 0; i < 6; ++i) eth[i] = kPauseDst[i];
    eth[12] = 0x88;
    eth[13] = 0x08;
    uint8_t body[46] = {};
    body[0] = 0x01;
    body[1] = 0x01;
    body[2] = 0;
    body[3] = f.pause_enable;
    for (int c = 0; c < kPriorities; ++c) {
      body[4 + 2 * c] = uint8_t(f.pause_quanta[c] >> 8);
      body[5 + 2 * c] = uint8_t(f.pause_quanta[c]);
    }
    pcap_->write_record(now, {std::span<const uint8_t>(eth, sizeof eth), {body, sizeof body}});
    return;
  }
  put_mac(eth, to);
  eth[12] = 0x08;  // IPv4
  eth[13] = 0x00;
  wire::Ipv4UdpFraming fr;
  fr.src_ip = f.src_ip;
  fr.dst_ip = f.dst_ip;
  fr.ip_id = f.ip_id;
  fr.dont_fragment = f.dont_fragment;
  fr.src_port = f.src_port;
  fr.dst_port = f.dst_port;
  const size_t ib_len =
      f.payload.size() >= wire::kIcrcBytes ? f.payload.size() - wire::kIcrcBytes : 0;
  uint8_t ipu[PcapWriter::kIpv4UdpHeaderBytes];
  PcapWriter::ipv4_udp_headers(fr, f.tos, ib_len, ipu);
  pcap_->write_record(now, {std::span<const uint8_t>(eth, sizeof eth),
                            {ipu, sizeof ipu},
                            {f.payload.data(), f.payload.size()}});
}

}  // namespace uroce::sim

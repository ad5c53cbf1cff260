// The engine's port boundary with addresses of either family (wire::IpAddr). Transmit: what the
// transport addresses as an IPv4-mapped address leaves as that IPv4 address, with the ICRC of
// the IPv4 datagram; anything else is unroutable for the IPv4 ports, dropped and counted before
// a port sees it. Receive: a frame's addresses reach the transport as the port gave them, and
// the ICRC is checked in the framing they imply (IPv4, or IPv6 for a future IPv6 port). A port
// of fixed buffers and frames, no sockets.
#include "engine/datapath.h"

#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "transport/wire/icrc.h"
#include "transport/wire/ip.h"
#include "transport/wire/wire.h"

namespace uroce {
namespace {

constexpr uint32_t kLocal = 0x0a000001, kPeer = 0x0a000002;

// Hands out buffers of its own and records the destination (as the IPv4 a socket port would
// send to) and the ICRC of each buffer it is asked to send.
class RecordingPort : public Port {
 public:
  struct Sent {
    uint32_t dst_ip;
    uint32_t icrc;
  };
  RecordingPort() {
    for (auto& b : bufs_) free_.push_back(&b);
  }
  const PortCaps& caps() const override { return caps_; }
  wire::IpAddr ip() const override { return wire::IpAddr(kLocal); }
  std::string describe() const override { return "recording"; }
  std::span<const RxFrame> rx_burst() override {
    handed_.swap(queued_);
    queued_.clear();
    return handed_;
  }
  transport::TxBuf* tx_alloc() override {
    if (free_.empty()) return nullptr;
    transport::TxBuf* b = free_.back();
    free_.pop_back();
    return b;
  }
  void tx_free(transport::TxBuf* b) override { free_.push_back(b); }
  size_t tx_burst(std::span<transport::TxBuf* const> bufs) override {
    for (transport::TxBuf* b : bufs) {
      sent->push_back({b->dst_ip.v4(), wire::load_le32(b->data + b->len)});
      free_.push_back(b);
    }
    return bufs.size();
  }
  size_t free_buffers() const { return free_.size(); }
  // `f` (its bytes the caller's, kept until the next rx_burst) comes in at the next rx_burst.
  void queue(const RxFrame& f) { queued_.push_back(f); }

  std::vector<Sent>* sent = nullptr;  // the test's, outliving the port's use

 private:
  PortCaps caps_;
  transport::TxBuf bufs_[4];
  std::vector<transport::TxBuf*> free_;
  std::vector<RxFrame> queued_, handed_;
};

struct Rig {
  Rig() {
    auto p = std::make_unique<RecordingPort>();
    port = p.get();
    port->sent = &sent;
    std::string err;
    dp = Datapath::open(std::move(p), {}, counters, &err);
    EXPECT_NE(dp, nullptr) << err;
  }
  // Queues a SEND-only packet (headers only) for `dst`.
  void queue(const wire::IpAddr& dst) {
    transport::TxBuf* b = dp->tx_alloc();
    ASSERT_NE(b, nullptr);
    wire::Packet p;
    p.bth.opcode = uint8_t(wire::Opcode::kUdSendOnly);
    p.bth.dest_qp = 0x22;
    p.deth.qkey = 0x11111111;
    p.deth.src_qp = 0x33;
    b->len = uint32_t(wire::build_headers(p, b->data));
    b->dst_ip = dst;
    b->src_port = 0xc001;
    dp->tx_commit(b);
  }
  std::vector<RecordingPort::Sent> sent;
  DeviceCounters counters;
  RecordingPort* port = nullptr;
  std::unique_ptr<Datapath> dp;
};

TEST(DatapathIp, AnIpv4MappedDestinationLeavesAsThatIpv4Address) {
  Rig r;
  ASSERT_TRUE(r.dp);
  r.queue(wire::IpAddr(kPeer));
  EXPECT_EQ(r.dp->tx_flush(0), 1u);
  ASSERT_EQ(r.sent.size(), 1u);
  EXPECT_EQ(r.sent[0].dst_ip, kPeer);
  // The ICRC is the IPv4 datagram's, from the port's address to the peer's.
  wire::Packet p;
  p.bth.opcode = uint8_t(wire::Opcode::kUdSendOnly);
  p.bth.dest_qp = 0x22;
  p.deth.qkey = 0x11111111;
  p.deth.src_qp = 0x33;
  uint8_t ib[64];
  const size_t len = wire::build_headers(p, ib);
  wire::Ipv4UdpFraming f;
  f.src_ip = kLocal;
  f.dst_ip = kPeer;
  f.dont_fragment = true;
  f.src_port = 0xc001;
  f.dst_port = wire::kRoceV2UdpPort;
  EXPECT_EQ(r.sent[0].icrc, wire::icrc(f, {ib, len}));
  EXPECT_EQ(r.counters.port.tx_errors.get(), 0u);
}

TEST(DatapathIp, ANonIpv4DestinationIsUnroutableDroppedAndCounted) {
  Rig r;
  ASSERT_TRUE(r.dp);
  const size_t free_before = r.port->free_buffers();
  r.queue(*wire::IpAddr::parse("2001:db8::2"));  // an IPv6 GID's address
  r.queue(wire::IpAddr{});                       // "::", no address at all
  EXPECT_EQ(r.counters.port.tx_errors.get(), 2u);
  EXPECT_EQ(r.dp->tx_queued(), 0u);
  EXPECT_EQ(r.port->free_buffers(), free_before);  // handed back, not leaked
  r.queue(wire::IpAddr(kPeer));                    // the next IPv4 one still goes
  r.dp->tx_flush(0);
  ASSERT_EQ(r.sent.size(), 1u);
  EXPECT_EQ(r.sent[0].dst_ip, kPeer);
}

// A UD SEND-only packet (headers only) and room for its ICRC behind it.
struct RxBytes {
  RxBytes() {
    wire::Packet p;
    p.bth.opcode = uint8_t(wire::Opcode::kUdSendOnly);
    p.bth.dest_qp = 0x22;
    p.bth.psn = 7;
    p.deth.qkey = 0x11111111;
    p.deth.src_qp = 0x33;
    ib_len = wire::build_headers(p, bytes);
  }
  RxFrame frame(const wire::IpAddr& src, const wire::IpAddr& dst, uint32_t icrc) {
    wire::store_le32(bytes + ib_len, icrc);
    RxFrame f;
    f.data = bytes;
    f.len = uint32_t(ib_len + wire::kIcrcBytes);
    f.src_ip = src;
    f.dst_ip = dst;
    f.src_port = 0xc002;
    f.dst_port = wire::kRoceV2UdpPort;
    f.ip_id_known = true;
    return f;
  }
  std::span<const uint8_t> ib() const { return {bytes, ib_len}; }
  uint8_t bytes[64];
  size_t ib_len = 0;
};

TEST(DatapathIp, AnIpv4FrameReachesTheTransportWithItsAddressesIpv4Mapped) {
  Rig r;
  ASSERT_TRUE(r.dp);
  RxBytes b;
  wire::Ipv4UdpFraming f;
  f.src_ip = kPeer;
  f.dst_ip = kLocal;
  f.src_port = 0xc002;
  f.dst_port = wire::kRoceV2UdpPort;
  r.port->queue(b.frame(wire::IpAddr(kPeer), wire::IpAddr(kLocal), wire::icrc(f, b.ib())));
  const auto got = r.dp->rx_burst(0);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].pkt.bth.psn, 7u);
  EXPECT_EQ(got[0].info.src_ip, wire::IpAddr(kPeer));
  EXPECT_EQ(got[0].info.dst_ip, wire::IpAddr(kLocal));
  EXPECT_EQ(r.counters.rcvd_icrc_err.get(), 0u);
}

TEST(DatapathIp, AnIpv6FrameIsCheckedWithTheIpv6IcrcAndKeepsItsAddresses) {
  Rig r;
  ASSERT_TRUE(r.dp);
  RxBytes b;
  const wire::IpAddr src = *wire::IpAddr::parse("2001:db8::2");
  const wire::IpAddr dst = *wire::IpAddr::parse("2001:db8::1");
  const wire::Ipv6UdpFraming f6{src, dst, 0xc002, wire::kRoceV2UdpPort};
  r.port->queue(b.frame(src, dst, wire::icrc(f6, b.ib())));
  auto got = r.dp->rx_burst(0);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].info.src_ip, src);
  EXPECT_EQ(got[0].info.dst_ip, dst);
  // The IPv4 framing's ICRC (of the low 32 bits) is no IPv6 ICRC: counted, dropped.
  wire::Ipv4UdpFraming f4;
  f4.src_ip = src.v4();
  f4.dst_ip = dst.v4();
  f4.src_port = 0xc002;
  f4.dst_port = wire::kRoceV2UdpPort;
  r.port->queue(b.frame(src, dst, wire::icrc(f4, b.ib())));
  got = r.dp->rx_burst(0);
  EXPECT_TRUE(got.empty());
  EXPECT_EQ(r.counters.rcvd_icrc_err.get(), 1u);
}

}  // namespace
}  // namespace uroce

#include "ports/udp/udp_port.h"

#include <linux/if_ether.h>
#include <linux/if_packet.h>
#include <net/if.h>
#include <netinet/ip.h>
#include <netinet/udp.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

#include "test_util.h"

namespace uroce {
namespace {

using test::loopback;
using test::RawSender;

// What a test keeps of a received packet (payload spans die with the next rx_burst).
struct Got {
  uint32_t dest_qp, psn;
  uint8_t opcode;
  std::vector<uint8_t> payload;
  transport::RxInfo info;
  uint16_t ip_id;
};

// Receives until `want` packets arrived or nothing came for `idle_ms`.
std::vector<Got> receive(UdpPort& port, size_t want, int idle_ms = 300) {
  std::vector<Got> out;
  while (out.size() < want) {
    auto batch = port.rx_burst();
    if (batch.empty()) {
      if (!test::wait_readable(port.rx_fd(), idle_ms)) break;
      continue;
    }
    for (const RxPacket& p : batch)
      out.push_back({p.pkt.bth.dest_qp,
                     p.pkt.bth.psn,
                     p.pkt.bth.opcode,
                     {p.pkt.payload.begin(), p.pkt.payload.end()},
                     p.info,
                     p.ip_id});
  }
  return out;
}

std::unique_ptr<UdpPort> open_port(uint32_t ip, DeviceCounters& c, FaultConfig faults = {},
                                   size_t max_src_sockets = 64) {
  UdpPortOptions o;
  o.ipv4 = ip;
  o.faults = faults;
  o.max_src_port_sockets = max_src_sockets;
  std::string err;
  auto p = UdpPort::open(o, c, &err);
  EXPECT_NE(p, nullptr) << err;
  return p;
}

// Queues one SEND ONLY packet from `port` to `dst`.
void queue_send(UdpPort& port, uint32_t dst, uint32_t qpn, uint32_t psn, uint16_t src_port,
                uint8_t ecn = transport::kEcnNotEct, size_t payload_len = 13) {
  transport::TxBuf* b = port.tx_alloc();
  ASSERT_NE(b, nullptr);
  std::vector<uint8_t> payload(payload_len);
  for (size_t i = 0; i < payload_len; ++i) payload[i] = static_cast<uint8_t>(psn + i);
  b->len = static_cast<uint32_t>(
      test::build_packet(b->data, wire::Opcode::kRcSendOnly, qpn, psn, payload));
  b->dst_ip = dst;
  b->src_port = src_port;
  b->ecn = ecn;
  port.tx_commit(b);
}

TEST(UdpPortTest, SendsBetweenTwoAddressesWithIcrcAndEcn) {
  const uint32_t a = loopback(41, 1, 1), b = loopback(41, 1, 2);
  DeviceCounters ca, cb;
  auto pa = open_port(a, ca), pb = open_port(b, cb);
  ASSERT_TRUE(pa && pb);

  queue_send(*pa, b, 0x11, 100, 0xc123, transport::kEcnEct0, 13);
  queue_send(*pa, b, 0x11, 101, 0xc123, transport::kEcnCe, 4000);
  EXPECT_EQ(pa->tx_queued(), 2u);
  EXPECT_EQ(pa->tx_flush(), 2u);
  EXPECT_EQ(pa->tx_queued(), 0u);
  EXPECT_EQ(ca.sent_pkts.get(), 2u);

  auto got = receive(*pb, 2);
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0].dest_qp, 0x11u);
  EXPECT_EQ(got[0].psn, 100u);
  EXPECT_EQ(got[0].payload.size(), 13u);  // pad stripped
  EXPECT_EQ(got[0].payload[12], static_cast<uint8_t>(100 + 12));
  EXPECT_EQ(got[0].info.src_ip, a);
  EXPECT_EQ(got[0].info.dst_ip, b);
  EXPECT_EQ(got[0].info.src_port, 0xc123);  // left from its own source-port socket
  EXPECT_EQ(got[0].info.ecn, transport::kEcnEct0);
  EXPECT_EQ(got[0].ip_id, 0);
  EXPECT_EQ(got[1].payload.size(), 4000u);
  EXPECT_EQ(got[1].info.ecn, transport::kEcnCe);
  EXPECT_EQ(cb.rcvd_pkts.get(), 2u);
  EXPECT_EQ(cb.rcvd_ecn_ce.get(), 1u);
  EXPECT_EQ(cb.rcvd_icrc_err.get(), 0u);
  EXPECT_EQ(ca.tx_src_port_sockets.get(), 1u);
}

TEST(UdpPortTest, CorruptedPacketIsACountedDrop) {
  const uint32_t a = loopback(41, 2, 1), b = loopback(41, 2, 2);
  DeviceCounters cb;
  auto pb = open_port(b, cb);
  ASSERT_TRUE(pb);
  RawSender s(a);
  ASSERT_TRUE(s.ok());
  uint8_t ib[64];
  uint8_t payload[8] = {1, 2, 3, 4, 5, 6, 7, 8};
  size_t n = test::build_packet(ib, wire::Opcode::kRcSendOnly, 0x22, 7, payload);

  ASSERT_TRUE(s.send_ib(b, {ib, n}, 0, 14));          // payload bit flipped
  ASSERT_TRUE(s.send_ib(b, {ib, n}, 0, int(n) + 1));  // ICRC bit flipped
  ASSERT_TRUE(s.send_ib(b, {ib, n}, 0, 5));           // DestQP bit flipped
  ASSERT_TRUE(s.send_ib(b, {ib, n}, 0));              // intact
  auto got = receive(*pb, 2);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].dest_qp, 0x22u);
  EXPECT_EQ(got[0].info.src_port, s.port());
  EXPECT_EQ(cb.rcvd_pkts.get(), 4u);
  EXPECT_EQ(cb.rcvd_icrc_err.get(), 3u);
}

TEST(UdpPortTest, AcceptsForeignIpIdentification) {
  // rxe and RNICs put non-zero IP IDs on the wire, which the socket cannot show us.
  const uint32_t a = loopback(41, 3, 1), b = loopback(41, 3, 2);
  DeviceCounters cb;
  auto pb = open_port(b, cb);
  ASSERT_TRUE(pb);
  RawSender s(a);
  uint8_t ib[64];
  size_t n = test::build_packet(ib, wire::Opcode::kRcSendOnly, 0x33, 1, {});
  ASSERT_TRUE(s.send_ib(b, {ib, n}, 0x1234));
  auto got = receive(*pb, 1);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].ip_id, 0x1234);
  EXPECT_EQ(cb.rx_foreign_ip_id.get(), 1u);
}

TEST(UdpPortTest, MalformedDatagramsAreCountedDrops) {
  const uint32_t a = loopback(41, 4, 1), b = loopback(41, 4, 2);
  DeviceCounters cb;
  auto pb = open_port(b, cb);
  ASSERT_TRUE(pb);
  RawSender s(a);
  uint8_t tiny[5] = {1, 2, 3, 4, 5};
  ASSERT_TRUE(s.send_raw(b, tiny));
  ASSERT_TRUE(s.send_raw(b, std::span<const uint8_t>()));  // empty datagram
  std::vector<uint8_t> huge(UdpPort::kRxBufBytes + 100, 0xab);
  ASSERT_TRUE(s.send_raw(b, huge));
  // Valid ICRC around a bad opcode (0x40: RD, unsupported) and a bad TVer.
  uint8_t ib[64];
  size_t n = test::build_packet(ib, wire::Opcode::kRcSendOnly, 0x44, 1, {});
  ib[0] = 0x40;
  ASSERT_TRUE(s.send_ib(b, {ib, n}));
  n = test::build_packet(ib, wire::Opcode::kRcSendOnly, 0x44, 1, {});
  ib[1] |= 0x01;  // TVer = 1
  ASSERT_TRUE(s.send_ib(b, {ib, n}));
  // An ACK needs an AETH: BTH alone is too short.
  n = test::build_packet(ib, wire::Opcode::kRcAcknowledge, 0x44, 1, {});
  ASSERT_TRUE(s.send_ib(b, {ib, 12}));

  auto got = receive(*pb, 1, 300);
  EXPECT_TRUE(got.empty());
  EXPECT_EQ(cb.rcvd_pkts.get(), 6u);
  EXPECT_EQ(cb.rx_too_short.get(), 2u);
  EXPECT_EQ(cb.rx_truncated.get(), 1u);
  EXPECT_EQ(cb.rx_parse_bad_opcode.get(), 1u);
  EXPECT_EQ(cb.rx_parse_bad_version.get(), 1u);
  EXPECT_EQ(cb.rx_parse_too_short.get(), 1u);
  EXPECT_EQ(cb.rcvd_icrc_err.get(), 0u);
}

TEST(UdpPortTest, BatchesKeepCommitOrderAcrossSourcePorts) {
  const uint32_t a = loopback(41, 5, 1), b = loopback(41, 5, 2);
  DeviceCounters ca, cb;
  auto pa = open_port(a, ca), pb = open_port(b, cb);
  ASSERT_TRUE(pa && pb);
  // Three source ports interleaved, plus 4791 itself: runs of one socket, order kept.
  const uint16_t ports[] = {0xc001, 0xc001, 0xc002, wire::kRoceV2UdpPort, 0xc003};
  constexpr uint32_t kPackets = 200;
  for (uint32_t i = 0; i < kPackets; ++i) queue_send(*pa, b, 0x55, i, ports[i % 5]);
  EXPECT_EQ(pa->tx_flush(), kPackets);
  auto got = receive(*pb, kPackets);
  ASSERT_EQ(got.size(), kPackets);
  for (uint32_t i = 0; i < kPackets; ++i) {
    EXPECT_EQ(got[i].psn, i);
    EXPECT_EQ(got[i].info.src_port, ports[i % 5]);
  }
  EXPECT_EQ(ca.tx_src_port_sockets.get(), 3u);
  EXPECT_EQ(cb.rcvd_icrc_err.get(), 0u);
}

TEST(UdpPortTest, FallsBackToTheRoceSocketWhenASourcePortIsTaken) {
  const uint32_t a = loopback(41, 6, 1), b = loopback(41, 6, 2);
  DeviceCounters ca, cb;
  auto pa = open_port(a, ca), pb = open_port(b, cb);
  ASSERT_TRUE(pa && pb);
  RawSender squatter(a, 0xd00d);
  ASSERT_TRUE(squatter.ok());
  queue_send(*pa, b, 0x66, 1, 0xd00d);
  EXPECT_EQ(pa->tx_flush(), 1u);
  auto got = receive(*pb, 1);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].info.src_port, wire::kRoceV2UdpPort);
  EXPECT_EQ(ca.tx_src_port_fallback.get(), 1u);
  EXPECT_EQ(pa->src_port_for(0xd00d), wire::kRoceV2UdpPort);
  EXPECT_EQ(cb.rcvd_icrc_err.get(), 0u);  // the ICRC covers the port really used
}

TEST(UdpPortTest, SourcePortPoolIsBounded) {
  const uint32_t a = loopback(41, 7, 1), b = loopback(41, 7, 2);
  DeviceCounters ca, cb;
  auto pa = open_port(a, ca, {}, 2), pb = open_port(b, cb);
  ASSERT_TRUE(pa && pb);
  for (uint16_t i = 0; i < 4; ++i) queue_send(*pa, b, 0x77, i, static_cast<uint16_t>(0xc100 + i));
  EXPECT_EQ(pa->tx_flush(), 4u);
  auto got = receive(*pb, 4);
  ASSERT_EQ(got.size(), 4u);
  EXPECT_EQ(got[0].info.src_port, 0xc100);
  EXPECT_EQ(got[1].info.src_port, 0xc101);
  EXPECT_EQ(got[2].info.src_port, wire::kRoceV2UdpPort);
  EXPECT_EQ(got[3].info.src_port, wire::kRoceV2UdpPort);
  EXPECT_EQ(ca.tx_src_port_sockets.get(), 2u);
}

TEST(UdpPortTest, TxRingIsBounded) {
  DeviceCounters c;
  auto p = open_port(loopback(41, 9, 1), c);
  ASSERT_TRUE(p);
  std::vector<transport::TxBuf*> bufs;
  for (size_t i = 0; i < UdpPort::kTxRing; ++i) {
    bufs.push_back(p->tx_alloc());
    ASSERT_NE(bufs.back(), nullptr);
  }
  EXPECT_EQ(p->tx_alloc(), nullptr);
  p->tx_abort(bufs.back());
  EXPECT_NE(p->tx_alloc(), nullptr);
}

TEST(UdpPortTest, BadLengthsAreRefusedAtCommit) {
  DeviceCounters c;
  auto p = open_port(loopback(41, 14, 1), c);
  ASSERT_TRUE(p);
  transport::TxBuf* b = p->tx_alloc();
  b->len = transport::kMaxIbPacket + 1;
  b->dst_ip = loopback(41, 14, 2);
  p->tx_commit(b);
  b = p->tx_alloc();
  b->len = 3;  // shorter than a BTH
  p->tx_commit(b);
  EXPECT_EQ(p->tx_queued(), 0u);
  EXPECT_EQ(c.tx_errors.get(), 2u);
  // Both buffers went back to the ring.
  for (size_t i = 0; i < UdpPort::kTxRing; ++i) ASSERT_NE(p->tx_alloc(), nullptr);
}

TEST(UdpPortTest, RefusedSendIsCountedNotFatal) {
  const uint32_t a = loopback(41, 10, 1), b = loopback(41, 10, 2);
  DeviceCounters ca, cb;
  auto pa = open_port(a, ca), pb = open_port(b, cb);
  ASSERT_TRUE(pa && pb);
  queue_send(*pa, 0xffffffff, 0x99, 2, 0xc300);  // broadcast without SO_BROADCAST: EACCES
  queue_send(*pa, b, 0x99, 3, 0xc300);
  pa->tx_flush();
  EXPECT_EQ(ca.tx_errors.get(), 1u);
  EXPECT_EQ(ca.sent_pkts.get(), 1u);
  auto got = receive(*pb, 1);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].psn, 3u);
}

TEST(UdpPortTest, OpenFailsClearly) {
  const uint32_t a = loopback(41, 11, 1);
  DeviceCounters c1, c2;
  auto p = open_port(a, c1);
  ASSERT_TRUE(p);
  UdpPortOptions o;
  o.ipv4 = a;
  std::string err;
  EXPECT_EQ(UdpPort::open(o, c2, &err), nullptr);
  EXPECT_NE(err.find("127.41.11.1:4791"), std::string::npos) << err;
  EXPECT_NE(err.find("in use"), std::string::npos) << err;

  o.ipv4 = 0xc6336401;  // 198.51.100.1 (TEST-NET-2), not configured here
  err.clear();
  EXPECT_EQ(UdpPort::open(o, c2, &err), nullptr);
  EXPECT_NE(err.find("198.51.100.1:4791"), std::string::npos) << err;
  EXPECT_NE(err.find("not configured"), std::string::npos) << err;
}

// Sends `n` packets in chunks the receiver drains between, so no datagram is lost to the kernel,
// and returns the PSNs that survived fault injection.
std::vector<uint32_t> lossy_run(uint8_t sub, FaultConfig faults, uint32_t n, DeviceCounters& cb) {
  const uint32_t a = loopback(42, sub, 1), b = loopback(42, sub, 2);
  DeviceCounters ca;
  auto pa = open_port(a, ca), pb = open_port(b, cb, faults);
  std::vector<uint32_t> psns;
  if (!pa || !pb) return psns;
  constexpr uint32_t kChunk = 50;
  for (uint32_t base = 0; base < n; base += kChunk) {
    for (uint32_t i = base; i < base + kChunk && i < n; ++i) queue_send(*pa, b, 0xaa, i, 0xc400);
    pa->tx_flush();
    // Drain until every datagram of the chunk is accounted for.
    while (cb.rcvd_pkts.get() < std::min(base + kChunk, n)) {
      if (!test::wait_readable(pb->rx_fd(), 1000)) break;
      for (const RxPacket& p : pb->rx_burst()) psns.push_back(p.pkt.bth.psn);
    }
  }
  return psns;
}

TEST(UdpPortTest, FaultInjectionDropsTheConfiguredFractionReproducibly) {
  constexpr uint32_t kPackets = 1000;
  FaultConfig f;
  f.rx_loss = 0.2;
  f.seed = 7;
  DeviceCounters c1, c2, c3;
  auto run1 = lossy_run(1, f, kPackets, c1);
  auto run2 = lossy_run(2, f, kPackets, c2);
  ASSERT_EQ(c1.rcvd_pkts.get(), kPackets);
  EXPECT_EQ(run1.size() + c1.fault_drops.get(), kPackets);
  // 200 expected; 5 standard deviations (sqrt(1000*0.2*0.8) = 12.6) either side.
  EXPECT_GT(c1.fault_drops.get(), 137u);
  EXPECT_LT(c1.fault_drops.get(), 263u);
  EXPECT_EQ(run1, run2);  // same seed, same arrivals dropped
  f.seed = 8;
  auto run3 = lossy_run(3, f, kPackets, c3);
  EXPECT_NE(run1, run3);
  EXPECT_EQ(c1.rcvd_icrc_err.get(), 0u);
}

TEST(UdpPortTest, FaultInjectionRunsBeforeTheIcrcCheck) {
  const uint32_t a = loopback(42, 9, 1), b = loopback(42, 9, 2);
  DeviceCounters cb;
  FaultConfig f;
  f.rx_loss = 1.0;
  auto pb = open_port(b, cb, f);
  ASSERT_TRUE(pb);
  RawSender s(a);
  uint8_t ib[64];
  size_t n = test::build_packet(ib, wire::Opcode::kRcSendOnly, 1, 1, {});
  ASSERT_TRUE(s.send_ib(b, {ib, n}, 0, 3));  // corrupt, but dropped by the fault first
  ASSERT_TRUE(test::wait_readable(pb->rx_fd(), 1000));
  EXPECT_TRUE(pb->rx_burst().empty());
  EXPECT_EQ(cb.fault_drops.get(), 1u);
  EXPECT_EQ(cb.rcvd_icrc_err.get(), 0u);
}

TEST(UdpPortTest, RandomDatagramsAreAllAccountedFor) {
  // Random bytes, half of them with a valid ICRC so that they reach the parser: nothing crashes,
  // and every datagram is either delivered or counted under one drop cause.
  const uint32_t a = loopback(41, 13, 1), b = loopback(41, 13, 2);
  DeviceCounters cb;
  auto pb = open_port(b, cb);
  ASSERT_TRUE(pb);
  RawSender s(a);
  uint64_t x = 0x1234567;
  auto rnd = [&] {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return x;
  };
  constexpr int kDatagrams = 2000;
  size_t delivered = 0;
  uint64_t unframed_long = 0;  // unframed datagrams long enough to reach the ICRC check
  std::vector<uint8_t> d;
  for (int i = 0; i < kDatagrams; ++i) {
    d.resize(rnd() % 120);
    for (auto& byte : d) byte = static_cast<uint8_t>(rnd());
    if (!d.empty()) d[1] &= 0xf0;  // TVer 0 mostly, so parsing goes deeper
    bool framed = i % 2 && !d.empty();
    if (!framed && d.size() >= wire::kBthBytes + wire::kIcrcBytes) ++unframed_long;
    bool ok = framed ? s.send_ib(b, d) : s.send_raw(b, d);
    ASSERT_TRUE(ok);
    if (i % 50 == 49) {  // drain before the socket buffer fills
      while (cb.rcvd_pkts.get() < static_cast<uint64_t>(i + 1)) {
        if (!test::wait_readable(pb->rx_fd(), 1000)) break;
        delivered += pb->rx_burst().size();
      }
    }
  }
  ASSERT_EQ(cb.rcvd_pkts.get(), static_cast<uint64_t>(kDatagrams));
  uint64_t drops = cb.rx_too_short.get() + cb.rcvd_icrc_err.get() + cb.rx_parse_too_short.get() +
                   cb.rx_parse_bad_opcode.get() + cb.rx_parse_bad_version.get() +
                   cb.rx_parse_bad_pad.get() + cb.rx_parse_bad_length.get() +
                   cb.rx_parse_other.get() + cb.rx_truncated.get();
  EXPECT_EQ(delivered + drops, static_cast<uint64_t>(kDatagrams));
  EXPECT_GT(delivered, 0u);
  // Each unframed one fails the ICRC (a random one passes with probability 2^-16: with this seed
  // none does); no framed one does.
  EXPECT_EQ(cb.rcvd_icrc_err.get(), unframed_long);
}

TEST(UdpPortTest, WireFramingIsWhatTheIcrcAssumes) {
  // Captures the datagram on lo and checks the IP header the kernel wrote: DF set, ID 0 (which
  // our ICRC assumed), our ECN bits, the requested source port, and the ICRC over the real header.
  int cap = socket(AF_PACKET, SOCK_DGRAM | SOCK_CLOEXEC, htons(ETH_P_IP));
  if (cap < 0) GTEST_SKIP() << "needs CAP_NET_RAW to capture on lo";
  sockaddr_ll ll{};
  ll.sll_family = AF_PACKET;
  ll.sll_protocol = htons(ETH_P_IP);
  ll.sll_ifindex = static_cast<int>(if_nametoindex("lo"));
  ASSERT_EQ(bind(cap, reinterpret_cast<sockaddr*>(&ll), sizeof ll), 0);

  const uint32_t a = loopback(41, 12, 1), b = loopback(41, 12, 2);
  DeviceCounters ca, cb;
  auto pa = open_port(a, ca), pb = open_port(b, cb);
  ASSERT_TRUE(pa && pb);
  queue_send(*pa, b, 0x12, 5, 0xc777, transport::kEcnEct1, 100);
  ASSERT_EQ(pa->tx_flush(), 1u);

  uint8_t frame[9000];
  bool found = false;
  while (!found && test::wait_readable(cap, 1000)) {
    ssize_t n = recv(cap, frame, sizeof frame, 0);
    if (n < static_cast<ssize_t>(sizeof(iphdr) + sizeof(udphdr))) continue;
    const auto* ip = reinterpret_cast<const iphdr*>(frame);
    if (ip->protocol != IPPROTO_UDP || ntohl(ip->saddr) != a || ntohl(ip->daddr) != b) continue;
    const auto* udp = reinterpret_cast<const udphdr*>(frame + ip->ihl * 4);
    if (ntohs(udp->dest) != wire::kRoceV2UdpPort) continue;
    found = true;
    EXPECT_EQ(ntohs(udp->source), 0xc777);
    EXPECT_TRUE(ntohs(ip->frag_off) & IP_DF);
    EXPECT_EQ(ip->id, 0);
    EXPECT_EQ(ip->tos & 3, transport::kEcnEct1);
    size_t len = ntohs(ip->tot_len);
    ASSERT_LE(len, static_cast<size_t>(n));
    EXPECT_EQ(wire::icrc_ipv4({frame, len - 4}), wire::load_le32(frame + len - 4));
  }
  close(cap);
  EXPECT_TRUE(found) << "datagram not seen on lo";
}

}  // namespace
}  // namespace uroce

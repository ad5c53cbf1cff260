#include "ports/udp/udp_port.h"

#include "engine/datapath.h"
#include "engine/engine.h"

#include <linux/filter.h>
#include <linux/if_ether.h>
#include <linux/if_packet.h>
#include <net/if.h>
#include <netinet/ip.h>
#include <netinet/udp.h>
#include <sched.h>
#include <sys/wait.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <deque>
#include <mutex>
#include <vector>

#include "test_util.h"

namespace uroce {
namespace {

using test::loopback;
using test::RawSender;

// The UDP datapath as a device has it: the receive pipeline (Datapath) over a UdpPort, on the
// engine's clock. These tests cover both: the port's socket I/O (source ports, GSO/GRO,
// multicast) and the pipeline's checks over it (ICRC, parsing, counters, fault injection).
class UdpPath {
 public:
  explicit UdpPath(std::unique_ptr<Datapath> dp) : dp_(std::move(dp)) {}
  std::span<const RxPacket> rx_burst() { return dp_->rx_burst(monotonic_now()); }
  size_t tx_flush() { return dp_->tx_flush(monotonic_now()); }
  transport::TxBuf* tx_alloc() { return dp_->tx_alloc(); }
  void tx_commit(transport::TxBuf* b) { dp_->tx_commit(b); }
  void tx_abort(transport::TxBuf* b) { dp_->tx_abort(b); }
  size_t tx_queued() const { return dp_->tx_queued(); }
  UdpPort& udp() { return static_cast<UdpPort&>(dp_->port()); }
  int rx_fd() { return udp().rx_fd(); }
  PortEvents& port_events() { return dp_->port_events(); }
  uint16_t src_port_for(uint16_t requested) { return udp().src_port_for(requested); }

 private:
  std::unique_ptr<Datapath> dp_;
};

// What a test keeps of a received packet (payload spans die with the next rx_burst).
struct Got {
  uint32_t dest_qp, psn;
  uint8_t opcode;
  std::vector<uint8_t> payload;
  transport::RxInfo info;
  uint16_t ip_id;
};

// Receives until `want` packets arrived or nothing came for `idle_ms`.
std::vector<Got> receive(UdpPath& port, size_t want, int idle_ms = 300) {
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

std::unique_ptr<UdpPath> open_port(uint32_t ip, DeviceCounters& c, FaultConfig faults = {},
                                   size_t max_src_sockets = 64, bool gso = true) {
  UdpPortOptions o;
  o.ipv4 = ip;
  o.max_src_port_sockets = max_src_sockets;
  o.gso = gso;
  std::string err;
  auto p = UdpPort::open(o, c.port, &err);
  EXPECT_NE(p, nullptr) << err;
  if (!p) return nullptr;
  DatapathOptions d;
  d.faults = faults;
  auto dp = Datapath::open(std::move(p), d, c, &err);
  EXPECT_NE(dp, nullptr) << err;
  if (!dp) return nullptr;
  return std::make_unique<UdpPath>(std::move(dp));
}

// Queues one SEND ONLY packet from `port` to `dst`. With `keep`, its payload goes by reference
// (TxBuf::ext, as the transport leaves it in a memory region), held in *keep until the flush.
void queue_send(UdpPath& port, uint32_t dst, uint32_t qpn, uint32_t psn, uint16_t src_port,
                uint8_t ecn = transport::kEcnNotEct, size_t payload_len = 13,
                std::deque<std::vector<uint8_t>>* keep = nullptr) {
  transport::TxBuf* b = port.tx_alloc();
  ASSERT_NE(b, nullptr);
  std::vector<uint8_t> payload(payload_len);
  for (size_t i = 0; i < payload_len; ++i) payload[i] = static_cast<uint8_t>(psn + i);
  if (keep != nullptr) {
    const std::vector<uint8_t>& kept = keep->emplace_back(std::move(payload));
    b->len =
        static_cast<uint32_t>(test::build_packet(b->data, wire::Opcode::kRcSendOnly, qpn, psn, {}));
    b->ext = kept.data();
    b->ext_len = static_cast<uint32_t>(kept.size());
  } else {
    b->len = static_cast<uint32_t>(
        test::build_packet(b->data, wire::Opcode::kRcSendOnly, qpn, psn, payload));
  }
  b->dst_ip = wire::IpAddr(dst);
  b->src_port = src_port;
  b->ecn = ecn;
  port.tx_commit(b);
}

// Datagrams the kernel drops on a full receive buffer are invisible to uroce's own checks, yet
// lost: they are counted (SO_RXQ_OVFL), so that `uroce stats` says where the packets went.
TEST(UdpPortTest, CountsDatagramsTheFullSocketBufferDropped) {
  const uint32_t a = loopback(41, 9, 1), b = loopback(41, 9, 2);
  DeviceCounters ca, cb;
  auto pa = open_port(a, ca, {}, 64, /*gso=*/false);
  UdpPortOptions o;
  o.ipv4 = b;
  o.rcvbuf_bytes = 64 << 10;  // room for a few dozen datagrams only
  std::string err;
  auto rp = UdpPort::open(o, cb.port, &err);
  ASSERT_TRUE(pa && rp) << err;
  auto pb = Datapath::open(std::move(rp), DatapathOptions{}, cb, &err);
  ASSERT_TRUE(pb) << err;
  constexpr uint32_t kSent = 2000;
  uint64_t got = 0;
  const auto drain = [&] {
    for (auto rx = pb->rx_burst(monotonic_now()); !rx.empty(); rx = pb->rx_burst(monotonic_now()))
      got += rx.size();
  };
  for (uint32_t i = 0; i < kSent; ++i) {
    queue_send(*pa, b, 0x11, i, 0xc123, transport::kEcnNotEct, 1000);
    pa->tx_flush();  // loopback delivers (or drops) each datagram within the send call
  }
  drain();
  // The kernel reports the socket's drop count with each datagram it queues, so the drops of the
  // flood show with the next datagram that finds room.
  queue_send(*pa, b, 0x11, kSent, 0xc123, transport::kEcnNotEct, 1000);
  pa->tx_flush();
  drain();
  const uint64_t dropped = cb.port.rx_socket_overflow.get();
  EXPECT_GT(dropped, 0u);
  EXPECT_GT(got, 1u);
  EXPECT_EQ(got + dropped, uint64_t{kSent} + 1);  // every datagram received or counted
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
  EXPECT_EQ(ca.port.sent_pkts.get(), 2u);

  auto got = receive(*pb, 2);
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0].dest_qp, 0x11u);
  EXPECT_EQ(got[0].psn, 100u);
  EXPECT_EQ(got[0].payload.size(), 13u);  // pad stripped
  EXPECT_EQ(got[0].payload[12], static_cast<uint8_t>(100 + 12));
  EXPECT_EQ(got[0].info.src_ip, wire::IpAddr(a));
  EXPECT_EQ(got[0].info.dst_ip, wire::IpAddr(b));
  EXPECT_EQ(got[0].info.src_port, 0xc123);  // left from its own source-port socket
  EXPECT_EQ(got[0].info.ecn, transport::kEcnEct0);
  EXPECT_EQ(got[0].ip_id, 0);
  EXPECT_EQ(got[1].payload.size(), 4000u);
  EXPECT_EQ(got[1].info.ecn, transport::kEcnCe);
  EXPECT_EQ(cb.rcvd_pkts.get(), 2u);
  EXPECT_EQ(cb.rcvd_ecn_ce.get(), 1u);
  EXPECT_EQ(cb.rcvd_icrc_err.get(), 0u);
  EXPECT_EQ(ca.port.tx_src_port_sockets.get(), 1u);
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
  EXPECT_EQ(ca.port.tx_src_port_sockets.get(), 3u);
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
  EXPECT_EQ(ca.port.tx_src_port_fallback.get(), 1u);
  EXPECT_EQ(pa->src_port_for(0xd00d), wire::kRoceV2UdpPort);
  EXPECT_EQ(cb.rcvd_icrc_err.get(), 0u);  // the ICRC covers the port really used
}

// A peer address where nothing listens on UDP 4791 answers with ICMP port unreachable, which the
// kernel passes back (IP_RECVERR) on the socket that sent: the port counts it and reports it
// through the port interface (PortEvent), its control fd stops being readable once it was read
// (the engine does not spin on it), and the socket's pending error neither fails the next
// receive nor costs the next send.
TEST(UdpPortTest, ReportsIcmpPortUnreachableForAnAddressWhereNothingListens) {
  const uint32_t a = loopback(41, 15, 1), nobody = loopback(41, 15, 9);
  DeviceCounters ca;
  auto pa = open_port(a, ca);
  ASSERT_TRUE(pa);
  std::mutex mu;
  std::vector<PortEvent> seen;
  pa->port_events().add_listener([&](const PortEvent& e) {
    std::lock_guard<std::mutex> g(mu);
    seen.push_back(e);
  });
  const auto count = [&] {
    std::lock_guard<std::mutex> g(mu);
    return seen.size();
  };
  // From a send socket of its own (a QP's source port), and from the 4791 socket itself.
  for (uint16_t src : {uint16_t{0xc123}, wire::kRoceV2UdpPort}) {
    SCOPED_TRACE(src);
    const size_t before = count();
    queue_send(*pa, nobody, 0x123456, 7, src);
    EXPECT_EQ(pa->tx_flush(), 1u);
    const int ctl = pa->udp().control_fd();
    ASSERT_GE(ctl, 0);
    // The engine wakes for the control fd and calls on_control(); so does this loop.
    for (int i = 0; i < 100 && count() == before; ++i)
      if (test::wait_readable(ctl, 100)) pa->udp().on_control();
    ASSERT_EQ(count(), before + 1);
    PortEvent e;
    {
      std::lock_guard<std::mutex> g(mu);
      e = seen.back();
    }
    EXPECT_EQ(e.kind, PortEvent::Kind::kUnreachable);
    EXPECT_TRUE(e.port_unreachable());
    EXPECT_EQ(e.dst_ip, wire::IpAddr(nobody));
    EXPECT_EQ(e.dst_port, wire::kRoceV2UdpPort);
    EXPECT_EQ(e.dest_qp, 0x123456u);  // the quoted BTH
    EXPECT_EQ(e.opcode, static_cast<uint8_t>(wire::Opcode::kRcSendOnly));
    EXPECT_EQ(ca.port.rx_icmp_unreachable.get(), before + 1);
    // Read: nothing wakes the engine again.
    EXPECT_FALSE(test::wait_readable(ctl, 0));
  }
  // A second ICMP error left as the sockets' pending error (not read yet): the next receive and
  // the next sends are not failures.
  queue_send(*pa, nobody, 0x123456, 8, wire::kRoceV2UdpPort);
  queue_send(*pa, nobody, 0x123456, 9, 0xc123);
  EXPECT_EQ(pa->tx_flush(), 2u);
  for (int i = 0; i < 100 && ca.port.rx_icmp_unreachable.get() < 4; ++i) {
    EXPECT_TRUE(pa->rx_burst().empty());  // reads the error queue when the receive returns it
    if (ca.port.rx_icmp_unreachable.get() < 4 && test::wait_readable(pa->udp().control_fd(), 100))
      pa->udp().on_control();
  }
  EXPECT_EQ(ca.port.rx_icmp_unreachable.get(), 4u);
  queue_send(*pa, nobody, 0x123456, 10, wire::kRoceV2UdpPort);
  queue_send(*pa, nobody, 0x123456, 11, 0xc123);
  EXPECT_EQ(pa->tx_flush(), 2u);
  EXPECT_EQ(ca.port.tx_errors.get(), 0u);
  EXPECT_EQ(ca.port.sent_pkts.get(), 6u);
  // What the log says (once per address: PortEvents).
  EXPECT_NE(PortEvents::describe(seen.front()).find("no RoCE endpoint at 127.41.15.9:4791"),
            std::string::npos);
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
  EXPECT_EQ(ca.port.tx_src_port_sockets.get(), 2u);
}

TEST(UdpPortTest, TxRingIsBounded) {
  DeviceCounters c;
  auto p = open_port(loopback(41, 20, 1), c);
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
  b->dst_ip = wire::IpAddr(loopback(41, 14, 2));
  p->tx_commit(b);
  b = p->tx_alloc();
  b->len = 3;  // shorter than a BTH
  p->tx_commit(b);
  EXPECT_EQ(p->tx_queued(), 0u);
  EXPECT_EQ(c.port.tx_errors.get(), 2u);
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
  EXPECT_EQ(ca.port.tx_errors.get(), 1u);
  EXPECT_EQ(ca.port.sent_pkts.get(), 1u);
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
  EXPECT_EQ(UdpPort::open(o, c2.port, &err), nullptr);
  EXPECT_NE(err.find("127.41.11.1:4791"), std::string::npos) << err;
  EXPECT_NE(err.find("in use"), std::string::npos) << err;

  o.ipv4 = 0xc6336401;  // 198.51.100.1 (TEST-NET-2), not configured here
  err.clear();
  EXPECT_EQ(UdpPort::open(o, c2.port, &err), nullptr);
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
  // A fixed source port: the ICRC covers it, so with an ephemeral one about 1 run in 75 had a
  // random datagram pass the check (2^-16 each).
  RawSender s(a, 40013);
  ASSERT_TRUE(s.ok());
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
  // Only datagrams to b reach the socket (a classic BPF filter on the IPv4 destination): lo
  // carries every other test's traffic too, which would otherwise fill the socket's buffer and
  // push ours out, and never leave it quiet long enough to give up.
  sock_filter code[] = {
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, 16),  // iphdr.daddr
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, b, 0, 1),
      BPF_STMT(BPF_RET | BPF_K, 0xffff),
      BPF_STMT(BPF_RET | BPF_K, 0),
  };
  sock_fprog prog{static_cast<unsigned short>(sizeof code / sizeof code[0]), code};
  ASSERT_EQ(setsockopt(cap, SOL_SOCKET, SO_ATTACH_FILTER, &prog, sizeof prog), 0);
  DeviceCounters ca, cb;
  auto pa = open_port(a, ca), pb = open_port(b, cb);
  ASSERT_TRUE(pa && pb);
  queue_send(*pa, b, 0x12, 5, 0xc777, transport::kEcnEct1, 100);
  ASSERT_EQ(pa->tx_flush(), 1u);

  uint8_t frame[9000];
  bool found = false;
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (!found && std::chrono::steady_clock::now() < give_up && test::wait_readable(cap, 1000)) {
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

// --- UDP GSO / GRO (UdpPortOptions::gso) ---

// The payload byte `i` of the packet with PSN `psn`, as queue_send writes it.
uint8_t payload_byte(uint32_t psn, size_t i) {
  return static_cast<uint8_t>(psn + i);
}

class UdpPortGsoTest : public ::testing::TestWithParam<bool> {};

// The burst below, its payloads copied into the transmit buffers or (by_reference) left where
// they lie: the kernel gathers each datagram from three iovecs, and GSO cuts the same segments.
void burst_arrives_intact(bool gso, bool by_reference) {
  const uint8_t sub = static_cast<uint8_t>((gso ? 1 : 2) + (by_reference ? 20 : 0));
  const uint32_t a = loopback(23, sub, 1), b = loopback(23, sub, 2);
  DeviceCounters ca, cb;
  auto pa = open_port(a, ca, {}, 64, gso), pb = open_port(b, cb, {}, 64, gso);
  ASSERT_TRUE(pa && pb);
  // 4000-byte payloads: 4016-byte datagrams, 16 to a GSO send (65507 bytes at most), so the
  // burst is cut into several sends, the last ending with the shorter packet.
  constexpr uint32_t kPackets = 40;
  uint64_t bytes = 0;
  std::deque<std::vector<uint8_t>> keep;
  for (uint32_t i = 0; i < kPackets; ++i) {
    size_t len = i + 1 == kPackets ? 1000 : 4000;
    queue_send(*pa, b, 0x123, i, 0xc500, transport::kEcnEct0, len, by_reference ? &keep : nullptr);
    bytes += wire::kBthBytes + len + wire::kIcrcBytes;
  }
  EXPECT_EQ(pa->tx_flush(), kPackets);
  EXPECT_EQ(ca.port.sent_pkts.get(), kPackets);
  EXPECT_EQ(ca.port.sent_bytes.get(), bytes);
  EXPECT_EQ(ca.port.tx_errors.get(), 0u);
  EXPECT_EQ(ca.port.tx_gso_fallback.get(), 0u);
  EXPECT_EQ(ca.port.tx_gathered.get(), by_reference ? kPackets : 0u);

  auto got = receive(*pb, kPackets);
  ASSERT_EQ(got.size(), kPackets);
  for (uint32_t i = 0; i < kPackets; ++i) {
    SCOPED_TRACE(i);
    EXPECT_EQ(got[i].psn, i);
    EXPECT_EQ(got[i].dest_qp, 0x123u);
    ASSERT_EQ(got[i].payload.size(), i + 1 == kPackets ? 1000u : 4000u);
    for (size_t k = 0; k < got[i].payload.size(); ++k)
      if (got[i].payload[k] != payload_byte(i, k)) {
        ADD_FAILURE() << "payload byte " << k;
        break;
      }
    EXPECT_EQ(got[i].info.src_port, 0xc500);
    EXPECT_EQ(got[i].info.ecn, transport::kEcnEct0);
    // A GSO send's segment j carries IP ID j (inet_gso_segment), which its ICRC was made for.
    EXPECT_EQ(got[i].ip_id, gso ? i % 16 : 0u);
  }
  EXPECT_EQ(cb.rcvd_pkts.get(), kPackets);
  EXPECT_EQ(cb.rcvd_bytes.get(), bytes);
  EXPECT_EQ(cb.rcvd_icrc_err.get(), 0u);
  EXPECT_EQ(cb.rx_truncated.get(), 0u);
}

TEST_P(UdpPortGsoTest, BurstOfEqualPacketsAndAShorterLastArrivesIntactInOrder) {
  burst_arrives_intact(GetParam(), /*by_reference=*/false);
}

TEST_P(UdpPortGsoTest, PayloadsByReferenceArriveIntactInOrder) {
  burst_arrives_intact(GetParam(), /*by_reference=*/true);
}

TEST_P(UdpPortGsoTest, DifferentDestinationsEcnAndSizesAreNotMerged) {
  const bool gso = GetParam();
  const uint8_t sub = gso ? 3 : 4;
  const uint32_t a = loopback(23, sub, 1), b = loopback(23, sub, 2), c = loopback(23, sub, 3);
  DeviceCounters ca, cb, cc;
  auto pa = open_port(a, ca, {}, 64, gso), pb = open_port(b, cb, {}, 64, gso),
       pc = open_port(c, cc, {}, 64, gso);
  ASSERT_TRUE(pa && pb && pc);
  // Each packet differs from its neighbour in one way: destination, ECN, a larger size after a
  // smaller one, or the source port (socket); runs of equal ones in between.
  struct P {
    uint32_t dst;
    uint8_t ecn;
    size_t len;
    uint16_t src_port;
  };
  const P plan[] = {
      {b, transport::kEcnNotEct, 500, 0xc600}, {b, transport::kEcnNotEct, 500, 0xc600},
      {c, transport::kEcnNotEct, 500, 0xc600}, {c, transport::kEcnNotEct, 500, 0xc600},
      {b, transport::kEcnCe, 500, 0xc600},     {b, transport::kEcnEct0, 500, 0xc600},
      {b, transport::kEcnEct0, 500, 0xc600},   {b, transport::kEcnEct0, 200, 0xc600},
      {b, transport::kEcnEct0, 500, 0xc600},   {b, transport::kEcnEct0, 500, 0xc601},
      {b, transport::kEcnEct0, 500, 0xc601},   {c, transport::kEcnEct1, 100, 0xc601},
  };
  constexpr uint32_t kN = sizeof plan / sizeof plan[0];
  for (uint32_t i = 0; i < kN; ++i)
    queue_send(*pa, plan[i].dst, 0x42, i, plan[i].src_port, plan[i].ecn, plan[i].len);
  EXPECT_EQ(pa->tx_flush(), kN);
  EXPECT_EQ(ca.port.sent_pkts.get(), kN);
  auto gb = receive(*pb, 9), gc = receive(*pc, 3);
  ASSERT_EQ(gb.size() + gc.size(), kN);
  size_t ib = 0, ic = 0;
  for (uint32_t i = 0; i < kN; ++i) {
    SCOPED_TRACE(i);
    const Got& g = plan[i].dst == b ? gb.at(ib++) : gc.at(ic++);
    EXPECT_EQ(g.psn, i);  // per destination, in commit order
    EXPECT_EQ(g.info.ecn, plan[i].ecn);
    EXPECT_EQ(g.info.src_port, plan[i].src_port);
    ASSERT_EQ(g.payload.size(), plan[i].len);
    EXPECT_EQ(g.payload.back(), payload_byte(i, plan[i].len - 1));
  }
  EXPECT_EQ(cb.rcvd_pkts.get(), 9u);
  EXPECT_EQ(cc.rcvd_pkts.get(), 3u);
  EXPECT_EQ(cb.rcvd_icrc_err.get() + cc.rcvd_icrc_err.get(), 0u);
  EXPECT_EQ(cb.rcvd_ecn_ce.get(), 1u);
}

INSTANTIATE_TEST_SUITE_P(GsoOnOff, UdpPortGsoTest, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& p) {
                           return p.param ? "Gso" : "NoGso";
                         });

// A UDP socket bound to `ip` that sends `datagrams` as one UDP GSO send of `seg`-byte segments.
// Returns false when the kernel refuses.
bool send_gso(uint32_t ip, uint32_t dst, uint16_t* src_port,
              const std::vector<std::vector<uint8_t>>& ibs, size_t seg) {
  int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(ip);
  socklen_t alen = sizeof a;
  bool ok = fd >= 0 && bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 &&
            getsockname(fd, reinterpret_cast<sockaddr*>(&a), &alen) == 0;
  *src_port = ntohs(a.sin_port);
  std::vector<uint8_t> all;
  for (size_t j = 0; ok && j < ibs.size(); ++j) {
    wire::Ipv4UdpFraming f;
    f.src_ip = ip;
    f.dst_ip = dst;
    f.ip_id = static_cast<uint16_t>(j);
    f.dont_fragment = true;
    f.src_port = *src_port;
    f.dst_port = wire::kRoceV2UdpPort;
    all.insert(all.end(), ibs[j].begin(), ibs[j].end());
    all.resize(all.size() + wire::kIcrcBytes);
    wire::store_le32(all.data() + all.size() - wire::kIcrcBytes, wire::icrc(f, ibs[j]));
  }
  int s = static_cast<int>(seg);
  ok = ok && setsockopt(fd, SOL_UDP, UDP_SEGMENT, &s, sizeof s) == 0;
  sockaddr_in to{};
  to.sin_family = AF_INET;
  to.sin_addr.s_addr = htonl(dst);
  to.sin_port = htons(wire::kRoceV2UdpPort);
  ok = ok && sendto(fd, all.data(), all.size(), 0, reinterpret_cast<sockaddr*>(&to), sizeof to) ==
                 static_cast<ssize_t>(all.size());
  if (fd >= 0) close(fd);
  return ok;
}

TEST(UdpPortTest, GroCoalescedDatagramIsSplitIntoPackets) {
  const uint32_t a = loopback(23, 5, 1), b = loopback(23, 5, 2);
  DeviceCounters cb;
  auto pb = open_port(b, cb);
  ASSERT_TRUE(pb);
  // 7 packets of 1000-byte payloads (1016-byte datagrams) and a 300-byte last one: one datagram
  // for the kernel, which a GRO socket receives whole with its segment size.
  std::vector<std::vector<uint8_t>> ibs;
  uint64_t bytes = 0;
  for (uint32_t j = 0; j < 8; ++j) {
    std::vector<uint8_t> payload(j == 7 ? 300 : 1000);
    for (size_t k = 0; k < payload.size(); ++k) payload[k] = payload_byte(j, k);
    std::vector<uint8_t> ib(wire::kBthBytes + payload.size() + 4);
    ib.resize(test::build_packet(ib.data(), wire::Opcode::kRcSendOnly, 0x77, 50 + j, payload));
    bytes += ib.size() + wire::kIcrcBytes;
    ibs.push_back(std::move(ib));
  }
  uint16_t src_port;
  ASSERT_TRUE(send_gso(a, b, &src_port, ibs, 1016));
  ASSERT_TRUE(test::wait_readable(pb->rx_fd(), 1000));
  auto batch = pb->rx_burst();
  // One receive, eight packets: it arrived coalesced and was split.
  ASSERT_EQ(batch.size(), 8u);
  for (uint32_t j = 0; j < 8; ++j) {
    SCOPED_TRACE(j);
    EXPECT_EQ(batch[j].pkt.bth.psn, 50 + j);
    EXPECT_EQ(batch[j].ip_id, j);
    EXPECT_EQ(batch[j].info.src_port, src_port);
    ASSERT_EQ(batch[j].pkt.payload.size(), j == 7 ? 300u : 1000u);
    EXPECT_TRUE(std::equal(batch[j].pkt.payload.begin(), batch[j].pkt.payload.end(),
                           ibs[j].begin() + wire::kBthBytes));
  }
  EXPECT_EQ(cb.rcvd_pkts.get(), 8u);
  EXPECT_EQ(cb.rcvd_bytes.get(), bytes);
  EXPECT_EQ(cb.rcvd_icrc_err.get(), 0u);
}

TEST(UdpPortTest, GroSegmentsGoThroughFaultInjectionOneByOne) {
  // Receive faults see datagrams, not GRO buffers: losing every other arrival loses every
  // other packet of a coalesced datagram.
  const uint32_t a = loopback(23, 6, 1), b = loopback(23, 6, 2);
  DeviceCounters cb;
  FaultConfig f;
  f.rx_loss = 1.0;
  auto pb = open_port(b, cb, f);
  ASSERT_TRUE(pb);
  std::vector<std::vector<uint8_t>> ibs;
  for (uint32_t j = 0; j < 5; ++j) {
    std::vector<uint8_t> ib(64);
    ib.resize(test::build_packet(ib.data(), wire::Opcode::kRcSendOnly, 0x78, j, {}));
    ibs.push_back(std::move(ib));
  }
  uint16_t src_port;
  ASSERT_TRUE(send_gso(a, b, &src_port, ibs, ibs[0].size() + wire::kIcrcBytes));
  ASSERT_TRUE(test::wait_readable(pb->rx_fd(), 1000));
  EXPECT_TRUE(pb->rx_burst().empty());
  EXPECT_EQ(cb.rcvd_pkts.get(), 5u);
  EXPECT_EQ(cb.fault_drops.get(), 5u);
}

TEST(UdpPortTest, OversizedDatagramIsTruncatedWithGro) {
  // With GRO the receive buffers are 64 KiB, so the kernel no longer flags what is longer than
  // a packet: the port does.
  const uint32_t a = loopback(23, 7, 1), b = loopback(23, 7, 2);
  DeviceCounters cb;
  auto pb = open_port(b, cb);
  ASSERT_TRUE(pb);
  RawSender s(a);
  std::vector<uint8_t> big(UdpPort::kRxBufBytes + 1, 0xab);
  ASSERT_TRUE(s.send_raw(b, big));
  ASSERT_TRUE(test::wait_readable(pb->rx_fd(), 1000));
  EXPECT_TRUE(pb->rx_burst().empty());
  EXPECT_EQ(cb.rx_truncated.get(), 1u);
  EXPECT_EQ(cb.rcvd_pkts.get(), 1u);
}

// The shell commands that set up a test's network namespace: loopback up, then `extra`.
std::string netns_setup(const char* extra) {
  return std::string("(ip link set lo up && ") + extra + ") >/dev/null 2>&1";
}

// Whether a child process can enter a network namespace of its own and configure it with
// `extra` (needs CAP_SYS_ADMIN and CAP_NET_ADMIN, ip and ethtool); the tests using one skip
// otherwise.
bool can_use_netns(const char* extra) {
  pid_t pid = fork();
  if (pid == 0) {
    if (unshare(CLONE_NEWNET) != 0) _exit(1);
    _exit(std::system(netns_setup(extra).c_str()) == 0 ? 0 : 1);
  }
  int st = 0;
  return pid > 0 && waitpid(pid, &st, 0) == pid && WIFEXITED(st) && WEXITSTATUS(st) == 0;
}

// In a death-test child: moves to a new network namespace configured with `extra`.
void enter_netns(const char* extra) {
  if (unshare(CLONE_NEWNET) != 0) _exit(90);
  if (std::system(netns_setup(extra).c_str()) != 0) _exit(91);
}

// A packet socket capturing what goes in and out of interface `ifname`, without link headers
// (-1 on failure). ETH_P_ALL: sockets for one protocol see only what comes in.
int capture_on(const char* ifname) {
  int cap = socket(AF_PACKET, SOCK_DGRAM | SOCK_CLOEXEC, htons(ETH_P_ALL));
  if (cap < 0) return -1;
  sockaddr_ll ll{};
  ll.sll_family = AF_PACKET;
  ll.sll_protocol = htons(ETH_P_ALL);
  ll.sll_ifindex = static_cast<int>(if_nametoindex(ifname));
  if (bind(cap, reinterpret_cast<sockaddr*>(&ll), sizeof ll) != 0) {
    close(cap);
    return -1;
  }
  return cap;
}

// A veth device without checksum offload (as a tap device without offloads, like the interop
// VM's), with a neighbour behind it: packets to 10.23.0.2 leave through it.
constexpr const char* kNoCsumVeth =
    "ip link add v0 type veth peer name v1 && ethtool -K v0 tx off && "
    "ip addr add 10.23.0.1/24 dev v0 && ip link set v0 up && ip link set v1 up && "
    "ip neigh add 10.23.0.2 lladdr 02:00:00:00:00:02 dev v0";

// The child's checks: a message on stderr and a distinct exit code for the first that fails.
#define CHILD_CHECK(cond, code)                                         \
  do {                                                                  \
    if (!(cond)) {                                                      \
      fprintf(stderr, "check failed: %s (line %d)\n", #cond, __LINE__); \
      _exit(code);                                                      \
    }                                                                   \
  } while (0)

[[noreturn]] void gso_fallback_child() {
  enter_netns(kNoCsumVeth);
  int cap = capture_on("v0");
  CHILD_CHECK(cap >= 0, 1);
  const uint32_t a = 0x0a170001, b = 0x0a170002;  // 10.23.0.1 -> 10.23.0.2
  DeviceCounters ca;
  auto pa = open_port(a, ca);
  CHILD_CHECK(pa, 2);
  for (uint32_t round = 0; round < 2; ++round) {
    for (uint32_t i = 0; i < 20; ++i)
      queue_send(*pa, b, 0x31, round * 20 + i, 0xc700, transport::kEcnNotEct, 800);
    CHILD_CHECK(pa->tx_flush() == 20, 3);
  }
  // Linux before 6.11 refuses GSO here (EIO), later ones checksum in software: either way
  // nothing is lost, and a fallback is counted once per socket.
  CHILD_CHECK(ca.port.tx_gso_fallback.get() <= 1, 4);
  CHILD_CHECK(ca.port.sent_pkts.get() == 40, 5);
  CHILD_CHECK(ca.port.tx_errors.get() == 0, 6);
  // On the wire: 40 datagrams in order, each with an ICRC valid for its real IP header.
  uint8_t frame[70000];
  uint32_t next_psn = 0;
  while (next_psn < 40 && test::wait_readable(cap, 1000)) {
    ssize_t n = recv(cap, frame, sizeof frame, 0);
    if (n < static_cast<ssize_t>(sizeof(iphdr) + sizeof(udphdr))) continue;
    const auto* ip = reinterpret_cast<const iphdr*>(frame);
    if (ip->version != 4 || ip->protocol != IPPROTO_UDP || ntohl(ip->daddr) != b) continue;
    size_t len = ntohs(ip->tot_len);
    CHILD_CHECK(len <= static_cast<size_t>(n), 7);
    CHILD_CHECK(ca.port.tx_gso_fallback.get() == 0 || ip->id == 0, 8);  // sent alone: ID 0
    CHILD_CHECK(wire::icrc_ipv4({frame, len - 4}) == wire::load_le32(frame + len - 4), 9);
    wire::Packet p;
    size_t ib_off = sizeof(iphdr) + sizeof(udphdr);
    CHILD_CHECK(wire::parse({frame + ib_off, len - ib_off - 4}, p) == wire::ParseError::kOk, 10);
    CHILD_CHECK(p.bth.psn == next_psn, 11);
    ++next_psn;
  }
  if (next_psn != 40) fprintf(stderr, "saw %u packets in order\n", next_psn);
  CHILD_CHECK(next_psn == 40, 12);
  _exit(0);
}

TEST(UdpPortTest, RefusedGsoFallsBackToOneDatagramPerPacket) {
  // A socket without UDP checksums (SO_NO_CHECK) makes the kernel refuse GSO with EINVAL (as a
  // device without checksum offload does with EIO before Linux 6.11): the packets are resent one
  // by one, and the socket sends so from then on, counted once.
  const uint32_t a = loopback(23, 10, 1), b = loopback(23, 10, 2);
  DeviceCounters ca, cb;
  auto pa = open_port(a, ca), pb = open_port(b, cb);
  ASSERT_TRUE(pa && pb);
  int on = 1;
  ASSERT_EQ(setsockopt(pa->rx_fd(), SOL_SOCKET, SO_NO_CHECK, &on, sizeof on), 0);
  // The first round's payloads by reference: resent one by one, each with its ICRC recomputed
  // over the headers and the payload where it lies.
  std::deque<std::vector<uint8_t>> keep;
  for (uint32_t round = 0; round < 2; ++round) {
    for (uint32_t i = 0; i < 20; ++i)
      queue_send(*pa, b, 0x30, round * 20 + i, wire::kRoceV2UdpPort, transport::kEcnCe, 700,
                 round == 0 ? &keep : nullptr);
    EXPECT_EQ(pa->tx_flush(), 20u);
  }
  EXPECT_EQ(ca.port.tx_gso_fallback.get(), 1u);
  EXPECT_EQ(ca.port.sent_pkts.get(), 40u);
  EXPECT_EQ(ca.port.tx_errors.get(), 0u);
  auto got = receive(*pb, 40);
  ASSERT_EQ(got.size(), 40u);
  for (uint32_t i = 0; i < 40; ++i) {
    EXPECT_EQ(got[i].psn, i);
    EXPECT_EQ(got[i].ip_id, 0);  // sent alone: the ICRC was recomputed for ID 0
    EXPECT_EQ(got[i].info.ecn, transport::kEcnCe);
    ASSERT_EQ(got[i].payload.size(), 700u);
    EXPECT_EQ(got[i].payload[699], static_cast<uint8_t>(i + 699));
  }
  EXPECT_EQ(cb.rcvd_icrc_err.get(), 0u);
  EXPECT_EQ(cb.rx_foreign_ip_id.get(), 0u);
}

TEST(UdpPortTest, GsoThroughADeviceWithoutChecksumOffloadLosesNothing) {
  // A device without checksum offload (a tap device without offloads, as the interop VM's)
  // makes the kernel refuse GSO with EIO: the socket falls back to one datagram per packet,
  // counted once, and no packet is lost.
  if (!can_use_netns(kNoCsumVeth)) GTEST_SKIP() << "needs network namespaces, veth and ethtool";
  EXPECT_EXIT(gso_fallback_child(), ::testing::ExitedWithCode(0), "");
}

[[noreturn]] void gso_wire_ids_child() {
  enter_netns("ethtool -K lo tx-udp-segmentation off");
  int cap = capture_on("lo");
  CHILD_CHECK(cap >= 0, 1);
  const uint32_t a = loopback(23, 9, 1), b = loopback(23, 9, 2);
  DeviceCounters ca, cb;
  auto pa = open_port(a, ca), pb = open_port(b, cb);
  CHILD_CHECK(pa && pb, 3);
  for (uint32_t i = 0; i < 20; ++i) queue_send(*pa, b, 0x32, i, 0xc701, transport::kEcnEct0, 1000);
  CHILD_CHECK(pa->tx_flush() == 20, 4);
  CHILD_CHECK(ca.port.tx_gso_fallback.get() == 0, 5);
  uint8_t frame[70000];
  size_t checked = 0, max_id = 0;
  while (test::wait_readable(cap, 300)) {
    ssize_t n = recv(cap, frame, sizeof frame, 0);
    if (n < static_cast<ssize_t>(sizeof(iphdr) + sizeof(udphdr))) continue;
    const auto* ip = reinterpret_cast<const iphdr*>(frame);
    if (ip->version != 4 || ip->protocol != IPPROTO_UDP || ntohl(ip->saddr) != a ||
        ntohl(ip->daddr) != b)
      continue;
    size_t len = ntohs(ip->tot_len);
    CHILD_CHECK(len <= static_cast<size_t>(n), 6);
    CHILD_CHECK(len == sizeof(iphdr) + sizeof(udphdr) + 1016, 7);  // one segment
    CHILD_CHECK(wire::icrc_ipv4({frame, len - 4}) == wire::load_le32(frame + len - 4), 8);
    max_id = std::max<size_t>(max_id, ntohs(ip->id));
    ++checked;
  }
  CHILD_CHECK(checked >= 20, 9);  // each seen once or twice (out and in on lo)
  CHILD_CHECK(max_id == 19, 10);  // one GSO send, IDs 0..19
  _exit(0);
}

TEST(UdpPortTest, GsoSegmentsOnTheWireCarryTheIcrcOfTheirIpId) {
  // With segmentation done in software before the device (lo told it cannot segment UDP), a
  // capture shows each segment's real IP header: its ICRC must be valid for it.
  if (!can_use_netns("ethtool -K lo tx-udp-segmentation off"))
    GTEST_SKIP() << "needs network namespaces";
  EXPECT_EXIT(gso_wire_ids_child(), ::testing::ExitedWithCode(0), "");
}

}  // namespace
}  // namespace uroce

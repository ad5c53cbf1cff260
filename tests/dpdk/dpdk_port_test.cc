// The DPDK port on two net_ring ethdevs joined back to back (A's transmit ring is B's receive
// ring and the other way round), each behind the device's receive pipeline (Datapath): ARP
// between them, RoCE packets with an exactly checked ICRC, ICMP echo, PAUSE, VLAN tags, and a
// neighbour that never answers. The EAL runs in the test process; no NIC, no namespaces.
#include "dpdk_port/dpdk_port.h"

#include <rte_eth_ring.h>
#include <rte_ethdev.h>
#include <rte_ip.h>
#include <rte_lcore.h>
#include <rte_mbuf.h>
#include <rte_mempool.h>
#include <rte_ring.h>

#include <gtest/gtest.h>
#include <spdlog/sinks/ostream_sink.h>

#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <sstream>
#include <thread>

#include "../engine/test_util.h"
#include "dpdk_port/eal.h"
#include "engine/config.h"
#include "engine/datapath.h"
#include "engine/engine.h"
#include "util/log.h"
#include "wire/icrc.h"

namespace uroce::dpdk {
namespace {

constexpr uint32_t kIpA = 0x0a4d0001, kIpB = 0x0a4d0002;
const Mac kMacA = {0x02, 0, 0, 0, 0, 0x0a};
const Mac kMacB = {0x02, 0, 0, 0, 0, 0x0b};

// One side: counters, the port (inside the pipeline) and its raw rings.
struct Side {
  DeviceCounters c;
  std::unique_ptr<Datapath> dp;
  DpdkPort* port = nullptr;
  rte_ring* rx = nullptr;  // frames to this side
  rte_ring* tx = nullptr;  // frames from this side
};

class DpdkRingTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    std::string err;
    ASSERT_TRUE(eal_ensure({}, false, &err)) << err;
    pool_ = rte_pktmbuf_pool_create("test_pool", 1024, 0, 0, 4096, SOCKET_ID_ANY);
    ASSERT_NE(pool_, nullptr);
  }

  // Makes the ring pair and both ports. `tweak_a` and `tweak_b` adjust each side's options.
  void make(void (*tweak_a)(DpdkPortOptions&) = nullptr,
            void (*tweak_b)(DpdkPortOptions&) = nullptr) {
    static int n = 0;
    const std::string id = std::to_string(n++);
    rte_ring* r1 = rte_ring_create(("r1_" + id).c_str(), 1024, SOCKET_ID_ANY, 0);
    rte_ring* r2 = rte_ring_create(("r2_" + id).c_str(), 1024, SOCKET_ID_ANY, 0);
    ASSERT_TRUE(r1 && r2);
    int pa = rte_eth_from_rings(("ringA" + id).c_str(), &r1, 1, &r2, 1, 0);
    int pb = rte_eth_from_rings(("ringB" + id).c_str(), &r2, 1, &r1, 1, 0);
    ASSERT_GE(pa, 0);
    ASSERT_GE(pb, 0);
    DpdkPortOptions oa, ob;
    oa.ip = wire::IpAddr(kIpA);
    oa.has_mac = true;
    oa.mac = kMacA;
    ob.ip = wire::IpAddr(kIpB);
    ob.has_mac = true;
    ob.mac = kMacB;
    if (tweak_a) tweak_a(oa);
    if (tweak_b) tweak_b(ob);
    open(a_, oa, pa, r1, r2);
    open(b_, ob, pb, r2, r1);
  }
  void open(Side& s, const DpdkPortOptions& o, int port_id, rte_ring* rx, rte_ring* tx) {
    std::string err;
    auto p = DpdkPort::open(o, s.c.port, &err, port_id);
    ASSERT_NE(p, nullptr) << err;
    s.port = p.get();
    DatapathOptions d;
    d.data_dscp = o.data_dscp;
    if (!faults_.empty()) {
      auto fc = parse_faults(faults_, &err);
      ASSERT_TRUE(fc) << err;
      d.faults = *fc;
    }
    s.dp = Datapath::open(std::move(p), d, s.c, &err);
    ASSERT_NE(s.dp, nullptr) << err;
    s.rx = rx;
    s.tx = tx;
  }

  // Queues one RoCE SEND ONLY from `s` to `dst` with PSN `psn`.
  static void send(Side& s, uint32_t dst, uint32_t psn, uint8_t dscp = transport::kDscpPortDefault,
                   bool roce_v1 = false, uint8_t pcp = transport::kPcpPortDefault) {
    transport::TxBuf* b = s.dp->tx_alloc();
    ASSERT_NE(b, nullptr);
    uint8_t payload[64];
    for (size_t i = 0; i < sizeof payload; ++i) payload[i] = uint8_t(psn + i);
    b->len = static_cast<uint32_t>(
        test::build_packet(b->data, wire::Opcode::kRcSendOnly, 0x11, psn, payload));
    b->dst_ip = wire::IpAddr(dst);
    b->src_port = 0xc001;
    b->ecn = transport::kEcnEct0;
    b->dscp = dscp;
    b->roce_v1 = roce_v1;
    b->pcp = pcp;
    s.dp->tx_commit(b);
    s.dp->tx_flush(monotonic_now());
  }
  // One engine pass's worth for a side: receive, then the port's housekeeping.
  static std::vector<uint32_t> pass(Side& s) {
    std::vector<uint32_t> psns;
    for (const RxPacket& p : s.dp->rx_burst(monotonic_now())) psns.push_back(p.pkt.bth.psn);
    s.port->poll(monotonic_now());
    return psns;
  }
  // Injects a raw frame into `s`'s receive ring.
  static void inject(Side& s, const uint8_t* f, size_t len) {
    rte_mbuf* m = rte_pktmbuf_alloc(pool_);
    ASSERT_NE(m, nullptr);
    std::memcpy(rte_pktmbuf_append(m, static_cast<uint16_t>(len)), f, len);
    ASSERT_EQ(rte_ring_enqueue(s.rx, m), 0);
  }
  // Injects an 802.1Qbb PFC frame from B's MAC into `s`, pausing priority `prio` for `quanta`.
  static void inject_pfc(Side& s, int prio, uint16_t quanta) {
    uint8_t f[64] = {};
    std::memcpy(f, kPauseMac.data(), 6);
    std::memcpy(f + 6, kMacB.data(), 6);
    f[12] = 0x88;  // MAC control
    f[13] = 0x08;
    f[14] = 0x01;  // opcode 0x0101: PFC
    f[15] = 0x01;
    f[17] = static_cast<uint8_t>(1 << prio);  // priority enable vector
    f[18 + 2 * prio] = static_cast<uint8_t>(quanta >> 8);
    f[18 + 2 * prio + 1] = static_cast<uint8_t>(quanta);
    inject(s, f, sizeof f);
  }
  // Takes every frame `s` transmitted (from its transmit ring, before the other side reads it).
  static std::vector<std::vector<uint8_t>> take(Side& s) {
    std::vector<std::vector<uint8_t>> out;
    void* obj;
    while (rte_ring_dequeue(s.tx, &obj) == 0) {
      auto* m = static_cast<rte_mbuf*>(obj);
      std::vector<uint8_t>& v = out.emplace_back(rte_pktmbuf_pkt_len(m));
      // rte_pktmbuf_read copies only when the frame is in several segments.
      const void* d = rte_pktmbuf_read(m, 0, v.size(), v.data());
      if (d != v.data()) std::memcpy(v.data(), d, v.size());
      rte_pktmbuf_free(m);
    }
    return out;
  }

  // Queues and flushes a RoCE SEND ONLY whose payload stays in `payload` (TxBuf::ext).
  static void send_by_reference(Side& s, uint32_t dst, uint32_t psn,
                                const std::vector<uint8_t>& payload) {
    transport::TxBuf* b = s.dp->tx_alloc();
    ASSERT_NE(b, nullptr);
    b->len = static_cast<uint32_t>(
        test::build_packet(b->data, wire::Opcode::kRcSendOnly, 0x11, psn, {}));
    b->ext = payload.data();
    b->ext_len = static_cast<uint32_t>(payload.size());
    b->dst_ip = wire::IpAddr(dst);
    b->src_port = 0xc001;
    s.dp->tx_commit(b);
    s.dp->tx_flush(monotonic_now());
  }
  // The segments of each frame waiting in `s`'s transmit ring, left in place.
  static std::vector<uint16_t> segments(Side& s) {
    std::vector<uint16_t> out;
    std::vector<void*> objs;
    void* obj;
    while (rte_ring_dequeue(s.tx, &obj) == 0) objs.push_back(obj);
    for (void* o : objs) {
      out.push_back(static_cast<rte_mbuf*>(o)->nb_segs);
      EXPECT_EQ(rte_ring_enqueue(s.tx, o), 0);
    }
    return out;
  }

  static rte_mempool* pool_;
  Side a_, b_;
  std::string faults_;  // UROCE_FAULTS for the sides make() opens
};
rte_mempool* DpdkRingTest::pool_ = nullptr;

TEST_F(DpdkRingTest, ArpResolvesThenRocePacketsArriveWithAnExactIcrc) {
  make();
  send(a_, kIpB, 100);
  EXPECT_EQ(a_.c.port.arp_tx_requests.get(), 1u);
  send(a_, kIpB, 101);            // waits behind the same request
  pass(a_);                       // the request goes out
  EXPECT_TRUE(pass(b_).empty());  // B answers it…
  EXPECT_EQ(b_.c.port.arp_tx_replies.get(), 1u);
  EXPECT_TRUE(pass(a_).empty());  // …A learns B and releases what waited
  auto got = pass(b_);
  EXPECT_EQ(got, (std::vector<uint32_t>{100, 101}));
  send(a_, kIpB, 102);  // resolved now: straight out
  EXPECT_EQ(pass(b_), (std::vector<uint32_t>{102}));
  EXPECT_EQ(a_.c.port.arp_tx_requests.get(), 1u);
  EXPECT_EQ(a_.c.port.sent_pkts.get(), 3u);
  EXPECT_EQ(b_.c.rcvd_pkts.get(), 3u);
  EXPECT_EQ(b_.c.rcvd_icrc_err.get(), 0u);
  EXPECT_TRUE(a_.port->caps().exact_icrc);
}

// What the NIC says of itself (Port::nic_info, published for `uroce doctor`): net_ring reports a
// fixed 10 Gb/s full-duplex link, no flow-control setting and no PAUSE statistics; the traffic
// above leaves no error.
TEST_F(DpdkRingTest, ReportsItsNicsSpeedErrorsAndFlowControl) {
  make();
  send(a_, kIpB, 100);
  pass(a_);
  pass(b_);
  pass(a_);
  EXPECT_EQ(pass(b_), (std::vector<uint32_t>{100}));
  NicInfo n;
  n.link_speed_mbps = 1;
  n.flow_ctrl = NicInfo::kFcFull;
  ASSERT_TRUE(b_.port->nic_info(&n));
  EXPECT_EQ(n.link_speed_mbps, 10000u);
  EXPECT_EQ(n.link_full_duplex, 1u);
  EXPECT_EQ(n.flow_ctrl, uint64_t{NicInfo::kFcUnknown});
  EXPECT_EQ(n.pause_stats, 0u);
  EXPECT_EQ(n.rx_errors + n.rx_missed + n.rx_nombuf + n.tx_errors, 0u);
}

// A receive burst takes at most DpdkPort::kRxBurst frames, in order; frames it does not hand up
// (one for another MAC here) go back to their pool at once, the rest with the next burst, and the
// frames handed up stay valid until then.
TEST_F(DpdkRingTest, ReceiveBurstsTakeAtMostTheirSizeInOrder) {
  make();
  send(a_, kIpB, 100);  // resolves B first (ArpResolvesThenRocePacketsArriveWithAnExactIcrc)
  pass(a_);
  pass(b_);
  pass(a_);
  ASSERT_EQ(pass(b_), (std::vector<uint32_t>{100}));
  constexpr uint32_t kFrames = DpdkPort::kRxBurst + 9;
  std::vector<uint32_t> sent;
  for (uint32_t i = 0; i < kFrames; ++i) {
    if (i == 5) {
      uint8_t other[64] = {0x02, 0, 0, 0, 0, 0x77};  // to a MAC nobody here has
      std::memcpy(other + 6, kMacA.data(), 6);
      other[12] = 0x08;  // IPv4
      inject(b_, other, sizeof other);
    }
    send(a_, kIpB, 200 + i);
    sent.push_back(200 + i);
  }
  std::vector<uint32_t> got;
  // The first burst holds kRxBurst frames, one of them not handed up.
  const auto burst = b_.dp->rx_burst(monotonic_now());
  EXPECT_EQ(burst.size(), DpdkPort::kRxBurst - 1);
  for (const RxPacket& p : burst) got.push_back(p.pkt.bth.psn);
  // Still readable: nothing was freed under them yet.
  for (const RxPacket& p : burst) {
    ASSERT_EQ(p.pkt.payload.size(), 64u);
    EXPECT_EQ(p.pkt.payload[0], uint8_t(p.pkt.bth.psn));
  }
  const auto rest = pass(b_);
  EXPECT_EQ(rest.size(), 10u);
  got.insert(got.end(), rest.begin(), rest.end());
  EXPECT_TRUE(pass(b_).empty());
  EXPECT_EQ(got, sent);
  EXPECT_EQ(b_.c.port.rx_not_for_us.get(), 1u);
  EXPECT_EQ(b_.c.rcvd_icrc_err.get(), 0u);
}

TEST_F(DpdkRingTest, IcrcIsCheckedForTheRealIpId) {
  // A frame whose ICRC was computed for IP ID 0 but which carries ID 5 is corrupt on the wire.
  // The socket datapath cannot tell (some ID makes it valid); this port sees the ID and drops it.
  make();
  uint8_t ib[128];
  const size_t n = test::build_packet(ib, wire::Opcode::kRcSendOnly, 0x11, 7, {});
  for (uint16_t id : {uint16_t{0}, uint16_t{5}}) {
    RoceV2Headers h;
    h.l2.dst = kMacB;
    h.l2.src = kMacA;
    h.src_ip = wire::IpAddr(kIpA);
    h.dst_ip = wire::IpAddr(kIpB);
    h.src_port = 0xc002;
    h.ip_id = id;
    uint8_t f[256];
    const size_t hdr = roce_v2_header_bytes(false);
    write_roce_v2(f, h, n + 4);
    std::memcpy(f + hdr, ib, n);
    wire::Ipv4UdpFraming fr;
    fr.src_ip = kIpA;
    fr.dst_ip = kIpB;
    fr.ip_id = 0;
    fr.src_port = 0xc002;
    wire::store_le32(f + hdr + n, wire::icrc(fr, {ib, n}));
    inject(b_, f, hdr + n + 4);
  }
  EXPECT_EQ(pass(b_), (std::vector<uint32_t>{7}));
  EXPECT_EQ(b_.c.rcvd_icrc_err.get(), 1u);
}

TEST_F(DpdkRingTest, AnswersIcmpEcho) {
  make();
  std::vector<uint8_t> f(14 + 20 + 8 + 16);
  std::memcpy(f.data(), kMacB.data(), 6);
  std::memcpy(f.data() + 6, kMacA.data(), 6);
  f[12] = 0x08;
  auto* ip = reinterpret_cast<rte_ipv4_hdr*>(f.data() + 14);
  ip->version_ihl = 0x45;
  ip->total_length = rte_cpu_to_be_16(20 + 8 + 16);
  ip->time_to_live = 64;
  ip->next_proto_id = IPPROTO_ICMP;
  ip->src_addr = rte_cpu_to_be_32(kIpA);
  ip->dst_addr = rte_cpu_to_be_32(kIpB);
  ip->hdr_checksum = rte_ipv4_cksum(ip);
  f[34] = 8;
  inject(b_, f.data(), f.size());
  pass(b_);
  auto out = take(b_);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0][34], 0);  // echo reply
  EXPECT_EQ(std::memcmp(out[0].data(), kMacA.data(), 6), 0);
  EXPECT_EQ(b_.c.port.icmp_echo_replies.get(), 1u);
}

TEST_F(DpdkRingTest, PfcPausesOnlyItsPriorityForItsQuanta) {
  make([](DpdkPortOptions& o) {
    o.neighbours.push_back({wire::IpAddr(kIpB), kMacB});  // static: no ARP in the way
  });
  // PFC for priority 3 (RoCE data: DSCP 26 >> 3), the most quanta there are.
  inject_pfc(a_, 3, 0xffff);
  pass(a_);
  EXPECT_EQ(a_.c.port.rx_prio_pause[3].get(), 1u);
  const transport::Time t0 = monotonic_now();
  send(a_, kIpB, 1);      // priority 3: held
  send(a_, kIpB, 2, 48);  // DSCP 48 (a CNP's): priority 6, not paused
  auto out = take(a_);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0][15] >> 2, 48);  // the TOS byte's DSCP
  EXPECT_EQ(a_.c.port.tx_pause_held.get(), 1u);
  const transport::Time expiry = a_.port->next_deadline();
  const auto pause_ns = static_cast<transport::Time>(0xffff * a_.port->quantum_ns());
  EXPECT_GE(expiry, t0);
  EXPECT_LE(expiry, t0 + pause_ns + 1'000'000);
  // Still paused a moment before the end…
  if (monotonic_now() + 200'000 < expiry) {
    a_.port->poll(monotonic_now());
    EXPECT_TRUE(take(a_).empty());
  }
  // …released once it passed.
  while (monotonic_now() < expiry) std::this_thread::sleep_for(std::chrono::microseconds(100));
  a_.port->poll(monotonic_now());
  out = take(a_);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0][15] >> 2, 26);
}

TEST_F(DpdkRingTest, JumboFramesCarryAFullPathMtu4096Packet) {
  // net_ring has no frame limit: at port MTU 9000 a 4096-byte payload travels in one frame.
  make([](DpdkPortOptions& o) { o.neighbours.push_back({wire::IpAddr(kIpB), kMacB}); });
  // (B's default MTU is what the ring carries too: the ring PMD checks nothing.)
  transport::TxBuf* b = a_.dp->tx_alloc();
  ASSERT_NE(b, nullptr);
  std::vector<uint8_t> payload(4096, 0x5a);
  b->len = static_cast<uint32_t>(
      test::build_packet(b->data, wire::Opcode::kRcSendOnly, 0x11, 9, payload));
  b->dst_ip = wire::IpAddr(kIpB);
  b->src_port = 0xc001;
  a_.dp->tx_commit(b);
  a_.dp->tx_flush(monotonic_now());
  auto got = b_.dp->rx_burst(monotonic_now());
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].pkt.payload.size(), 4096u);
  EXPECT_EQ(b_.c.rcvd_icrc_err.get(), 0u);
}

// A port that takes payloads by reference (forced here on net_ring; uroce does it by itself on
// memif) sends headers, payload and ICRC as three segments, and the frame arrives whole with a
// valid ICRC. A port that does not gets the payload copied in by the pipeline.
TEST_F(DpdkRingTest, PayloadsByReferenceLeaveAsSegmentsAndArriveWhole) {
  make(
      [](DpdkPortOptions& o) {
        o.neighbours.push_back({wire::IpAddr(kIpB), kMacB});
        o.force_tx_gather = true;
      },
      [](DpdkPortOptions& o) {
        o.neighbours.push_back({wire::IpAddr(kIpA), kMacA});
      });
  EXPECT_EQ(a_.dp->tx_gather_min(), DpdkPort::kGatherMin);
  EXPECT_EQ(b_.dp->tx_gather_min(), 0u);
  std::vector<uint8_t> payload(1024);
  for (size_t i = 0; i < payload.size(); ++i) payload[i] = uint8_t(i * 13 + 1);

  send_by_reference(a_, kIpB, 5, payload);
  EXPECT_EQ(segments(a_), std::vector<uint16_t>{3});
  EXPECT_EQ(a_.c.port.tx_gathered.get(), 1u);
  EXPECT_EQ(a_.c.port.tx_gather_copied.get(), 0u);
  auto got = b_.dp->rx_burst(monotonic_now());
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].pkt.bth.psn, 5u);
  EXPECT_TRUE(std::equal(payload.begin(), payload.end(), got[0].pkt.payload.begin(),
                         got[0].pkt.payload.end()));
  EXPECT_EQ(b_.c.rcvd_icrc_err.get(), 0u);

  send_by_reference(b_, kIpA, 6, payload);
  EXPECT_EQ(segments(b_), std::vector<uint16_t>{1});
  EXPECT_EQ(b_.c.port.tx_gathered.get(), 0u);  // copied in by the pipeline
  auto back = a_.dp->rx_burst(monotonic_now());
  ASSERT_EQ(back.size(), 1u);
  EXPECT_TRUE(std::equal(payload.begin(), payload.end(), back[0].pkt.payload.begin(),
                         back[0].pkt.payload.end()));
  EXPECT_EQ(a_.c.rcvd_icrc_err.get(), 0u);
}

// Holding (the ACKs of an application's receive pass, Datapath::set_hold) keeps a packet back
// but never one whose payload is by reference: the application may release that memory once
// the device lock is dropped.
TEST_F(DpdkRingTest, APayloadByReferenceIsNeverHeld) {
  make([](DpdkPortOptions& o) {
    o.neighbours.push_back({wire::IpAddr(kIpB), kMacB});
    o.force_tx_gather = true;
  });
  std::vector<uint8_t> payload(2048, 0x33);
  a_.dp->set_hold(Datapath::Hold::kUntilNextCall);
  send(a_, kIpB, 1);  // 64 bytes, copied: held
  EXPECT_TRUE(segments(a_).empty());
  EXPECT_TRUE(a_.dp->holding());
  // Sends both, in commit order (a held SEND keeps its place; only held ACKs go behind).
  send_by_reference(a_, kIpB, 2, payload);
  EXPECT_EQ(segments(a_), (std::vector<uint16_t>{1, 3}));
  EXPECT_FALSE(a_.dp->holding());
  a_.dp->set_hold(Datapath::Hold::kOff);
  auto got = b_.dp->rx_burst(monotonic_now());
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0].pkt.bth.psn, 1u);
  EXPECT_EQ(got[1].pkt.payload.size(), payload.size());
}

// A gathered frame the port must keep (here: its next hop not resolved yet, which holds it until
// the peer answers ARP, however long the test takes) is made whole at once: what the application
// writes into its buffer afterwards is not what leaves when the frame is released.
TEST_F(DpdkRingTest, AHeldFrameCarriesItsPayloadAsItWasSent) {
  make([](DpdkPortOptions& o) { o.force_tx_gather = true; });
  std::vector<uint8_t> payload(1024, 0x5a);
  send_by_reference(a_, kIpB, 9, payload);
  EXPECT_EQ(a_.c.port.arp_tx_requests.get(), 1u);
  EXPECT_EQ(a_.c.port.tx_gathered.get(), 1u);
  EXPECT_EQ(a_.c.port.tx_gather_copied.get(), 1u);
  std::fill(payload.begin(), payload.end(), 0);  // the application reuses its buffer
  pass(a_);                                      // the ARP request goes out
  EXPECT_TRUE(pass(b_).empty());                 // B answers it…
  EXPECT_TRUE(pass(a_).empty());                 // …A learns B and releases the held frame
  EXPECT_EQ(segments(a_), std::vector<uint16_t>{1});
  auto got = b_.dp->rx_burst(monotonic_now());
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(b_.c.rcvd_icrc_err.get(), 0u);
  ASSERT_EQ(got[0].pkt.payload.size(), 1024u);
  EXPECT_TRUE(std::all_of(got[0].pkt.payload.begin(), got[0].pkt.payload.end(),
                          [](uint8_t x) { return x == 0x5a; }));
}

// Transmit fault injection wants each packet's bytes in one piece: no gathering under it.
TEST_F(DpdkRingTest, TransmitFaultsTurnGatheringOff) {
  faults_ = "tx.loss=0.0001,seed=1";  // on, and (this seed) drops nothing here
  make([](DpdkPortOptions& o) {
    o.neighbours.push_back({wire::IpAddr(kIpB), kMacB});
    o.force_tx_gather = true;
  });
  EXPECT_EQ(a_.dp->tx_gather_min(), 0u);
  std::vector<uint8_t> payload(1024, 0x77);
  send_by_reference(a_, kIpB, 3, payload);
  EXPECT_EQ(segments(a_), std::vector<uint16_t>{1});
  auto got = b_.dp->rx_burst(monotonic_now());
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].pkt.payload.size(), payload.size());
  EXPECT_EQ(got[0].pkt.payload[100], 0x77);
}

TEST_F(DpdkRingTest, VlanTagCarriesThePriority) {
  make([](DpdkPortOptions& o) {
    o.vlan = 42;
    o.priority = 3;
    o.neighbours.push_back({wire::IpAddr(kIpB), kMacB});
  });
  send(a_, kIpB, 1);
  send(a_, kIpB, 2, 48);
  send(a_, kIpB, 3, 48, false, 5);  // a CNP with cnp_802p_prio=5
  auto out = take(a_);
  ASSERT_EQ(out.size(), 3u);
  for (const auto& f : out) {
    ASSERT_GE(f.size(), 18u);
    EXPECT_EQ(f[12], 0x81);
    EXPECT_EQ(f[13], 0x00);
  }
  EXPECT_EQ((out[0][14] << 8 | out[0][15]), 3 << 13 | 42);  // data: the RoCE priority
  EXPECT_EQ((out[1][14] << 8 | out[1][15]), 6 << 13 | 42);  // DSCP 48: priority 6
  EXPECT_EQ((out[2][14] << 8 | out[2][15]), 5 << 13 | 42);  // its own priority
}

// RoCE v1 (roce_v1=1): EtherType 0x8915, a GRH with IPv4-mapped GIDs, the ICRC over the GRH; the
// receiver checks that ICRC exactly and hands the packet up marked as v1.
TEST_F(DpdkRingTest, RoceV1FramesCarryAGrhAndAnExactIcrc) {
  auto v1 = [](DpdkPortOptions& o) {
    o.roce_v1 = true;
    o.neighbours.push_back({wire::IpAddr(o.ip == wire::IpAddr(kIpA) ? kIpB : kIpA),
                            o.ip == wire::IpAddr(kIpA) ? kMacB : kMacA});
  };
  make(v1, v1);
  EXPECT_TRUE(a_.port->caps().roce_v1);
  send(a_, kIpB, 40, 26, /*roce_v1=*/true);
  auto out = take(a_);
  ASSERT_EQ(out.size(), 1u);
  const std::vector<uint8_t>& f = out[0];
  ASSERT_EQ(f.size(), 14u + 40 + 12 + 64 + 4);
  EXPECT_EQ(f[12] << 8 | f[13], 0x8915);
  const uint8_t* g = f.data() + 14;
  EXPECT_EQ(g[0] >> 4, 6);                                // IPVer
  EXPECT_EQ((g[0] & 0xf) << 4 | g[1] >> 4, 26 << 2 | 2);  // TClass: DSCP 26, ECT(0)
  EXPECT_EQ(g[4] << 8 | g[5], 12 + 64 + 4);               // PayLen
  EXPECT_EQ(g[6], 0x1b);                                  // NxtHdr: BTH
  const uint8_t mapped_b[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 0x4d, 0, 2};
  EXPECT_EQ(std::memcmp(g + 24, mapped_b, 16), 0);  // DGID ::ffff:10.77.0.2
  const std::span<const uint8_t> ib(f.data() + 54, 12 + 64);
  EXPECT_EQ(wire::load_le32(f.data() + 54 + 76), wire::icrc_grh(kIpA, kIpB, ib));
  inject(b_, f.data(), f.size());
  auto got = b_.dp->rx_burst(monotonic_now());
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].pkt.bth.psn, 40u);
  EXPECT_TRUE(got[0].info.roce_v1);
  EXPECT_EQ(got[0].info.src_ip, wire::IpAddr(kIpA));
  EXPECT_EQ(b_.c.rcvd_icrc_err.get(), 0u);
  EXPECT_EQ(b_.c.port.rx_roce_v1.get(), 1u);
  // The same frame with one payload bit flipped is dropped for its ICRC.
  std::vector<uint8_t> bad = f;
  bad[54 + 20] ^= 1;
  inject(b_, bad.data(), bad.size());
  EXPECT_TRUE(b_.dp->rx_burst(monotonic_now()).empty());
  EXPECT_EQ(b_.c.rcvd_icrc_err.get(), 1u);
}

// Without roce_v1 a port neither sends v1 (the packet is counted as a transmit error) nor takes
// v1 frames up (they count as not RoCE).
TEST_F(DpdkRingTest, RoceV1IsRefusedOnAPortWithoutIt) {
  make([](DpdkPortOptions& o) {
    o.roce_v1 = true;
    o.neighbours.push_back({wire::IpAddr(kIpB), kMacB});
  });
  EXPECT_FALSE(b_.port->caps().roce_v1);
  send(a_, kIpB, 41, transport::kDscpPortDefault, /*roce_v1=*/true);
  auto out = take(a_);
  ASSERT_EQ(out.size(), 1u);
  inject(b_, out[0].data(), out[0].size());
  EXPECT_TRUE(b_.dp->rx_burst(monotonic_now()).empty());
  EXPECT_EQ(b_.c.port.rx_non_roce.get(), 1u);
  const uint64_t errors = b_.c.port.tx_errors.get();
  send(b_, kIpA, 42, transport::kDscpPortDefault, /*roce_v1=*/true);
  EXPECT_EQ(b_.c.port.tx_errors.get(), errors + 1);
  EXPECT_TRUE(take(b_).empty());
}

TEST_F(DpdkRingTest, NeighbourThatNeverAnswersFailsAndItsPacketsAreDropped) {
  make();
  const uint32_t nobody = 0x0a4d0063;
  send(a_, nobody, 1);
  const auto start = std::chrono::steady_clock::now();
  while (a_.c.port.arp_failures.get() == 0 &&
         std::chrono::steady_clock::now() - start < std::chrono::seconds(5)) {
    a_.port->poll(monotonic_now());
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(a_.c.port.arp_failures.get(), 1u);
  EXPECT_EQ(a_.c.port.arp_tx_requests.get(), 5u);  // NeighbourTable::Params::max_requests
  EXPECT_EQ(a_.c.port.tx_no_neighbour.get(), 1u);
  send(a_, nobody, 2);  // failed: dropped at once
  EXPECT_EQ(a_.c.port.tx_no_neighbour.get(), 2u);
}

// Threads that work a port get an lcore id and so a per-lcore mbuf cache (eal.h): at most
// kMaxThreadCaches at a time, the rest still work through the pools' rings; a thread that exits
// gives its cached mbufs back to the pools and its lcore id back to the EAL.
TEST_F(DpdkRingTest, ThreadsThatWorkAPortCacheMbufsAndGiveThemBackWhenTheyExit) {
  make();
  send(a_, kIpB, 1);  // ARP, as in the first test
  pass(a_);
  pass(b_);
  pass(a_);
  ASSERT_EQ(pass(b_), (std::vector<uint32_t>{1}));
  rte_mempool* tx_pool =
      rte_mempool_lookup(("uroce_tx" + std::to_string(a_.port->port_id())).c_str());
  ASSERT_NE(tx_pool, nullptr);
  const int before = eal_registered_threads();

  unsigned lcore = LCORE_ID_ANY;
  unsigned cached = 0;
  std::vector<uint32_t> got;
  std::thread t([&] {
    for (uint32_t psn = 2; psn < 6; ++psn) {
      send(a_, kIpB, psn);                           // A's mbuf from this thread's cache …
      for (uint32_t p : pass(b_)) got.push_back(p);  // … freed into it by B's next receive
    }
    lcore = rte_lcore_id();
    if (rte_mempool_cache* c = rte_mempool_default_cache(tx_pool, lcore)) cached = c->len;
  });
  t.join();
  EXPECT_EQ(got, (std::vector<uint32_t>{2, 3, 4, 5}));
  ASSERT_NE(lcore, LCORE_ID_ANY) << "the thread got no lcore id";
  EXPECT_GT(cached, 0u) << "its mbufs did not go through its cache";
  EXPECT_EQ(rte_mempool_default_cache(tx_pool, lcore)->len, 0u)
      << "the exited thread's cache still holds mbufs nobody can use";
  EXPECT_EQ(eal_registered_threads(), before);

  // More threads at once than caches: every one works; only kMaxThreadCaches get an lcore id.
  constexpr int kThreads = kMaxThreadCaches + 2;
  std::atomic<int> arrived{0}, with_id{0};
  std::atomic<bool> go{false};
  std::vector<std::thread> ts;
  for (int i = 0; i < kThreads; ++i)
    ts.emplace_back([&] {
      eal_thread_enter();
      if (rte_lcore_id() != LCORE_ID_ANY) with_id.fetch_add(1);
      arrived.fetch_add(1);
      while (!go.load()) std::this_thread::yield();  // all alive together
    });
  while (arrived.load() < kThreads) std::this_thread::yield();
  EXPECT_EQ(with_id.load(), kMaxThreadCaches - before);
  go.store(true);
  for (std::thread& th : ts) th.join();
  EXPECT_EQ(eal_registered_threads(), before);
  pass(b_);  // B lets go of the last frame it received
  // Each mbuf is back: in the pool's ring or in the caches of lcores still in use (this one's).
  EXPECT_EQ(rte_mempool_avail_count(tx_pool), DpdkPort::kTxPoolSize);
}

}  // namespace
}  // namespace uroce::dpdk

namespace uroce::dpdk {
namespace {

// DPDK's log goes into uroce's, at DPDK's level, so UROCE_LOG filters it; memif's refusal of
// multi-process support (expected: the EAL runs without it) only at debug.
TEST(DpdkPortTest, DpdkLogLinesGoToUrocesLogAtTheirLevel) {
  std::string err;
  ASSERT_TRUE(eal_ensure({}, false, &err)) << err;
  std::ostringstream out;
  auto sink = std::make_shared<spdlog::sinks::ostream_sink_mt>(out);
  sink->set_pattern("%l %v");
  log().sinks().push_back(sink);
  const spdlog::level::level_enum was = log().level();
  log().set_level(spdlog::level::info);
  RTE_LOG(ERR, USER1, "something failed\n");
  RTE_LOG(WARNING, USER1, "a warning\n");
  RTE_LOG(INFO, USER1, "by the way\n");
  RTE_LOG(ERR, USER1, "rte_pmd_memif_probe(): Failed to register mp action callback: x\n");
  log_dpdk_line("", RTE_LOG_ERR);  // nothing for an empty line
  log().set_level(was);
  log().sinks().pop_back();
  EXPECT_EQ(out.str(),
            "error dpdk: USER1: something failed\n"
            "warning dpdk: USER1: a warning\n"
            "info dpdk: USER1: by the way\n");
}

TEST(DpdkPortTest, AnMtuThePmdCannotCarryIsRefusedNamingItsLimit) {
  // net_memif carries jumbo frames up to uroce's limit for it, MTU 9000 (DPDK 22.11's memif
  // reports 1518-byte frames, which ethdev then enforces on the MTU, but the driver carries any
  // length: dpdk_port.cc).
  std::string err;
  DpdkPortOptions o;
  o.dev = "net_memif7,role=server,socket=/tmp/uroce-dpdk-tests-mtu.sock,socket-abstract=no";
  o.ip = wire::IpAddr(0x0a4d0009u);
  o.mtu = 9001;
  PortCounters c;
  EXPECT_EQ(DpdkPort::open(o, c, &err), nullptr);
  EXPECT_NE(err.find("mtu=9001 exceeds what the port carries (MTU 9000"), std::string::npos) << err;
  // At its own MTU it opens and says what it carries (the vdev was released: it probes again).
  o.mtu = 0;
  {
    auto p = DpdkPort::open(o, c, &err);
    ASSERT_NE(p, nullptr) << err;
    EXPECT_EQ(p->caps().ip_mtu, 1500u);
  }
  // And at jumbo's.
  o.mtu = 9000;
  o.dev += ",bsize=9216";
  auto p = DpdkPort::open(o, c, &err);
  ASSERT_NE(p, nullptr) << err;
  EXPECT_EQ(p->caps().ip_mtu, 9000u);
}

TEST(DpdkPortTest, AStaleMemifSocketOfADeadServerIsRemoved) {
  // A memif server killed before it closed leaves its socket file; the next server must start.
  const char* path = "/tmp/uroce-dpdk-tests-stale.sock";
  unlink(path);
  int fd = socket(AF_UNIX, SOCK_SEQPACKET, 0);
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  std::strcpy(a.sun_path, path);
  ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  close(fd);  // bound, never listening: what a dead server leaves
  DpdkPortOptions o;
  o.dev = std::string("net_memif8,role=server,socket=") + path + ",socket-abstract=no";
  o.ip = wire::IpAddr(0x0a4d000au);
  PortCounters c;
  std::string err;
  auto p = DpdkPort::open(o, c, &err);
  EXPECT_NE(p, nullptr) << err;
  p.reset();
  unlink(path);
}

}  // namespace
}  // namespace uroce::dpdk

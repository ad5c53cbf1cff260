// The fabric's parts, one at a time: link timing (egress.cc + channel.cc), RED marking at
// enqueue and at dequeue, PFC's XOFF/XON hysteresis and refresh (switch.cc), ECMP hashing
// (ecmp.cc), and a host's NIC under PAUSE; then whole small fabrics (fabric.cc, host.cc,
// workload.cc): a WRITE completes at the speed the links allow, and reruns are identical.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <map>
#include <set>
#include <vector>

#include "sim/capture.h"
#include "sim/ecmp.h"
#include "sim/egress.h"
#include "sim/fabric.h"
#include "sim/switch.h"
#include "util/red.h"
#include "wire/icrc.h"

namespace uroce::sim {
namespace {

constexpr uint64_t kGbps = 1'000'000'000ull;

// Keeps what arrives, in order, with its arrival time.
struct Collect : FrameSink {
  FramePool* pool = nullptr;
  std::vector<std::pair<Time, Frame>> got;
  void on_frame(Frame* f, Time now) override {
    got.emplace_back(now, *f);
    pool->put(f);
  }
};

struct NoOwner : EgressOwner {
  std::vector<Time> dequeued;
  void on_dequeue(uint32_t, const Frame&, Time now) override { dequeued.push_back(now); }
};

Frame* data_frame(FramePool& pool, uint32_t payload, uint8_t prio = 3, uint8_t ecn = 2,
                  uint16_t tag = 0) {
  Frame* f = pool.get();
  f->kind = FrameKind::kRoce;
  f->payload.assign(payload, 0);
  f->prio = prio;
  f->tos = uint8_t(26 << 2 | ecn);
  f->src_port = tag;
  f->src_ip = Fabric::host_ip(0);
  f->dst_ip = Fabric::host_ip(1);
  return f;
}

// One egress port at 10 Gb/s into a 500 ns channel.
struct OnePort {
  EventQueue q;
  FramePool pool;
  Rng rng{1};
  Window w;
  Collect far;
  NoOwner owner;
  Channel ch{q, pool, rng, ChannelParams{.delay = 500}, &far};
  EgressPort port;
  explicit OnePort(RedConfig red = {}) : port(q, 10 * kGbps, &ch, &owner, 0, &w, &rng, red) {
    far.pool = &pool;
  }
};

TEST(LinkTiming, SerialisationThenPropagation) {
  OnePort p;
  // 1000 bytes of payload: a 1046-byte frame, 1066 bytes of link time at 10 Gb/s = 852.8 ns.
  Frame* f = data_frame(p.pool, 1000);
  ASSERT_EQ(f->bytes(), 1046u);
  EXPECT_EQ(p.port.tx_time(f->wire_bytes()), 853u);  // rounded up
  p.port.enqueue(f);
  p.port.enqueue(data_frame(p.pool, 1000));
  p.q.run_until(kNever);
  ASSERT_EQ(p.far.got.size(), 2u);
  EXPECT_EQ(p.far.got[0].first, 853u + 500);
  EXPECT_EQ(p.far.got[1].first, 2 * 853u + 500);  // back to back behind the first
  EXPECT_EQ(p.owner.dequeued, (std::vector<Time>{0, 853}));
  EXPECT_EQ(p.port.counters().frames, 2u);
  EXPECT_EQ(p.port.counters().busy_ns, 2 * 853u);
}

TEST(LinkTiming, StrictPriorityAndControlFirst) {
  OnePort p;
  p.port.enqueue(data_frame(p.pool, 1000, 3, 2, 1));  // on the wire at once
  p.port.enqueue(data_frame(p.pool, 1000, 3, 2, 2));
  p.port.enqueue(data_frame(p.pool, 16, 6, 0, 3));  // a CNP's class
  Frame* pause = p.pool.get();
  pause->kind = FrameKind::kPause;
  pause->src_port = 4;
  p.port.send_control(pause);
  p.q.run_until(kNever);
  std::vector<uint16_t> order;
  for (auto& [t, f] : p.far.got) order.push_back(f.src_port);
  EXPECT_EQ(order, (std::vector<uint16_t>{1, 4, 3, 2}));
}

TEST(LinkTiming, PauseHoldsAClassForItsQuantaAndXonResumes) {
  OnePort p;
  Frame pause;
  pause.kind = FrameKind::kPause;
  pause.pause_enable = 1u << 3;
  pause.pause_quanta[3] = 100;  // 100 · 512 bit times at 10 Gb/s = 5.12 µs
  p.port.on_pause_frame(pause);
  p.port.enqueue(data_frame(p.pool, 1000, 3));
  p.port.enqueue(data_frame(p.pool, 16, 6, 0));  // another class is not held
  p.q.run_until(kNever);
  ASSERT_EQ(p.far.got.size(), 2u);
  EXPECT_EQ(p.far.got[0].second.prio, 6);
  EXPECT_EQ(p.far.got[1].first, 5120u + 853 + 500);
  EXPECT_EQ(p.port.counters().pfc[3].rx_pause, 1u);
  EXPECT_EQ(p.port.counters().pfc[3].pause_ns, 5120u);
  // XON (quanta 0) ends a pause early: the frame leaves at once.
  p.port.on_pause_frame(pause);
  p.port.enqueue(data_frame(p.pool, 1000, 3));
  EXPECT_TRUE(p.port.paused(3));
  Frame xon = pause;
  xon.pause_quanta[3] = 0;
  p.port.on_pause_frame(xon);
  EXPECT_FALSE(p.port.paused(3));
  EXPECT_TRUE(p.port.busy());
  EXPECT_EQ(p.port.counters().pfc[3].rx_resume, 1u);
  EXPECT_EQ(p.port.counters().pfc[3].pause_ns, 5120u);  // the XON came at the pause's start
}

TEST(Red, TheCurve) {
  EXPECT_EQ(red_probability(5 * 1024, 5 * 1024, 200 * 1024, 0.01), 0.0);
  EXPECT_NEAR(red_probability(102 * 1024 + 512, 5 * 1024, 200 * 1024, 0.01), 0.005, 1e-12);
  EXPECT_EQ(red_probability(200 * 1024, 5 * 1024, 200 * 1024, 0.01), 0.01);
  EXPECT_EQ(red_probability(200 * 1024 + 1, 5 * 1024, 200 * 1024, 0.01), 1.0);
}

// 40 ECT frames of ~1 KiB queued at once behind a port with Kmin 8 KiB, Kmax 16 KiB, Pmax 0
// (so only "above Kmax" marks, deterministically).
std::vector<bool> marks(bool at_dequeue, uint8_t ecn = 2) {
  RedConfig red{
      .enabled = true, .kmin = 8 * 1024, .kmax = 16 * 1024, .pmax = 0.0, .at_dequeue = at_dequeue};
  OnePort p(red);
  for (int i = 0; i < 40; ++i) p.port.enqueue(data_frame(p.pool, 1000 - 46, 3, ecn, uint16_t(i)));
  p.q.run_until(kNever);
  std::vector<bool> m;
  for (auto& [t, f] : p.far.got) m.push_back((f.tos & 3) == 3);
  return m;
}

TEST(Red, AtEnqueueMarksTheFramesThatFindALongQueue) {
  const std::vector<bool> m = marks(false);
  ASSERT_EQ(m.size(), 40u);
  // Frame i (1000 B) finds i - 1 frames queued (the first went on the wire at once): above
  // 16 KiB from the 18th on.
  for (int i = 0; i < 40; ++i) EXPECT_EQ(m[i], (i - 1) * 1000 > 16 * 1024) << i;
}

TEST(Red, AtDequeueMarksTheFramesThatLeaveALongQueueBehind) {
  const std::vector<bool> m = marks(true);
  ASSERT_EQ(m.size(), 40u);
  // Frame i leaves 39 - i frames behind it (the first left an empty queue: it went at once).
  EXPECT_FALSE(m[0]);
  for (int i = 1; i < 40; ++i) EXPECT_EQ(m[i], (39 - i) * 1000 > 16 * 1024) << i;
}

TEST(Red, NeverMarksNotEct) {
  for (bool b : marks(false, 0)) EXPECT_FALSE(b);
}

TEST(Red, MarksWithTheCurvesProbabilityBetweenKminAndKmax) {
  RedConfig red{.enabled = true, .kmin = 0, .kmax = 1'000'000, .pmax = 0.5};
  OnePort p(red);
  // Frame i (1000 bytes) finds (i - 1)·1000 bytes queued: p = 0.5·(i - 1)/1000 up to Kmax, 1
  // beyond. The marks are a sum of independent draws: within 5 standard deviations.
  double mean = 0, var = 0;
  for (int i = 0; i < 2000; ++i) {
    p.port.enqueue(data_frame(p.pool, 1000 - 46));
    const double q = i == 0 ? 0 : red_probability(uint64_t(i - 1) * 1000, 0, 1'000'000, 0.5);
    mean += q;
    var += q * (1 - q);
  }
  p.q.run_until(kNever);
  EXPECT_NEAR(double(p.port.counters().marked), mean, 5 * std::sqrt(var));
  EXPECT_GT(var, 50.0);  // the test exercises the probabilistic part
}

// A switch with port 0 (from the sender) and port 1 (to a 1 Gb/s receiver link); frames for
// host 1 are routed to port 1.
struct PfcRig {
  EventQueue q;
  FramePool pool;
  Rng rng{1};
  Window w;
  Collect up, down;  // what port 0 sends upstream (PAUSE), what port 1 forwards
  std::unique_ptr<Switch> sw;
  explicit PfcRig(PfcConfig pfc, uint64_t buffer = 0) {
    up.pool = down.pool = &pool;
    SwitchConfig c;
    c.pfc = pfc;
    c.buffer_bytes = buffer;
    sw = std::make_unique<Switch>(q, pool, "s", 0, c, &w, 1);
    sw->add_port(40 * kGbps,
                 std::make_unique<Channel>(q, pool, rng, ChannelParams{.delay = 100}, &up),
                 "sender");
    sw->add_port(1 * kGbps,
                 std::make_unique<Channel>(q, pool, rng, ChannelParams{.delay = 100}, &down),
                 "receiver");
    sw->set_route(Fabric::host_ip(1), {1});
  }
  // Frames of 1000 bytes (or of `payload` UDP payload bytes) in class `prio` arriving on port 0,
  // `n` of them at `at`.
  void arrive(int n, Time at, uint32_t payload = 1000 - 46, uint8_t prio = 3) {
    for (int i = 0; i < n; ++i) {
      Frame* f = data_frame(pool, payload, prio);
      q.schedule(at, EventClass::kArrival, &in, reinterpret_cast<uint64_t>(f));
    }
  }
  struct In : EventHandler {
    Switch* sw = nullptr;
    void on_event(Time now, uint64_t arg) override {
      sw->receive(0, reinterpret_cast<Frame*>(arg), now);
    }
  } in;
  // The PAUSE frames port 0 sent upstream for class `prio`: when, and their quanta.
  std::vector<std::pair<Time, uint16_t>> pauses(int prio = 3) const {
    std::vector<std::pair<Time, uint16_t>> out;
    for (auto& [t, f] : up.got)
      if (f.kind == FrameKind::kPause && (f.pause_enable & (1u << prio)))
        out.emplace_back(t, f.pause_quanta[prio]);
    return out;
  }
};

TEST(Pfc, XoffAtTheThresholdXonBelowTheOtherNothingBetween) {
  PfcRig r(PfcConfig{.enabled = true, .xoff = 20'000, .xon = 10'000, .quanta = 0xffff});
  r.in.sw = r.sw.get();
  // 19 frames: 19 000 bytes held (one goes on the wire at once): below XOFF, no PAUSE.
  r.arrive(19, 0);
  r.q.run_until(kNever);
  EXPECT_TRUE(r.pauses().empty());
  // 25 at once: the 21st held frame reaches 20 000 bytes → XOFF; as the 1 Gb/s port drains,
  // XON once 10 000 or fewer bytes are held — and only then.
  r.arrive(25, r.q.now());
  r.q.run_until(kNever);
  const auto p = r.pauses();
  ASSERT_EQ(p.size(), 2u);
  EXPECT_EQ(p[0].second, 0xffff);
  EXPECT_EQ(p[1].second, 0);
  const Time frame_ns = r.sw->port(1).egress->tx_time(1020);  // 1000-byte frames at 1 Gb/s
  // XOFF went at once; XON after the queue fell from 24 held frames to 10: 14 frame times.
  EXPECT_NEAR(double(p[1].first - p[0].first), double(14 * frame_ns), double(frame_ns));
  EXPECT_EQ(r.sw->port(0).egress->counters().pfc[3].tx_pause, 1u);
  EXPECT_EQ(r.sw->port(0).egress->counters().pfc[3].tx_resume, 1u);
  EXPECT_EQ(r.down.got.size(), 19u + 25);
}

TEST(Pfc, RefreshedWhileTheQueueStaysAboveXon) {
  // Quanta 100 at 40 Gb/s: 1.28 µs; refresh every 0.64 µs. 100 frames at 1 Gb/s take ~0.8 ms to
  // drain, so the XOFF is refreshed many times before the XON.
  PfcRig r(PfcConfig{.enabled = true, .xoff = 20'000, .xon = 10'000, .quanta = 100});
  r.in.sw = r.sw.get();
  r.arrive(100, 0);
  r.q.run_until(kNever);
  const auto p = r.pauses();
  ASSERT_GT(p.size(), 100u);
  for (size_t i = 0; i + 1 < p.size(); ++i) EXPECT_EQ(p[i].second, 100) << i;
  EXPECT_EQ(p.back().second, 0);
  for (size_t i = 1; i + 1 < p.size(); ++i) EXPECT_LE(p[i].first - p[i - 1].first, 700u);
}

TEST(Pfc, OffMeansNoPauseAndTheBufferDrops) {
  PfcRig r(PfcConfig{}, /*buffer=*/30'000);
  r.in.sw = r.sw.get();
  r.arrive(50, 0);
  r.q.run_until(kNever);
  EXPECT_TRUE(r.pauses().empty());
  // One frame on the wire, 30 fit in the buffer (the one on the wire left it), the rest drop.
  EXPECT_EQ(r.sw->port(1).c.drops[3], 50u - 31);
  EXPECT_EQ(r.down.got.size(), 31u);
}

// PFC is per class: traffic in a class the switch does not treat as lossless is dropped when
// the buffer is full, however PFC is configured for the others (RoCE on the wrong priority).
TEST(Pfc, OnlyTheLosslessClassesArePaused) {
  const PfcConfig pfc{.enabled = true, .classes = 1u << 3, .xoff = 10'000, .xon = 5'000};
  PfcRig wrong(pfc, /*buffer=*/30'000);
  wrong.in.sw = wrong.sw.get();
  wrong.arrive(50, 0, 1000 - 46, /*prio=*/0);
  wrong.q.run_until(kNever);
  for (int c = 0; c < kPriorities; ++c) EXPECT_TRUE(wrong.pauses(c).empty()) << c;
  EXPECT_EQ(wrong.sw->port(1).c.drops[0], 50u - 31);
  EXPECT_EQ(wrong.down.got.size(), 31u);

  PfcRig right(pfc, /*buffer=*/30'000);
  right.in.sw = right.sw.get();
  right.arrive(50, 0, 1000 - 46, /*prio=*/3);
  right.q.run_until(kNever);
  EXPECT_FALSE(right.pauses(3).empty());
  EXPECT_TRUE(right.pauses(0).empty());
  // The arrivals ignore the PAUSE (the rig's sender is not a port), so the buffer still
  // overflows; what matters here is which class PFC acted on.
  EXPECT_EQ(right.sw->port(0).egress->counters().pfc[3].tx_pause, 1u);
  EXPECT_EQ(right.sw->port(0).egress->counters().pfc[0].tx_pause, 0u);
}

// A port's MTU limits the IPv4 packet (header to the end of the UDP payload): longer frames are
// dropped at the port they would leave by, or at the port they arrive on, and counted there.
TEST(Mtu, LongerThanAPortsMtuDropsThereAndIsCounted) {
  constexpr uint32_t kPayload = 1000 - 46;  // IPv4 packet: 28 + 954 = 982 bytes
  for (uint32_t mtu : {982u, 981u}) {
    PfcRig out(PfcConfig{});
    out.in.sw = out.sw.get();
    out.sw->port(1).mtu = mtu;
    out.arrive(10, 0, kPayload);
    out.arrive(10, 0, 100);  // short frames pass either way
    out.q.run_until(kNever);
    const uint64_t dropped = mtu < 982 ? 10 : 0;
    EXPECT_EQ(out.sw->port(1).c.mtu_drops, dropped) << mtu;
    EXPECT_EQ(out.sw->port(0).c.mtu_drops, 0u);
    EXPECT_EQ(out.down.got.size(), 20u - dropped) << mtu;
  }
  PfcRig in(PfcConfig{});
  in.in.sw = in.sw.get();
  in.sw->port(0).mtu = 981;
  in.arrive(10, 0, kPayload);
  in.arrive(10, 0, 100);
  in.q.run_until(kNever);
  EXPECT_EQ(in.sw->port(0).c.mtu_drops, 10u);
  EXPECT_EQ(in.sw->port(1).c.mtu_drops, 0u);
  EXPECT_EQ(in.down.got.size(), 10u);
  for (int c = 0; c < kPriorities; ++c) EXPECT_EQ(in.sw->port(1).c.drops[c], 0u);
}

TEST(Ecmp, KnownAnswerAndDeterminism) {
  const FiveTuple t{0x0a000001, 0x0a000002, 0xc123, 4791, 17};
  // zlib.crc32(struct.pack('>IIIBHH', 0x12345678, 0x0a000001, 0x0a000002, 17, 0xc123, 4791))
  EXPECT_EQ(ecmp_hash(EcmpHash::kCrc32, 0x12345678, t), 0xd30ed349u);
  for (EcmpHash h : {EcmpHash::kCrc32, EcmpHash::kCrc16, EcmpHash::kXor, EcmpHash::kL3})
    EXPECT_EQ(ecmp_hash(h, 7, t), ecmp_hash(h, 7, t)) << to_string(h);
}

TEST(Ecmp, TheSourcePortSpreadsFlowsEvenly) {
  for (EcmpHash h : {EcmpHash::kCrc32, EcmpHash::kCrc16, EcmpHash::kXor}) {
    std::map<uint32_t, int> n;
    for (uint32_t p = 0; p < 16384; ++p) {
      const FiveTuple t{0x0a000001, 0x0a000009, uint16_t(0xc000 | p), 4791, 17};
      ++n[ecmp_pick(ecmp_hash(h, 99, t), 0, 4)];
    }
    ASSERT_EQ(n.size(), 4u) << to_string(h);
    for (auto [m, c] : n) EXPECT_NEAR(c, 4096, 300) << to_string(h) << " member " << m;
  }
}

TEST(Ecmp, L3IgnoresTheSourcePort) {
  std::set<uint32_t> seen;
  for (uint16_t p = 0xc000; p < 0xc100; ++p)
    seen.insert(ecmp_hash(EcmpHash::kL3, 5, FiveTuple{0x0a000001, 0x0a000002, p, 4791, 17}));
  EXPECT_EQ(seen.size(), 1u);
}

TEST(Ecmp, SeedsAloneDoNotDecorrelateACrcTheOffsetDoes) {
  // Two switches with different seeds but the same bits: CRC-32 is linear, the two hashes
  // differ by a constant, so the picks are a fixed permutation of each other (polarisation).
  std::set<std::pair<uint32_t, uint32_t>> pairs;
  int same_offset_agree = 0, other_offset_agree = 0;
  for (uint32_t p = 0; p < 1000; ++p) {
    const FiveTuple t{0x0a000001, 0x0a000009, uint16_t(0xc000 | p), 4791, 17};
    const uint32_t a = ecmp_pick(ecmp_hash(EcmpHash::kCrc32, 1, t), 0, 4);
    const uint32_t b = ecmp_pick(ecmp_hash(EcmpHash::kCrc32, 2, t), 0, 4);
    const uint32_t c = ecmp_pick(ecmp_hash(EcmpHash::kCrc32, 2, t), 11, 4);
    pairs.emplace(a, b);
    same_offset_agree += a == b;
    other_offset_agree += a == c;
  }
  EXPECT_EQ(pairs.size(), 4u);  // each a maps to one b
  EXPECT_TRUE(same_offset_agree == 0 || same_offset_agree == 1000);
  EXPECT_NEAR(other_offset_agree, 250, 60);  // independent choices agree a quarter of the time
  EXPECT_LE(hash_offset(EcmpHash::kCrc32, 0xffffffff), 16);
  EXPECT_LE(hash_offset(EcmpHash::kCrc16, 0xffffffff), 8);
  EXPECT_EQ(parse_ecmp_hash("crc16"), EcmpHash::kCrc16);
  EXPECT_FALSE(parse_ecmp_hash("md5"));
}

// h0 and h1 on one switch; one WRITE from h0 to h1.
struct Pair {
  Fabric f;
  explicit Pair(uint64_t seed = 1, LinkSpec l = {}) : f(seed) {
    HostConfig hc;
    hc.rate_bps = l.rate_bps;
    f.add_host("h0", hc);
    f.add_host("h1", hc);
    f.add_switch("s0", SwitchConfig{});
    f.connect({NodeRef::Kind::kHost, 0}, {NodeRef::Kind::kSwitch, 0}, l);
    f.connect({NodeRef::Kind::kHost, 1}, {NodeRef::Kind::kSwitch, 0}, l);
    f.compute_routes();
  }
};

TEST(Fabric, AWriteCompletesAtTheLinksSpeed) {
  Pair p;
  FlowSpec s;
  s.src = 0;
  s.dst = 1;
  s.msg_bytes = 1 << 20;
  s.messages = 1;
  Flow& fl = p.f.add_flow(s);
  p.f.run(10 * kMs, true);
  ASSERT_TRUE(fl.done());
  EXPECT_EQ(fl.goodput_bytes(), 1u << 20);
  // 1024 packets of 1 KiB: 1106 bytes of link time each (BTH 12, ICRC 4, UDP/IP 28, Ethernet 18,
  // preamble and gap 20; the first carries a RETH too) at 40 Gb/s, plus two hops of 1 µs, the
  // second link's last frame and the ACK's way back.
  const double ideal_ns = 1024 * 1106 * 8 / 40.0 + 16 * 8 / 40.0;
  const double fct = double(fl.messages()[0].second - fl.messages()[0].first);
  EXPECT_GT(fct, ideal_ns);
  EXPECT_LT(fct, ideal_ns + 6000);
  EXPECT_EQ(p.f.host(0).qp_totals().retransmitted_pkts, 0u);
  EXPECT_EQ(p.f.host(1).counters().rcvd_icrc_err.get(), 0u);
  EXPECT_EQ(p.f.host(0).overdue_passes() + p.f.host(1).overdue_passes(), 0u);
}

TEST(Fabric, RerunsAreBitIdentical) {
  auto run = [](uint64_t seed) {
    Pair p(seed);
    for (int i = 0; i < 2; ++i) {
      FlowSpec s;
      s.src = 0;
      s.dst = 1;
      s.msg_bytes = 200'000;
      s.messages = 5;
      s.start = Time(i) * 3 * kUs;
      p.f.add_flow(s);
    }
    p.f.run(10 * kMs, true);
    std::vector<Time> out{p.f.queue().now(), p.f.queue().events_run()};
    for (auto& fl : p.f.flows())
      for (auto [a, b] : fl->messages()) out.push_back(b);
    return out;
  };
  EXPECT_EQ(run(1), run(1));
}

TEST(Fabric, TwoQpsOfOneHostShareItsLinkEvenly) {
  Pair p;
  for (int i = 0; i < 2; ++i) {
    FlowSpec s;
    s.src = 0;
    s.dst = 1;
    s.msg_bytes = 64 * 1024;
    s.depth = 4;
    s.stop = 2 * kMs;
    p.f.add_flow(s);
  }
  p.f.run(2 * kMs);
  const double a = double(p.f.flows()[0]->goodput_bytes());
  const double b = double(p.f.flows()[1]->goodput_bytes());
  EXPECT_GT(a + b, 0.9 * 2e-3 * 40e9 / 8 * 1024 / 1106);
  EXPECT_NEAR(a / (a + b), 0.5, 0.02);
}

// A link capture is a pcap of Ethernet frames with virtual timestamps whose every RoCE record
// carries a valid ICRC, and whose PAUSE frames are 802.1Qbb MAC control frames.
TEST(Capture, EthernetFramesInVirtualTimeWithValidIcrcs) {
  const std::string path = ::testing::TempDir() + "/sim_capture_test.pcap";
  Fabric f(1);
  HostConfig hc;
  // Appended: `"h" + std::to_string(i)` draws a bogus -Wrestrict from gcc 12 at -O3 here (GCC
  // bug 105329).
  for (int i = 0; i < 3; ++i) f.add_host(std::string("h").append(std::to_string(i)), hc);
  SwitchConfig sc;
  sc.pfc = PfcConfig{.enabled = true, .xoff = 8 * 1024, .xon = 4 * 1024};
  f.add_switch("s0", sc);
  for (uint32_t i = 0; i < 3; ++i)
    f.connect({NodeRef::Kind::kHost, i}, {NodeRef::Kind::kSwitch, 0}, {});
  f.compute_routes();
  for (uint32_t i = 0; i < 2; ++i) {
    FlowSpec s;
    s.src = i;
    s.dst = 2;
    s.msg_bytes = 256 * 1024;
    s.messages = 1;
    f.add_flow(s);
  }
  const FabricLink& l = f.links()[0];  // h0-s0
  std::string err;
  auto cap = LinkCapture::open(path, *l.ab, *l.ba, 0, 3, &err);
  ASSERT_TRUE(cap) << err;
  f.run(10 * kMs, true);
  cap.reset();
  std::ifstream in(path, std::ios::binary);
  const std::vector<uint8_t> b((std::istreambuf_iterator<char>(in)),
                               std::istreambuf_iterator<char>());
  ASSERT_GE(b.size(), 24u);
  auto u32 = [&](size_t o) {
    return uint32_t(b[o]) | uint32_t(b[o + 1]) << 8 | uint32_t(b[o + 2]) << 16 |
           uint32_t(b[o + 3]) << 24;
  };
  EXPECT_EQ(u32(0), 0xa1b23c4du);  // nanosecond pcap
  EXPECT_EQ(u32(20), 1u);          // LINKTYPE_ETHERNET
  size_t roce = 0, pauses = 0;
  uint64_t last_ts = 0;
  for (size_t o = 24; o + 16 <= b.size();) {
    const uint64_t ts = uint64_t(u32(o)) * 1'000'000'000u + u32(o + 4);
    const uint32_t len = u32(o + 8);
    ASSERT_LE(o + 16 + len, b.size());
    const uint8_t* fr = b.data() + o + 16;
    EXPECT_GE(ts, last_ts);  // virtual time, in order
    EXPECT_LT(ts, 10 * kMs);
    last_ts = ts;
    const uint16_t type = uint16_t(fr[12] << 8 | fr[13]);
    if (type == 0x0800) {
      ++roce;
      const std::span<const uint8_t> ip(fr + 14, len - 14 - 4);
      EXPECT_EQ(wire::icrc_ipv4(ip), wire::load_le32(fr + len - 4)) << "record at " << o;
    } else {
      ASSERT_EQ(type, 0x8808);
      EXPECT_EQ(fr[14], 0x01);  // opcode 0x0101: PFC
      EXPECT_EQ(fr[15], 0x01);
      EXPECT_EQ(fr[17], 1u << 3);  // class 3
      ++pauses;
    }
    o += 16 + len;
  }
  EXPECT_GT(roce, 256u);  // the WRITE's packets and the ACKs back
  EXPECT_GT(pauses, 0u);
  std::remove(path.c_str());
}

}  // namespace
}  // namespace uroce::sim

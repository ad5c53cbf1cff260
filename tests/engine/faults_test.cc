// Fault injection: the injector alone (each fault kind at a fixed seed, determinism, the
// `loss=p,seed=n` stream kept from before), the UROCE_FAULTS syntax, and two Devices on loopback
// exchanging RC SENDs under every fault kind, each message arriving once, in order, byte-exact.
#include "engine/faults.h"

#include <gtest/gtest.h>

#include <arpa/inet.h>

#include <chrono>
#include <cstring>
#include <map>
#include <set>
#include <thread>

#include "engine/config.h"
#include "engine/device.h"
#include "rc_side.h"
#include "test_util.h"

namespace uroce {
namespace {

using namespace std::chrono_literals;
using test::config;
using test::connect;
using test::loopback;
using test::poll_n;
using test::Side;

// A frame whose bytes encode its sequence number (and are long enough to corrupt).
FaultFrame frame(uint32_t seq, size_t len = 64) {
  FaultFrame f;
  f.bytes.assign(len, 0);
  std::memcpy(f.bytes.data(), &seq, sizeof seq);
  for (size_t i = sizeof seq; i < len; ++i) f.bytes[i] = static_cast<uint8_t>(i * 13 + seq);
  return f;
}
uint32_t seq_of(const FaultFrame& f) {
  uint32_t s;
  std::memcpy(&s, f.bytes.data(), sizeof s);
  return s;
}

struct Counters {
  Counter drops, burst, corrupted, dup, reordered, delayed;
  FaultCounterRefs refs() { return {&drops, &burst, &corrupted, &dup, &reordered, &delayed}; }
};

// Offers frames 0..n-1 at 1 us intervals, then releases everything still held; returns what came
// out, in order.
std::vector<FaultFrame> run(FaultInjector& inj, uint32_t n) {
  std::vector<FaultFrame> out;
  transport::Time t = 1'000'000;
  for (uint32_t i = 0; i < n; ++i, t += 1000) inj.offer(frame(i), t, out);
  inj.release_due(t + 20'000'000'000ull, out);
  EXPECT_EQ(inj.held(), 0u);
  return out;
}

std::vector<uint32_t> seqs(const std::vector<FaultFrame>& v) {
  std::vector<uint32_t> s;
  for (const auto& f : v) s.push_back(seq_of(f));
  return s;
}

TEST(FaultInjectorTest, LossKeepsTheStreamOfThePreviousReceiveLoss) {
  // The receive loss drew one splitmix64 number per datagram and dropped when u < p: a seed must
  // still drop exactly the same datagrams.
  FaultSpec s;
  s.loss = 0.3;
  Counters c;
  FaultInjector inj(s, 7, c.refs());
  std::vector<FaultFrame> out;
  uint64_t st = 7;
  auto old_next = [&st] {
    uint64_t z = (st += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return static_cast<double>((z ^ (z >> 31)) >> 11) * 0x1.0p-53;
  };
  std::vector<uint32_t> expected;
  for (uint32_t i = 0; i < 1000; ++i) {
    inj.offer(frame(i), 1000 * i, out);
    if (!(old_next() < 0.3)) expected.push_back(i);
  }
  EXPECT_EQ(seqs(out), expected);
  EXPECT_EQ(c.drops.get(), 1000 - expected.size());
  EXPECT_GT(c.drops.get(), 250u);
  EXPECT_LT(c.drops.get(), 350u);
}

TEST(FaultInjectorTest, SameSeedSameDecisionsOtherSeedOthers) {
  FaultSpec s;
  s.loss = 0.05;
  s.burst = 0.02;
  s.corrupt = 0.05;
  s.dup = 0.05;
  s.reorder = 0.1;
  s.delay_ns = 5000;
  s.jitter_ns = 3000;
  Counters c1, c2, c3;
  FaultInjector a(s, 42, c1.refs()), b(s, 42, c2.refs()), other(s, 43, c3.refs());
  auto ra = run(a, 2000), rb = run(b, 2000), ro = run(other, 2000);
  ASSERT_EQ(ra.size(), rb.size());
  for (size_t i = 0; i < ra.size(); ++i) EXPECT_EQ(ra[i].bytes, rb[i].bytes) << i;
  EXPECT_NE(seqs(ra), seqs(ro));
  EXPECT_EQ(c1.drops.get(), c2.drops.get());
  // Conservation: out = in - dropped + duplicated.
  EXPECT_EQ(ra.size(), 2000 - c1.drops.get() + c1.dup.get());
}

TEST(FaultInjectorTest, BurstDropsRunsOfExactlyLen) {
  FaultSpec s;
  s.burst = 0.02;
  s.burst_len = 5;
  Counters c;
  FaultInjector inj(s, 3, c.refs());
  auto out = run(inj, 5000);
  std::vector<bool> passed(5000, false);
  for (uint32_t q : seqs(out)) passed[q] = true;
  // Every maximal run of drops is made of whole bursts (bursts can abut).
  size_t run_len = 0, runs = 0;
  for (size_t i = 0; i <= passed.size(); ++i) {
    if (i < passed.size() && !passed[i]) {
      ++run_len;
      continue;
    }
    if (run_len > 0) {
      EXPECT_EQ(run_len % 5, 0u) << "run ending at " << i;
      ++runs;
    }
    run_len = 0;
  }
  EXPECT_EQ(c.drops.get(), c.burst.get());
  EXPECT_EQ(c.drops.get() % 5, 0u);
  EXPECT_EQ(out.size(), 5000 - c.drops.get());
  // p = 0.02 per passing datagram: about 5000 / (1/0.02 + 5) ≈ 91 bursts.
  EXPECT_GT(runs, 50u);
  EXPECT_LT(runs, 140u);
  EXPECT_EQ(seqs(out), [&] {  // order kept
    auto v = seqs(out);
    std::sort(v.begin(), v.end());
    return v;
  }());
}

TEST(FaultInjectorTest, CorruptionFlipsExactlyTheConfiguredBitsOutsideResv8a) {
  FaultSpec s;
  s.corrupt = 0.2;
  s.corrupt_bits = 1;
  Counters c;
  FaultInjector inj(s, 9, c.refs());
  auto out = run(inj, 3000);
  ASSERT_EQ(out.size(), 3000u);
  size_t changed = 0;
  for (uint32_t q = 0; q < out.size(); ++q) {
    FaultFrame orig = frame(q);  // no drops, no reordering: out[q] is datagram q
    int bits = 0;
    for (size_t i = 0; i < orig.bytes.size(); ++i) {
      uint8_t d = out[q].bytes[i] ^ orig.bytes[i];
      bits += __builtin_popcount(d);
      EXPECT_TRUE(i != 4 || d == 0) << "resv8a (masked by the ICRC) flipped";
    }
    EXPECT_LE(bits, 1);
    changed += bits;
  }
  EXPECT_EQ(changed, c.corrupted.get());
  EXPECT_GT(c.corrupted.get(), 500u);
  EXPECT_LT(c.corrupted.get(), 700u);

  // With the real ICRC: every corrupted packet fails the receiver's check.
  FaultSpec all;
  all.corrupt = 1.0;
  all.corrupt_bits = 3;
  FaultInjector inj2(all, 5, c.refs());
  uint8_t pkt[256];
  std::vector<uint8_t> payload(100, 0xab);
  size_t n = test::build_packet(pkt, wire::Opcode::kRcSendOnly, 0x12, 7, payload);
  wire::Ipv4UdpFraming fr;
  fr.src_ip = loopback(45, 0, 1);
  fr.dst_ip = loopback(45, 0, 2);
  fr.dont_fragment = true;
  fr.src_port = 4791;
  fr.dst_port = 4791;
  wire::store_le32(pkt + n, wire::icrc(fr, {pkt, n}));
  for (int i = 0; i < 200; ++i) {
    FaultFrame f;
    f.bytes.assign(pkt, pkt + n + 4);
    std::vector<FaultFrame> o;
    inj2.offer(std::move(f), 0, o);
    ASSERT_EQ(o.size(), 1u);
    uint16_t id;
    EXPECT_FALSE(wire::icrc_matches_some_ip_id(fr, {o[0].bytes.data(), n},
                                               wire::load_le32(o[0].bytes.data() + n), &id))
        << "corruption " << i << " went unnoticed";
  }
}

TEST(FaultInjectorTest, DuplicatesFollowTheirOriginal) {
  FaultSpec s;
  s.dup = 0.1;
  Counters c;
  FaultInjector inj(s, 11, c.refs());
  auto v = seqs(run(inj, 2000));
  EXPECT_EQ(v.size(), 2000 + c.dup.get());
  EXPECT_GT(c.dup.get(), 150u);
  EXPECT_LT(c.dup.get(), 250u);
  size_t pairs = 0;
  for (size_t i = 1; i < v.size(); ++i) {
    EXPECT_LE(v[i - 1], v[i]);
    pairs += v[i - 1] == v[i];
  }
  EXPECT_EQ(pairs, c.dup.get());
}

TEST(FaultInjectorTest, ReorderHoldsAtMostDepthDatagrams) {
  FaultSpec s;
  s.reorder = 0.1;
  s.reorder_depth = 3;
  Counters c;
  FaultInjector inj(s, 13, c.refs());
  std::vector<FaultFrame> out;
  for (uint32_t i = 0; i < 3000; ++i) inj.offer(frame(i), 1000 * i, out);  // 1 us apart
  inj.release_due(transport::kNever - 1, out);
  auto v = seqs(out);
  ASSERT_EQ(v.size(), 3000u);
  auto sorted = v;
  std::sort(sorted.begin(), sorted.end());
  for (uint32_t i = 0; i < 3000; ++i) ASSERT_EQ(sorted[i], i);  // a permutation
  size_t late = 0;
  for (size_t pos = 0; pos < v.size(); ++pos) {
    // Overtaken by at most depth later datagrams, plus those released at the same moment.
    EXPECT_LE(static_cast<int64_t>(pos) - static_cast<int64_t>(v[pos]), 6) << v[pos];
    late += pos > v[pos];
  }
  EXPECT_GT(c.reordered.get(), 200u);
  EXPECT_LT(c.reordered.get(), 400u);
  EXPECT_GE(late, c.reordered.get() / 2);
}

TEST(FaultInjectorTest, ReorderedDatagramIsReleasedByTheHoldLimitWhenNothingFollows) {
  FaultSpec s;
  s.reorder = 1.0;
  Counters c;
  FaultInjector inj(s, 1, c.refs());
  std::vector<FaultFrame> out;
  inj.offer(frame(0), 5000, out);
  EXPECT_TRUE(out.empty());
  EXPECT_EQ(inj.next_deadline(), 5000 + FaultInjector::kReorderMaxHoldNs);
  inj.release_due(5000 + FaultInjector::kReorderMaxHoldNs - 1, out);
  EXPECT_TRUE(out.empty());
  inj.release_due(5000 + FaultInjector::kReorderMaxHoldNs, out);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(inj.next_deadline(), transport::kNever);
}

TEST(FaultInjectorTest, DelayHoldsEveryDatagramAndKeepsOrder) {
  FaultSpec s;
  s.delay_ns = 100'000;
  s.jitter_ns = 50'000;
  Counters c;
  FaultInjector inj(s, 17, c.refs());
  std::vector<FaultFrame> out;
  for (uint32_t i = 0; i < 100; ++i) inj.offer(frame(i), 1000 * i, out);
  EXPECT_TRUE(out.empty());
  EXPECT_EQ(inj.held(), 100u);
  EXPECT_GE(inj.next_deadline(), 100'000u);
  EXPECT_LT(inj.next_deadline(), 150'000u);
  inj.release_due(99'999, out);
  EXPECT_TRUE(out.empty());
  inj.release_due(1000 * 99 + 150'000, out);  // the last one's latest due time
  EXPECT_EQ(out.size(), 100u);
  auto v = seqs(out);
  EXPECT_TRUE(std::is_sorted(v.begin(), v.end()));
  EXPECT_EQ(c.delayed.get(), 100u);
  EXPECT_EQ(inj.next_deadline(), transport::kNever);
}

// --- UROCE_FAULTS syntax ---

void expect_error(const std::string& spec, const std::string& token) {
  std::string err;
  EXPECT_FALSE(parse_faults(spec, &err).has_value()) << spec;
  EXPECT_NE(err.find("UROCE_FAULTS"), std::string::npos) << err;
  EXPECT_NE(err.find(token), std::string::npos) << "'" << token << "' not in: " << err;
}

// An injector that only marks CE, with probability p, counting into `set`.
FaultInjector ce_injector(double p, uint64_t seed, Counter& set) {
  FaultSpec s;
  s.ce = p;
  FaultCounterRefs r;
  r.ce_set = &set;
  return FaultInjector(s, seed, r);
}

// rx.ce sets CE whatever the ECN field held (Not-ECT included: a remarking middlebox), counts
// what it changed, and leaves the rest of the datagram alone.
TEST(FaultInjectorTest, CeMarksEveryEcnCodepoint) {
  Counter set;
  FaultInjector inj = ce_injector(1.0, 1, set);
  std::vector<FaultFrame> out;
  for (uint8_t ecn = 0; ecn < 4; ++ecn) {
    FaultFrame f = frame(ecn);
    f.tos = static_cast<uint8_t>(26 << 2 | ecn);
    inj.offer(std::move(f), 1000, out);
  }
  ASSERT_EQ(out.size(), 4u);
  for (uint8_t ecn = 0; ecn < 4; ++ecn) {
    EXPECT_EQ(out[ecn].tos, 26 << 2 | transport::kEcnCe) << int(ecn);  // the DSCP kept
    EXPECT_EQ(out[ecn].bytes, frame(ecn).bytes);
  }
  EXPECT_EQ(set.get(), 3u);  // the one already CE is not counted
  // A fraction: about that many of 10 000 (binomial, sd 50).
  Counter n;
  FaultInjector h = ce_injector(0.5, 7, n);
  out.clear();
  for (uint32_t i = 0; i < 10000; ++i) h.offer(frame(i), 1000 + i, out);
  EXPECT_NEAR(double(n.get()), 5000.0, 300.0);
  auto parsed = parse_faults("rx.ce=0.25", nullptr);
  ASSERT_TRUE(parsed.has_value());
  EXPECT_DOUBLE_EQ(parsed->rx.ce, 0.25);
  EXPECT_TRUE(parsed->rx_spec().enabled());
}

TEST(FaultConfigTest, ParsesEveryKindAndDirection) {
  std::string err;
  auto f = parse_faults(
      "rx.loss=0.01,tx.dup=0.02,reorder=0.05:depth=7,burst=0.001:len=8,tx.corrupt=0.1:bits=2,"
      "tx.delay=1.5ms:jitter=200us,seed=7",
      &err);
  ASSERT_TRUE(f.has_value()) << err;
  EXPECT_DOUBLE_EQ(f->rx_loss, 0.01);
  EXPECT_DOUBLE_EQ(f->rx_spec().loss, 0.01);
  EXPECT_DOUBLE_EQ(f->tx.dup, 0.02);
  EXPECT_DOUBLE_EQ(f->rx.reorder, 0.05);
  EXPECT_EQ(f->rx.reorder_depth, 7u);
  EXPECT_DOUBLE_EQ(f->rx.burst, 0.001);
  EXPECT_EQ(f->rx.burst_len, 8u);
  EXPECT_DOUBLE_EQ(f->tx.corrupt, 0.1);
  EXPECT_EQ(f->tx.corrupt_bits, 2u);
  EXPECT_EQ(f->tx.delay_ns, 1'500'000u);
  EXPECT_EQ(f->tx.jitter_ns, 200'000u);
  EXPECT_EQ(f->seed, 7u);
  EXPECT_TRUE(f->enabled());
  EXPECT_FALSE(f->rx.dup > 0.0);

  f = parse_faults("loss=0.05,seed=7", &err);  // as before: receive loss only
  ASSERT_TRUE(f.has_value()) << err;
  EXPECT_DOUBLE_EQ(f->rx_loss, 0.05);
  EXPECT_FALSE(f->tx.enabled());
  f = parse_faults("tx.delay=20us", &err);
  ASSERT_TRUE(f.has_value()) << err;
  EXPECT_EQ(f->tx.delay_ns, 20'000u);
  EXPECT_FALSE(f->rx_spec().enabled());
  EXPECT_TRUE(f->enabled());
  f = parse_faults("delay=3s, reorder = 0.5", &err);
  ASSERT_TRUE(f.has_value()) << err;
  EXPECT_EQ(f->rx.delay_ns, 3'000'000'000u);
  EXPECT_EQ(f->rx.reorder_depth, 3u);  // default
}

TEST(FaultConfigTest, RejectsMalformedValuesNamingTheToken) {
  expect_error("tx.loss=2", "tx.loss '2' is out of range");
  expect_error("dup=x", "dup 'x' is not a number");
  expect_error("reorder=0.1:depth=0", "reorder:depth '0' is out of range");
  expect_error("reorder=0.1:depth=abc", "'abc'");
  expect_error("reorder=0.1:deep=3", "unknown key 'reorder:deep' (known: reorder:depth)");
  expect_error("reorder=0.1:depth=2:depth=3", "key 'reorder:depth' given twice");
  expect_error("reorder=0.1:depth", "'reorder:depth' is not key=value");
  expect_error("burst=0.1:len=100000", "'100000'");
  expect_error("corrupt=0.1:bits=65", "'65' is out of range");
  expect_error("loss=0.1:len=3", "key 'loss:len' applies to burst, not loss");
  expect_error("delay=5", "delay '5' needs a unit");
  expect_error("delay=5ks", "'5ks'");
  expect_error("delay=ms", "'ms' is not a duration");
  expect_error("delay=11s", "'11s' is out of range");
  expect_error("tx.delay=1ms:jitter=-1us", "'-1us'");
  expect_error("tx.jump=0.1", "unknown key 'tx.jump'");
  expect_error("up.loss=0.1", "unknown key 'up.loss'");
  expect_error("loss=0.1,rx.loss=0.2", "key 'rx.loss' given twice (first as 'loss')");
  expect_error("tx.dup=0.1,tx.dup=0.1", "'tx.dup' given twice");
  expect_error("ce=1.5", "ce '1.5' is out of range");
  expect_error("tx.ce=0.1", "key 'tx.ce' applies to rx, not tx");
  expect_error("tx.seed=3", "unknown key 'tx.seed'");
}

// --- End to end: two Devices, RC SENDs under each fault kind ---

// A sends kMsgs messages of kLen bytes (3 packets each) to B, both devices with `faults`; checks
// every message completes once, in order, byte-exact. Returns the two devices' counters' sum
// through `total` (name → value) for the caller's fault-specific checks.
void exchange(uint8_t sub, const std::string& spec, std::map<std::string, uint64_t>* total) {
  constexpr size_t kMsgs = 40, kLen = 2500;
  std::string err;
  auto faults = parse_faults(spec, &err);
  ASSERT_TRUE(faults.has_value()) << err;
  Side a, b;
  ASSERT_TRUE(a.setup(config("fa", loopback(45, sub, 1), *faults), kMsgs * kLen));
  ASSERT_TRUE(b.setup(config("fb", loopback(45, sub, 2), *faults), kMsgs * kLen));
  // 67 ms retransmission timeout, 7 retries: a budget of half a second of silence, which a
  // sanitizer build on a loaded 2-core machine can need; the faults here are recovered by NAKs
  // far more often than by timeouts, so the runs stay short.
  connect(a, b, 14);
  connect(b, a, 14);
  for (size_t i = 0; i < a.buf.size(); ++i) a.buf[i] = static_cast<uint8_t>(i * 31 + i / 251);
  for (size_t i = 0; i < kMsgs; ++i) {
    transport::RecvWqe w;
    w.wr_id = 1000 + i;
    w.num_sge = 1;
    w.sge[0] = {reinterpret_cast<uintptr_t>(b.buf.data() + i * kLen), kLen, b.lkey};
    size_t bad;
    ASSERT_EQ(b.dev->post_recv(b.qp, &w, 1, &bad), 0);
  }
  for (size_t i = 0; i < kMsgs; ++i) {
    transport::SendWqe w;
    w.wr_id = i;
    w.opcode = IBV_WR_SEND;
    w.send_flags = IBV_SEND_SIGNALED;
    w.num_sge = 1;
    w.sge[0] = {reinterpret_cast<uintptr_t>(a.buf.data() + i * kLen), kLen, a.lkey};
    size_t bad;
    ASSERT_EQ(a.dev->post_send(a.qp, &w, 1, &bad), 0);
  }
  auto rwc = poll_n(*b.rcq, kMsgs, 20000ms);
  if (rwc.size() != kMsgs) {
    // Say why: the sender's completions (an error status names the cause) and the counters.
    std::string why;
    for (const ibv_wc& wc : poll_n(*a.scq, kMsgs, 10ms))
      if (wc.status != IBV_WC_SUCCESS)
        why += " send " + std::to_string(wc.wr_id) + ": status " + std::to_string(wc.status) + ";";
    for (Side* s : {&a, &b})
      s->dev->counters().for_each([&](const char* name, uint64_t v) {
        if (v) why += std::string(" ") + name + "=" + std::to_string(v);
      });
    transport::QpCounters q = a.qp->counters();
    why += " | sender: retransmitted " + std::to_string(q.retransmitted_pkts) + ", timeouts " +
           std::to_string(q.local_ack_timeout_err) + ", retry_exceeded " +
           std::to_string(q.retry_exceeded_err);
    FAIL() << spec << ": " << rwc.size() << " of " << kMsgs << " messages arrived;" << why;
  }
  for (size_t i = 0; i < kMsgs; ++i) {
    EXPECT_EQ(rwc[i].status, IBV_WC_SUCCESS) << spec << " status " << rwc[i].status;
    EXPECT_EQ(rwc[i].wr_id, 1000 + i) << spec;
    EXPECT_EQ(rwc[i].byte_len, kLen) << spec;
  }
  auto swc = poll_n(*a.scq, kMsgs, 20000ms);
  ASSERT_EQ(swc.size(), kMsgs) << spec;
  for (size_t i = 0; i < kMsgs; ++i) {
    EXPECT_EQ(swc[i].status, IBV_WC_SUCCESS) << spec << " status " << swc[i].status;
    EXPECT_EQ(swc[i].wr_id, i) << spec;
  }
  EXPECT_EQ(a.buf, b.buf) << spec;
  // Exactly once: nothing more completes.
  std::this_thread::sleep_for(20ms);
  ibv_wc extra[4];
  EXPECT_EQ(b.rcq->poll(4, extra), 0) << spec;
  EXPECT_EQ(a.scq->poll(4, extra), 0) << spec;
  for (Side* s : {&a, &b})
    s->dev->counters().for_each([&](const char* name, uint64_t v) { (*total)[name] += v; });
}

// One message in flight at a time, both ways, with the polling thread driving progress as a
// verbs application's ibv_poll_cq does: held datagrams must be released on time by whichever
// thread receives, never by a retransmission timeout.
TEST(FaultsPingPongTest, DelayedDatagramsNeverWaitForATimeout) {
  for (const char* spec : {"delay=100us", "tx.delay=100us:jitter=50us"}) {
    SCOPED_TRACE(spec);
    constexpr size_t kIters = 100, kLen = 4096;
    std::string err;
    auto faults = parse_faults(spec, &err);
    ASSERT_TRUE(faults.has_value()) << err;
    uint8_t sub = spec[0] == 't' ? 101 : 100;
    Side a, b;
    // What is tested is that the delay line releases every datagram on time, so that no timer
    // fires: early retransmission (a probe after a few ms without an ACK) would fire whenever
    // the loaded machine deschedules a peer for that long, so only the IBTA timer is armed.
    DeviceConfig ca = config("fa", loopback(45, sub, 1), *faults);
    DeviceConfig cb = config("fb", loopback(45, sub, 2), *faults);
    ca.early_retransmit = cb.early_retransmit = false;
    ASSERT_TRUE(a.setup(ca, kLen));
    ASSERT_TRUE(b.setup(cb, kLen));
    // 1.07 s: a packet the delay line forgot would wait for it and show in the counters, while a
    // loaded machine descheduling the test for tens of milliseconds would not.
    connect(a, b, 18);
    connect(b, a, 18);
    auto post = [&](Side& s, bool send) {
      size_t bad;
      if (send) {
        transport::SendWqe w;
        w.opcode = IBV_WR_SEND;
        w.send_flags = IBV_SEND_SIGNALED;
        w.num_sge = 1;
        w.sge[0] = {reinterpret_cast<uintptr_t>(s.buf.data()), kLen, s.lkey};
        ASSERT_EQ(s.dev->post_send(s.qp, &w, 1, &bad), 0);
      } else {
        transport::RecvWqe w;
        w.num_sge = 1;
        w.sge[0] = {reinterpret_cast<uintptr_t>(s.buf.data()), kLen, s.lkey};
        ASSERT_EQ(s.dev->post_recv(s.qp, &w, 1, &bad), 0);
      }
    };
    auto wait = [&](Side& s, Cq& cq) {
      ibv_wc wc;
      auto end = std::chrono::steady_clock::now() + 5s;
      while (std::chrono::steady_clock::now() < end) {
        if (cq.poll(1, &wc) == 1) return wc.status == IBV_WC_SUCCESS;
        s.dev->poll_progress();
      }
      return false;
    };
    // A round trip waits for four delayed deliveries (data and ACK each way, < 0.6 ms in all),
    // far below the 1.07 s retransmission timeout: the delay line must release every packet on
    // time, so no timer may fire and nothing may be resent. The counters prove it; wall time
    // would only measure how loaded the machine is.
    for (size_t i = 0; i < kIters; ++i) {
      post(b, false);
      post(a, true);
      ASSERT_TRUE(wait(b, *b.rcq)) << i;
      ASSERT_TRUE(wait(a, *a.scq)) << i;
      post(a, false);
      post(b, true);
      ASSERT_TRUE(wait(a, *a.rcq)) << i;
      ASSERT_TRUE(wait(b, *b.scq)) << i;
    }
    EXPECT_EQ(a.qp->counters().local_ack_timeout_err + b.qp->counters().local_ack_timeout_err, 0u);
    EXPECT_EQ(a.qp->counters().retransmitted_pkts + b.qp->counters().retransmitted_pkts, 0u);
    const char* held = spec[0] == 't' ? "fault_tx_delayed" : "fault_rx_delayed";
    uint64_t delayed = 0;
    for (Side* s : {&a, &b})
      s->dev->counters().for_each([&](const char* name, uint64_t v) {
        if (std::string(name) == held) delayed += v;
      });
    EXPECT_GE(delayed, kIters * 2 * 5);  // 4 data packets and an ACK each way, at least
  }
}

struct E2eCase {
  uint8_t sub;  // addresses 127.45.<sub>.1 and .2
  const char* spec;
  std::vector<const char*> nonzero;  // counters the faults must have moved
};

class FaultsE2eTest : public ::testing::TestWithParam<E2eCase> {};

TEST_P(FaultsE2eTest, EveryMessageArrivesOnceInOrderByteExact) {
  std::map<std::string, uint64_t> c;
  exchange(GetParam().sub, GetParam().spec, &c);
  for (const char* name : GetParam().nonzero) EXPECT_GT(c[name], 0u) << name;
  if (c["fault_rx_corrupted"] + c["fault_tx_corrupted"] > 0) {
    EXPECT_GT(c["rcvd_icrc_err"], 0u);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Kinds, FaultsE2eTest,
    ::testing::Values(
        E2eCase{1, "loss=0.1,seed=7", {"fault_drops"}},
        E2eCase{2, "tx.loss=0.1,seed=7", {"fault_tx_drops"}},
        E2eCase{3, "burst=0.03:len=4,seed=5", {"fault_rx_burst_drops"}},
        E2eCase{4, "tx.burst=0.03:len=4,seed=5", {"fault_tx_burst_drops"}},
        E2eCase{5, "corrupt=0.1,seed=3", {"fault_rx_corrupted", "rcvd_icrc_err"}},
        E2eCase{6, "tx.corrupt=0.1:bits=2,seed=3", {"fault_tx_corrupted", "rcvd_icrc_err"}},
        E2eCase{7, "dup=0.2,seed=9", {"fault_rx_duplicated"}},
        E2eCase{8, "tx.dup=0.2,seed=9", {"fault_tx_duplicated"}},
        E2eCase{9, "reorder=0.2:depth=3,seed=2", {"fault_rx_reordered"}},
        E2eCase{10, "tx.reorder=0.2:depth=3,seed=2", {"fault_tx_reordered"}},
        E2eCase{11, "delay=200us:jitter=100us", {"fault_rx_delayed"}},
        E2eCase{12, "tx.delay=300us", {"fault_tx_delayed"}},
        E2eCase{13,
                "rx.loss=0.03,tx.dup=0.05,reorder=0.05:depth=3,burst=0.01:len=3,"
                "tx.corrupt=0.03,delay=50us:jitter=50us,tx.reorder=0.05,seed=7",
                {"fault_drops", "fault_tx_duplicated", "fault_rx_reordered", "fault_rx_delayed"}}),
    [](const ::testing::TestParamInfo<E2eCase>& info) {
      return "Case" + std::to_string(info.index);
    });

}  // namespace
}  // namespace uroce

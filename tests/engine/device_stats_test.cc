// A Device publishes its identity and counters for `uroce stats` (engine/stats_shm.h) while it is
// open, live, and removes the file when it closes; publishing never stops a device from opening.
#include <gtest/gtest.h>

#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <optional>
#include <string>
#include <thread>

#include "engine/device.h"
#include "engine/stats_shm.h"
#include "rc_side.h"
#include "test_util.h"
#include "transport/cc/parse.h"

namespace uroce {
namespace {

using namespace std::chrono_literals;
using test::loopback;
using test::PublishEnv;

DeviceConfig config(const std::string& name, uint32_t ip) {
  DeviceConfig c;
  c.name = name;
  c.ipv4 = ip;
  c.netdev = "lo";
  return c;
}

std::string path_of(const std::string& device) {
  return std::string(stats_shm::kShmDir) + stats_shm::shm_name(getpid(), device);
}

uint64_t value(const stats_shm::Snapshot& s, const std::string& name) {
  for (const auto& [n, v] : s.counters)
    if (n == name) return v;
  ADD_FAILURE() << "no counter " << name;
  return 0;
}

TEST(DeviceStatsTest, PublishesLiveCountersWhileOpen) {
  PublishEnv env(nullptr);
  std::string name = "st" + std::to_string(getpid());
  std::string err;
  auto dev = Device::open(config(name, loopback(71, 1, 1)), &err);
  ASSERT_NE(dev, nullptr) << err;
  std::string path = path_of(name);
  auto s = stats_shm::read_file(path, &err);
  ASSERT_TRUE(s) << err;
  EXPECT_EQ(s->id.pid, getpid());
  EXPECT_EQ(s->id.device, name);
  EXPECT_EQ(s->id.ip, wire::IpAddr(loopback(71, 1, 1)));
  EXPECT_EQ(s->id.netdev, "lo");
  EXPECT_EQ(s->id.mtu, dev->mtu_bytes());
  EXPECT_EQ(s->port_state, stats_shm::kPortActive);
  EXPECT_TRUE(stats_shm::publisher_alive(s->id));
  // Every device counter and every QP total is there, by name.
  size_t n = 0;
  dev->counters().for_each([&](const char* c, uint64_t) {
    EXPECT_NO_FATAL_FAILURE(value(*s, c));
    ++n;
  });
  EXPECT_GE(s->counters.size(), n + 18);
  EXPECT_EQ(value(*s, "retransmitted_pkts"), 0u);

  // A datagram to the device's port: the device counts it, and the file shows the count without
  // the device doing anything more (its counters live in the mapping).
  int fd = socket(AF_INET, SOCK_DGRAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_in to{};
  to.sin_family = AF_INET;
  to.sin_port = htons(4791);
  to.sin_addr.s_addr = htonl(loopback(71, 1, 1));
  char junk[4] = {};  // shorter than a BTH: a counted drop
  ASSERT_EQ(sendto(fd, junk, sizeof junk, 0, reinterpret_cast<sockaddr*>(&to), sizeof to), 4);
  close(fd);
  for (int i = 0; i < 200 && dev->counters().rx_too_short.get() == 0; ++i)
    std::this_thread::sleep_for(5ms);
  ASSERT_EQ(dev->counters().rx_too_short.get(), 1u);
  s = stats_shm::read_file(path, &err);
  ASSERT_TRUE(s) << err;
  EXPECT_EQ(value(*s, "rx_too_short"), 1u);
  EXPECT_EQ(value(*s, "rcvd_pkts"), dev->counters().rcvd_pkts.get());

  dev.reset();
  EXPECT_NE(access(path.c_str(), F_OK), 0) << "the file outlives its device";
}

// With congestion control on, every RC QP's reaction point (rate, alpha) is published in the
// ccqpNN_* slots, lowest QPN first (docs/congestion-control.md, "Counters"); without, none is.
TEST(DeviceStatsTest, PublishesEachQpsRateAndAlphaWithCongestionControl) {
  PublishEnv env(nullptr);
  for (bool cc_on : {true, false}) {
    SCOPED_TRACE(cc_on ? "dcqcn" : "none");
    std::string name = std::string(cc_on ? "sc" : "sn") + std::to_string(getpid());
    DeviceConfig c = config(name, loopback(71, 1, cc_on ? 6 : 7));
    std::string err;
    if (cc_on) c.cc = *transport::cc::parse_cc("dcqcn", &err);
    auto dev = Device::open(c, &err);
    ASSERT_NE(dev, nullptr) << err;
    test::Side a, b;
    // a and b borrow dev, which outlives them: their QPs must go before their CQs do, as
    // ibv_destroy_cq refuses (EBUSY) while a QP completes into the CQ — otherwise the engine
    // thread may still be inside a push to a CQ being destroyed (TSan: vptr race).
    struct DropQps {
      Device& d;
      test::Side& a;
      test::Side& b;
      ~DropQps() {
        for (test::Side* s : {&a, &b})
          if (s->qp != nullptr) {
            EXPECT_EQ(d.destroy_qp(s->qp), 0);
          }
      }
    } drop{*dev, a, b};
    ASSERT_TRUE(a.attach(*dev, 4096));
    ASSERT_TRUE(b.attach(*dev, 4096));
    const uint32_t lo = std::min(a.qp->qpn(), b.qp->qpn()), hi = std::max(a.qp->qpn(), b.qp->qpn());
    // One WRITE from a to b, so that a's slot counts packets sent.
    test::connect(a, b);
    test::connect(b, a);
    transport::SendWqe w;
    w.opcode = IBV_WR_RDMA_WRITE;
    w.send_flags = IBV_SEND_SIGNALED;
    w.num_sge = 1;
    w.sge[0] = {reinterpret_cast<uintptr_t>(a.buf.data()), 4096, a.lkey};
    w.remote_addr = reinterpret_cast<uintptr_t>(b.buf.data());
    w.rkey = b.rkey;
    size_t bad;
    ASSERT_EQ(dev->post_send(a.qp, &w, 1, &bad), 0);
    ASSERT_EQ(test::poll_n(*a.scq, 1, std::chrono::seconds(20)).size(), 1u);
    const std::string a_sent = stats_shm::cc_slot_name(a.qp->qpn() == lo ? 0 : 1, 3);
    // A snapshot is taken within kPublishInterval (100 ms) of a verb call: wait for one that
    // holds both QPs and a's WRITE.
    std::optional<stats_shm::Snapshot> s;
    for (int i = 0; i < 400; ++i) {
      s = stats_shm::read_file(path_of(name), &err);
      ASSERT_TRUE(s) << err;
      if (!cc_on || (value(*s, "ccqp01_qpn") != 0 && value(*s, a_sent) != 0)) break;
      ibv_qp_attr m{};
      m.qp_state = IBV_QPS_RESET;
      dev->modify_qp(b.qp, m, IBV_QP_STATE);  // a verb call: the device publishes
      std::this_thread::sleep_for(10ms);
    }
    if (!cc_on) {
      for (size_t slot = 0; slot < stats_shm::kCcQpSlots; ++slot)
        EXPECT_EQ(value(*s, stats_shm::cc_slot_name(slot, 0)), 0u) << "slot " << slot;
      continue;
    }
    EXPECT_EQ(value(*s, "ccqp00_qpn"), lo);
    EXPECT_EQ(value(*s, "ccqp01_qpn"), hi);
    EXPECT_EQ(value(*s, "ccqp02_qpn"), 0u);
    // Untouched by any CNP: at the line rate, alpha at its initial value.
    EXPECT_EQ(value(*s, "ccqp00_rate_kbps"), a.qp->cc_rate_bps() / 1000);
    EXPECT_GT(value(*s, "ccqp00_rate_kbps"), 0u);
    const double alpha = a.qp->cc_alpha(0);
    EXPECT_NEAR(double(value(*s, "ccqp00_alpha_ppm")) / 1e6, alpha, 1e-3);
    // a sent the WRITE's 4 KiB (1 packet or more, by the path MTU); b only ACKs.
    EXPECT_GE(value(*s, a_sent), 1u);
    uint64_t sent;
    {
      std::lock_guard<std::mutex> g(dev->lock());  // the engine thread owns the QP's counters
      sent = a.qp->counters().sent_pkts;
    }
    EXPECT_EQ(value(*s, a_sent), sent);
  }
}

TEST(StatsShmSlotNames, RoundTrip) {
  size_t slot = 99, field = 99;
  EXPECT_EQ(stats_shm::cc_slot_name(7, 1), "ccqp07_rate_kbps");
  EXPECT_TRUE(stats_shm::parse_cc_slot_name("ccqp63_alpha_ppm", &slot, &field));
  EXPECT_EQ(slot, 63u);
  EXPECT_EQ(field, 2u);
  EXPECT_FALSE(stats_shm::parse_cc_slot_name("ccqp64_qpn", &slot, &field));
  EXPECT_FALSE(stats_shm::parse_cc_slot_name("ccqp0x_qpn", &slot, &field));
  EXPECT_FALSE(stats_shm::parse_cc_slot_name("ccqp01_rate", &slot, &field));
  EXPECT_FALSE(stats_shm::parse_cc_slot_name("qp_sent_pkts", &slot, &field));
}

TEST(DeviceStatsTest, PublishZeroPublishesNothing) {
  PublishEnv env("0");
  std::string name = "sz" + std::to_string(getpid());
  std::string err;
  auto dev = Device::open(config(name, loopback(71, 1, 2)), &err);
  ASSERT_NE(dev, nullptr) << err;
  EXPECT_NE(access(path_of(name).c_str(), F_OK), 0);
}

TEST(DeviceStatsTest, DeviceOpensWhenItCannotPublish) {
  PublishEnv env(nullptr);
  // A name that cannot name a file: publishing fails, the device must still work.
  std::string err;
  auto dev = Device::open(config("bad/name", loopback(71, 1, 3)), &err);
  ASSERT_NE(dev, nullptr) << err;
  EXPECT_TRUE(dev->port_active());
  // And the second device of one name in a process: the first keeps its file.
  std::string name = "sd" + std::to_string(getpid());
  auto a = Device::open(config(name, loopback(71, 1, 4)), &err);
  ASSERT_NE(a, nullptr) << err;
  auto b = Device::open(config(name, loopback(71, 1, 5)), &err);
  ASSERT_NE(b, nullptr) << err;
  auto s = stats_shm::read_file(path_of(name), &err);
  ASSERT_TRUE(s) << err;
  EXPECT_EQ(s->id.ip, wire::IpAddr(loopback(71, 1, 4)));
  b.reset();  // not its file: it must not remove it
  EXPECT_TRUE(stats_shm::read_file(path_of(name), &err)) << err;
  a.reset();
  EXPECT_NE(access(path_of(name).c_str(), F_OK), 0);
}

}  // namespace
}  // namespace uroce

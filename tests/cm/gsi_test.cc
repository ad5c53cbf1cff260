// The GSI QP (src/cm/gsi.cc) on real engine Devices over loopback: QP1 exists once per device and
// carries MADs between two devices with the sender's address attached.
#include "cm/gsi.h"

#include <gtest/gtest.h>
#include <poll.h>

#include <algorithm>
#include <chrono>
#include <thread>

#include "engine/config.h"
#include "engine/device.h"

namespace uroce::cm {
namespace {

constexpr uint32_t kIpA = 0x7f002c01;  // 127.0.44.1
constexpr uint32_t kIpB = 0x7f002c02;

std::shared_ptr<Device> open_dev(const char* name, uint32_t ip) {
  DeviceConfig c;
  c.name = name;
  c.ipv4 = ip;
  c.netdev = "lo";
  std::string err;
  std::shared_ptr<Device> d = Device::open(c, &err);
  EXPECT_NE(d, nullptr) << err;
  return d;
}

TEST(Gsi, QpOneExistsOncePerDevice) {
  auto dev = open_dev("ga", kIpA);
  ASSERT_NE(dev, nullptr);
  int err = 0;
  auto g = Gsi::open(dev, &err);
  ASSERT_NE(g, nullptr) << err;
  EXPECT_EQ(Gsi::open(dev, &err), nullptr);
  EXPECT_EQ(err, EBUSY);
  // Asking the device directly: QP1 is taken.
  Cq cq(16, nullptr, nullptr);
  transport::QpInit init;
  init.type = IBV_QPT_RC;
  init.qpn = 1;
  init.pd = dev->alloc_pd();
  init.max_send_wr = init.max_recv_wr = 4;
  init.max_send_sge = init.max_recv_sge = 1;
  init.send_cq = init.recv_cq = &cq;
  EXPECT_EQ(dev->create_qp(init, &err), nullptr);
  EXPECT_EQ(err, EBUSY);
  // Ordinary QPs never get QPN 1.
  init.qpn = 0;
  transport::Qp* qp = dev->create_qp(init, &err);
  ASSERT_NE(qp, nullptr);
  EXPECT_GT(qp->qpn(), 1u);
  dev->destroy_qp(qp);
  dev->dealloc_pd(init.pd);
  g.reset();  // QP1 is free again
  EXPECT_NE(Gsi::open(dev, &err), nullptr);
}

TEST(Gsi, CarriesMadsBetweenDevices) {
  auto a = open_dev("gb", kIpA + 0x10);
  auto b = open_dev("gc", kIpB + 0x10);
  ASSERT_TRUE(a && b);
  int err = 0;
  auto ga = Gsi::open(a, &err);
  auto gb = Gsi::open(b, &err);
  ASSERT_TRUE(ga && gb);
  Mad m{};
  for (size_t i = 0; i < m.size(); ++i) m[i] = static_cast<uint8_t>(i);
  for (int i = 0; i < 3; ++i) ASSERT_EQ(ga->send(wire::IpAddr(kIpB + 0x10), m), 0);
  int got = 0;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (got < 3 && std::chrono::steady_clock::now() < deadline) {
    pollfd p{gb->fd(), POLLIN, 0};
    poll(&p, 1, 100);
    gb->poll([&](const wire::IpAddr& src, std::span<const uint8_t> mad) {
      EXPECT_EQ(src, wire::IpAddr(kIpA + 0x10));
      ASSERT_EQ(mad.size(), kMadBytes);
      EXPECT_EQ(mad[0], 0);
      EXPECT_EQ(mad[255], 255);
      ++got;
    });
    gb->rearm();
  }
  EXPECT_EQ(got, 3);
  EXPECT_EQ(ga->counters().sent, 3u);
  EXPECT_EQ(gb->counters().received, 3u);
}

// An IPv6 device (::1, the one IPv6 loopback address: the MADs go from its QP1 to itself): the
// source is read from the IPv6 header in the GRH area, not from where an IPv4 header would be.
TEST(Gsi, CarriesMadsOverIpv6) {
  DeviceConfig c;
  c.name = "g6";
  c.ipv6 = *wire::IpAddr::parse("::1");
  c.netdev = "lo";
  std::string why;
  std::shared_ptr<Device> d = Device::open(c, &why);
  if (!d) GTEST_SKIP() << "no IPv6 on lo: " << why;
  int err = 0;
  auto g = Gsi::open(d, &err);
  ASSERT_NE(g, nullptr) << err;
  // An RTU naming a communication ID of this process: other processes may share ::1 (the ipv6.*
  // tests), and the device's steering brings a CM message to the process whose ID it names.
  Rtu rtu;
  rtu.local_comm_id = 7;
  rtu.remote_comm_id = (d->port_share() ? d->port_share()->comm_id_base() : 0) | 1;
  Mad m{};
  ASSERT_TRUE(encode(rtu, 0x6b, m));
  ASSERT_EQ(g->send(c.ipv6, m), 0);
  int got = 0;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (got < 1 && std::chrono::steady_clock::now() < deadline) {
    pollfd p{g->fd(), POLLIN, 0};
    poll(&p, 1, 100);
    g->poll([&](const wire::IpAddr& src, std::span<const uint8_t> mad) {
      EXPECT_EQ(src, c.ipv6);
      EXPECT_TRUE(std::equal(mad.begin(), mad.end(), m.begin()));
      ++got;
    });
    g->rearm();
  }
  EXPECT_EQ(got, 1);
}

}  // namespace
}  // namespace uroce::cm

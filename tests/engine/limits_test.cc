// A device holds DeviceLimits::kMaxQp QPs (16384; issue 12, "Scale and endurance"), refuses the
// next with ENOMEM, and takes QPs again once some are destroyed. Device on 127.48.2.1.
#include <gtest/gtest.h>

#include <vector>

#include "engine/cq.h"
#include "engine/device.h"
#include "rc_side.h"
#include "test_util.h"

namespace uroce {
namespace {

TEST(LimitsTest, ADeviceHoldsMaxQpQueuePairs) {
  static_assert(DeviceLimits::kMaxQp >= 16384);
  // The CQ outlives the device, whose QPs complete into it until they go.
  CompChannel channel;
  Cq cq(1024, &channel, nullptr);
  auto dev = test::open_device(test::config("lim", test::loopback(48, 2, 1)));
  ASSERT_NE(dev, nullptr);
  transport::QpInit init;
  init.type = IBV_QPT_RC;
  init.pd = dev->alloc_pd();
  init.max_send_wr = init.max_recv_wr = 4;
  init.max_send_sge = init.max_recv_sge = 1;
  init.send_cq = init.recv_cq = &cq;
  std::vector<transport::Qp*> qps;
  qps.reserve(DeviceLimits::kMaxQp);
  int err = 0;
  for (uint32_t i = 0; i < DeviceLimits::kMaxQp; ++i) {
    transport::Qp* qp = dev->create_qp(init, &err);
    ASSERT_NE(qp, nullptr) << "QP " << i << ": errno " << err;
    qps.push_back(qp);
  }
  EXPECT_EQ(dev->qp_count(), DeviceLimits::kMaxQp);
  // QPNs are distinct and 24 bits wide.
  std::vector<bool> seen(1u << 24);
  for (transport::Qp* qp : qps) {
    ASSERT_LT(qp->qpn(), 1u << 24);
    EXPECT_FALSE(seen[qp->qpn()]) << qp->qpn();
    seen[qp->qpn()] = true;
  }
  EXPECT_EQ(dev->create_qp(init, &err), nullptr);
  EXPECT_EQ(err, ENOMEM);
  ASSERT_EQ(dev->destroy_qp(qps.back()), 0);
  qps.pop_back();
  transport::Qp* again = dev->create_qp(init, &err);
  ASSERT_NE(again, nullptr) << "errno " << err;
  qps.push_back(again);
  for (transport::Qp* qp : qps) ASSERT_EQ(dev->destroy_qp(qp), 0);
  EXPECT_EQ(dev->qp_count(), 0u);
}

}  // namespace
}  // namespace uroce

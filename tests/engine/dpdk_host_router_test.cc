// The DPDK host's book of its clients (dpdk_port/host_router.h): slots handed out and reused
// late, rdma_cm claims and their EADDRINUSE, and where each received datagram goes — the same
// decision as the kernel-UDP port's steering (share::destination_of), among live clients only.
#include "dpdk_port/host_router.h"

#include <gtest/gtest.h>

#include <cerrno>
#include <vector>

namespace uroce::dpdk::host {
namespace {

using share::kQpnSlotShift;
namespace off = share::offsets;

void put32(std::vector<uint8_t>& p, size_t at, uint32_t v) {
  for (size_t b = 0; b < 4; ++b) p[at + b] = static_cast<uint8_t>(v >> (24 - 8 * b));
}

std::vector<uint8_t> to_qp(uint32_t qpn) {
  std::vector<uint8_t> p(64, 0);
  p[off::kOpcode] = 0x04;  // RC SEND only
  put32(p, off::kDestQp, qpn);
  return p;
}

// A CM REQ (attribute 0x0010) on QP1 for the IP CM service of (port space, port).
std::vector<uint8_t> req(uint16_t space, uint16_t port) {
  std::vector<uint8_t> p(off::kServiceIdLow + 64, 0);
  p[off::kOpcode] = 0x64;  // UD SEND only
  put32(p, off::kDestQp, 1);
  p[off::kAttrId] = 0x00;
  p[off::kAttrId + 1] = 0x10;
  put32(p, off::kServiceIdLow, uint32_t{space} << 16 | port);
  return p;
}

TEST(DpdkHostRouterTest, SlotsAreHandedOutLowestFirstAndReusedLate) {
  Router r;
  EXPECT_EQ(r.join(), 0);
  EXPECT_EQ(r.join(), 1);
  EXPECT_EQ(r.join(), 2);
  r.leave(1);
  r.leave(0);
  // Never-used slots come before freed ones; among freed ones, the one freed longest ago.
  for (uint32_t s = 3; s < share::kSlots; ++s) EXPECT_EQ(r.join(), static_cast<int>(s));
  EXPECT_EQ(r.join(), 1);
  EXPECT_EQ(r.join(), 0);
  EXPECT_EQ(r.join(), -1);
  EXPECT_EQ(r.members(), share::kSlots);
}

TEST(DpdkHostRouterTest, ADatagramGoesToTheLiveClientOwningItsQp) {
  Router r;
  const int a = r.join(), b = r.join();
  const auto pa = to_qp(uint32_t(a) << kQpnSlotShift | 0x11);
  const auto pb = to_qp(uint32_t(b) << kQpnSlotShift | 0x12);
  EXPECT_EQ(r.route(pa.data(), pa.size()), a);
  EXPECT_EQ(r.route(pb.data(), pb.size()), b);
  // A slot nobody holds (its client died): dropped, never another client's.
  const auto stray = to_qp(7u << kQpnSlotShift | 0x11);
  EXPECT_EQ(r.route(stray.data(), stray.size()), -1);
  r.leave(uint32_t(b));
  EXPECT_EQ(r.route(pb.data(), pb.size()), -1);
  // Too short to tell.
  EXPECT_EQ(r.route(pa.data(), 3), -1);
}

TEST(DpdkHostRouterTest, ARequestGoesToItsListenerAndClaimsConflict) {
  Router r;
  const uint32_t a = uint32_t(r.join()), b = uint32_t(r.join());
  constexpr uint16_t kTcp = 0x0106;
  EXPECT_EQ(r.claim(a, kTcp, 7000), 0);
  EXPECT_EQ(r.claim(a, kTcp, 7000), 0);  // the same process again: counted
  EXPECT_EQ(r.claim(b, kTcp, 7000), EADDRINUSE);
  EXPECT_EQ(r.claim(b, kTcp, 7001), 0);
  const auto q = req(kTcp, 7000);
  EXPECT_EQ(r.route(q.data(), q.size()), -1);  // bound, not listening
  r.listen(a, kTcp, 7000, true);
  EXPECT_EQ(r.route(q.data(), q.size()), int(a));
  r.listen(b, kTcp, 7000, true);  // not b's: no effect
  EXPECT_EQ(r.route(q.data(), q.size()), int(a));
  r.release(a, kTcp, 7000);
  EXPECT_EQ(r.claim(b, kTcp, 7000), EADDRINUSE);  // one reference left
  r.release(a, kTcp, 7000);
  EXPECT_EQ(r.route(q.data(), q.size()), -1);
  // A client's death releases its claims at once.
  EXPECT_EQ(r.claim(a, kTcp, 7002), 0);
  r.leave(a);
  EXPECT_EQ(r.claim(b, kTcp, 7002), 0);
}

}  // namespace
}  // namespace uroce::dpdk::host

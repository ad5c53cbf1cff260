#include "engine/key_table.h"

#include <gtest/gtest.h>

#include <set>
#include <thread>
#include <vector>

namespace uroce {
namespace {

using transport::MemStatus;

constexpr int kAll = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_WRITE |
                     IBV_ACCESS_REMOTE_ATOMIC;

uint64_t addr_of(const void* p) {
  return reinterpret_cast<uintptr_t>(p);
}

TEST(KeyTableTest, PdsAreDistinctAndDeallocOnlyWhenUnused) {
  KeyTable t;
  uint32_t a = t.alloc_pd(), b = t.alloc_pd();
  EXPECT_NE(a, 0u);
  EXPECT_NE(a, b);
  uint8_t buf[64];
  uint32_t lkey, rkey;
  ASSERT_EQ(t.reg_mr(a, buf, sizeof buf, addr_of(buf), 0, &lkey, &rkey), 0);
  EXPECT_EQ(t.dealloc_pd(a), EBUSY);
  ASSERT_EQ(t.pd_ref(b), 0);  // a QP
  EXPECT_EQ(t.dealloc_pd(b), EBUSY);
  t.pd_unref(b);
  EXPECT_EQ(t.dealloc_pd(b), 0);
  EXPECT_EQ(t.dealloc_pd(b), EINVAL);
  EXPECT_EQ(t.pd_ref(b), EINVAL);
  ASSERT_EQ(t.dereg_mr(lkey), 0);
  EXPECT_EQ(t.dereg_mr(lkey), EINVAL);
  EXPECT_EQ(t.dealloc_pd(a), 0);
  EXPECT_NE(t.alloc_pd(), a);  // never reused
}

TEST(KeyTableTest, RegistrationRules) {
  KeyTable t;
  uint32_t pd = t.alloc_pd();
  uint8_t buf[64];
  uint32_t lkey, rkey;
  EXPECT_EQ(t.reg_mr(pd + 7, buf, sizeof buf, addr_of(buf), 0, &lkey, &rkey), EINVAL);
  EXPECT_EQ(t.reg_mr(pd, buf, 0, addr_of(buf), 0, &lkey, &rkey), EINVAL);
  // Remote write and atomic require local write (ibv_reg_mr(3)).
  EXPECT_EQ(t.reg_mr(pd, buf, sizeof buf, addr_of(buf), IBV_ACCESS_REMOTE_WRITE, &lkey, &rkey),
            EINVAL);
  EXPECT_EQ(t.reg_mr(pd, buf, sizeof buf, addr_of(buf), IBV_ACCESS_REMOTE_ATOMIC, &lkey, &rkey),
            EINVAL);
  EXPECT_EQ(t.reg_mr(pd, buf, sizeof buf, ~0ull - 8, kAll, &lkey, &rkey), EINVAL);  // wraps
  EXPECT_EQ(t.mr_count(), 0u);
}

TEST(KeyTableTest, KeysAreUniqueAndNeverReused) {
  KeyTable t;
  uint32_t pd = t.alloc_pd();
  uint8_t buf[64];
  std::set<uint32_t> keys;
  for (int i = 0; i < 1000; ++i) {
    uint32_t lkey, rkey;
    ASSERT_EQ(t.reg_mr(pd, buf, sizeof buf, addr_of(buf), 0, &lkey, &rkey), 0);
    EXPECT_NE(lkey, 0u);
    EXPECT_TRUE(keys.insert(lkey).second);
    if (i % 2) {
      ASSERT_EQ(t.dereg_mr(lkey), 0);
    }
  }
}

TEST(KeyTableTest, ResolveChecksKeyPdBoundsAndAccess) {
  KeyTable t;
  uint32_t pd = t.alloc_pd(), other = t.alloc_pd();
  uint8_t buf[256];
  uint64_t base = addr_of(buf);
  uint32_t ro, rw, rr;  // local read only; local write; local write + remote read/write
  uint32_t unused;
  ASSERT_EQ(t.reg_mr(pd, buf, sizeof buf, base, 0, &ro, &unused), 0);
  ASSERT_EQ(t.reg_mr(pd, buf, sizeof buf, base, IBV_ACCESS_LOCAL_WRITE, &rw, &unused), 0);
  ASSERT_EQ(t.reg_mr(pd, buf, sizeof buf, base,
                     IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_WRITE,
                     &unused, &rr),
            0);

  auto r = t.resolve_local(ro, pd, base + 16, 32, 0);
  EXPECT_EQ(r.status, MemStatus::kOk);
  EXPECT_EQ(r.ptr, buf + 16);
  EXPECT_EQ(t.resolve_local(ro + 1000, pd, base, 1, 0).status, MemStatus::kBadKey);
  EXPECT_EQ(t.resolve_local(ro, other, base, 1, 0).status, MemStatus::kBadPd);
  EXPECT_EQ(t.resolve_local(ro, pd, base, 257, 0).status, MemStatus::kOutOfBounds);
  EXPECT_EQ(t.resolve_local(ro, pd, base + 255, 2, 0).status, MemStatus::kOutOfBounds);
  EXPECT_EQ(t.resolve_local(ro, pd, base - 1, 2, 0).status, MemStatus::kOutOfBounds);
  EXPECT_EQ(t.resolve_local(ro, pd, base + 256, 1, 0).status, MemStatus::kOutOfBounds);
  EXPECT_EQ(t.resolve_local(ro, pd, base + 8, ~0ull, 0).status, MemStatus::kOutOfBounds);
  EXPECT_EQ(t.resolve_local(ro, pd, ~0ull, 2, 0).status, MemStatus::kOutOfBounds);
  EXPECT_EQ(t.resolve_local(ro, pd, base + 255, 1, 0).status, MemStatus::kOk);
  EXPECT_EQ(t.resolve_local(ro, pd, base, 16, IBV_ACCESS_LOCAL_WRITE).status, MemStatus::kNoAccess);
  EXPECT_EQ(t.resolve_local(rw, pd, base, 16, IBV_ACCESS_LOCAL_WRITE).status, MemStatus::kOk);
  // Zero length succeeds for any key of the PD, wherever it points.
  EXPECT_EQ(t.resolve_local(ro, pd, 12345, 0, IBV_ACCESS_LOCAL_WRITE).status, MemStatus::kOk);
  EXPECT_EQ(t.resolve_local(ro, other, base, 0, 0).status, MemStatus::kBadPd);

  // Remote: a region without any remote right is no rkey.
  EXPECT_EQ(t.resolve_remote(rw, pd, base, 8, IBV_ACCESS_REMOTE_READ).status, MemStatus::kNoAccess);
  EXPECT_EQ(t.resolve_remote(rr, pd, base, 8, IBV_ACCESS_REMOTE_READ).status, MemStatus::kOk);
  EXPECT_EQ(t.resolve_remote(rr, pd, base, 8, IBV_ACCESS_REMOTE_WRITE).status, MemStatus::kOk);
  EXPECT_EQ(t.resolve_remote(rr, pd, base, 8, IBV_ACCESS_REMOTE_ATOMIC).status,
            MemStatus::kNoAccess);
  EXPECT_EQ(t.resolve_remote(rr, other, base, 8, IBV_ACCESS_REMOTE_READ).status, MemStatus::kBadPd);

  ASSERT_EQ(t.dereg_mr(rr), 0);
  EXPECT_EQ(t.resolve_remote(rr, pd, base, 8, IBV_ACCESS_REMOTE_READ).status, MemStatus::kBadKey);
}

TEST(KeyTableTest, IovaTranslatesToTheHostAddress) {
  KeyTable t;
  uint32_t pd = t.alloc_pd();
  uint8_t buf[128];
  uint32_t lkey, rkey;
  ASSERT_EQ(t.reg_mr(pd, buf, sizeof buf, 0x10000, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ,
                     &lkey, &rkey),
            0);
  auto r = t.resolve_remote(rkey, pd, 0x10010, 16, IBV_ACCESS_REMOTE_READ);
  ASSERT_EQ(r.status, MemStatus::kOk);
  EXPECT_EQ(r.ptr, buf + 0x10);
  EXPECT_EQ(t.resolve_local(lkey, pd, addr_of(buf), 16, 0).status, MemStatus::kOutOfBounds);
}

TEST(KeyTableTest, AtomicsReturnTheOriginalValue) {
  KeyTable t;
  alignas(8) uint64_t word = 5;
  auto* p = reinterpret_cast<uint8_t*>(&word);
  EXPECT_EQ(t.atomic_fetch_add(p, 3), 5u);
  EXPECT_EQ(word, 8u);
  EXPECT_EQ(t.atomic_cmp_swap(p, 7, 100), 8u);  // no match: unchanged
  EXPECT_EQ(word, 8u);
  EXPECT_EQ(t.atomic_cmp_swap(p, 8, 100), 8u);
  EXPECT_EQ(word, 100u);

  alignas(8) uint8_t raw[16] = {};
  uint8_t* odd = raw + 1;  // misaligned: the locked fallback
  EXPECT_EQ(t.atomic_fetch_add(odd, 2), 0u);
  EXPECT_EQ(t.atomic_cmp_swap(odd, 2, 9), 2u);
  EXPECT_EQ(t.atomic_fetch_add(odd, 0), 9u);
}

TEST(KeyTableTest, FetchAddIsAtomicAcrossThreads) {
  KeyTable t;
  alignas(8) uint64_t word = 0;
  auto* p = reinterpret_cast<uint8_t*>(&word);
  constexpr int kThreads = 4, kAdds = 20000;
  std::vector<std::thread> ts;
  for (int i = 0; i < kThreads; ++i)
    ts.emplace_back([&] {
      for (int k = 0; k < kAdds; ++k) t.atomic_fetch_add(p, 1);
    });
  for (auto& th : ts) th.join();
  EXPECT_EQ(word, uint64_t(kThreads) * kAdds);
}

}  // namespace
}  // namespace uroce

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

TEST(KeyPermutationTest, IsABijection) {
  for (unsigned bits : {8u, 16u}) {
    KeyPermutation p(bits, 0x1234567890abcdefull);
    std::set<uint32_t> images;
    for (uint32_t x = 0; x < (1u << bits); ++x) {
      const uint32_t y = p(x);
      EXPECT_LT(y, 1u << bits);
      images.insert(y);
    }
    EXPECT_EQ(images.size(), size_t{1} << bits) << bits << " bits";
  }
}

// A peer that has seen keys cannot tell the next one: consecutive keys differ by no pattern, two
// devices (tables) give different sequences, and window indices are scattered too.
TEST(KeyTableTest, KeysAreNotPredictableFromEarlierKeys) {
  auto keys_of = [](KeyTable& t, int n) {
    const uint32_t pd = t.alloc_pd();
    static uint8_t buf[64];
    std::vector<uint32_t> keys;
    for (int i = 0; i < n; ++i) {
      uint32_t lkey, rkey;
      EXPECT_EQ(t.reg_mr(pd, buf, sizeof buf, addr_of(buf), 0, &lkey, &rkey), 0);
      EXPECT_EQ(lkey, rkey);
      EXPECT_GE(lkey, 0x100u);
      EXPECT_LT(lkey, KeyTable::kMwKeyBit) << "MR keys stay out of the window key space";
      keys.push_back(lkey);
    }
    return keys;
  };
  KeyTable a, b;
  const std::vector<uint32_t> ka = keys_of(a, 2000), kb = keys_of(b, 2000);
  EXPECT_NE(ka, kb) << "each table draws its own secret";
  std::set<uint32_t> deltas, low_bytes;
  for (size_t i = 1; i < ka.size(); ++i) deltas.insert(ka[i] - ka[i - 1]);
  for (uint32_t k : ka) low_bytes.insert(k & 0xff);
  EXPECT_GT(deltas.size(), 1990u) << "no stride between consecutive keys";
  EXPECT_GT(low_bytes.size(), 200u);
  // The high bits vary as much as the low ones: keys spread over the whole 31-bit space.
  uint32_t or_all = 0, and_all = ~0u;
  for (uint32_t k : ka) {
    or_all |= k;
    and_all &= k;
  }
  EXPECT_EQ(or_all, KeyTable::kMwKeyBit - 1);
  EXPECT_EQ(and_all, 0u);
  // The same secret gives the same keys (for reproducible tests), another one other keys.
  KeyTable c(42), d(42), e(43);
  const std::vector<uint32_t> kc = keys_of(c, 50);
  EXPECT_EQ(kc, keys_of(d, 50));
  EXPECT_NE(kc, keys_of(e, 50));
}

TEST(KeyTableTest, WindowKeysAreNotPredictableEither) {
  KeyTable t;
  const uint32_t pd = t.alloc_pd();
  std::set<uint32_t> indices, deltas;
  uint32_t prev = 0;
  for (int i = 0; i < 1000; ++i) {
    uint32_t handle, rkey;
    ASSERT_EQ(t.alloc_mw(pd, IBV_MW_TYPE_2, &handle, &rkey), 0);
    EXPECT_TRUE(rkey & KeyTable::kMwKeyBit);
    EXPECT_NE(handle, 0u);
    EXPECT_EQ((rkey & ~KeyTable::kMwKeyBit) >> 8, handle);
    EXPECT_TRUE(indices.insert(handle).second) << "window indices are never reused";
    if (i > 0) deltas.insert(handle - prev);
    prev = handle;
  }
  EXPECT_GT(deltas.size(), 990u);
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

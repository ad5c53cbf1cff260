// The memory-access rules (transport/memory_table.h) and the three MemoryAccess implementations
// built on them: the engine's key table, the simulator's memory without bytes and the transport
// tests' FakeMemory answer every resolve alike, and the table's own bookkeeping (offsets, the
// lookup cache, rereg, windows holding their region) holds.
#include "transport/memory_table.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <utility>
#include <string>
#include <vector>

#include "engine/key_table.h"
#include "harness.h"
#include "sim/memory.h"

namespace uroce::transport {
namespace {

uint64_t addr_of(const void* p) {
  return reinterpret_cast<uint64_t>(p);
}

// A region without bytes (as the simulator's).
MemoryTable::Region region(uint32_t pd, uint64_t iova, uint64_t len, int access) {
  MemoryTable::Region r;
  r.pd = pd;
  r.iova = iova;
  r.len = len;
  r.access = access;
  return r;
}

// Every resolve of a matrix of keys, PDs, ranges, accesses and sides gives the same status from
// the three, and the same bytes from the two that have bytes.
TEST(MemoryTableTest, EngineSimulatorAndTestsCheckMemoryAlike) {
  alignas(8) static uint8_t buf[4][512];
  const int kAccess[] = {
      0, IBV_ACCESS_LOCAL_WRITE, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ,
      IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC};
  KeyTable engine(42);
  const uint32_t pd = engine.alloc_pd(), other = engine.alloc_pd();
  sim::SyntheticMemory simulated;
  test::FakeMemory fake;
  std::vector<uint32_t> ekeys, skeys, fkeys;
  for (int i = 0; i < 4; ++i) {
    uint32_t lkey = 0, rkey = 0;
    ASSERT_EQ(engine.reg_mr(pd, buf[i], sizeof buf[i], addr_of(buf[i]), kAccess[i], &lkey, &rkey),
              0);
    ekeys.push_back(lkey);
    skeys.push_back(simulated.reg(pd, addr_of(buf[i]), sizeof buf[i], kAccess[i]));
    fkeys.push_back(fake.reg(pd, buf[i], sizeof buf[i], kAccess[i]));
  }
  const int kAsk[] = {0, IBV_ACCESS_LOCAL_WRITE, IBV_ACCESS_REMOTE_READ, IBV_ACCESS_REMOTE_WRITE,
                      IBV_ACCESS_REMOTE_ATOMIC};
  int compared = 0, ok = 0;
  for (size_t k = 0; k < 5; ++k) {  // the four regions, and a key none of them has
    for (uint32_t p : {pd, other}) {
      const uint64_t base = addr_of(buf[k % 4]);
      const std::pair<uint64_t, uint64_t> ranges[] = {
          {base, 8},   {base + 504, 8}, {base + 505, 8},  {base - 1, 8}, {base, 512},
          {base, 513}, {base + 512, 0}, {base + 4096, 0}, {~0ull, 2},    {base + 8, ~0ull}};
      for (auto [addr, len] : ranges) {
        for (int ask : kAsk) {
          for (bool remote : {false, true}) {
            const uint32_t ek = k < 4 ? ekeys[k] : 0x7777;
            const uint32_t sk = k < 4 ? skeys[k] : 0x7777;
            const uint32_t fk = k < 4 ? fkeys[k] : 0x7777;
            const MemRef e = remote ? engine.resolve_remote(ek, p, addr, len, ask)
                                    : engine.resolve_local(ek, p, addr, len, ask);
            const MemRef s = remote ? simulated.resolve_remote(sk, p, addr, len, ask)
                                    : simulated.resolve_local(sk, p, addr, len, ask);
            const MemRef f = remote ? fake.resolve_remote(fk, p, addr, len, ask)
                                    : fake.resolve_local(fk, p, addr, len, ask);
            const std::string where = "region " + std::to_string(k) + " pd " + std::to_string(p) +
                                      " addr+" + std::to_string(addr - base) + " len " +
                                      std::to_string(len) + " access " + std::to_string(ask) +
                                      (remote ? " remote" : " local");
            EXPECT_EQ(s.status, e.status) << where;
            EXPECT_EQ(f.status, e.status) << where;
            if (e.status == MemStatus::kOk) {
              EXPECT_EQ(f.ptr, e.ptr) << where;
              EXPECT_NE(s.ptr, nullptr) << where;  // every range here fits the window
              ++ok;
            }
            ++compared;
          }
        }
      }
    }
  }
  EXPECT_EQ(compared, 5 * 2 * 10 * 5 * 2);
  EXPECT_GT(ok, 50);
}

// ATOMIC WRITE's placement (MemoryAccess::atomic_store): all three put the 8 bytes as they are
// (memory order, not a number to byte-swap) on the word and nothing beside it; the engine's is a
// release store through std::atomic_ref (key_table.cc), the others plain copies where one thread
// owns the memory.
TEST(MemoryTableTest, AtomicStorePlacesTheEightBytesAsTheyAre) {
  alignas(8) uint8_t engine_buf[32], sim_buf[32], fake_buf[32];
  KeyTable engine(7);
  sim::SyntheticMemory simulated;
  test::FakeMemory fake;
  const uint8_t bytes[8] = {1, 2, 3, 4, 5, 6, 7, 8};
  uint64_t v;
  std::memcpy(&v, bytes, 8);
  for (auto [mem, buf] : {std::pair<MemoryAccess*, uint8_t*>{&engine, engine_buf},
                          {&simulated, sim_buf},
                          {&fake, fake_buf}}) {
    std::memset(buf, 0xee, 32);
    mem->atomic_store(buf + 8, v);
    EXPECT_EQ(0, std::memcmp(buf + 8, bytes, 8));
    EXPECT_EQ(buf[7], 0xee);
    EXPECT_EQ(buf[16], 0xee);
  }
}

TEST(MemoryTableTest, RegistrationRules) {
  uint8_t b[16];
  MemoryTable::Region r;
  r.host = b;
  r.iova = 0x1000;
  r.len = sizeof b;
  r.access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE;
  EXPECT_TRUE(MemoryTable::valid_registration(r));
  r.access = IBV_ACCESS_REMOTE_WRITE;  // remote write needs local write (ibv_reg_mr(3))
  EXPECT_FALSE(MemoryTable::valid_registration(r));
  r.access = IBV_ACCESS_REMOTE_ATOMIC;
  EXPECT_FALSE(MemoryTable::valid_registration(r));
  r.access = IBV_ACCESS_REMOTE_READ;
  EXPECT_TRUE(MemoryTable::valid_registration(r));
  r.len = 0;
  EXPECT_FALSE(MemoryTable::valid_registration(r));
  r.len = 16;
  r.iova = ~0ull - 8;  // wraps around the address space
  EXPECT_FALSE(MemoryTable::valid_registration(r));

  MemoryTable t;
  r.iova = 0x1000;
  EXPECT_TRUE(t.add_region(0x100, r));
  EXPECT_FALSE(t.add_region(0x100, r)) << "a key in use";
  EXPECT_FALSE(t.add_region(MemoryTable::kMwKeyBit | 5, r)) << "a window's key";
  ASSERT_NE(t.region(0x100), nullptr);
  EXPECT_EQ(t.region(0x100)->len, 16u);
  EXPECT_EQ(t.region(0x101), nullptr);
  EXPECT_EQ(t.region_count(), 1u);
}

// Offsets, not pointers, are what the table answers: a region without bytes (the simulator's)
// resolves like any other, and the owner places the bytes.
TEST(MemoryTableTest, ResolveAnswersTheOffsetInTheRegion) {
  MemoryTable t;
  ASSERT_TRUE(t.add_region(
      0x200, region(3, 0x10000, 0x1000, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ)));
  MemoryTable::Access a = t.resolve(0x200, 3, 0x10010, 16, IBV_ACCESS_REMOTE_READ, true);
  ASSERT_EQ(a.status, MemStatus::kOk);
  EXPECT_EQ(a.offset, 0x10u);
  EXPECT_EQ(a.region, t.region(0x200));
  a = t.resolve(0x200, 3, 0x10ff0, 16, 0, false);
  EXPECT_EQ(a.status, MemStatus::kOk);
  EXPECT_EQ(a.offset, 0xff0u);
  EXPECT_EQ(t.resolve(0x200, 3, 0x10ff1, 16, 0, false).status, MemStatus::kOutOfBounds);
  // Zero length names no byte: any key of the PD, the offset of the address when inside.
  a = t.resolve(0x200, 3, 0x10800, 0, IBV_ACCESS_REMOTE_ATOMIC, true);
  EXPECT_EQ(a.status, MemStatus::kOk);
  EXPECT_EQ(a.offset, 0x800u);
  EXPECT_EQ(t.resolve(0x200, 3, 0x99999, 0, 0, false).offset, 0u);
  EXPECT_EQ(t.resolve(0x200, 4, 0x10000, 0, 0, false).status, MemStatus::kBadPd);
  // An SGE cannot name a window's key.
  EXPECT_EQ(t.resolve(MemoryTable::kMwKeyBit | 0x100, 3, 0x10000, 8, 0, false).status,
            MemStatus::kBadKey);
}

// The one-entry lookup cache never answers for a region that went, or with its old rights.
TEST(MemoryTableTest, RemovedAndReplacedRegionsAreSeenAtOnce) {
  MemoryTable t;
  const MemoryTable::Region r =
      region(1, 0x1000, 64, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
  ASSERT_TRUE(t.add_region(0x100, r));
  EXPECT_EQ(t.resolve(0x100, 1, 0x1000, 8, IBV_ACCESS_REMOTE_WRITE, true).status, MemStatus::kOk);
  EXPECT_EQ(t.resolve(0x100, 1, 0x1000, 8, IBV_ACCESS_LOCAL_WRITE, false).status, MemStatus::kOk);
  MemoryTable::Region ro = r;
  ro.access = IBV_ACCESS_REMOTE_READ;
  ro.pd = 2;
  ASSERT_EQ(t.replace_region(0x100, ro), 0);
  EXPECT_EQ(t.resolve(0x100, 1, 0x1000, 8, IBV_ACCESS_REMOTE_WRITE, true).status,
            MemStatus::kBadPd);
  EXPECT_EQ(t.resolve(0x100, 2, 0x1000, 8, IBV_ACCESS_REMOTE_WRITE, true).status,
            MemStatus::kNoAccess);
  EXPECT_EQ(t.pd_users(1), 0u);
  EXPECT_EQ(t.pd_users(2), 1u) << "the region moved to PD 2";
  ASSERT_EQ(t.remove_region(0x100), 0);
  EXPECT_EQ(t.pd_users(2), 0u);
  EXPECT_EQ(t.resolve(0x100, 2, 0x1000, 8, IBV_ACCESS_REMOTE_READ, true).status,
            MemStatus::kBadKey);
  EXPECT_EQ(t.resolve(0x100, 2, 0x1000, 8, 0, false).status, MemStatus::kBadKey);
  EXPECT_EQ(t.remove_region(0x100), EINVAL);
  EXPECT_EQ(t.replace_region(0x100, r), EINVAL);
}

// A bound window holds its region (it can neither go nor change) and answers with its own range
// and rights; unbinding, by invalidation or by removing the window, lets the region go.
TEST(MemoryTableTest, WindowsHoldTheirRegionWhileBound) {
  MemoryTable t;
  // No remote right of its own.
  const MemoryTable::Region r =
      region(1, 0x1000, 0x100, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_MW_BIND);
  ASSERT_TRUE(t.add_region(0x100, r));
  const uint32_t rkey = t.add_window(7, 1, IBV_MW_TYPE_2);
  EXPECT_EQ(rkey, MemoryTable::kMwKeyBit | 7u << 8);
  EXPECT_EQ(t.resolve(rkey, 1, 0x1000, 8, IBV_ACCESS_REMOTE_READ, true).status, MemStatus::kBadKey)
      << "unbound";
  MwBind b;
  b.mw = 7;
  b.new_rkey = rkey | 0x2a;
  b.mr_lkey = 0x100;
  b.addr = 0x1040;
  b.length = 0x40;
  b.access = IBV_ACCESS_REMOTE_READ;
  EXPECT_EQ(t.bind(b, 2), MemStatus::kBadPd) << "a QP of another PD";
  ASSERT_EQ(t.bind(b, 1), MemStatus::kOk);
  MemoryTable::Access a = t.resolve(b.new_rkey, 1, 0x1048, 8, IBV_ACCESS_REMOTE_READ, true);
  ASSERT_EQ(a.status, MemStatus::kOk);
  EXPECT_EQ(a.region, t.region(0x100));
  EXPECT_EQ(a.offset, 0x48u);  // in the region, not the window
  EXPECT_EQ(t.resolve(b.new_rkey, 1, 0x1000, 8, IBV_ACCESS_REMOTE_READ, true).status,
            MemStatus::kOutOfBounds);
  EXPECT_EQ(t.resolve(b.new_rkey, 1, 0x1048, 8, IBV_ACCESS_REMOTE_WRITE, true).status,
            MemStatus::kNoAccess);
  EXPECT_EQ(t.resolve(rkey, 1, 0x1048, 8, IBV_ACCESS_REMOTE_READ, true).status, MemStatus::kBadKey)
      << "the stale key";
  EXPECT_EQ(t.remove_region(0x100), EBUSY);
  EXPECT_EQ(t.replace_region(0x100, r), EBUSY);
  EXPECT_EQ(t.invalidate(0x100, 1), MemStatus::kNoAccess) << "a region cannot be invalidated";
  ASSERT_EQ(t.invalidate(b.new_rkey, 1), MemStatus::kOk);
  EXPECT_EQ(t.resolve(b.new_rkey, 1, 0x1048, 8, IBV_ACCESS_REMOTE_READ, true).status,
            MemStatus::kBadKey);
  EXPECT_EQ(t.replace_region(0x100, r), 0);
  // Bound again, then the window goes: the region is free to go too.
  b.new_rkey = rkey | 0x2b;
  ASSERT_EQ(t.bind(b, 1), MemStatus::kOk);
  EXPECT_EQ(t.pd_users(1), 2u) << "the region and the window";
  ASSERT_EQ(t.remove_window(7), 0);
  EXPECT_EQ(t.window_count(), 0u);
  EXPECT_EQ(t.remove_region(0x100), 0);
  EXPECT_EQ(t.pd_users(1), 0u);
}

}  // namespace
}  // namespace uroce::transport

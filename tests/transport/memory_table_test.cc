// The memory-access rules (transport/memory_table.h) and the three MemoryAccess implementations
// built on them: the engine's key table, the simulator's memory without bytes and the transport
// tests' FakeMemory answer every resolve alike, and the table's own bookkeeping (offsets, the
// lookup cache, rereg, windows holding their region) holds.
#include "transport/memory_table.h"

#include <gtest/gtest.h>
#include <sys/mman.h>

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

// On-demand regions (IBV_ACCESS_ON_DEMAND): four pages of which none is touched before the
// transport reaches it, the second with no access (PROT_NONE) and the third read-only. Each
// access is faulted in with the access it needs (TableMemory::populate) or refused with
// kNotMapped — never a pointer to a page a load or store would fault on — and nothing is
// remembered: a page protected after a good access is refused at the next. A region without the
// flag is not checked (its pages were vouched for at registration, as pinned memory is).
class OnDemandTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!TableMemory::on_demand_supported())
      GTEST_SKIP() << "this kernel cannot fault pages in without touching them (MADV_POPULATE_*)";
    void* p = mmap(nullptr, 4 * kPage, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    ASSERT_NE(p, MAP_FAILED);
    base_ = static_cast<uint8_t*>(p);
    // The hole has no access at all (PROT_NONE): an unmapped page could be mapped again by the
    // next mmap of any thread (ASan's allocator does), and then it would be no hole.
    ASSERT_EQ(mprotect(base_ + kPage, kPage, PROT_NONE), 0);
    ASSERT_EQ(mprotect(base_ + 2 * kPage, kPage, PROT_READ), 0);
  }
  void TearDown() override {
    if (!base_) return;
    munmap(base_, 4 * kPage);
  }
  uint64_t page(int i) const { return addr_of(base_ + i * kPage); }

  static constexpr size_t kPage = 4096;
  static constexpr int kAll = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
                              IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC;
  uint8_t* base_ = nullptr;
};

TEST_F(OnDemandTest, PagesAreFaultedInWithTheAccessAskedOrRefused) {
  test::FakeMemory fake;
  const uint32_t pd = 1;
  const uint32_t odp = fake.reg(pd, base_, 4 * kPage, kAll | IBV_ACCESS_ON_DEMAND);
  auto remote = [&](uint64_t a, uint64_t len, int access) {
    return fake.resolve_remote(odp, pd, a, len, access);
  };
  // Mapped, never touched: faulted in, then usable.
  MemRef w = remote(page(0) + 64, 64, IBV_ACCESS_REMOTE_WRITE);
  ASSERT_EQ(w.status, MemStatus::kOk);
  EXPECT_EQ(w.ptr, base_ + 64);
  std::memset(w.ptr, 0x11, 64);
  EXPECT_EQ(fake.resolve_local(odp, pd, page(3), kPage, IBV_ACCESS_LOCAL_WRITE).status,
            MemStatus::kOk);
  // The hole: nothing, whatever the access; a range that only reaches into it too.
  for (int access : {IBV_ACCESS_REMOTE_READ, IBV_ACCESS_REMOTE_WRITE, IBV_ACCESS_REMOTE_ATOMIC}) {
    MemRef r = remote(page(1) + 8, 8, access);
    EXPECT_EQ(r.status, MemStatus::kNotMapped) << access;
    EXPECT_EQ(r.ptr, nullptr);
  }
  EXPECT_EQ(remote(page(1) - 16, 32, IBV_ACCESS_REMOTE_READ).status, MemStatus::kNotMapped);
  EXPECT_EQ(fake.resolve_local(odp, pd, page(1), 1, 0).status, MemStatus::kNotMapped);
  // A length of zero names no byte (IBTA 9.4.3): nothing to fault in.
  EXPECT_EQ(remote(page(1), 0, IBV_ACCESS_REMOTE_WRITE).status, MemStatus::kOk);
  // Read-only: read, never written or reached by an atomic.
  EXPECT_EQ(remote(page(2), 128, IBV_ACCESS_REMOTE_READ).status, MemStatus::kOk);
  EXPECT_EQ(remote(page(2), 128, IBV_ACCESS_REMOTE_WRITE).status, MemStatus::kNotMapped);
  EXPECT_EQ(remote(page(2) + 8, 8, IBV_ACCESS_REMOTE_ATOMIC).status, MemStatus::kNotMapped);
  EXPECT_EQ(fake.resolve_local(odp, pd, page(2), 8, IBV_ACCESS_LOCAL_WRITE).status,
            MemStatus::kNotMapped);
  // The rules before the pages: another PD, out of bounds, a right not granted.
  EXPECT_EQ(fake.resolve_remote(odp, pd + 1, page(0), 8, IBV_ACCESS_REMOTE_READ).status,
            MemStatus::kBadPd);
  EXPECT_EQ(remote(page(3), kPage + 1, IBV_ACCESS_REMOTE_READ).status, MemStatus::kOutOfBounds);
  // Nothing is cached: a page unmapped after a good access is refused at the next.
  ASSERT_EQ(remote(page(3), 8, IBV_ACCESS_REMOTE_WRITE).status, MemStatus::kOk);
  ASSERT_EQ(mprotect(base_ + 3 * kPage, kPage, PROT_NONE), 0);
  EXPECT_EQ(remote(page(3), 8, IBV_ACCESS_REMOTE_WRITE).status, MemStatus::kNotMapped);
  // The same bytes registered without the flag are not checked.
  const uint32_t pinned = fake.reg(pd, base_, 4 * kPage, kAll);
  MemRef p = fake.resolve_remote(pinned, pd, page(1), 8, IBV_ACCESS_REMOTE_READ);
  EXPECT_EQ(p.status, MemStatus::kOk);
  EXPECT_EQ(p.ptr, base_ + kPage);
}

// The engine's key table: the implicit region (the whole address space at iova 0), the
// refusals counted in odp_faults, and ibv_advise_mr's check of its keys and ranges.
TEST_F(OnDemandTest, EngineImplicitRegionCountsFaultsAndChecksPrefetches) {
  KeyTable keys(5);
  Counter faults;
  keys.set_odp_fault_counter(&faults);
  const uint32_t pd = keys.alloc_pd();
  uint32_t implicit = 0, rkey = 0, explicit_ro = 0, pinned = 0;
  ASSERT_EQ(keys.reg_mr(pd, nullptr, SIZE_MAX, 0, kAll | IBV_ACCESS_ON_DEMAND, &implicit, &rkey),
            0);
  ASSERT_EQ(
      keys.reg_mr(pd, base_, 4 * kPage, addr_of(base_), IBV_ACCESS_ON_DEMAND, &explicit_ro, &rkey),
      0);
  ASSERT_EQ(keys.reg_mr(pd, base_, kPage, addr_of(base_), kAll, &pinned, &rkey), 0);
  // Any mapped address is its own iova.
  MemRef r = keys.resolve_remote(implicit, pd, page(0) + 100, 8, IBV_ACCESS_REMOTE_WRITE);
  ASSERT_EQ(r.status, MemStatus::kOk);
  EXPECT_EQ(r.ptr, base_ + 100);
  alignas(8) static uint64_t word = 41;
  r = keys.resolve_remote(implicit, pd, addr_of(&word), 8, IBV_ACCESS_REMOTE_ATOMIC);
  ASSERT_EQ(r.status, MemStatus::kOk);
  EXPECT_EQ(keys.atomic_fetch_add(r.ptr, 1), 41u);
  EXPECT_EQ(word, 42u);
  EXPECT_EQ(faults.get(), 0u);
  // Address 0, the hole, the read-only page written: refused and counted.
  EXPECT_EQ(keys.resolve_remote(implicit, pd, 0, 8, IBV_ACCESS_REMOTE_READ).status,
            MemStatus::kNotMapped);
  EXPECT_EQ(keys.resolve_remote(implicit, pd, page(1), 8, IBV_ACCESS_REMOTE_READ).status,
            MemStatus::kNotMapped);
  EXPECT_EQ(keys.resolve_local(implicit, pd, page(2), 8, IBV_ACCESS_LOCAL_WRITE).status,
            MemStatus::kNotMapped);
  EXPECT_EQ(faults.get(), 3u);
  // The top of the address space is out of the region's bounds, not a fault.
  EXPECT_EQ(keys.resolve_remote(implicit, pd, ~0ull - 3, 8, IBV_ACCESS_REMOTE_READ).status,
            MemStatus::kOutOfBounds);
  EXPECT_EQ(faults.get(), 3u);

  const uint8_t* host = nullptr;
  EXPECT_EQ(keys.prefetch_range(pd, implicit, page(0), kPage, true, &host), 0);
  EXPECT_EQ(host, base_);
  EXPECT_EQ(keys.prefetch_range(pd, explicit_ro, page(2), kPage, false, &host), 0);
  EXPECT_EQ(host, base_ + 2 * kPage);
  // Write asked of a region without local write, out of bounds, another PD, an unknown key, a
  // region that is not on demand: EFAULT, as ibv_advise_mr(3) lists them.
  EXPECT_EQ(keys.prefetch_range(pd, explicit_ro, page(0), 8, true, &host), EFAULT);
  EXPECT_EQ(keys.prefetch_range(pd, explicit_ro, page(3), kPage + 1, false, &host), EFAULT);
  EXPECT_EQ(keys.prefetch_range(pd + 1, implicit, page(0), 8, false, &host), EFAULT);
  EXPECT_EQ(keys.prefetch_range(pd, 0x12345, page(0), 8, false, &host), EFAULT);
  EXPECT_EQ(keys.prefetch_range(pd, pinned, page(0), 8, false, &host), EFAULT);
  // populate() is what a prefetch then runs: the hole cannot be faulted in.
  EXPECT_EQ(TableMemory::populate(base_, kPage, true), MemStatus::kOk);
  EXPECT_EQ(TableMemory::populate(base_ + kPage, 8, false), MemStatus::kNotMapped);
  EXPECT_EQ(keys.dereg_mr(implicit), 0);
  EXPECT_EQ(keys.dereg_mr(explicit_ro), 0);
  EXPECT_EQ(keys.dereg_mr(pinned), 0);
}

}  // namespace
}  // namespace uroce::transport

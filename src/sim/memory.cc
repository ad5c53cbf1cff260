#include "sim/memory.h"

namespace uroce::sim {

using transport::MemRef;
using transport::MemStatus;

uint32_t SyntheticMemory::reg(uint32_t pd, uint64_t base, uint64_t len, int access) {
  const uint32_t key = next_key_++;
  transport::MemoryTable::Region r;
  r.pd = pd;
  r.iova = base;
  r.len = len;
  r.access = access;
  table_.add_region(key, r);
  return key;
}

MemRef SyntheticMemory::place(const transport::MemoryTable::Access& a, uint64_t len) {
  if (a.status != MemStatus::kOk) return MemRef{a.status, nullptr};
  return MemRef{MemStatus::kOk, len <= kWindow ? scratch_.data() + a.offset % kWindow : nullptr};
}

MemRef SyntheticMemory::resolve_local(uint32_t lkey, uint32_t pd, uint64_t addr, uint64_t len,
                                      int access) {
  return place(table_.resolve(lkey, pd, addr, len, access, false), len);
}

MemRef SyntheticMemory::resolve_remote(uint32_t rkey, uint32_t pd, uint64_t addr, uint64_t len,
                                       int access) {
  return place(table_.resolve(rkey, pd, addr, len, access, true), len);
}

}  // namespace uroce::sim

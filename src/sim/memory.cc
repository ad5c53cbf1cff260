#include "sim/memory.h"

#include <cstring>

namespace uroce::sim {

using transport::MemRef;
using transport::MemStatus;

uint32_t SyntheticMemory::reg(uint32_t pd, uint64_t base, uint64_t len, int access) {
  const uint32_t key = next_key_++;
  regions_[key] = Region{pd, base, len, access};
  return key;
}

MemRef SyntheticMemory::resolve(const Region& g, uint32_t pd, uint64_t addr, uint64_t len) {
  MemRef r;
  r.status = MemStatus::kBadPd;
  if (g.pd != pd) return r;
  r.status = MemStatus::kOutOfBounds;
  if (addr < g.base || len > g.len || addr - g.base > g.len - len) return r;
  r.status = MemStatus::kOk;
  r.ptr = len <= kWindow ? scratch_.data() + (addr - g.base) % kWindow : nullptr;
  return r;
}

MemRef SyntheticMemory::resolve_local(uint32_t lkey, uint32_t pd, uint64_t addr, uint64_t len,
                                      int access) {
  auto it = regions_.find(lkey);
  if (it == regions_.end()) return MemRef{};
  if ((access & IBV_ACCESS_LOCAL_WRITE) && !(it->second.access & IBV_ACCESS_LOCAL_WRITE)) {
    MemRef r = resolve(it->second, pd, addr, len);
    if (r.status == MemStatus::kOk) r = MemRef{MemStatus::kNoAccess, nullptr};
    return r;
  }
  return resolve(it->second, pd, addr, len);
}

MemRef SyntheticMemory::resolve_remote(uint32_t rkey, uint32_t pd, uint64_t addr, uint64_t len,
                                       int access) {
  auto it = regions_.find(rkey);
  if (it == regions_.end()) return MemRef{};
  MemRef r = resolve(it->second, pd, addr, len);
  if (r.status == MemStatus::kOk && (it->second.access & access) != access)
    r = MemRef{MemStatus::kNoAccess, nullptr};
  return r;
}

uint64_t SyntheticMemory::atomic_fetch_add(uint8_t* ptr, uint64_t add) {
  uint64_t v;
  std::memcpy(&v, ptr, 8);
  const uint64_t n = v + add;
  std::memcpy(ptr, &n, 8);
  return v;
}

uint64_t SyntheticMemory::atomic_cmp_swap(uint8_t* ptr, uint64_t compare, uint64_t swap) {
  uint64_t v;
  std::memcpy(&v, ptr, 8);
  if (v == compare) std::memcpy(ptr, &swap, 8);
  return v;
}

}  // namespace uroce::sim

#include "engine/key_table.h"

#include <atomic>
#include <cerrno>
#include <cstring>

namespace uroce {

using transport::MemRef;
using transport::MemStatus;

uint32_t KeyTable::alloc_pd() {
  uint32_t pd = next_pd_++;
  pds_.emplace(pd, 0);
  return pd;
}

int KeyTable::dealloc_pd(uint32_t pd) {
  auto it = pds_.find(pd);
  if (it == pds_.end()) return EINVAL;
  if (it->second != 0) return EBUSY;
  pds_.erase(it);
  return 0;
}

int KeyTable::pd_ref(uint32_t pd) {
  auto it = pds_.find(pd);
  if (it == pds_.end()) return EINVAL;
  ++it->second;
  return 0;
}

void KeyTable::pd_unref(uint32_t pd) {
  auto it = pds_.find(pd);
  if (it != pds_.end() && it->second > 0) --it->second;
}

int KeyTable::reg_mr(uint32_t pd, void* addr, uint64_t len, uint64_t iova, int access,
                     uint32_t* lkey, uint32_t* rkey) {
  if (!pd_exists(pd) || len == 0) return EINVAL;
  // ibv_reg_mr(3): remote write and remote atomic require local write.
  if ((access & (IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC)) &&
      !(access & IBV_ACCESS_LOCAL_WRITE))
    return EINVAL;
  // The region must not wrap around either address space.
  uint64_t host = reinterpret_cast<uintptr_t>(addr);
  if (host + len < host || iova + len < iova) return EINVAL;
  uint32_t key = next_key_++;
  if (next_key_ == 0) next_key_ = 0x100;  // after 2^32 registrations; mrs_ still rejects dups
  if (!mrs_.emplace(key, Mr{pd, static_cast<uint8_t*>(addr), iova, len, access}).second)
    return ENOMEM;
  ++pds_[pd];
  *lkey = key;
  *rkey = key;
  return 0;
}

int KeyTable::dereg_mr(uint32_t lkey) {
  auto it = mrs_.find(lkey);
  if (it == mrs_.end()) return EINVAL;
  pd_unref(it->second.pd);
  mrs_.erase(it);
  return 0;
}

MemRef KeyTable::resolve(uint32_t key, uint32_t pd, uint64_t addr, uint64_t len, int access,
                         bool remote) const {
  MemRef r;
  auto it = mrs_.find(key);
  if (it == mrs_.end()) {
    r.status = MemStatus::kBadKey;
    return r;
  }
  const Mr& mr = it->second;
  if (mr.pd != pd) {
    r.status = MemStatus::kBadPd;
    return r;
  }
  if (len == 0) {
    // Zero-length access names no byte; the pointer is only a harmless base.
    r.status = MemStatus::kOk;
    r.ptr = (addr >= mr.iova && addr - mr.iova <= mr.len) ? mr.host + (addr - mr.iova) : mr.host;
    return r;
  }
  // Written so that no sum can overflow: addr >= iova, then (addr - iova) + len <= mr.len.
  if (addr < mr.iova || addr - mr.iova > mr.len || len > mr.len - (addr - mr.iova)) {
    r.status = MemStatus::kOutOfBounds;
    return r;
  }
  // Local reads need no flag (every MR grants them); everything else must have been granted.
  int needed = access;
  if (remote) {
    // An rkey with no remote right at all is no rkey (IBTA C9-?: R_Key violation).
    constexpr int kRemote =
        IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC;
    if (!(mr.access & kRemote)) {
      r.status = MemStatus::kNoAccess;
      return r;
    }
  }
  if ((mr.access & needed) != needed) {
    r.status = MemStatus::kNoAccess;
    return r;
  }
  r.status = MemStatus::kOk;
  r.ptr = mr.host + (addr - mr.iova);
  return r;
}

MemRef KeyTable::resolve_local(uint32_t lkey, uint32_t pd, uint64_t addr, uint64_t len,
                               int access) {
  return resolve(lkey, pd, addr, len, access, false);
}

MemRef KeyTable::resolve_remote(uint32_t rkey, uint32_t pd, uint64_t addr, uint64_t len,
                                int access) {
  return resolve(rkey, pd, addr, len, access, true);
}

uint64_t KeyTable::atomic_fetch_add(uint8_t* ptr, uint64_t add) {
  if (reinterpret_cast<uintptr_t>(ptr) % alignof(uint64_t) == 0)
    return std::atomic_ref<uint64_t>(*reinterpret_cast<uint64_t*>(ptr)).fetch_add(add);
  std::lock_guard<std::mutex> g(atomic_mu_);
  uint64_t v;
  std::memcpy(&v, ptr, sizeof v);
  uint64_t n = v + add;
  std::memcpy(ptr, &n, sizeof n);
  return v;
}

uint64_t KeyTable::atomic_cmp_swap(uint8_t* ptr, uint64_t compare, uint64_t swap) {
  if (reinterpret_cast<uintptr_t>(ptr) % alignof(uint64_t) == 0) {
    uint64_t expected = compare;
    std::atomic_ref<uint64_t>(*reinterpret_cast<uint64_t*>(ptr))
        .compare_exchange_strong(expected, swap);
    return expected;  // the original value whether or not the swap happened
  }
  std::lock_guard<std::mutex> g(atomic_mu_);
  uint64_t v;
  std::memcpy(&v, ptr, sizeof v);
  if (v == compare) std::memcpy(ptr, &swap, sizeof swap);
  return v;
}

}  // namespace uroce

// The memory-access rules. See memory_table.h.
#include "transport/memory_table.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace uroce::transport {

bool MemoryTable::valid_registration(const Region& r) {
  if (r.len == 0) return false;
  // ibv_reg_mr(3): remote write and remote atomic require local write.
  if ((r.access & (IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC)) &&
      !(r.access & IBV_ACCESS_LOCAL_WRITE))
    return false;
  // The region must not wrap around either address space.
  const auto host = reinterpret_cast<uintptr_t>(r.host);
  return host + r.len >= host && r.iova + r.len >= r.iova;
}

bool MemoryTable::add_region(uint32_t key, const Region& r) {
  if (key >= kMwKeyBit) return false;
  Region g = r;
  g.bound_mws = 0;
  if (!regions_.emplace(key, g).second) return false;
  ++pd_users_[g.pd];
  return true;
}

void MemoryTable::release_pd(uint32_t pd) {
  auto it = pd_users_.find(pd);
  if (it != pd_users_.end() && --it->second == 0) pd_users_.erase(it);
}

int MemoryTable::remove_region(uint32_t key) {
  auto it = regions_.find(key);
  if (it == regions_.end()) return EINVAL;
  if (it->second.bound_mws != 0) return EBUSY;
  release_pd(it->second.pd);
  cached_[0] = cached_[1] = nullptr;
  regions_.erase(it);
  return 0;
}

int MemoryTable::replace_region(uint32_t key, const Region& r) {
  auto it = regions_.find(key);
  if (it == regions_.end()) return EINVAL;
  if (it->second.bound_mws != 0) return EBUSY;
  ++pd_users_[r.pd];
  release_pd(it->second.pd);
  it->second = r;
  it->second.bound_mws = 0;
  return 0;
}

const MemoryTable::Region* MemoryTable::region(uint32_t key) const {
  auto it = regions_.find(key);
  return it == regions_.end() ? nullptr : &it->second;
}

uint32_t MemoryTable::add_window(uint32_t index, uint32_t pd, ibv_mw_type type) {
  Window w{};
  w.pd = pd;
  w.type = type;
  w.rkey = kMwKeyBit | index << 8;
  if (windows_.emplace(index, w).second) ++pd_users_[pd];
  return w.rkey;
}

void MemoryTable::unbind(Window& w) {
  if (!w.bound) return;
  auto it = regions_.find(w.mr);
  if (it != regions_.end() && it->second.bound_mws > 0) --it->second.bound_mws;
  w.bound = false;
  w.mr = 0;
  w.addr = w.len = 0;
  w.access = 0;
}

int MemoryTable::remove_window(uint32_t index) {
  auto it = windows_.find(index);
  if (it == windows_.end()) return EINVAL;
  // Deallocating a bound window invalidates it (ibv_dealloc_mw(3)).
  unbind(it->second);
  release_pd(it->second.pd);
  windows_.erase(it);
  return 0;
}

MemStatus MemoryTable::bind(const MwBind& b, uint32_t qp_pd) {
  auto wit = windows_.find(b.mw);
  if (wit == windows_.end()) return MemStatus::kBadKey;
  Window& w = wit->second;
  // The new R_Key must name the same window: only its low 8 bits are the consumer's.
  if ((b.new_rkey & ~0xffu) != (w.rkey & ~0xffu)) return MemStatus::kBadKey;
  if (w.type == IBV_MW_TYPE_2) {
    // A type 2 window is bound only from the free state (it must be invalidated first), only
    // through a QP of its own PD, and never to an empty range (IBTA 10.6.7.2.2; rxe checks the
    // same).
    if (w.bound || b.length == 0) return MemStatus::kBadKey;
    if (w.pd != qp_pd) return MemStatus::kBadPd;
  } else if (b.length == 0) {
    // Type 1: binding a zero-length window unbinds it; the R_Key still changes.
    unbind(w);
    w.rkey = b.new_rkey;
    return MemStatus::kOk;
  }
  auto mit = regions_.find(b.mr_lkey);
  if (mit == regions_.end()) return MemStatus::kBadKey;
  Region& mr = mit->second;
  if (mr.pd != w.pd) return MemStatus::kBadPd;
  // The region must have been registered for binding (IBV_ACCESS_MW_BIND, IBTA 10.6.7.1).
  if (!(mr.access & IBV_ACCESS_MW_BIND)) return MemStatus::kNoAccess;
  // A window grants remote rights only: LOCAL_WRITE means nothing for it and is ignored (as
  // NICs do); zero-based windows and any other flag are refused. Remote write and atomic through
  // the window need the region's local write (as for an MR, ibv_bind_mw(3)).
  if (b.access & ~static_cast<unsigned>(kRemoteAccess | IBV_ACCESS_LOCAL_WRITE))
    return MemStatus::kNoAccess;
  if ((b.access & (IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC)) &&
      !(mr.access & IBV_ACCESS_LOCAL_WRITE))
    return MemStatus::kNoAccess;
  if (b.addr < mr.iova || b.addr - mr.iova > mr.len || b.length > mr.len - (b.addr - mr.iova))
    return MemStatus::kOutOfBounds;
  unbind(w);  // type 1 rebinding moves the window
  w.bound = true;
  w.mr = b.mr_lkey;
  w.addr = b.addr;
  w.len = b.length;
  w.access = static_cast<int>(b.access & kRemoteAccess);
  w.rkey = b.new_rkey;
  ++mr.bound_mws;
  return MemStatus::kOk;
}

MemStatus MemoryTable::invalidate(uint32_t rkey, uint32_t pd) {
  if (!(rkey & kMwKeyBit)) {
    // Registered regions cannot be invalidated: only fast-register MRs can, which uroce lacks.
    return regions_.count(rkey) != 0 ? MemStatus::kNoAccess : MemStatus::kBadKey;
  }
  auto it = windows_.find((rkey & ~kMwKeyBit) >> 8);
  if (it == windows_.end()) return MemStatus::kBadKey;
  Window& w = it->second;
  if (w.rkey != rkey || !w.bound) return MemStatus::kBadKey;
  if (w.pd != pd) return MemStatus::kBadPd;
  // Type 1 windows are unbound only by a zero-length bind (IBTA 10.6.7.2).
  if (w.type != IBV_MW_TYPE_2) return MemStatus::kNoAccess;
  unbind(w);
  return MemStatus::kOk;
}

MemoryTable::Access MemoryTable::resolve_window(uint32_t rkey, uint32_t pd, uint64_t addr,
                                                uint64_t len, int access) const {
  Access r;
  auto it = windows_.find((rkey & ~kMwKeyBit) >> 8);
  // A stale key (an older low byte) or an unbound window is no key (R_Key violation).
  if (it == windows_.end() || it->second.rkey != rkey || !it->second.bound) return r;
  const Window& w = it->second;
  if (w.pd != pd) {
    r.status = MemStatus::kBadPd;
    return r;
  }
  auto mit = regions_.find(w.mr);
  if (mit == regions_.end()) return r;  // cannot happen: remove_region refuses while bound
  // The window's own range and rights decide, not the region's (IBTA 10.6.7: a region
  // registered without remote rights can still be reached through a window bound to it).
  return within(mit->second, w.addr, w.len, w.access, true, addr, len, access);
}

bool TableMemory::on_demand_supported() {
  // Asked once of the kernel on a page of our own: EINVAL from a kernel before 5.14.
  static const bool supported = [] {
    static uint8_t probe[1];
    return populate(probe, sizeof probe, true) == MemStatus::kOk;
  }();
  return supported;
}

MemStatus TableMemory::populate(const uint8_t* p, uint64_t len, bool write) {
  if (len == 0) return MemStatus::kOk;
  static const uintptr_t page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  // madvise wants a page-aligned start; the length it rounds up itself. The range was resolved
  // inside a region, so it does not wrap.
  const uintptr_t first = reinterpret_cast<uintptr_t>(p);
  const uintptr_t start = first & ~(page - 1);
  const size_t span = static_cast<size_t>(first - start + len);
  // Unmapped: ENOMEM; mapped without the access: EINVAL (or EFAULT); a page that would raise
  // SIGBUS (a file mapping past its end): EFAULT. EINTR and EAGAIN are not about the range.
  for (int tries = 0; tries < 8; ++tries) {
    if (madvise(reinterpret_cast<void*>(start), span,
                write ? MADV_POPULATE_WRITE : MADV_POPULATE_READ) == 0)
      return MemStatus::kOk;
    if (errno != EINTR && errno != EAGAIN) break;
  }
  return MemStatus::kNotMapped;
}

MemRef TableMemory::checked(const MemoryTable::Access& a, uint64_t len, int access) {
  MemRef r = a.ref();
  if (r.status != MemStatus::kOk || len == 0 || !a.region->on_demand()) return r;
  constexpr int kWrite =
      IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC;
  const MemStatus st = fault_in(r.ptr, len, (access & kWrite) != 0);
  if (st != MemStatus::kOk) return MemRef{st, nullptr};
  return r;
}

MemRef TableMemory::resolve_local(uint32_t lkey, uint32_t pd, uint64_t addr, uint64_t len,
                                  int access) {
  return checked(table_.resolve(lkey, pd, addr, len, access, false), len, access);
}

MemRef TableMemory::resolve_remote(uint32_t rkey, uint32_t pd, uint64_t addr, uint64_t len,
                                   int access) {
  return checked(table_.resolve(rkey, pd, addr, len, access, true), len, access);
}

MemStatus TableMemory::bind_mw(const MwBind& b, uint32_t qp_pd) {
  return table_.bind(b, qp_pd);
}

MemStatus TableMemory::invalidate(uint32_t rkey, uint32_t pd) {
  return table_.invalidate(rkey, pd);
}

uint64_t TableMemory::atomic_fetch_add(uint8_t* ptr, uint64_t add) {
  uint64_t v;
  std::memcpy(&v, ptr, sizeof v);
  const uint64_t n = v + add;
  std::memcpy(ptr, &n, sizeof n);
  return v;
}

uint64_t TableMemory::atomic_cmp_swap(uint8_t* ptr, uint64_t compare, uint64_t swap) {
  uint64_t v;
  std::memcpy(&v, ptr, sizeof v);
  if (v == compare) std::memcpy(ptr, &swap, sizeof swap);
  return v;
}

void TableMemory::atomic_store(uint8_t* ptr, uint64_t value) {
  std::memcpy(ptr, &value, sizeof value);
}

}  // namespace uroce::transport

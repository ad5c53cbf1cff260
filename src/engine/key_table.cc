#include "engine/key_table.h"

#include <atomic>
#include <cerrno>
#include <cstring>
#include <random>

namespace uroce {

using transport::MemRef;
using transport::MemStatus;

namespace {

// MurmurHash3's 32-bit finaliser: a bijective avalanche mix, the Feistel round function.
uint32_t mix32(uint32_t h) {
  h ^= h >> 16;
  h *= 0x85ebca6bu;
  h ^= h >> 13;
  h *= 0xc2b2ae35u;
  h ^= h >> 16;
  return h;
}

uint64_t random_secret() {
  // std::random_device reads getrandom(2) / /dev/urandom on Linux.
  std::random_device rd;
  return (uint64_t{rd()} << 32) | rd();
}

}  // namespace

KeyPermutation::KeyPermutation(unsigned bits, uint64_t secret)
    : half_(bits / 2), mask_(half_ >= 32 ? ~0u : (1u << half_) - 1) {
  for (uint32_t i = 0; i < 4; ++i)
    round_[i] = mix32(static_cast<uint32_t>(secret >> (16 * i)) ^ (0x9e3779b9u * (i + 1)));
}

uint32_t KeyPermutation::operator()(uint32_t x) const {
  // A 4-round balanced Feistel network on two half_-bit halves: a bijection of the 2*half_-bit
  // domain whatever the round function (Luby-Rackoff).
  uint32_t l = (x >> half_) & mask_, r = x & mask_;
  for (uint32_t k : round_) {
    const uint32_t f = mix32(r ^ k) & mask_;
    const uint32_t next_r = l ^ f;
    l = r;
    r = next_r;
  }
  return (l << half_) | r;
}

KeyTable::KeyTable() : KeyTable(random_secret()) {}

// MR keys are 32-bit images of which those below kMwKeyBit are taken (about half: the next one
// comes within a few counter values); window indices are 24-bit images of which the nonzero ones
// below 2^23 are taken.
KeyTable::KeyTable(uint64_t secret)
    : mr_perm_(32, secret), mw_perm_(24, secret ^ 0x5deece66dull * 0x9e3779b97f4a7c15ull) {}

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
  // The next counter value whose image is a valid MR key (cycle walking: a permutation of
  // 2^32 values restricted to those below kMwKeyBit, about one in two). After 2^32 counter values
  // the sequence would repeat: then registration fails rather than reuse a key.
  uint32_t key = 0;
  do {
    if (mr_count_ == ~0u) return ENOMEM;
    key = mr_perm_(mr_count_++);
  } while (key >= kMwKeyBit || key < 0x100);
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
  // A region with windows bound to it cannot go (IBTA 10.6.7.1; rxe and mlx5 refuse too): the
  // windows would name freed memory.
  if (it->second.bound_mws != 0) return EBUSY;
  pd_unref(it->second.pd);
  cached_mr_[0] = cached_mr_[1] = nullptr;
  mrs_.erase(it);
  return 0;
}

int KeyTable::rereg_mr(uint32_t lkey, int flags, uint32_t pd, void* addr, uint64_t len,
                       uint64_t iova, int access) {
  if (flags == 0 || (flags & ~IBV_REREG_MR_FLAGS_SUPPORTED)) return EINVAL;
  auto it = mrs_.find(lkey);
  if (it == mrs_.end()) return EINVAL;
  Mr next = it->second;
  if (flags & IBV_REREG_MR_CHANGE_PD) {
    if (!pd_exists(pd)) return EINVAL;
    next.pd = pd;
  }
  if (flags & IBV_REREG_MR_CHANGE_TRANSLATION) {
    uint64_t host = reinterpret_cast<uintptr_t>(addr);
    if (!addr || len == 0 || host + len < host || iova + len < iova) return EINVAL;
    next.host = static_cast<uint8_t*>(addr);
    next.iova = iova;
    next.len = len;
  }
  if (flags & IBV_REREG_MR_CHANGE_ACCESS) next.access = access;
  // The same rule as reg_mr, on the resulting rights (ibv_reg_mr(3)).
  if ((next.access & (IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC)) &&
      !(next.access & IBV_ACCESS_LOCAL_WRITE))
    return EINVAL;
  // Bound windows were checked against the old PD, bounds and MW_BIND right (IBTA 10.6.7.1), so
  // changing any of them under a window is refused, as dereg_mr is.
  if (it->second.bound_mws != 0) return EBUSY;
  if (next.pd != it->second.pd) {
    ++pds_[next.pd];
    pd_unref(it->second.pd);
  }
  it->second = next;
  return 0;
}

int KeyTable::alloc_mw(uint32_t pd, ibv_mw_type type, uint32_t* handle, uint32_t* rkey) {
  if (!pd_exists(pd) || (type != IBV_MW_TYPE_1 && type != IBV_MW_TYPE_2)) return EINVAL;
  // 2^23 indices fit between kMwKeyBit and the 8-bit key; never reused while the table lives:
  // the images of a 24-bit counter under mw_perm_ that are nonzero and below 2^23.
  uint32_t index = 0;
  do {
    if (mw_count_ >= (1u << 24)) return ENOMEM;
    index = mw_perm_(mw_count_++);
  } while (index == 0 || index >= (kMwKeyBit >> 8));
  Mw mw{};
  mw.pd = pd;
  mw.type = type;
  mw.rkey = kMwKeyBit | index << 8;
  mws_.emplace(index, mw);
  ++pds_[pd];
  *handle = index;
  *rkey = mw.rkey;
  return 0;
}

void KeyTable::unbind(Mw& mw) {
  if (!mw.bound) return;
  auto it = mrs_.find(mw.mr);
  if (it != mrs_.end() && it->second.bound_mws > 0) --it->second.bound_mws;
  mw.bound = false;
  mw.mr = 0;
  mw.addr = mw.len = 0;
  mw.access = 0;
}

int KeyTable::dealloc_mw(uint32_t handle) {
  auto it = mws_.find(handle);
  if (it == mws_.end()) return EINVAL;
  // Deallocating a bound window invalidates it (ibv_dealloc_mw(3)).
  unbind(it->second);
  pd_unref(it->second.pd);
  mws_.erase(it);
  return 0;
}

MemStatus KeyTable::bind_mw(const transport::MwBind& b, uint32_t qp_pd) {
  auto wit = mws_.find(b.mw);
  if (wit == mws_.end()) return MemStatus::kBadKey;
  Mw& mw = wit->second;
  // The new R_Key must name the same window: only its low 8 bits are the consumer's.
  if ((b.new_rkey & ~0xffu) != (mw.rkey & ~0xffu)) return MemStatus::kBadKey;
  if (mw.type == IBV_MW_TYPE_2) {
    // A type 2 window is bound only from the free state (it must be invalidated first), only
    // through a QP of its own PD, and never to an empty range (IBTA 10.6.7.2.2; rxe checks the
    // same).
    if (mw.bound || b.length == 0) return MemStatus::kBadKey;
    if (mw.pd != qp_pd) return MemStatus::kBadPd;
  } else if (b.length == 0) {
    // Type 1: binding a zero-length window unbinds it; the R_Key still changes.
    unbind(mw);
    mw.rkey = b.new_rkey;
    return MemStatus::kOk;
  }
  auto mit = mrs_.find(b.mr_lkey);
  if (mit == mrs_.end()) return MemStatus::kBadKey;
  Mr& mr = mit->second;
  if (mr.pd != mw.pd) return MemStatus::kBadPd;
  // The region must have been registered for binding (IBV_ACCESS_MW_BIND, IBTA 10.6.7.1).
  if (!(mr.access & IBV_ACCESS_MW_BIND)) return MemStatus::kNoAccess;
  // A window grants remote rights only: LOCAL_WRITE means nothing for it and is ignored (as
  // NICs do); zero-based windows and any other flag are refused. Remote write and atomic through
  // the window need the region's local write (as for an MR, ibv_bind_mw(3)).
  constexpr unsigned kRemote =
      IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC;
  if (b.access & ~(kRemote | IBV_ACCESS_LOCAL_WRITE)) return MemStatus::kNoAccess;
  if ((b.access & (IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC)) &&
      !(mr.access & IBV_ACCESS_LOCAL_WRITE))
    return MemStatus::kNoAccess;
  if (b.addr < mr.iova || b.addr - mr.iova > mr.len || b.length > mr.len - (b.addr - mr.iova))
    return MemStatus::kOutOfBounds;
  unbind(mw);  // type 1 rebinding moves the window
  mw.bound = true;
  mw.mr = b.mr_lkey;
  mw.addr = b.addr;
  mw.len = b.length;
  mw.access = static_cast<int>(b.access & kRemote);
  mw.rkey = b.new_rkey;
  ++mr.bound_mws;
  return MemStatus::kOk;
}

MemStatus KeyTable::invalidate(uint32_t rkey, uint32_t pd) {
  if (!(rkey & kMwKeyBit)) {
    // Registered MRs cannot be invalidated: only fast-register MRs can, which uroce lacks.
    return mrs_.count(rkey) != 0 ? MemStatus::kNoAccess : MemStatus::kBadKey;
  }
  auto it = mws_.find((rkey & ~kMwKeyBit) >> 8);
  if (it == mws_.end()) return MemStatus::kBadKey;
  Mw& mw = it->second;
  if (mw.rkey != rkey || !mw.bound) return MemStatus::kBadKey;
  if (mw.pd != pd) return MemStatus::kBadPd;
  // Type 1 windows are unbound only by a zero-length bind (IBTA 10.6.7.2).
  if (mw.type != IBV_MW_TYPE_2) return MemStatus::kNoAccess;
  unbind(mw);
  return MemStatus::kOk;
}

MemRef KeyTable::resolve_mw(uint32_t rkey, uint32_t pd, uint64_t addr, uint64_t len,
                            int access) const {
  MemRef r;
  auto it = mws_.find((rkey & ~kMwKeyBit) >> 8);
  // A stale key (an older low byte) or an unbound window is no key (R_Key violation).
  if (it == mws_.end() || it->second.rkey != rkey || !it->second.bound) {
    r.status = MemStatus::kBadKey;
    return r;
  }
  const Mw& mw = it->second;
  if (mw.pd != pd) {
    r.status = MemStatus::kBadPd;
    return r;
  }
  auto mit = mrs_.find(mw.mr);
  if (mit == mrs_.end()) {  // cannot happen: dereg_mr refuses while bound
    r.status = MemStatus::kBadKey;
    return r;
  }
  const Mr& mr = mit->second;
  if (len == 0) {
    r.status = MemStatus::kOk;
    r.ptr = mr.host + (mw.addr - mr.iova);
    return r;
  }
  if (addr < mw.addr || addr - mw.addr > mw.len || len > mw.len - (addr - mw.addr)) {
    r.status = MemStatus::kOutOfBounds;
    return r;
  }
  // The window's own rights decide, not the region's (IBTA 10.6.7: an MR registered without
  // remote rights can still be reached through a window bound to it).
  if ((mw.access & access) != access || mw.access == 0) {
    r.status = MemStatus::kNoAccess;
    return r;
  }
  r.status = MemStatus::kOk;
  r.ptr = mr.host + (addr - mr.iova);
  return r;
}

MemRef KeyTable::resolve(uint32_t key, uint32_t pd, uint64_t addr, uint64_t len, int access,
                         bool remote) const {
  MemRef r;
  if (key & kMwKeyBit) {
    // Windows have only an R_Key: an SGE cannot name one (IBTA 10.6.7).
    if (remote) return resolve_mw(key, pd, addr, len, access);
    r.status = MemStatus::kBadKey;
    return r;
  }
  const Mr* found = cached_mr_[remote];
  if (!found || cached_key_[remote] != key) {
    auto it = mrs_.find(key);
    if (it == mrs_.end()) {
      r.status = MemStatus::kBadKey;
      return r;
    }
    found = &it->second;
    cached_key_[remote] = key;
    cached_mr_[remote] = found;
  }
  const Mr& mr = *found;
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

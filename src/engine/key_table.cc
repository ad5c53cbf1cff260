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
  if (it->second != 0 || table_.pd_users(pd) != 0) return EBUSY;
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
  transport::MemoryTable::Region r;
  r.pd = pd;
  r.host = static_cast<uint8_t*>(addr);
  r.iova = iova;
  r.len = len;
  r.access = access;
  if (!pd_exists(pd) || !transport::MemoryTable::valid_registration(r)) return EINVAL;
  // The next counter value whose image is a valid MR key (cycle walking: a permutation of
  // 2^32 values restricted to those below kMwKeyBit, about one in two). After 2^32 counter values
  // the sequence would repeat: then registration fails rather than reuse a key.
  uint32_t key = 0;
  do {
    if (mr_count_ == ~0u) return ENOMEM;
    key = mr_perm_(mr_count_++);
  } while (key >= kMwKeyBit || key < 0x100);
  if (!table_.add_region(key, r)) return ENOMEM;
  *lkey = key;
  *rkey = key;
  return 0;
}

int KeyTable::prefetch_range(uint32_t pd, uint32_t lkey, uint64_t addr, uint64_t len, bool write,
                             const uint8_t** host) const {
  const transport::MemoryTable::Region* r = table_.region(lkey);
  if (r == nullptr || !r->on_demand()) return EFAULT;
  const int access = write ? IBV_ACCESS_LOCAL_WRITE : 0;
  const transport::MemoryTable::Access a = table_.resolve(lkey, pd, addr, len, access, false);
  if (a.status != transport::MemStatus::kOk) return EFAULT;
  *host = a.ref().ptr;
  return 0;
}

transport::MemStatus KeyTable::fault_in(const uint8_t* p, uint64_t len, bool write) {
  const transport::MemStatus st = populate(p, len, write);
  if (st != transport::MemStatus::kOk && odp_faults_) odp_faults_->add();
  return st;
}

int KeyTable::dereg_mr(uint32_t lkey) {
  return table_.remove_region(lkey);
}

int KeyTable::rereg_mr(uint32_t lkey, int flags, uint32_t pd, void* addr, uint64_t len,
                       uint64_t iova, int access) {
  if (flags == 0 || (flags & ~IBV_REREG_MR_FLAGS_SUPPORTED)) return EINVAL;
  const transport::MemoryTable::Region* old = table_.region(lkey);
  if (old == nullptr) return EINVAL;
  transport::MemoryTable::Region next = *old;
  if (flags & IBV_REREG_MR_CHANGE_PD) {
    if (!pd_exists(pd)) return EINVAL;
    next.pd = pd;
  }
  if (flags & IBV_REREG_MR_CHANGE_TRANSLATION) {
    if (!addr) return EINVAL;
    next.host = static_cast<uint8_t*>(addr);
    next.iova = iova;
    next.len = len;
  }
  if (flags & IBV_REREG_MR_CHANGE_ACCESS) next.access = access;
  // The same rules as reg_mr, on the resulting region.
  if (!transport::MemoryTable::valid_registration(next)) return EINVAL;
  return table_.replace_region(lkey, next);
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
  *rkey = table_.add_window(index, pd, type);
  *handle = index;
  return 0;
}

int KeyTable::dealloc_mw(uint32_t handle) {
  return table_.remove_window(handle);
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

void KeyTable::atomic_store(uint8_t* ptr, uint64_t value) {
  if (reinterpret_cast<uintptr_t>(ptr) % alignof(uint64_t) == 0) {
    std::atomic_ref<uint64_t>(*reinterpret_cast<uint64_t*>(ptr))
        .store(value, std::memory_order_release);
    return;
  }
  std::lock_guard<std::mutex> g(atomic_mu_);  // never from the transport: it refuses misaligned
  std::memcpy(ptr, &value, sizeof value);
}

}  // namespace uroce

// Protection domains and memory of one device, and the transport's window onto memory
// (transport::MemoryAccess): every byte the transport reads or writes on behalf of a work request
// or a remote peer is reached through resolve_local/resolve_remote. The rules — key, PD, bounds,
// access flags, memory windows — are transport::MemoryTable's (transport/memory_table.h), which
// the simulator and the transport tests use too; what the engine adds is its own: unpredictable
// keys, PD lifetimes, and atomics that are atomic across the device.
//
// Locking: the device lock protects the whole table (the transport resolves keys with it held,
// and the verbs calls that register and deregister take it). Atomics do not rely on it; see
// atomic_fetch_add.
#pragma once

#include <cstdint>
#include <mutex>
#include <unordered_map>

#include "transport/env.h"
#include "transport/memory_table.h"
#include "util/counter.h"

namespace uroce {

// Keys are not predictable from earlier keys: a peer that has seen the R_Keys a program
// advertised cannot guess another region's (IBTA 10.6.3.1 leaves key values to the CI; mlx5
// randomises the low byte, which leaves 1 guess in 256). Each key comes from a counter that is
// never reused while the table lives, passed through a keyed permutation (KeyPermutation) whose
// key is drawn from the system's random source when the table is made: distinct counters give
// distinct keys, and without the secret the sequence looks random.
class KeyPermutation {
 public:
  // A permutation of [0, 2^bits), bits even, 2..32, keyed by 64 random bits.
  KeyPermutation(unsigned bits, uint64_t secret);
  uint32_t operator()(uint32_t x) const;

 private:
  unsigned half_;      // bits / 2
  uint32_t mask_;      // 2^half_ - 1
  uint32_t round_[4];  // round keys
};

class KeyTable : public transport::TableMemory {
 public:
  KeyTable();                          // draws the permutations' secret (getrandom)
  KeyTable(const KeyTable&) = delete;  // as its MemoryTable
  KeyTable& operator=(const KeyTable&) = delete;
  // For tests that need the same keys from run to run.
  explicit KeyTable(uint64_t secret);

  // PD handles start at 1 (0 is never a valid PD) and are never reused while the table lives.
  uint32_t alloc_pd();
  // 0; EINVAL for an unknown PD; EBUSY while MRs, windows or QPs use it.
  int dealloc_pd(uint32_t pd);
  bool pd_exists(uint32_t pd) const { return pds_.count(pd) != 0; }
  // QPs hold a reference on their PD so that dealloc_pd can refuse (EBUSY).
  int pd_ref(uint32_t pd);  // EINVAL for an unknown PD
  void pd_unref(uint32_t pd);

  // Registers [addr, addr+len) of this process, addressed by the peer and by SGEs at `iova`
  // (ibv_reg_mr uses iova == addr; ibv_reg_mr_iova2 another value). lkey == rkey, like rxe; keys
  // are unique and never reused while the table lives. 0, or EINVAL (unknown PD, len 0, bad
  // access combination: remote write or atomic without local write, IBTA o10-?/ibv_reg_mr(3)).
  // With IBV_ACCESS_ON_DEMAND the pages need not be mapped (transport::TableMemory checks them
  // when reached); addr nullptr, len SIZE_MAX and iova 0 is the implicit on-demand region, the
  // whole address space.
  int reg_mr(uint32_t pd, void* addr, uint64_t len, uint64_t iova, int access, uint32_t* lkey,
             uint32_t* rkey);
  // ibv_advise_mr(3): may [addr, addr+len) under `lkey` of PD `pd` be prefetched (for writing,
  // with `write`)? 0 and *host, where its bytes are in this process; or EFAULT as the man page
  // lists it: the key is unknown, of another PD or not an on-demand region (mlx5 prefetches only
  // those), the range is outside it, or write is asked of a region without local write.
  int prefetch_range(uint32_t pd, uint32_t lkey, uint64_t addr, uint64_t len, bool write,
                     const uint8_t** host) const;
  // Where refused on-demand accesses are counted (DeviceCounters::odp_faults); nullptr: nowhere.
  void set_odp_fault_counter(Counter* c) { odp_faults_ = c; }
  int dereg_mr(uint32_t lkey);  // 0, EINVAL, or EBUSY while memory windows are bound to it
  // ibv_rereg_mr: gives the region `lkey` a new PD, translation ([addr, addr+len) addressed at
  // `iova`) and/or access, as `flags` (IBV_REREG_MR_CHANGE_*) select; the other properties stay.
  // The keys do not change (the IBTA Reregister Memory Region verb may return new keys; keeping
  // them is allowed, simpler for the application, and what the verbs layer reports in ibv_mr). All
  // or nothing: on any error the region is untouched. 0; EINVAL (unknown key or PD, no flag or an
  // unknown one, len 0, wrap-around, bad access combination); EBUSY while memory windows are bound
  // to it (they name the old translation and rights).
  int rereg_mr(uint32_t lkey, int flags, uint32_t pd, void* addr, uint64_t len, uint64_t iova,
               int access);
  size_t mr_count() const { return table_.region_count(); }
  size_t pd_count() const { return pds_.size(); }

  // Memory windows (IBTA 10.6.7): see transport::MemoryTable for their keys and rules.
  static constexpr uint32_t kMwKeyBit = transport::MemoryTable::kMwKeyBit;
  // 0, EINVAL (unknown PD, type not 1/2) or ENOMEM; *handle names the window, *rkey its key.
  int alloc_mw(uint32_t pd, ibv_mw_type type, uint32_t* handle, uint32_t* rkey);
  int dealloc_mw(uint32_t handle);  // 0 or EINVAL; a bound window is unbound first
  size_t mw_count() const { return table_.window_count(); }

  // transport::MemoryAccess: resolving, binding and invalidating are TableMemory's (the rules);
  // the atomics are the engine's own. IBV_ATOMIC_HCA asks only for atomicity against this device's
  // atomics, but the operation is done with a CPU atomic instruction on the 8-byte word, so it is
  // also atomic against the application's own atomics and other devices in the process (a stronger
  // guarantee, at no cost). A misaligned pointer (the transport should never pass one: IBTA C9-?
  // makes misaligned atomics an invalid request) falls back to the device-wide atomic lock.
  uint64_t atomic_fetch_add(uint8_t* ptr, uint64_t add) override;
  uint64_t atomic_cmp_swap(uint8_t* ptr, uint64_t compare, uint64_t swap) override;
  // ATOMIC WRITE: a release store of the aligned word (std::atomic_ref), so an application
  // polling the word with an acquire load sees every byte the QP placed before it.
  void atomic_store(uint8_t* ptr, uint64_t value) override;

 protected:
  transport::MemStatus fault_in(const uint8_t* p, uint64_t len, bool write) override;

 private:
  Counter* odp_faults_ = nullptr;
  std::unordered_map<uint32_t, uint32_t> pds_;  // PD → QPs using it (MRs, windows: table_)
  uint32_t next_pd_ = 1;
  // MR keys: mr_perm_(mr_count_) for the next counter value whose image is a valid MR key
  // (0x100 ≤ key < kMwKeyBit: away from 0, which some applications take for "none", and out of
  // the window keys). The counter is never reused while the table lives (2^32 registrations).
  KeyPermutation mr_perm_;
  uint32_t mr_count_ = 0;
  // Window indices (23 bits, never 0): mw_perm_(mw_count_), likewise never reused.
  KeyPermutation mw_perm_;
  uint32_t mw_count_ = 0;
  std::mutex atomic_mu_;  // only for misaligned atomics
};

}  // namespace uroce

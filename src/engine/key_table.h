// Protection domains and memory regions of one device, and the transport's window onto memory
// (transport::MemoryAccess): every byte the transport reads or writes on behalf of a work request
// or a remote peer is reached through resolve_local/resolve_remote, which check the key, the PD,
// the bounds and the access flags.
//
// Locking: the device lock protects the whole table (the transport resolves keys with it held,
// and the verbs calls that register and deregister take it). Atomics do not rely on it; see
// atomic_fetch_add.
#pragma once

#include <cstdint>
#include <mutex>
#include <unordered_map>

#include "transport/env.h"

namespace uroce {

class KeyTable : public transport::MemoryAccess {
 public:
  // PD handles start at 1 (0 is never a valid PD) and are never reused while the table lives.
  uint32_t alloc_pd();
  // 0; EINVAL for an unknown PD; EBUSY while MRs or QPs use it.
  int dealloc_pd(uint32_t pd);
  bool pd_exists(uint32_t pd) const { return pds_.count(pd) != 0; }
  // QPs hold a reference on their PD so that dealloc_pd can refuse (EBUSY).
  int pd_ref(uint32_t pd);  // EINVAL for an unknown PD
  void pd_unref(uint32_t pd);

  // Registers [addr, addr+len) of this process, addressed by the peer and by SGEs at `iova`
  // (ibv_reg_mr uses iova == addr; ibv_reg_mr_iova2 another value). lkey == rkey, like rxe; keys
  // are unique and never reused while the table lives. 0, or EINVAL (unknown PD, len 0, bad
  // access combination: remote write or atomic without local write, IBTA o10-?/ibv_reg_mr(3)).
  int reg_mr(uint32_t pd, void* addr, uint64_t len, uint64_t iova, int access, uint32_t* lkey,
             uint32_t* rkey);
  int dereg_mr(uint32_t lkey);  // 0 or EINVAL
  size_t mr_count() const { return mrs_.size(); }

  // transport::MemoryAccess.
  transport::MemRef resolve_local(uint32_t lkey, uint32_t pd, uint64_t addr, uint64_t len,
                                  int access) override;
  transport::MemRef resolve_remote(uint32_t rkey, uint32_t pd, uint64_t addr, uint64_t len,
                                   int access) override;
  // IBV_ATOMIC_HCA asks only for atomicity against this device's atomics, but the operation is
  // done with a CPU atomic instruction on the 8-byte word, so it is also atomic against the
  // application's own atomics and other devices in the process (a stronger guarantee, at no
  // cost). A misaligned pointer (the transport should never pass one: IBTA C9-? makes misaligned
  // atomics an invalid request) falls back to the device-wide atomic lock.
  uint64_t atomic_fetch_add(uint8_t* ptr, uint64_t add) override;
  uint64_t atomic_cmp_swap(uint8_t* ptr, uint64_t compare, uint64_t swap) override;

 private:
  struct Mr {
    uint32_t pd;
    uint8_t* host;  // first byte in this process
    uint64_t iova;  // address of the first byte as work requests and peers name it
    uint64_t len;
    int access;  // IBV_ACCESS_* given at registration
  };
  transport::MemRef resolve(uint32_t key, uint32_t pd, uint64_t addr, uint64_t len, int access,
                            bool remote) const;

  std::unordered_map<uint32_t, uint32_t> pds_;  // PD → references (MRs + QPs)
  std::unordered_map<uint32_t, Mr> mrs_;        // key → region
  uint32_t next_pd_ = 1;
  // Keys start away from 0: some applications treat a zero key as "none".
  uint32_t next_key_ = 0x100;
  std::mutex atomic_mu_;  // only for misaligned atomics
};

}  // namespace uroce

// The memory-access rules, written once: one device's memory regions and memory windows, and the
// check every byte the transport reaches goes through — the key exists and is an lkey (local) or
// an rkey (remote), it belongs to the caller's PD, the range lies inside what it names, and the
// access is granted (IBTA 10.6: memory regions; 10.6.7: memory windows, bind and invalidate;
// ibv_reg_mr(3), ibv_bind_mw(3)).
//
// Pure: no lock, no clock, no random source, no bytes of its own. Whoever owns one serialises
// the calls (the engine's device lock) and decides what it does not: where keys come from, which
// PDs exist (the table counts each PD's regions and windows), how atomics are made atomic, and
// where a region's bytes are. TableMemory below is the transport::MemoryAccess over one; the
// engine's key table (unpredictable keys, PDs, atomics across threads: src/engine/key_table.h),
// the simulator's memory (regions without bytes, src/sim/memory.h) and the transport tests'
// FakeMemory (keys in order, tests/transport/harness.h) are TableMemorys, so all three check
// memory exactly alike.
#pragma once

#include <infiniband/verbs.h>

#include <cstdint>
#include <unordered_map>

#include "transport/env.h"

namespace uroce::transport {

class MemoryTable {
 public:
  // A window's R_Key is kMwKeyBit | index << 8 | key: the index names the window for its
  // lifetime, the low 8 bits change with every bind (the consumer's key for type 2, incremented
  // by the verbs layer for type 1), so a stale R_Key stops working. Region keys stay below
  // kMwKeyBit, so the two never collide.
  static constexpr uint32_t kMwKeyBit = 0x80000000u;
  // The rights a window can grant, and an rkey must have at least one of.
  static constexpr int kRemoteAccess =
      IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC;

  struct Region {
    uint32_t pd = 0;
    // First byte in this process; null for a region without bytes (the simulator's), and for
    // the implicit on-demand region, whose first byte is address 0.
    uint8_t* host = nullptr;
    uint64_t iova = 0;  // address of the first byte as work requests and peers name it
    uint64_t len = 0;
    int access = 0;          // IBV_ACCESS_* given at registration
    uint32_t bound_mws = 0;  // windows bound to it: it can neither go nor change while > 0
    // IBV_ACCESS_ON_DEMAND (on-demand paging): nothing was checked of its pages at
    // registration; TableMemory checks them each time the transport reaches them.
    bool on_demand() const { return (access & IBV_ACCESS_ON_DEMAND) != 0; }
  };

  // What resolve() found: on kOk the region holding the range and the range's offset in it.
  struct Access {
    MemStatus status = MemStatus::kBadKey;
    const Region* region = nullptr;
    uint64_t offset = 0;
    // The range in this process, for a region with bytes. Integer arithmetic: an implicit
    // on-demand region (the whole address space) starts at address 0, a null `host`.
    MemRef ref() const {
      if (status != MemStatus::kOk) return MemRef{status, nullptr};
      return MemRef{status,
                    reinterpret_cast<uint8_t*>(reinterpret_cast<uintptr_t>(region->host) + offset)};
    }
  };

  MemoryTable() = default;
  MemoryTable(const MemoryTable&) = delete;  // the lookup cache points into its own maps
  MemoryTable& operator=(const MemoryTable&) = delete;

  // ibv_reg_mr(3)'s rules for what a region may be: some bytes, in neither address space
  // wrapping around, and remote write or atomic only with local write.
  static bool valid_registration(const Region& r);

  // Regions (lkey == rkey, like rxe). add_region: false when `key` is in use or not below
  // kMwKeyBit (the caller picks keys). remove_region: 0; EINVAL (no such key); EBUSY while
  // windows are bound to it (they would name freed memory: IBTA 10.6.7.1, and rxe and mlx5
  // refuse too). replace_region (ibv_rereg_mr): the region's PD, translation and access become
  // r's; 0, EINVAL or EBUSY as for removal — bound windows were checked against the old ones.
  bool add_region(uint32_t key, const Region& r);
  int remove_region(uint32_t key);
  int replace_region(uint32_t key, const Region& r);
  const Region* region(uint32_t key) const;
  size_t region_count() const { return regions_.size(); }

  // Windows (IBTA 10.6.7). add_window: an unbound window of PD `pd` at `index` (nonzero, below
  // 2^23, unused: the caller picks it); returns its first R_Key. remove_window: 0 or EINVAL; a
  // bound window is unbound first (ibv_dealloc_mw(3)). Type 2 windows are associated with their
  // PD only (type 2B, as mlx5), not with the QP that bound them.
  uint32_t add_window(uint32_t index, uint32_t pd, ibv_mw_type type);
  int remove_window(uint32_t index);
  size_t window_count() const { return windows_.size(); }
  // The regions and windows of PD `pd`: while any, the PD cannot be deallocated.
  uint32_t pd_users(uint32_t pd) const {
    auto it = pd_users_.find(pd);
    return it == pd_users_.end() ? 0 : it->second;
  }
  // A BIND_MW work request posted on a QP of PD `qp_pd` (MemoryAccess::bind_mw).
  MemStatus bind(const MwBind& b, uint32_t qp_pd);
  // A LOCAL_INV, or a SEND with invalidate received, on a QP of PD `pd`
  // (MemoryAccess::invalidate).
  MemStatus invalidate(uint32_t rkey, uint32_t pd);

  // The check (MemoryAccess::resolve_local / resolve_remote): [addr, addr + len) under `key`
  // for `access` (IBV_ACCESS_* bits; 0: local read), for a local SGE or a remote request.
  // len == 0 names no byte: any key of the PD resolves. Inline: the transport resolves for
  // every packet it sends or places.
  Access resolve(uint32_t key, uint32_t pd, uint64_t addr, uint64_t len, int access,
                 bool remote) const;

 private:
  struct Window {
    uint32_t pd;
    ibv_mw_type type;
    uint32_t rkey;               // current R_Key (kMwKeyBit | index << 8 | key)
    bool bound = false;          // type 2 "valid", else "free"; type 1 bound with length > 0
    uint32_t mr = 0;             // key of the region it is bound to, while bound
    uint64_t addr = 0, len = 0;  // the window, in the region's address space
    int access = 0;              // IBV_ACCESS_REMOTE_* granted through the window
  };
  void unbind(Window& w);
  void release_pd(uint32_t pd);
  // The rest of the check once key and PD passed: [addr, addr + len) inside [lo, lo + span) of
  // region `g` (the region itself, or a window on it) with the `rights` granted there.
  static Access within(const Region& g, uint64_t lo, uint64_t span, int rights, bool remote,
                       uint64_t addr, uint64_t len, int access);
  Access resolve_window(uint32_t rkey, uint32_t pd, uint64_t addr, uint64_t len, int access) const;

  std::unordered_map<uint32_t, Region> regions_;     // key → region
  std::unordered_map<uint32_t, Window> windows_;     // window index → window
  std::unordered_map<uint32_t, uint32_t> pd_users_;  // PD → its regions and windows
  // The last region each side resolved (local SGEs, remote requests), found again without
  // hashing: a flow's packets name the same key one after the other. Node pointers of regions_
  // survive other insertions; remove_region clears the cache.
  mutable uint32_t cached_key_[2] = {};
  mutable const Region* cached_[2] = {};
};

// transport::MemoryAccess over one MemoryTable. Its regions' bytes are in this process (the
// engine's key table, the transport tests' fake memory, which differ only in how they hand out keys
// and, the engine, in how atomics are made atomic); the simulator's memory, whose regions have no
// bytes, places them itself (resolve_local/remote).
//
// On-demand regions (IBV_ACCESS_ON_DEMAND, ibv_reg_mr(3)): the application may register memory it
// has not mapped yet, or the whole address space (implicit ODP), and unmap or protect pages while
// the region lives; an RNIC faults such pages in when it reaches them and fails the access
// (a remote access or local protection error) when it cannot. Here every range of an on-demand
// region the transport resolves is first faulted in with the access it needs (fault_in): the
// range reaches the transport only once its pages are mapped with that access, so a bad access
// becomes kNotMapped instead of SIGSEGV. What this cannot cover: the application unmapping the
// very pages while the transport copies them (between the check and the copy, microseconds) — a
// program that unmaps memory a transfer is using races with that transfer by its own design.
class TableMemory : public MemoryAccess {
 public:
  // Whether this host can fault pages in without touching them (MADV_POPULATE_READ/WRITE,
  // Linux 5.14): on-demand regions need it, and the device offers ODP only when it is there.
  static bool on_demand_supported();
  // Faults [p, p + len) in for reading or for writing without reading or writing a byte: kOk, or
  // kNotMapped where a load (a store, with `write`) would raise SIGSEGV or SIGBUS.
  static MemStatus populate(const uint8_t* p, uint64_t len, bool write);

  MemRef resolve_local(uint32_t lkey, uint32_t pd, uint64_t addr, uint64_t len,
                       int access) override;
  MemRef resolve_remote(uint32_t rkey, uint32_t pd, uint64_t addr, uint64_t len,
                        int access) override;
  MemStatus bind_mw(const MwBind& b, uint32_t qp_pd) override;
  MemStatus invalidate(uint32_t rkey, uint32_t pd) override;
  // Plain read-modify-writes of the 8-byte word: atomic where one thread owns the memory (the
  // simulator, the transport tests). The engine's key table makes them atomic across threads.
  uint64_t atomic_fetch_add(uint8_t* ptr, uint64_t add) override;
  uint64_t atomic_cmp_swap(uint8_t* ptr, uint64_t compare, uint64_t swap) override;
  void atomic_store(uint8_t* ptr, uint64_t value) override;

 protected:
  // An on-demand region's range that resolved: populate() it (the engine's key table also counts
  // the failures).
  virtual MemStatus fault_in(const uint8_t* p, uint64_t len, bool write) {
    return populate(p, len, write);
  }

  MemoryTable table_;

 private:
  MemRef checked(const MemoryTable::Access& a, uint64_t len, int access);
};

inline MemoryTable::Access MemoryTable::within(const Region& g, uint64_t lo, uint64_t span,
                                               int rights, bool remote, uint64_t addr, uint64_t len,
                                               int access) {
  Access r;
  r.region = &g;
  // Written so that no sum can overflow: addr >= lo, then (addr - lo) + len <= span.
  const bool inside = addr >= lo && addr - lo <= span;
  if (len == 0) {
    // Zero-length access names no byte; the offset is only a harmless base.
    r.status = MemStatus::kOk;
    r.offset = (inside ? addr : lo) - g.iova;
    return r;
  }
  if (!inside || len > span - (addr - lo)) {
    r.status = MemStatus::kOutOfBounds;
    return r;
  }
  // Local reads need no flag (every region grants them); everything else must have been
  // granted, and an rkey with no remote right at all is no rkey (an R_Key violation).
  if ((remote && !(rights & kRemoteAccess)) || (rights & access) != access) {
    r.status = MemStatus::kNoAccess;
    return r;
  }
  r.status = MemStatus::kOk;
  r.offset = addr - g.iova;
  return r;
}

inline MemoryTable::Access MemoryTable::resolve(uint32_t key, uint32_t pd, uint64_t addr,
                                                uint64_t len, int access, bool remote) const {
  Access r;
  if (key & kMwKeyBit) {
    // Windows have only an R_Key: an SGE cannot name one (IBTA 10.6.7).
    if (remote) return resolve_window(key, pd, addr, len, access);
    return r;
  }
  const Region* found = cached_[remote];
  if (!found || cached_key_[remote] != key) {
    auto it = regions_.find(key);
    if (it == regions_.end()) return r;
    found = &it->second;
    cached_key_[remote] = key;
    cached_[remote] = found;
  }
  if (found->pd != pd) {
    r.status = MemStatus::kBadPd;
    return r;
  }
  return within(*found, found->iova, found->len, found->access, remote, addr, len, access);
}

}  // namespace uroce::transport

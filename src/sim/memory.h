// Memory behind a simulated host's MRs, without the bytes: regions of any size, checked by the
// engine's own rules (transport::MemoryTable: key, PD, bounds, access), whose contents live in
// one small scratch window. A 256-host fabric moving megabyte messages then needs no gigabytes of
// buffers; the packets still carry (and the ICRC still covers) real bytes — whatever the
// window holds.
//
// The pointer contract: a resolve of at most kWindow bytes returns a pointer valid for that many
// bytes (into the window, at the region offset modulo its size); a longer one — the transport
// checks whole SGEs and whole RETH ranges before it moves anything, and moves bytes a packet at
// a time — succeeds with a null pointer, so a caller that dereferenced it would fault at once
// rather than read beyond the window.
#pragma once

#include <cstdint>
#include <vector>

#include "transport/env.h"
#include "transport/memory_table.h"

namespace uroce::sim {

class SyntheticMemory final : public transport::TableMemory {
 public:
  // Larger than any packet's payload (path MTU 4096).
  static constexpr uint64_t kWindow = 16 * 1024;

  SyntheticMemory() : scratch_(2 * kWindow, 0) {}
  // A region of `len` bytes at virtual address `base` of PD `pd` with IBV_ACCESS_* `access`;
  // returns its key (lkey == rkey).
  uint32_t reg(uint32_t pd, uint64_t base, uint64_t len, int access);

  transport::MemRef resolve_local(uint32_t lkey, uint32_t pd, uint64_t addr, uint64_t len,
                                  int access) override;
  transport::MemRef resolve_remote(uint32_t rkey, uint32_t pd, uint64_t addr, uint64_t len,
                                   int access) override;

 private:
  // Where the bytes of a resolved range are: the window, or nothing for a longer range.
  transport::MemRef place(const transport::MemoryTable::Access& a, uint64_t len);

  uint32_t next_key_ = 0x100;
  std::vector<uint8_t> scratch_;  // 2·kWindow, so any resolve of <= kWindow bytes fits
};

}  // namespace uroce::sim

// Copies between a message laid out over a scatter/gather list and a packet payload. Every access
// goes through MemoryAccess, which checks key, PD, bounds and access flags; nothing here
// dereferences an address it did not get from there.
#pragma once

#include <array>
#include <cstdint>

#include "transport/env.h"
#include "transport/qp.h"

namespace uroce::transport {

// Sum of the SGE lengths (64-bit: the sum of 16 32-bit lengths can exceed 2^32).
uint64_t sge_total(const Sge* sges, uint32_t n);

// A resolved piece of a message: host memory that MemoryAccess vouched for.
struct MemPiece {
  const uint8_t* ptr = nullptr;
  uint32_t len = 0;
};
// At most one piece per SGE.
using MemPieces = std::array<MemPiece, kMaxSge>;

// Resolves `len` message bytes starting at byte `offset` of the message held by `sges` (access
// 0: local read) into pieces, without copying, so a caller can check before it allocates a
// transmit buffer. Returns the status of the first SGE that does not resolve.
MemStatus resolve_read(MemoryAccess& mem, uint32_t pd, const Sge* sges, uint32_t n, uint64_t offset,
                       uint32_t len, MemPieces& pieces, uint32_t* npieces);
// Leaves a payload of one piece where it lies (TxBuf::ext; the flush that follows reads it, as a
// NIC's DMA would) when the sink takes it by reference — at least `gather_min` bytes (0: never)
// and no pad — setting buf->len to the `hdr` bytes of headers, and returns true; else false,
// and the caller copies it in.
inline bool leave_in_place(TxBuf* buf, size_t hdr, const uint8_t* payload, uint32_t len,
                           uint8_t pad, uint32_t gather_min) {
  if (gather_min == 0 || len < gather_min || pad != 0) return false;
  buf->ext = payload;
  buf->ext_len = len;
  buf->len = static_cast<uint32_t>(hdr);
  return true;
}
// Copies resolved pieces to `dst` in order; returns the bytes copied.
uint32_t copy_pieces(const MemPieces& pieces, uint32_t npieces, uint8_t* dst);
// Copies `len` bytes from `src` into the message held by `sges` at byte `offset`, with
// IBV_ACCESS_LOCAL_WRITE. The caller has checked offset + len against sge_total().
MemStatus scatter(MemoryAccess& mem, uint32_t pd, const Sge* sges, uint32_t n, uint64_t offset,
                  const uint8_t* src, uint32_t len);
// Resolves every SGE once (access as above): catches a bad lkey before the first packet.
MemStatus check_sges(MemoryAccess& mem, uint32_t pd, const Sge* sges, uint32_t n, int access);

}  // namespace uroce::transport

#include "transport/dma.h"

#include <algorithm>
#include <cstring>

namespace uroce::transport {
namespace {

// Walks the part of the message [offset, offset + len) SGE by SGE, calling fn(sge, sge_offset,
// chunk, done) for each piece; stops on the first non-kOk status.
template <typename Fn>
MemStatus walk(const Sge* sges, uint32_t n, uint64_t offset, uint32_t len, Fn&& fn) {
  uint32_t done = 0;
  for (uint32_t i = 0; i < n && done < len; ++i) {
    const Sge& s = sges[i];
    if (offset >= s.length) {
      offset -= s.length;
      continue;
    }
    const uint32_t chunk = static_cast<uint32_t>(std::min<uint64_t>(s.length - offset, len - done));
    const MemStatus st = fn(s, offset, chunk, done);
    if (st != MemStatus::kOk) return st;
    done += chunk;
    offset = 0;
  }
  // Asked for more than the SGEs hold: the caller's length check failed; report, never overrun.
  return done == len ? MemStatus::kOk : MemStatus::kOutOfBounds;
}

}  // namespace

uint64_t sge_total(const Sge* sges, uint32_t n) {
  uint64_t t = 0;
  for (uint32_t i = 0; i < n; ++i) t += sges[i].length;
  return t;
}

MemStatus resolve_read(MemoryAccess& mem, uint32_t pd, const Sge* sges, uint32_t n, uint64_t offset,
                       uint32_t len, MemPieces& pieces, uint32_t* npieces) {
  *npieces = 0;
  return walk(sges, std::min(n, kMaxSge), offset, len,
              [&](const Sge& s, uint64_t off, uint32_t chunk, uint32_t) {
                const MemRef r = mem.resolve_local(s.lkey, pd, s.addr + off, chunk, 0);
                if (r.status == MemStatus::kOk) pieces[(*npieces)++] = {r.ptr, chunk};
                return r.status;
              });
}

uint32_t copy_pieces(const MemPieces& pieces, uint32_t npieces, uint8_t* dst) {
  uint32_t done = 0;
  for (uint32_t i = 0; i < npieces; ++i) {
    std::memcpy(dst + done, pieces[i].ptr, pieces[i].len);
    done += pieces[i].len;
  }
  return done;
}

MemStatus scatter(MemoryAccess& mem, uint32_t pd, const Sge* sges, uint32_t n, uint64_t offset,
                  const uint8_t* src, uint32_t len) {
  return walk(sges, std::min(n, kMaxSge), offset, len,
              [&](const Sge& s, uint64_t off, uint32_t chunk, uint32_t done) {
                const MemRef r =
                    mem.resolve_local(s.lkey, pd, s.addr + off, chunk, IBV_ACCESS_LOCAL_WRITE);
                if (r.status == MemStatus::kOk) std::memcpy(r.ptr, src + done, chunk);
                return r.status;
              });
}

MemStatus check_sges(MemoryAccess& mem, uint32_t pd, const Sge* sges, uint32_t n, int access) {
  for (uint32_t i = 0; i < std::min(n, kMaxSge); ++i) {
    const MemRef r = mem.resolve_local(sges[i].lkey, pd, sges[i].addr, sges[i].length, access);
    if (r.status != MemStatus::kOk) return r.status;
  }
  return MemStatus::kOk;
}

}  // namespace uroce::transport

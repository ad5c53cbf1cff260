// RoCEv2 ICRC, IBTA Annex A17.3.3 (IPv4 and IPv6).
//
// The ICRC is the standard CRC-32 of IEEE 802.3 (zlib's crc32: reflected polynomial 0xEDB88320,
// initial value and final XOR 0xFFFFFFFF) over a pseudo-packet in which every field that a router
// may change is replaced by ones:
//   8 bytes of 0xFF              stand-in for the LRH (RoCEv2 has none)
//   IPv4 header                  TOS (incl. ECN), TTL and header checksum set to all ones
//   UDP header                   checksum set to all ones
//   BTH                          resv8a (byte 4, which carries FECN/BECN in RoCEv2) set to ones
//   extended headers, payload, pad
// Over IPv6 the 40-byte IPv6 header takes the IPv4 header's place with Traffic Class (DSCP and
// ECN), Flow Label and Hop Limit set to all ones: the fields a router may change, as for IPv4 (and
// as IBTA 7.8.1 masks them in a GRH); Version, Payload Length, Next Header and both addresses
// are covered. Linux rxe masks the same (rxe_icrc.c, the IPv6 branch of rxe_icrc_hdr).
// Byte order, found from the known-answer frames in tests/wire (ConnectX-4 Lx CNP, Linux rxe, and
// a third-party UC SEND): the wire carries the zlib crc32 value least significant byte first, so
// icrc() returns exactly zlib's value and store_le32() puts it on the wire.
#include "transport/wire/icrc.h"

#include <isa-l/crc.h>
#include <zlib.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <bit>
#include <cstdint>
#include <cstring>

#include "transport/wire/wire.h"

namespace uroce::wire {
namespace {

constexpr size_t kLrhStandIn = 8;
constexpr size_t kIpv4MinHeader = 20;
constexpr size_t kUdpHeader = 8;
constexpr size_t kPseudoBytes = kLrhStandIn + kIpv4MinHeader + kUdpHeader;
constexpr size_t kIpv6Header = 40;
constexpr size_t kPseudoBytes6 = kLrhStandIn + kIpv6Header + kUdpHeader;
constexpr size_t kIpIdOffset = 4;       // within the IPv4 header
constexpr size_t kBthResv8aOffset = 4;  // within BTH
constexpr uint8_t kIpProtoUdp = 17;

// ISA-L's crc32_gzip_refl computes the same reflected IEEE CRC-32 as zlib's crc32 (the same
// seed in and value out, so it chains), with carry-less multiplication: about 20x zlib's speed
// here on 4 KiB packets (bench/wire_bench). zlib stays the reference in tests/wire/icrc_test.cc,
// and for crc32_combine below.
//
// Which of ISA-L's routines: its own dispatch picks the widest the CPU has, on AVX-512 machines
// the 512-bit folding loop (by16_10). That is the fastest in a loop over warm buffers, but a
// datapath computes one packet's CRC between other work, and there the 512-bit routine cost 3-7x
// the 128-bit ones on this project's build host (rdtsc around Datapath::accept over memif: 720
// against 215 cycles a 1 KiB packet, 760-980 against ~110 an ACK on the sending side, where the
// 1 KiB CRCs ran too; 64 KiB ib_write_bw 1040-1090 against 1437-1591 MB/s) — the cost of bringing
// up the wide units (and their clock licence) for a short burst of use. So uroce takes the
// 128-bit PCLMULQDQ routine, VEX-encoded where the CPU has AVX, and ISA-L's dispatch only where
// neither exists. The two are exported by libisal but not declared in its headers: weak, so a
// libisal without them falls back to the dispatch. UROCE_ICRC picks another routine, for hosts
// where the wide one keeps its speed (select_icrc_routine).
//
// AMD's AVX-512 (Zen 4 on) runs without a clock licence: there the wide routine keeps its speed
// inside the datapath too, and the automatic choice is ISA-L's dispatch. Measured on an AMD EPYC
// build host (2026-12-07): wire_bench 4 KiB 39.7 against 12.2 GB/s; 64 KiB WRITEs over loopback
// sockets, three alternating pairs beside a CI build, 764-1064 against 504-678 MB/s and 972-1109
// against 725-893 MB per CPU-second (docs/performance.md).
extern "C" {
uint32_t crc32_gzip_refl_by8_02(uint32_t, const unsigned char*, uint64_t) __attribute__((weak));
uint32_t crc32_gzip_refl_by8(uint32_t, const unsigned char*, uint64_t) __attribute__((weak));
}

using CrcFn = uint32_t (*)(uint32_t, const unsigned char*, uint64_t);

struct CrcImpl {
  CrcFn fn;
  const char* name;
};

// zlib's crc32, in the same shape as ISA-L's routines (a packet is far below uInt's range).
uint32_t zlib_crc(uint32_t crc, const unsigned char* p, uint64_t n) {
  return static_cast<uint32_t>(crc32(crc, p, static_cast<uInt>(n)));
}

const CrcImpl kIsal{crc32_gzip_refl, "ISA-L crc32_gzip_refl (its own dispatch)"};
const CrcImpl kZlibImpl{zlib_crc, "zlib crc32 (table-driven)"};

// The 128-bit routine this CPU and libisal offer, or null.
const CrcImpl* pclmul_impl() {
#if defined(__x86_64__)
  static const CrcImpl kAvx{crc32_gzip_refl_by8_02,
                            "ISA-L crc32_gzip_refl_by8_02 (128-bit PCLMULQDQ, AVX)"};
  static const CrcImpl kSse{crc32_gzip_refl_by8,
                            "ISA-L crc32_gzip_refl_by8 (128-bit PCLMULQDQ, SSE)"};
  __builtin_cpu_init();
  if (__builtin_cpu_supports("pclmul")) {
    if (crc32_gzip_refl_by8_02 && __builtin_cpu_supports("avx")) return &kAvx;
    if (crc32_gzip_refl_by8 && __builtin_cpu_supports("sse4.1")) return &kSse;
  }
#endif
  return nullptr;
}

// An AMD CPU with AVX-512 and its carry-less multiply, where ISA-L's dispatch takes by16_10.
bool wide_crc_keeps_its_speed() {
#if defined(__x86_64__)
  __builtin_cpu_init();
  return __builtin_cpu_is("amd") && __builtin_cpu_supports("avx512f") &&
         __builtin_cpu_supports("vpclmulqdq");
#else
  return false;
#endif
}

const CrcImpl* impl_for(IcrcRoutine r) {
  switch (r) {
    case IcrcRoutine::kAuto: {
      static const CrcImpl kIsalWide{crc32_gzip_refl,
                                     "ISA-L crc32_gzip_refl (its own dispatch: 512-bit on AMD)"};
      if (wide_crc_keeps_its_speed()) return &kIsalWide;
      const CrcImpl* p = pclmul_impl();
      return p ? p : &kIsal;
    }
    case IcrcRoutine::kPclmul:
      return pclmul_impl();
    case IcrcRoutine::kIsal:
      return &kIsal;
    case IcrcRoutine::kZlib:
      return &kZlibImpl;
  }
  return nullptr;
}

// The routine in use: the automatic choice until select_icrc_routine() names another. One relaxed
// load per CRC call; the first call makes the automatic choice (static initialisers of other
// translation units may compute ICRCs before anything is selected), unless a selection came first.
std::atomic<const CrcImpl*> g_selected{nullptr};

const CrcImpl& crc_impl() {
  const CrcImpl* p = g_selected.load(std::memory_order_relaxed);
  if (p) [[likely]]
    return *p;
  const CrcImpl* automatic = impl_for(IcrcRoutine::kAuto);
  // A selection made meanwhile wins; the loser of a race between two first calls agrees anyway.
  if (g_selected.compare_exchange_strong(p, automatic, std::memory_order_relaxed))
    return *automatic;
  return *p;
}

uint32_t crc_update(uint32_t crc, const uint8_t* p, size_t n) {
  return crc_impl().fn(crc, p, n);
}

// Packets up to this size are copied whole behind the pseudo-header, so their ICRC is one call:
// each call of ISA-L's folding CRC has a fixed cost of some 15-20 ns that dominates short
// inputs, and ACKs and small messages are most of the packets a latency-bound flow sends
// (bench/path_bench: four calls per packet were a third of a 64-byte WRITE's cost).
constexpr size_t kShortIb = 256;

// The CRC of `head` (the masked pseudo-header, `head_len` bytes, with room for kShortIb more
// behind it) followed by the IB packet with BTH resv8a masked to ones. Reads only inside `ib`.
uint32_t crc_head_ib(uint8_t* head, size_t head_len, std::span<const uint8_t> ib) {
  if (ib.size() <= kShortIb) {
    if (!ib.empty()) std::memcpy(head + head_len, ib.data(), ib.size());  // data() may be null
    if (ib.size() > kBthResv8aOffset) head[head_len + kBthResv8aOffset] = 0xff;
    return crc_update(0, head, head_len + ib.size());
  }
  // Longer: the BTH rides with the pseudo-header, masked in the copy; the rest follows.
  std::memcpy(head + head_len, ib.data(), kBthBytes);
  head[head_len + kBthResv8aOffset] = 0xff;
  const uint32_t crc = crc_update(0, head, head_len + kBthBytes);
  return crc_update(crc, ib.data() + kBthBytes, ib.size() - kBthBytes);
}

// Whole-word big-endian stores (one bswap and one store where the compiler would otherwise
// keep the byte stores of put_be16 apart).
void store_be32(uint8_t* p, uint32_t v) {
  if constexpr (std::endian::native == std::endian::little) v = __builtin_bswap32(v);
  std::memcpy(p, &v, sizeof v);
}
void store_be64(uint8_t* p, uint64_t v) {
  if constexpr (std::endian::native == std::endian::little) v = __builtin_bswap64(v);
  std::memcpy(p, &v, sizeof v);
}

// Linear part of the CRC contributed by each IP ID bit at the ID field's position, i.e. the CRC
// difference between ID = 1<<i and ID = 0 over just the two ID bytes. Shifting these through the
// bytes that follow the ID field (crc32_combine_op) gives each bit's effect on the final ICRC.
std::array<uint32_t, 16> make_id_bit_crcs() {
  std::array<uint32_t, 16> g{};
  const uint8_t zero[2] = {0, 0};
  const uint32_t c0 = uint32_t(crc32(0, zero, 2));
  for (int i = 0; i < 16; ++i) {
    uint8_t b[2];
    put_be16(b, uint16_t(1u << i));
    g[i] = uint32_t(crc32(0, b, 2)) ^ c0;
  }
  return g;
}

// Each ID bit's effect on the final ICRC for a packet with `after` bytes behind the ID field, in
// echelon form (vec[i] has leading bit pivot[i], pivots strictly decreasing) and tagged with the ID
// bits that produce it, so reducing a CRC difference by it yields the ID in one pass.
struct IdBasis {
  size_t after = SIZE_MAX;
  uint8_t pivot[16] = {};
  uint32_t vec[16] = {};
  uint16_t combo[16] = {};
};

IdBasis make_id_basis(size_t after) {
  static const std::array<uint32_t, 16> kIdBitCrc = make_id_bit_crcs();
  const uLong op = crc32_combine_gen(z_off_t(after));
  // Gaussian elimination over GF(2), indexed by leading bit.
  uint32_t by_bit[32] = {};
  uint16_t combo_by_bit[32] = {};
  for (int i = 0; i < 16; ++i) {
    uint32_t v = uint32_t(crc32_combine_op(kIdBitCrc[i], 0, op));
    uint16_t c = uint16_t(1u << i);
    for (int bit = 31; bit >= 0 && v; --bit) {
      if (!(v >> bit & 1)) continue;
      if (!by_bit[bit]) {
        by_bit[bit] = v;
        combo_by_bit[bit] = c;
        break;
      }
      v ^= by_bit[bit];
      c ^= combo_by_bit[bit];
    }
    // v == 0 would mean two ID values give the same ICRC. It cannot happen: the 16 ID bits are
    // one burst, and CRC-32 detects every burst of up to 32 bits. (Tested over all 65536 IDs.)
  }
  IdBasis b;
  b.after = after;
  int n = 0;
  for (int bit = 31; bit >= 0 && n < 16; --bit) {
    if (!by_bit[bit]) continue;
    b.pivot[n] = uint8_t(bit);
    b.vec[n] = by_bit[bit];
    b.combo[n] = combo_by_bit[bit];
    ++n;
  }
  return b;
}

}  // namespace

const char* icrc_implementation() {
  return crc_impl().name;
}

std::optional<IcrcRoutine> parse_icrc_routine(std::string_view s) {
  if (s.empty() || s == "auto") return IcrcRoutine::kAuto;
  if (s == "pclmul") return IcrcRoutine::kPclmul;
  if (s == "isal") return IcrcRoutine::kIsal;
  if (s == "zlib") return IcrcRoutine::kZlib;
  return std::nullopt;
}

bool icrc_routine_available(IcrcRoutine r) {
  return impl_for(r) != nullptr;
}

bool select_icrc_routine(IcrcRoutine r) {
  const CrcImpl* p = impl_for(r);
  if (!p) return false;
  g_selected.store(p, std::memory_order_relaxed);
  return true;
}

uint32_t icrc(const Ipv4UdpFraming& f, std::span<const uint8_t> ib, std::span<const uint8_t> more) {
  const size_t udp_len = kUdpHeader + ib.size() + more.size() + kIcrcBytes;
  const uint64_t ip_len = kIpv4MinHeader + udp_len;
  // The pseudo-header in four word stores rather than field by field: it is built for every
  // packet sent and received, and byte stores were a third of a small packet's ICRC
  // (bench/path_bench under callgrind).
  alignas(8) uint8_t h[kPseudoBytes + kShortIb];
  store_be64(h, ~uint64_t{0});  // the LRH stand-in
  // Version 4 and IHL 5 (the framing has no options), TOS masked; total length; ID; flags.
  store_be64(h + 8, uint64_t{0x45ff} << 48 | (ip_len & 0xffff) << 32 | uint64_t{f.ip_id} << 16 |
                        (f.dont_fragment ? 0x4000u : 0u));
  // TTL masked, protocol UDP, header checksum masked; source address.
  store_be64(h + 16, uint64_t{0xff} << 56 | uint64_t{kIpProtoUdp} << 48 | uint64_t{0xffff} << 32 |
                         f.src_ip);
  // Destination address; UDP source and destination ports.
  store_be64(h + 24, uint64_t{f.dst_ip} << 32 | uint64_t{f.src_port} << 16 | f.dst_port);
  // UDP length; UDP checksum masked.
  store_be32(h + 32, uint32_t(udp_len & 0xffff) << 16 | 0xffff);
  const uint32_t crc = crc_head_ib(h, kPseudoBytes, ib);
  return more.empty() ? crc : crc_update(crc, more.data(), more.size());
}

uint32_t icrc(const Ipv6UdpFraming& f, std::span<const uint8_t> ib, std::span<const uint8_t> more) {
  // UDP length and IPv6 Payload Length are the same number: UDP is the only header behind IPv6.
  const size_t udp_len = kUdpHeader + ib.size() + more.size() + kIcrcBytes;
  // Word stores as in the IPv4 overload: this builds for every packet too.
  alignas(8) uint8_t h[kPseudoBytes6 + kShortIb];
  store_be64(h, ~uint64_t{0});  // the LRH stand-in
  // Version 6, Traffic Class and Flow Label masked; Payload Length; Next Header UDP; Hop Limit
  // masked.
  store_be64(h + 8, uint64_t{0x6fffffff} << 32 | (udp_len & 0xffff) << 16 |
                        uint64_t{kIpProtoUdp} << 8 | 0xff);
  std::memcpy(h + 16, f.src.data(), 16);
  std::memcpy(h + 32, f.dst.data(), 16);
  // UDP ports, length; checksum masked.
  store_be64(h + 48, uint64_t{f.src_port} << 48 | uint64_t{f.dst_port} << 32 |
                         (udp_len & 0xffff) << 16 | 0xffff);
  const uint32_t crc = crc_head_ib(h, kPseudoBytes6, ib);
  return more.empty() ? crc : crc_update(crc, more.data(), more.size());
}

uint32_t icrc_grh(uint32_t src_ip, uint32_t dst_ip, std::span<const uint8_t> ib,
                  std::span<const uint8_t> more) {
  uint8_t h[kLrhStandIn + 40 + kShortIb];
  std::memset(h, 0xff, kLrhStandIn);
  uint8_t* g = h + kLrhStandIn;
  // IPVer 6; TClass and FlowLabel masked to ones (IBTA 7.8.1: the fields a router may change).
  put_be32(g, 0x6fffffff);
  put_be16(g + 4, uint16_t(ib.size() + more.size() + kIcrcBytes));  // PayLen
  g[6] = 0x1b;                                                      // NxtHdr: the BTH
  g[7] = 0xff;                                                      // HopLmt masked
  std::memset(g + 8, 0, 32);                                        // the GIDs, IPv4-mapped
  g[18] = g[19] = 0xff;
  put_be32(g + 20, src_ip);
  g[34] = g[35] = 0xff;
  put_be32(g + 36, dst_ip);
  const uint32_t crc = crc_head_ib(h, kLrhStandIn + 40, ib);
  return more.empty() ? crc : crc_update(crc, more.data(), more.size());
}

uint32_t icrc_ipv4(std::span<const uint8_t> pkt) {
  // Malformed input cannot crash this: each masked field is masked only if it lies inside `pkt`,
  // and the result simply will not match the received ICRC.
  uint8_t head[kLrhStandIn + 60 + kUdpHeader + kShortIb];
  std::memset(head, 0xff, kLrhStandIn);
  if (pkt.size() < kIpv4MinHeader) {
    if (!pkt.empty()) std::memcpy(head + kLrhStandIn, pkt.data(), pkt.size());
    return crc_update(0, head, kLrhStandIn + pkt.size());
  }
  size_t ihl = size_t(pkt[0] & 0x0f) * 4;
  if (ihl < kIpv4MinHeader || ihl + kUdpHeader > pkt.size()) ihl = kIpv4MinHeader;
  uint8_t* hdr = head + kLrhStandIn;
  const size_t hlen = std::min(ihl + kUdpHeader, pkt.size());
  std::memcpy(hdr, pkt.data(), hlen);
  hdr[1] = 0xff;                                                     // TOS
  hdr[8] = 0xff;                                                     // TTL
  hdr[10] = hdr[11] = 0xff;                                          // header checksum
  if (hlen == ihl + kUdpHeader) hdr[ihl + 6] = hdr[ihl + 7] = 0xff;  // UDP checksum
  return crc_head_ib(head, kLrhStandIn + hlen, pkt.subspan(hlen));
}

uint32_t icrc_ipv6(std::span<const uint8_t> pkt) {
  // As icrc_ipv4: a field is masked only where it lies inside `pkt`, so a short or malformed
  // packet gives a mismatch, never an out-of-bounds read.
  uint8_t head[kPseudoBytes6 + kShortIb];
  std::memset(head, 0xff, kLrhStandIn);
  uint8_t* hdr = head + kLrhStandIn;
  const size_t hlen = std::min(kIpv6Header + kUdpHeader, pkt.size());
  if (hlen) std::memcpy(hdr, pkt.data(), hlen);  // data() may be null
  if (hlen > 0) hdr[0] |= 0x0f;                  // Traffic Class, high nibble (Version stays)
  for (size_t i = 1; i < 4 && i < hlen; ++i) hdr[i] = 0xff;  // TC low nibble and Flow Label
  if (hlen > 7) hdr[7] = 0xff;                               // Hop Limit
  if (hlen == kIpv6Header + kUdpHeader) hdr[kIpv6Header + 6] = hdr[kIpv6Header + 7] = 0xff;
  if (hlen < kIpv6Header + kUdpHeader) return crc_update(0, head, kLrhStandIn + hlen);
  return crc_head_ib(head, kLrhStandIn + hlen, pkt.subspan(hlen));
}

bool icrc_matches_some_ip_id(const Ipv4UdpFraming& f, std::span<const uint8_t> ib,
                             uint32_t received, uint16_t* ip_id_out) {
  // For equal-length messages CRC(a ^ d) = CRC(a) ^ L(d) with L linear over GF(2), so with the
  // ID unknown: received == icrc(ID=0) ^ L(ID). L maps the 16 ID bits to 32 CRC bits and is
  // injective (a CRC-32 detects every error burst of at most 32 bits), so at most one ID fits.
  Ipv4UdpFraming f0 = f;
  f0.ip_id = 0;
  uint32_t target = icrc(f0, ib) ^ received;
  if (target == 0) {
    if (ip_id_out) *ip_id_out = 0;
    return true;
  }

  // Bytes after the ID field: the rest of the IPv4 header, the UDP header and the IB packet.
  const size_t after = (kIpv4MinHeader - kIpIdOffset - 2) + kUdpHeader + ib.size();
  // The basis depends only on that length, and a flow's packets come in a few lengths (full-MTU
  // segments, ACKs), so keep a few per thread: a hit costs 16 conditional XORs.
  thread_local IdBasis cache[8];
  IdBasis& b = cache[(after / 4) % 8];
  if (b.after != after) b = make_id_basis(after);
  uint16_t id = 0;
  for (int i = 0; i < 16; ++i) {
    if (target >> b.pivot[i] & 1) {
      target ^= b.vec[i];
      id ^= b.combo[i];
    }
  }
  if (target != 0) return false;  // outside the span of the ID bits: no ID makes the ICRC valid
  if (ip_id_out) *ip_id_out = id;
  return true;
}

}  // namespace uroce::wire

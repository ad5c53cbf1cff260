// Which IPv4 Identifications each source sends, for a port that cannot see the IP header (the
// kernel UDP socket). The ICRC covers the ID (docs/wire-format.md), so such a port accepts a
// datagram when *some* ID makes its ICRC valid — and a corrupted datagram finds one with
// probability about 2^-16 (16 unknown bits under a 32-bit CRC), an escape the stress tests'
// corruption runs hit a few times in a hundred. Senders differ: uroce's socket port sends ID 0,
// or 0, 1, 2 … for the packets of one GSO send (at most 64); rxe and RNICs count over the whole
// range. The guard learns which kind a source is and refuses, from a source that has only ever
// needed small IDs, a datagram that only a large one validates: that is almost certainly a
// corrupted one. A uroce peer's corruption then escapes only through the small IDs and those just
// past them (below): 2^-25.
//
// Learning: a source is "counting" from its first datagram with a large ID, unless it has
// already sent kTrusted datagrams with small ones; then kSwitch large-ID datagrams in a row are
// needed (another sender took the address over, say rxe after a uroce program exited; a
// corrupted escape in a row of kSwitch is out of the question) — or one large ID at most
// kMaxStep past the source's last accepted ID: a counter that started small and went on (rxe's
// per-destination counter can start anywhere; CI saw it start below 64 and the guard refuse its
// next 7 datagrams). That admits IDs up to 79 from a uroce peer too: its escape stays about 2^-25.
// Sources share kSlots slots by address hash; one that loses its slot starts learning again, which
// only delays the guard. One thread (the receive side) calls it.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>

namespace uroce {

class IpIdGuard {
 public:
  static constexpr uint16_t kMaxSmallId = 63;  // a GSO send's packets: IDs 0 … 63
  static constexpr uint32_t kTrusted = 16;
  static constexpr uint32_t kSwitch = 8;
  static constexpr uint16_t kMaxStep = 16;
  static constexpr std::size_t kSlots = 256;

  // Whether a datagram from src_ip whose ICRC is valid under IP ID `id` (and no smaller one
  // was tried first: the caller solves for the ID) is accepted.
  bool accept(uint32_t src_ip, uint16_t id);

 private:
  struct Slot {
    uint32_t ip = 0;        // 0 (no source sends from 0.0.0.0): the slot is free
    bool counting = false;  // sends IDs over the whole range: every ID is accepted
    uint8_t small = 0;      // datagrams with small IDs, up to kTrusted
    uint8_t large_run = 0;  // large-ID datagrams in a row refused since the last small one
    uint16_t last = 0;      // the last accepted datagram's ID
  };
  std::array<Slot, kSlots> slots_{};
};

}  // namespace uroce

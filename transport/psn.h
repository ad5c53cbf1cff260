// Packet sequence numbers: 24-bit counters that wrap from 0xFFFFFF to 0 (IBTA 9.7.1). Every PSN
// in the transport is a Psn, so no role can compare two of them with a plain `<` by mistake.
#pragma once

#include <cstdint>

namespace uroce::transport {

inline constexpr uint32_t kPsnMask = 0x00ffffff;

class Psn {
 public:
  constexpr Psn() = default;
  constexpr explicit Psn(uint32_t v) : v_(v & kPsnMask) {}
  constexpr uint32_t value() const { return v_; }

  // Signed distance a - b in [-2^23, 2^23): positive when `a` is later than `b`. Two PSNs more
  // than 2^23 apart cannot both be live (IBTA 9.7.4.1.3 splits the PSN space in halves).
  friend constexpr int32_t operator-(Psn a, Psn b) {
    return static_cast<int32_t>(static_cast<uint32_t>(a.v_ - b.v_) << 8) >> 8;
  }
  friend constexpr Psn operator+(Psn a, uint32_t n) { return Psn(a.v_ + n); }
  friend constexpr Psn operator-(Psn a, uint32_t n) { return Psn(a.v_ - n); }
  constexpr Psn& operator+=(uint32_t n) { return *this = *this + n; }
  constexpr Psn& operator++() { return *this += 1; }

  friend constexpr bool operator==(Psn a, Psn b) = default;
  // Wrap-safe ordering.
  friend constexpr bool operator<(Psn a, Psn b) { return (a - b) < 0; }
  friend constexpr bool operator<=(Psn a, Psn b) { return (a - b) <= 0; }
  friend constexpr bool operator>(Psn a, Psn b) { return (a - b) > 0; }
  friend constexpr bool operator>=(Psn a, Psn b) { return (a - b) >= 0; }

 private:
  uint32_t v_ = 0;
};

// Number of PSNs in [from, to), to >= from.
inline constexpr uint32_t psn_span(Psn from, Psn to) {
  return static_cast<uint32_t>(to - from);
}

}  // namespace uroce::transport

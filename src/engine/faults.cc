#include "engine/faults.h"

#include <algorithm>
#include <utility>

namespace uroce {
namespace {

// BTH byte 4 (resv8a) is masked to ones by the ICRC (Annex A17.3.3), so a flip there goes
// unnoticed, as it would on a real link; corruption avoids it so that every corrupted datagram is
// one the receiver's ICRC check must catch. Its bit positions in the datagram:
constexpr uint64_t kMaskedFirstBit = 4 * 8, kMaskedEndBit = 5 * 8;

}  // namespace

FaultInjector::FaultInjector(const FaultSpec& spec, uint64_t seed, FaultCounterRefs counters)
    : spec_(spec), prng_(seed), c_(counters) {}

// splitmix64 (Steele, Lea, Flood 2014): tiny, seedable with any value, and the generator the
// receive loss always used, so `loss=p,seed=n` keeps dropping the same datagrams.
uint64_t FaultInjector::next_u64() {
  uint64_t z = (prng_ += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

double FaultInjector::next_unit() {
  return static_cast<double>(next_u64() >> 11) * 0x1.0p-53;  // 53 random bits
}

uint64_t FaultInjector::next_below(uint64_t n) {
  // Multiply-shift (Lemire); the bias for the small n used here is far below 2^-32.
  return static_cast<uint64_t>((static_cast<unsigned __int128>(next_u64()) * n) >> 64);
}

void FaultInjector::corrupt(std::vector<uint8_t>& b) {
  uint64_t bits = static_cast<uint64_t>(b.size()) * 8;
  uint64_t usable = bits > kMaskedEndBit ? bits - (kMaskedEndBit - kMaskedFirstBit) : bits;
  if (usable == 0) return;
  for (uint32_t i = 0; i < spec_.corrupt_bits; ++i) {
    uint64_t pos = next_below(usable);
    if (bits > kMaskedEndBit && pos >= kMaskedFirstBit) pos += kMaskedEndBit - kMaskedFirstBit;
    b[pos / 8] ^= static_cast<uint8_t>(1u << (pos % 8));
  }
}

void FaultInjector::offer(FaultFrame&& f, transport::Time now, std::vector<FaultFrame>& out) {
  release_due(now, out);
  if (chance(spec_.loss)) {
    bump(c_.drops);
    return;
  }
  if (burst_left_ > 0) {
    --burst_left_;
    bump(c_.drops);
    bump(c_.burst_drops);
    return;
  }
  if (chance(spec_.burst)) {
    burst_left_ = spec_.burst_len - 1;
    bump(c_.drops);
    bump(c_.burst_drops);
    return;
  }
  if (chance(spec_.corrupt)) {
    corrupt(f.bytes);
    bump(c_.corrupted);
  }
  if (chance(spec_.dup)) {
    bump(c_.duplicated);
    FaultFrame copy = f;
    reorder_stage(std::move(f), now, out);
    reorder_stage(std::move(copy), now, out);
    return;
  }
  reorder_stage(std::move(f), now, out);
}

void FaultInjector::reorder_stage(FaultFrame&& f, transport::Time now,
                                  std::vector<FaultFrame>& out) {
  if (chance(spec_.reorder)) {
    bump(c_.reordered);
    auto left = static_cast<uint32_t>(1 + next_below(spec_.reorder_depth));
    reorder_.push_back({std::move(f), left, now + kReorderMaxHoldNs});
    return;
  }
  delay_stage(std::move(f), now, out);
  // `f` overtook every held datagram: count it against them and release, in arrival order, those
  // whose count is reached.
  for (size_t i = 0; i < reorder_.size();) {
    if (--reorder_[i].left == 0) {
      FaultFrame held = std::move(reorder_[i].f);
      reorder_.erase(reorder_.begin() + static_cast<ptrdiff_t>(i));
      delay_stage(std::move(held), now, out);
    } else {
      ++i;
    }
  }
}

void FaultInjector::delay_stage(FaultFrame&& f, transport::Time now, std::vector<FaultFrame>& out) {
  if (spec_.delay_ns == 0 && spec_.jitter_ns == 0) {
    out.push_back(std::move(f));
    return;
  }
  bump(c_.delayed);
  transport::Time due = now + spec_.delay_ns;
  if (spec_.jitter_ns > 0) due += next_below(spec_.jitter_ns);
  // FIFO: never before the datagram ahead of it.
  if (!delay_.empty()) due = std::max(due, delay_.back().due);
  delay_.push_back({std::move(f), due});
}

void FaultInjector::release_due(transport::Time now, std::vector<FaultFrame>& out) {
  // Reorder holds first: a datagram held past its limit enters the delay line now.
  for (size_t i = 0; i < reorder_.size();) {
    if (reorder_[i].deadline <= now) {
      FaultFrame held = std::move(reorder_[i].f);
      reorder_.erase(reorder_.begin() + static_cast<ptrdiff_t>(i));
      delay_stage(std::move(held), now, out);
    } else {
      ++i;
    }
  }
  while (!delay_.empty() && delay_.front().due <= now) {
    out.push_back(std::move(delay_.front().f));
    delay_.pop_front();
  }
}

transport::Time FaultInjector::next_deadline() const {
  transport::Time t = transport::kNever;
  for (const Reordered& r : reorder_) t = std::min(t, r.deadline);
  if (!delay_.empty()) t = std::min(t, delay_.front().due);
  return t;
}

}  // namespace uroce

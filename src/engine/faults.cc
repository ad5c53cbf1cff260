#include "engine/faults.h"

#include <algorithm>
#include <utility>

#include "util/red.h"

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
  if (chance(spec_.ce) && (f.tos & 3) != transport::kEcnCe) {
    f.tos = static_cast<uint8_t>(f.tos | transport::kEcnCe);
    bump(c_.ce_set);
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
    queue_stage(std::move(f), now, out);
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
    const transport::Time due = delay_.front().due;
    queue_stage(std::move(delay_.front().f), due, out);
    delay_.pop_front();
  }
  while (!queue_.empty() && queue_.front().due <= now) {
    // At dequeue: what is still queued behind it when it has left (its departure is `due`).
    if (spec_.queue_mark_dequeue) red_mark(queue_.front().f, queue_backlog(queue_.front().due));
    out.push_back(std::move(queue_.front().f));
    queue_.pop_front();
  }
}

void FaultInjector::red_mark(FaultFrame& f, uint64_t backlog) {
  const uint8_t ecn = f.tos & 3;
  if (ecn != transport::kEcnEct0 && ecn != transport::kEcnEct1) return;  // ECN-capable only
  const double p = red_probability(backlog, spec_.queue_kmin, spec_.queue_kmax, spec_.queue_pmax);
  if (p >= 1.0 || chance(p)) {
    f.tos = static_cast<uint8_t>(f.tos | transport::kEcnCe);
    bump(c_.queue_marked);
  }
}

uint64_t FaultInjector::queue_backlog(transport::Time now) const {
  if (spec_.queue_bps == 0 || queue_busy_until_ <= now) return 0;
  const unsigned __int128 bits =
      static_cast<unsigned __int128>(queue_busy_until_ - now) * spec_.queue_bps;
  return static_cast<uint64_t>(bits / 8'000'000'000u);
}

void FaultInjector::queue_stage(FaultFrame&& f, transport::Time at, std::vector<FaultFrame>& out) {
  if (spec_.queue_bps == 0) {
    out.push_back(std::move(f));
    return;
  }
  // Frame bytes on the switch's egress link: the datagram (IB packet + ICRC) with its UDP,
  // IPv4 and Ethernet headers and FCS — what a switch buffer holds.
  const uint64_t size = f.bytes.size() + 8 + 20 + 14 + 4;
  const uint64_t backlog = queue_backlog(at);
  if (backlog + size > spec_.queue_buffer) {
    bump(c_.queue_drops);
    return;
  }
  // Where the queue sits, as arrivals see it (the same boundaries as red_probability's).
  bump(backlog <= spec_.queue_kmin  ? c_.queue_below_kmin
       : backlog > spec_.queue_kmax ? c_.queue_above_kmax
                                    : c_.queue_in_ramp);
  // RED on the queue the datagram finds (DCQCN §2: Kmin, Kmax, Pmax), or at dequeue on the one
  // it leaves behind (release_due).
  if (!spec_.queue_mark_dequeue) red_mark(f, backlog);
  const transport::Time start = std::max(at, queue_busy_until_);
  queue_busy_until_ =
      start + static_cast<transport::Time>(
                  (static_cast<unsigned __int128>(size) * 8'000'000'000u + spec_.queue_bps - 1) /
                  spec_.queue_bps);
  queue_.push_back({std::move(f), queue_busy_until_});
}

transport::Time FaultInjector::next_deadline() const {
  transport::Time t = transport::kNever;
  for (const Reordered& r : reorder_) t = std::min(t, r.deadline);
  if (!delay_.empty()) t = std::min(t, delay_.front().due);
  if (!queue_.empty()) t = std::min(t, queue_.front().due);
  return t;
}

}  // namespace uroce

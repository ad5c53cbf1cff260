#include "tools/perf/histogram.h"

#include <algorithm>
#include <bit>
#include <cmath>

namespace uroce::perf {

Histogram::Histogram() : counts_(kBuckets, 0) {}

size_t Histogram::index_of(uint64_t ns) {
  if (ns < 2 * kSub) return static_cast<size_t>(ns);
  // ns has its top bit at position msb >= kSubBits + 1; keep kSubBits bits below it.
  const unsigned msb = 63 - static_cast<unsigned>(std::countl_zero(ns));
  const unsigned shift = msb - kSubBits;
  return static_cast<size_t>((shift + 1) * kSub + ((ns >> shift) - kSub));
}

uint64_t Histogram::lower_of(size_t index) {
  if (index < 2 * kSub) return index;
  const unsigned shift = static_cast<unsigned>(index / kSub) - 1;
  return (index % kSub + kSub) << shift;
}

uint64_t Histogram::width_of(size_t index) {
  if (index < 2 * kSub) return 1;
  return uint64_t{1} << (index / kSub - 1);
}

void Histogram::record(uint64_t ns) {
  ++counts_[index_of(ns)];
  ++count_;
  min_ = std::min(min_, ns);
  max_ = std::max(max_, ns);
  const double x = static_cast<double>(ns);
  const double delta = x - mean_;
  mean_ += delta / static_cast<double>(count_);
  m2_ += delta * (x - mean_);
}

void Histogram::merge(const Histogram& other) {
  if (other.count_ == 0) return;
  for (size_t i = 0; i < kBuckets; ++i) counts_[i] += other.counts_[i];
  const double n1 = static_cast<double>(count_), n2 = static_cast<double>(other.count_);
  const double delta = other.mean_ - mean_;
  const double n = n1 + n2;
  // Chan, Golub, LeVeque: the combined mean and sum of squared deviations of two sets.
  mean_ += delta * n2 / n;
  m2_ += other.m2_ + delta * delta * n1 * n2 / n;
  count_ += other.count_;
  min_ = std::min(min_, other.min_);
  max_ = std::max(max_, other.max_);
}

void Histogram::clear() {
  std::fill(counts_.begin(), counts_.end(), 0);
  count_ = 0;
  min_ = UINT64_MAX;
  max_ = 0;
  mean_ = m2_ = 0;
}

double Histogram::stdev() const {
  if (count_ == 0) return 0;
  return std::sqrt(std::max(0.0, m2_ / static_cast<double>(count_)));
}

double Histogram::percentile(double p) const {
  if (count_ == 0) return 0;
  if (!(p > 0)) return static_cast<double>(min_);  // also catches NaN
  if (p >= 100) return static_cast<double>(max_);
  // Nearest rank: the ceil(p/100 * n)-th smallest sample (1-based).
  uint64_t rank = static_cast<uint64_t>(std::ceil(p / 100.0 * static_cast<double>(count_)));
  rank = std::clamp<uint64_t>(rank, 1, count_);
  uint64_t seen = 0;
  for (size_t i = 0; i < kBuckets; ++i) {
    seen += counts_[i];
    if (seen >= rank) {
      const double mid =
          static_cast<double>(lower_of(i)) + static_cast<double>(width_of(i) - 1) / 2;
      return std::clamp(mid, static_cast<double>(min_), static_cast<double>(max_));
    }
  }
  return static_cast<double>(max_);
}

std::vector<Histogram::Bucket> Histogram::buckets() const {
  std::vector<Bucket> out;
  for (size_t i = 0; i < kBuckets; ++i)
    if (counts_[i]) out.push_back({lower_of(i), lower_of(i) + width_of(i), counts_[i]});
  return out;
}

}  // namespace uroce::perf

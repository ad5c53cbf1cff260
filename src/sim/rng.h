// Seeded randomness for the simulator. The engine is std::mt19937_64, whose output sequence the
// C++ standard fixes; the conversion to a double is written here rather than left to
// std::uniform_real_distribution, whose algorithm the standard leaves to each library — so a
// seed means the same run on every platform. The conversion is the one libstdc++ uses for this
// engine (one 64-bit draw divided by 2^64), so code that used uniform_real_distribution(0, 1)
// with mt19937_64 draws exactly the same numbers (tests/sim/core_test.cc checks it).
//
// Each random component (a link's loss model, a switch's RED) owns its Rng, seeded from the run's
// seed and the component's identity (stream()), so adding a component or a draw in one place
// does not shift the numbers every other component sees.
#pragma once

#include <cmath>
#include <cstdint>
#include <random>

namespace uroce::sim {

class Rng {
 public:
  explicit Rng(uint64_t seed) : engine_(seed) {}

  uint64_t next() { return engine_(); }
  // Uniform in [0, 1).
  double uniform() {
    const double r = double(engine_()) * 0x1p-64;
    return r < 1.0 ? r : std::nextafter(1.0, 0.0);  // double(x) may round up to 2^64
  }
  // True with probability p (p <= 0: never, p >= 1: always, no draw either way).
  bool chance(double p) {
    if (p <= 0) return false;
    if (p >= 1) return true;
    return uniform() < p;
  }

  // The seed of component `id`'s stream under the run's `seed` (splitmix64 of both: distinct,
  // well-mixed seeds for neighbouring ids).
  static uint64_t stream(uint64_t seed, uint64_t id) {
    uint64_t z = seed + 0x9e3779b97f4a7c15ull * (id + 1);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }

 private:
  std::mt19937_64 engine_;
};

}  // namespace uroce::sim

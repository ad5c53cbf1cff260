// The values the configuration's keys take (config_values.h): probabilities, counts, durations,
// rates, sizes and seeds, each read strictly (the reader says what is wrong), and the text
// `uroce config` shows for each, in the form the reader takes back. Apart from the tables that use
// them (config_faults.cc, config.cc) so that a value reads the same in every variable.
#include "engine/config_values.h"

#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <initializer_list>
#include <utility>

#include "transport/spec/spec.h"

namespace uroce::config_values {

// A probability: plain decimal in [0, 1]. strtod accepts "nan", "inf", hex floats and leading
// blanks; only plain decimals pass.
bool read_probability(std::string_view value, double* out, std::string* why) {
  const std::string v(value);
  const bool plain = !v.empty() && v.find_first_not_of("0123456789.eE+-") == std::string::npos;
  char* end = nullptr;
  errno = 0;
  const double p = plain ? std::strtod(v.c_str(), &end) : 0.0;
  if (!plain || errno != 0 || end != v.c_str() + v.size() || !std::isfinite(p)) {
    *why = "is not a number";
    return false;
  }
  if (p < 0.0 || p > 1.0) {
    *why = "is out of range [0, 1]";
    return false;
  }
  *out = p;
  return true;
}

// A small count in [1, max]: depth, len, bits.
bool read_count(std::string_view v, uint32_t max, uint32_t* out, std::string* why) {
  uint64_t n = 0;
  if (v.empty() || v.size() > 9 || v.find_first_not_of("0123456789") != std::string_view::npos) {
    *why = "is not a positive integer";
    return false;
  }
  if (!spec::read_uint(v, 1, max, &n)) {
    (*why = "is out of range [1, ").append(std::to_string(max)).append("]");
    return false;
  }
  *out = uint32_t(n);
  return true;
}

namespace {

// A decimal followed by a unit from `units` (name, scale): "1.5ms", "800mbit". Scale 0: the
// number is not a plain decimal; -1: the unit is missing or unknown.
double read_with_unit(std::string_view v,
                      std::initializer_list<std::pair<const char*, double>> units, double* scale) {
  const size_t num_end = v.find_first_not_of("0123456789.");
  const std::string num(v.substr(0, num_end));
  const std::string_view unit = num_end == std::string_view::npos ? "" : v.substr(num_end);
  char* end = nullptr;
  const double x = num.empty() ? -1 : std::strtod(num.c_str(), &end);
  *scale = 0;
  if (num.empty() || end != num.c_str() + num.size()) return x;
  *scale = -1;
  for (const auto& [name, s] : units) {
    if (unit == name) *scale = s;
  }
  return x;
}

}  // namespace

// A duration: a plain decimal with a unit (ns, us, ms, s), at most 10 s. The unit is required:
// "delay=5" could mean anything.
bool read_duration(std::string_view v, uint64_t* out_ns, std::string* why) {
  double scale;
  const double x = read_with_unit(v, {{"ns", 1}, {"us", 1e3}, {"ms", 1e6}, {"s", 1e9}}, &scale);
  if (scale == 0) {
    *why = "is not a duration (e.g. 500us, 2ms)";
    return false;
  }
  if (scale < 0) {
    *why = "needs a unit: ns, us, ms or s";
    return false;
  }
  const double ns = x * scale;
  if (ns > 10e9) {
    *why = "is out of range [0, 10s]";
    return false;
  }
  *out_ns = static_cast<uint64_t>(ns + 0.5);
  return true;
}

// A rate: a plain decimal with a unit, kbit, mbit or gbit (10^3, 10^6, 10^9 bit/s, as tc writes
// them), from 1 kbit to 1000 gbit.
bool read_rate(std::string_view v, uint64_t* out_bps, std::string* why) {
  double scale;
  const double x = read_with_unit(v, {{"kbit", 1e3}, {"mbit", 1e6}, {"gbit", 1e9}}, &scale);
  if (scale == 0) {
    *why = "is not a rate (e.g. 800mbit, 10gbit)";
    return false;
  }
  if (scale < 0) {
    *why = "needs a unit: kbit, mbit or gbit";
    return false;
  }
  const double bps = x * scale;
  if (bps < 1e3 || bps > 1e12) {
    *why = "is out of range [1kbit, 1000gbit]";
    return false;
  }
  *out_bps = static_cast<uint64_t>(bps + 0.5);
  return true;
}

// A size in bytes: an unsigned decimal, optionally with k (KiB) or m (MiB), at most 1 GiB.
bool read_size(std::string_view v, uint64_t* out, std::string* why) {
  std::string_view num = v;
  uint64_t scale = 1;
  if (!num.empty() && (num.back() == 'k' || num.back() == 'm')) {
    scale = num.back() == 'k' ? 1024 : 1024 * 1024;
    num.remove_suffix(1);
  }
  uint64_t n = 0;
  if (num.size() > 10 || !spec::read_uint(num, 0, ~uint64_t{0}, &n)) {
    *why = "is not a size (bytes, or with k or m)";
    return false;
  }
  if (n * scale > (uint64_t{1} << 30)) {
    *why = "is out of range [0, 1024m]";
    return false;
  }
  *out = n * scale;
  return true;
}

// The values as `uroce config` shows them, in the forms the readers take.
std::string number_text(double d) {
  char buf[32];
  const auto [end, ec] = std::to_chars(buf, buf + sizeof buf, d);
  return ec == std::errc() ? std::string(buf, end) : "?";
}
namespace {

std::string scaled_text(uint64_t v, std::initializer_list<std::pair<const char*, uint64_t>> units) {
  for (const auto& [name, scale] : units) {
    if (v != 0 && v % scale == 0) return std::to_string(v / scale) + name;
  }
  return std::to_string(v);
}

}  // namespace

std::string duration_text(uint64_t ns) {
  return ns == 0
             ? "0ns"
             : scaled_text(ns, {{"s", 1'000'000'000}, {"ms", 1'000'000}, {"us", 1'000}, {"ns", 1}});
}
std::string size_text(uint64_t b) {
  return scaled_text(b, {{"m", 1024 * 1024}, {"k", 1024}, {"", 1}});
}

bool read_seed(std::string_view v, uint64_t* out, std::string* why) {
  // Decimal only; strtoull would accept "-1" (as 2^64-1) and leading blanks.
  if (v.empty() || v.size() > 20 || v.find_first_not_of("0123456789") != std::string_view::npos) {
    *why = "is not an unsigned decimal integer";
    return false;
  }
  if (std::from_chars(v.data(), v.data() + v.size(), *out).ec != std::errc()) {
    *why = "is out of range [0, 2^64)";
    return false;
  }
  return true;
}

std::string rate_text(uint64_t bps) {
  return bps ? scaled_text(bps, {{"gbit", 1'000'000'000}, {"mbit", 1'000'000}, {"kbit", 1'000}})
             : std::string("off");
}
std::string uint_text(uint64_t v) {
  return std::to_string(v);
}

}  // namespace uroce::config_values

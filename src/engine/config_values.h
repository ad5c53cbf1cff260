// What the configuration's files share (config.h is the interface; config.cc reads the
// environment, config_devices.cc parses UROCE_DEVICES, config_faults.cc UROCE_FAULTS): the
// variables' names, the one error form "VAR: message", and the readers and text forms of the
// values spec keys take (durations, rates, sizes, …; config_values.cc). Internal to the engine.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace uroce::config_values {

inline constexpr std::string_view kDevicesVar = "UROCE_DEVICES";
inline constexpr std::string_view kFaultsVar = "UROCE_FAULTS";
inline constexpr std::string_view kCcVar = "UROCE_CC";

// Sets *err (when given) to "VAR: msg".
inline void set_err(std::string* err, std::string_view var, const std::string& msg) {
  if (err) (*err = var).append(": ").append(msg);
}

// The values keys take. Each reader says in *why what is wrong with a value; the parser names
// the key and the value (spec.h).

// A probability: plain decimal in [0, 1].
bool read_probability(std::string_view value, double* out, std::string* why);
// A small count in [1, max]: depth, len, bits.
bool read_count(std::string_view v, uint32_t max, uint32_t* out, std::string* why);
// A duration: a plain decimal with a unit (ns, us, ms, s), at most 10 s.
bool read_duration(std::string_view v, uint64_t* out_ns, std::string* why);
// A rate: a plain decimal with a unit, kbit, mbit or gbit, from 1 kbit to 1000 gbit.
bool read_rate(std::string_view v, uint64_t* out_bps, std::string* why);
// A size in bytes: an unsigned decimal, optionally with k (KiB) or m (MiB), at most 1 GiB.
bool read_size(std::string_view v, uint64_t* out, std::string* why);
// An unsigned 64-bit decimal (a PRNG seed).
bool read_seed(std::string_view v, uint64_t* out, std::string* why);

// The values as `uroce config` shows them, in the forms the readers take.
std::string number_text(double d);
std::string duration_text(uint64_t ns);
std::string rate_text(uint64_t bps);
std::string size_text(uint64_t b);
std::string uint_text(uint64_t v);

}  // namespace uroce::config_values

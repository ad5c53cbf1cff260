// The text form of a congestion-control configuration (one device's part of UROCE_CC,
// docs/configuration.md):
//
//   spec  = algo { "," key "=" value }
//   algo  = "none" | "dcqcn" | "timely"
//
// e.g. "dcqcn,preset=cx,rpg_ai_rate=5" or "timely,timely_t_high=500". `preset` (paper | cx) is
// applied before the other keys wherever it stands; every other key overrides one parameter,
// under its mlx5 name in mlx5's unit (params.h, docs/congestion-control.md). Errors name the
// field: "rpg_ai_rate 'fast' is not an unsigned integer", "unknown parameter 'rpg_foo'",
// "rpg_gd 9 is out of range [10, 20]", "rpg_ai_rate is a dcqcn parameter, not timely's".
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "transport/cc/params.h"

namespace uroce::transport::cc {

std::optional<CcConfig> parse_cc(std::string_view spec, std::string* err);

// The configuration as a spec that parse_cc() reads back to the same values: the algorithm, the
// preset, then every parameter that applies to the algorithm.
std::string format_cc(const CcConfig& c);

}  // namespace uroce::transport::cc

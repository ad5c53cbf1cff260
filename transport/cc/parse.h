// The text form of a congestion-control configuration (one device's part of UROCE_CC,
// docs/configuration.md):
//
//   spec  = algo { "," key "=" value }
//   algo  = "none" | "dcqcn" | "timely"
//
// e.g. "dcqcn,preset=cx,rpg_ai_rate=5" or "timely,timely_t_high=500". `preset` (paper | cx) is
// applied before the other keys wherever it stands; every other key overrides one parameter,
// under its mlx5 name in mlx5's unit (params.h, docs/congestion-control.md). The keys are one
// table (schema()) read by the parser every spec shares (transport/spec/spec.h). Errors name the
// field: "rpg_ai_rate 'fast' is not an unsigned integer", "unknown key 'rpg_foo' (known: …)",
// "rpg_gd 9 is out of range [10, 20]", "key 'rpg_ai_rate' applies to dcqcn, not timely".
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "transport/cc/params.h"
#include "transport/spec/spec.h"

namespace uroce::transport::cc {

std::optional<CcConfig> parse_cc(std::string_view spec, std::string* err);

// Every key of a spec after the algorithm, scoped by algorithm (scope()): for `uroce config`
// (spec::describe) and the test that keeps docs/configuration.md in step with it.
const spec::Schema<CcConfig>& schema();
spec::Scopes scope(Algorithm a);

// The configuration as a spec that parse_cc() reads back to the same values: the algorithm, the
// preset, then every parameter that applies to the algorithm.
std::string format_cc(const CcConfig& c);

}  // namespace uroce::transport::cc

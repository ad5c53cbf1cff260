// Parsing and formatting of congestion-control specs (parse.h). One table lists every key: its
// name, which algorithm it belongs to, and how it is read and written, so parse and format
// cannot disagree about a key.
#include "transport/cc/parse.h"

#include <charconv>
#include <cmath>
#include <cstdio>
#include <functional>
#include <limits>
#include <set>
#include <vector>

namespace uroce::transport::cc {
namespace {

// Which algorithms a key belongs to: DCQCN's, TIMELY's, the NP's (any algorithm, `none` too:
// a receiver may answer marks for its peers without limiting itself), the pacer's (any that
// limits), the send window's (any algorithm).
enum class Scope : uint8_t { kDcqcn, kTimely, kNp, kPacer, kWindow };

const char* scope_name(Scope s) {
  switch (s) {
    case Scope::kDcqcn:
      return "dcqcn";
    case Scope::kTimely:
      return "timely";
    case Scope::kNp:
      return "np";
    case Scope::kPacer:
      return "dcqcn or timely";
    case Scope::kWindow:
      return "window";
  }
  return "?";
}

struct Key {
  const char* name;
  Scope scope;
  // Sets the value; false and a message naming the key on a malformed value. Ranges are
  // checked afterwards by validate(), which names the key too.
  std::function<bool(CcConfig&, std::string_view, std::string*)> set;
  std::function<std::string(const CcConfig&)> get;
};

bool parse_u64(std::string_view key, std::string_view v, uint64_t max, uint64_t* out,
               std::string* err) {
  uint64_t x = 0;
  const auto [p, ec] = std::from_chars(v.data(), v.data() + v.size(), x);
  if (v.empty() || ec != std::errc() || p != v.data() + v.size()) {
    if (err) *err = std::string(key) + " '" + std::string(v) + "' is not an unsigned integer";
    return false;
  }
  if (x > max) {
    if (err) {
      *err = std::string(key) + " " + std::string(v) + " is out of range [0, " +
             std::to_string(max) + "]";
    }
    return false;
  }
  *out = x;
  return true;
}

bool parse_double(std::string_view key, std::string_view v, double* out, std::string* err) {
  double x = 0;
  const auto [p, ec] = std::from_chars(v.data(), v.data() + v.size(), x);
  if (v.empty() || ec != std::errc() || p != v.data() + v.size() || !std::isfinite(x)) {
    if (err) *err = std::string(key) + " '" + std::string(v) + "' is not a decimal number";
    return false;
  }
  *out = x;
  return true;
}

std::string fmt_double(double d) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.17g", d);
  return buf;
}

// Accessors for each kind of field. `F` maps the config to the field.
template <typename T, typename F>
Key uint_key(const char* name, Scope scope, F field) {
  return Key{name, scope,
             [=](CcConfig& c, std::string_view v, std::string* err) {
               uint64_t x;
               if (!parse_u64(name, v, std::numeric_limits<T>::max(), &x, err)) return false;
               field(c) = static_cast<T>(x);
               return true;
             },
             [=](const CcConfig& c) { return std::to_string(uint64_t(field(c))); }};
}

template <typename F>
Key bool_key(const char* name, Scope scope, F field) {
  return Key{name, scope,
             [=](CcConfig& c, std::string_view v, std::string* err) {
               if (v != "0" && v != "1") {
                 if (err) *err = std::string(name) + " '" + std::string(v) + "' is not 0 or 1";
                 return false;
               }
               field(c) = v == "1";
               return true;
             },
             [=](const CcConfig& c) { return std::string(field(c) ? "1" : "0"); }};
}

template <typename F>
Key double_key(const char* name, Scope scope, F field) {
  return Key{name, scope,
             [=](CcConfig& c, std::string_view v, std::string* err) {
               return parse_double(name, v, &field(c), err);
             },
             [=](const CcConfig& c) { return fmt_double(field(c)); }};
}

// An option with named values; `E` is its enum, `values` lists (name, value) pairs.
template <typename E, typename F>
Key enum_key(const char* name, Scope scope, F field,
             std::vector<std::pair<const char*, E>> values) {
  return Key{name, scope,
             [=](CcConfig& c, std::string_view v, std::string* err) {
               std::string names;
               for (const auto& [n, e] : values) {
                 if (v == n) {
                   field(c) = e;
                   return true;
                 }
                 names += names.empty() ? "" : ", ";
                 names += n;
               }
               if (err) {
                 *err = std::string(name) + " '" + std::string(v) + "' is not one of " + names;
               }
               return false;
             },
             [=](const CcConfig& c) {
               for (const auto& [n, e] : values) {
                 if (field(c) == e) return std::string(n);
               }
               return std::string("?");
             }};
}

const std::vector<Key>& keys() {
  static const std::vector<Key> k = [] {
    using S = Scope;
    std::vector<Key> v;
    // Field accessors, for a const or a mutable config alike.
    auto d = [](auto m) {
      return [m](auto& c) -> auto& {
        return c.dcqcn.*m;
      };
    };
    auto n = [](auto m) {
      return [m](auto& c) -> auto& {
        return c.np.*m;
      };
    };
    auto t = [](auto m) {
      return [m](auto& c) -> auto& {
        return c.timely.*m;
      };
    };
    // DCQCN reaction point, mlx5 names (roce_rp) [NV].
    v.push_back(uint_key<uint32_t>("rpg_time_reset", S::kDcqcn, d(&DcqcnParams::rpg_time_reset)));
    v.push_back(uint_key<uint64_t>("rpg_byte_reset", S::kDcqcn, d(&DcqcnParams::rpg_byte_reset)));
    v.push_back(uint_key<uint32_t>("rpg_threshold", S::kDcqcn, d(&DcqcnParams::rpg_threshold)));
    v.push_back(uint_key<uint32_t>("rpg_ai_rate", S::kDcqcn, d(&DcqcnParams::rpg_ai_rate)));
    v.push_back(uint_key<uint32_t>("rpg_hai_rate", S::kDcqcn, d(&DcqcnParams::rpg_hai_rate)));
    v.push_back(uint_key<uint32_t>("rpg_min_rate", S::kDcqcn, d(&DcqcnParams::rpg_min_rate)));
    v.push_back(uint_key<uint32_t>("rpg_max_rate", S::kDcqcn, d(&DcqcnParams::rpg_max_rate)));
    v.push_back(uint_key<uint32_t>("rpg_gd", S::kDcqcn, d(&DcqcnParams::rpg_gd)));
    v.push_back(uint_key<uint32_t>("rpg_min_dec_fac", S::kDcqcn, d(&DcqcnParams::rpg_min_dec_fac)));
    v.push_back(uint_key<uint32_t>("rate_to_set_on_first_cnp", S::kDcqcn,
                                   d(&DcqcnParams::rate_to_set_on_first_cnp)));
    v.push_back(uint_key<uint32_t>("dce_tcp_g", S::kDcqcn, d(&DcqcnParams::dce_tcp_g)));
    v.push_back(uint_key<uint32_t>("dce_tcp_rtt", S::kDcqcn, d(&DcqcnParams::dce_tcp_rtt)));
    v.push_back(uint_key<uint32_t>("rate_reduce_monitor_period", S::kDcqcn,
                                   d(&DcqcnParams::rate_reduce_monitor_period)));
    v.push_back(
        uint_key<uint32_t>("initial_alpha_value", S::kDcqcn, d(&DcqcnParams::initial_alpha_value)));
    v.push_back(bool_key("clamp_tgt_rate", S::kDcqcn, d(&DcqcnParams::clamp_tgt_rate)));
    v.push_back(bool_key("clamp_tgt_rate_after_time_inc", S::kDcqcn,
                         d(&DcqcnParams::clamp_tgt_rate_after_time_inc)));
    // uroce's choices where the descriptions of DCQCN differ (params.h).
    v.push_back(enum_key<AlphaUpdate>(
        "alpha_update", S::kDcqcn, d(&DcqcnParams::alpha_update),
        {{"per_cnp", AlphaUpdate::kPerCnp}, {"periodic", AlphaUpdate::kPeriodic}}));
    v.push_back(enum_key<AlphaOrder>(
        "alpha_order", S::kDcqcn, d(&DcqcnParams::alpha_order),
        {{"cut_first", AlphaOrder::kCutFirst}, {"update_first", AlphaOrder::kUpdateFirst}}));
    v.push_back(enum_key<FrBoundary>("fr_boundary", S::kDcqcn, d(&DcqcnParams::fr_boundary),
                                     {{"le", FrBoundary::kLe}, {"lt", FrBoundary::kLt}}));
    v.push_back(
        enum_key<HyperStep>("hyper_step", S::kDcqcn, d(&DcqcnParams::hyper_step),
                            {{"linear", HyperStep::kLinear}, {"constant", HyperStep::kConstant}}));
    v.push_back(enum_key<Tie>("tie", S::kDcqcn, d(&DcqcnParams::tie),
                              {{"timer_first", Tie::kTimerFirst}, {"cnp_first", Tie::kCnpFirst}}));
    // Notification point, mlx5 names (roce_np) [NV]; `np` switches it.
    v.push_back(bool_key("np", S::kNp, n(&NpParams::enabled)));
    v.push_back(
        uint_key<uint32_t>("min_time_between_cnps", S::kNp, n(&NpParams::min_time_between_cnps)));
    v.push_back(uint_key<uint8_t>("cnp_dscp", S::kNp, n(&NpParams::cnp_dscp)));
    v.push_back(uint_key<uint8_t>("cnp_802p_prio", S::kNp, n(&NpParams::cnp_802p_prio)));
    // The pacer, for either algorithm.
    v.push_back(uint_key<uint64_t>(
        "pacer_burst", S::kPacer, [](auto& c) -> auto& { return c.pacer_burst; }));
    // The send window's cap, for any algorithm (uroce's own).
    v.push_back(uint_key<uint64_t>(
        "max_inflight", S::kWindow, [](auto& c) -> auto& { return c.max_inflight; }));
    // TIMELY [TIMELY].
    v.push_back(uint_key<uint32_t>("timely_t_low", S::kTimely, t(&TimelyParams::t_low)));
    v.push_back(uint_key<uint32_t>("timely_t_high", S::kTimely, t(&TimelyParams::t_high)));
    v.push_back(uint_key<uint32_t>("timely_min_rtt", S::kTimely, t(&TimelyParams::min_rtt)));
    v.push_back(uint_key<uint32_t>("timely_ai_rate", S::kTimely, t(&TimelyParams::ai_rate)));
    v.push_back(double_key("timely_beta", S::kTimely, t(&TimelyParams::beta)));
    v.push_back(double_key("timely_ewma", S::kTimely, t(&TimelyParams::ewma)));
    v.push_back(uint_key<uint32_t>("timely_hai_thresh", S::kTimely, t(&TimelyParams::hai_thresh)));
    v.push_back(uint_key<uint32_t>("timely_hai_factor", S::kTimely, t(&TimelyParams::hai_factor)));
    v.push_back(uint_key<uint32_t>("timely_min_rate", S::kTimely, t(&TimelyParams::min_rate)));
    v.push_back(uint_key<uint32_t>("timely_max_rate", S::kTimely, t(&TimelyParams::max_rate)));
    return v;
  }();
  return k;
}

bool applies(Scope s, Algorithm a) {
  return s == Scope::kNp || s == Scope::kWindow || (s == Scope::kDcqcn && a == Algorithm::kDcqcn) ||
         (s == Scope::kTimely && a == Algorithm::kTimely) ||
         (s == Scope::kPacer && a != Algorithm::kNone);
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

void set_err(std::string* err, std::string msg) {
  if (err) *err = std::move(msg);
}

}  // namespace

std::optional<CcConfig> parse_cc(std::string_view spec, std::string* err) {
  std::vector<std::string_view> parts;
  for (;;) {
    const size_t c = spec.find(',');
    parts.push_back(trim(spec.substr(0, c)));
    if (c == std::string_view::npos) break;
    spec.remove_prefix(c + 1);
  }
  Algorithm algo;
  if (parts[0] == "none") {
    algo = Algorithm::kNone;
  } else if (parts[0] == "dcqcn") {
    algo = Algorithm::kDcqcn;
  } else if (parts[0] == "timely") {
    algo = Algorithm::kTimely;
  } else {
    set_err(err, parts[0].empty()
                     ? "missing algorithm (none, dcqcn or timely)"
                     : "unknown algorithm '" + std::string(parts[0]) + "' (none, dcqcn or timely)");
    return std::nullopt;
  }
  // Split key=value pairs; the preset goes first.
  std::vector<std::pair<std::string_view, std::string_view>> kv;
  Preset preset = Preset::kCx;
  bool have_preset = false;
  for (size_t i = 1; i < parts.size(); ++i) {
    const std::string_view p = parts[i];
    const size_t eq = p.find('=');
    if (p.empty()) {
      set_err(err, "empty entry");
      return std::nullopt;
    }
    if (eq == std::string_view::npos) {
      // Built by appending: `"'" + std::string(p)` (operator+ prepending into the temporary)
      // draws a bogus -Wrestrict from gcc 12 at -O3 (GCC bug 105329).
      set_err(err, std::string("'").append(p).append("' is not key=value"));
      return std::nullopt;
    }
    const std::string_view k = trim(p.substr(0, eq)), v = trim(p.substr(eq + 1));
    if (k == "preset") {
      if (have_preset) {
        set_err(err, "preset given twice");
        return std::nullopt;
      }
      have_preset = true;
      if (v == "paper") {
        preset = Preset::kPaper;
      } else if (v == "cx") {
        preset = Preset::kCx;
      } else {
        set_err(err, "preset '" + std::string(v) + "' is not one of paper, cx");
        return std::nullopt;
      }
      continue;
    }
    kv.emplace_back(k, v);
  }
  CcConfig c = make_config(algo, preset);
  std::set<std::string_view> seen;
  for (const auto& [k, v] : kv) {
    const Key* key = nullptr;
    for (const Key& x : keys()) {
      if (k == x.name) key = &x;
    }
    if (key == nullptr) {
      set_err(err, "unknown parameter '" + std::string(k) + "'");
      return std::nullopt;
    }
    if (!applies(key->scope, algo)) {
      set_err(err, std::string(k) + " is a " + scope_name(key->scope) + " parameter, not " +
                       to_string(algo) + "'s");
      return std::nullopt;
    }
    if (!seen.insert(k).second) {
      set_err(err, std::string(k) + " given twice");
      return std::nullopt;
    }
    if (!key->set(c, v, err)) return std::nullopt;
  }
  if (!validate(c, err)) return std::nullopt;
  return c;
}

std::string format_cc(const CcConfig& c) {
  std::string s = to_string(c.algorithm);
  s += ",preset=";
  s += to_string(c.preset);
  for (const Key& k : keys()) {
    if (!applies(k.scope, c.algorithm)) continue;
    s += ",";
    s += k.name;
    s += "=";
    s += k.get(c);
  }
  return s;
}

}  // namespace uroce::transport::cc

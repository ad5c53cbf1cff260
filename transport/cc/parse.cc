// Parsing and formatting of congestion-control specs (parse.h). One table lists every key: its
// name, which algorithms it belongs to, how it is read and written, and its one-line doc, so
// parse, format and `uroce config` cannot disagree about a key. The entries themselves are
// checked by the parser every spec shares (transport/spec/spec.h).
#include "transport/cc/parse.h"

#include <charconv>
#include <cmath>
#include <limits>
#include <vector>

namespace uroce::transport::cc {
namespace {

using Key = spec::Key<CcConfig>;

// Scopes: the algorithm a spec names. The NP's keys and the send window's apply to any
// algorithm (`none` too: a receiver may answer marks for its peers without limiting itself), the
// pacer's to any that limits.
constexpr spec::Scopes kNone = 1, kDcqcn = 2, kTimely = 4;
constexpr spec::Scopes kPacer = kDcqcn | kTimely;

// An algorithm's scope: its bit, in Algorithm's order.
spec::Scopes scope_of(Algorithm a) {
  static_assert((spec::Scopes{1} << int(Algorithm::kNone)) == kNone &&
                (spec::Scopes{1} << int(Algorithm::kDcqcn)) == kDcqcn &&
                (spec::Scopes{1} << int(Algorithm::kTimely)) == kTimely);
  return spec::Scopes{1} << int(a);
}

bool parse_u64(std::string_view v, uint64_t max, uint64_t* out, std::string* why) {
  uint64_t x = 0;
  const auto [p, ec] = std::from_chars(v.data(), v.data() + v.size(), x);
  if (v.empty() || ec != std::errc() || p != v.data() + v.size()) {
    *why = "is not an unsigned integer";
    return false;
  }
  if (x > max) {
    (*why = "is out of range [0, ").append(std::to_string(max)).append("]");
    return false;
  }
  *out = x;
  return true;
}

bool parse_double(std::string_view v, double* out, std::string* why) {
  double x = 0;
  const auto [p, ec] = std::from_chars(v.data(), v.data() + v.size(), x);
  if (v.empty() || ec != std::errc() || p != v.data() + v.size() || !std::isfinite(x)) {
    *why = "is not a decimal number";
    return false;
  }
  *out = x;
  return true;
}

// The shortest text that reads back to the same double.
std::string fmt_double(double d) {
  char buf[32];
  const auto [end, ec] = std::to_chars(buf, buf + sizeof buf, d);
  return ec == std::errc() ? std::string(buf, end) : std::string("nan");
}

// Keys of each kind of field. `F` maps the config to the field. Ranges are checked afterwards by
// validate(), which names the key too.
template <typename T, typename F>
Key uint_key(const char* name, spec::Scopes scope, F field, const char* doc) {
  return Key{.name = name,
             .scopes = scope,
             .set =
                 [=](CcConfig& c, std::string_view v, std::string* why) {
                   uint64_t x;
                   if (!parse_u64(v, std::numeric_limits<T>::max(), &x, why)) return false;
                   field(c) = static_cast<T>(x);
                   return true;
                 },
             .get = [=](const CcConfig& c) { return std::to_string(uint64_t(field(c))); },
             .doc = doc};
}

template <typename F>
Key double_key(const char* name, spec::Scopes scope, F field, const char* doc) {
  return Key{.name = name,
             .scopes = scope,
             .set = [=](CcConfig& c, std::string_view v,
                        std::string* why) { return parse_double(v, &field(c), why); },
             .get = [=](const CcConfig& c) { return fmt_double(field(c)); },
             .doc = doc};
}

// An option with named values; `E` is its enum, `values` lists (name, value) pairs.
template <typename E, typename F>
Key enum_key(const char* name, spec::Scopes scope, F field,
             std::vector<std::pair<const char*, E>> values, const char* doc) {
  return Key{.name = name,
             .scopes = scope,
             .set =
                 [=](CcConfig& c, std::string_view v, std::string* why) {
                   std::string names;
                   for (const auto& [n, e] : values) {
                     if (v == n) {
                       field(c) = e;
                       return true;
                     }
                     names += names.empty() ? "" : ", ";
                     names += n;
                   }
                   *why = "is not one of " + names;
                   return false;
                 },
             .get =
                 [=](const CcConfig& c) {
                   for (const auto& [n, e] : values) {
                     if (field(c) == e) return std::string(n);
                   }
                   return std::string("?");
                 },
             .doc = doc};
}

spec::Schema<CcConfig> make_schema() {
  spec::Schema<CcConfig> s;
  s.scope_names = {"none", "dcqcn", "timely"};
  std::vector<Key>& v = s.keys;
  constexpr spec::Scopes kAny = spec::kAllScopes;
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
  // The preset sets every parameter of the algorithm and the NP, so it goes first wherever it
  // stands and the other keys override it.
  v.push_back(Key{.name = "preset",
                  .set =
                      [](CcConfig& c, std::string_view val, std::string* why) {
                        if (val != "paper" && val != "cx") {
                          *why = "is not one of paper, cx";
                          return false;
                        }
                        c = make_config(c.algorithm, val == "paper" ? Preset::kPaper : Preset::kCx);
                        return true;
                      },
                  .get = [](const CcConfig& c) { return std::string(to_string(c.preset)); },
                  .def = "cx",
                  .doc = "parameter set applied first: cx (ConnectX) or paper (DCQCN, SIGCOMM'15)",
                  .first = true});
  // DCQCN reaction point, mlx5 names (roce_rp) [NV].
  v.push_back(uint_key<uint32_t>("rpg_time_reset", kDcqcn, d(&DcqcnParams::rpg_time_reset),
                                 "T: rate-increase timer period, µs"));
  v.push_back(uint_key<uint64_t>("rpg_byte_reset", kDcqcn, d(&DcqcnParams::rpg_byte_reset),
                                 "B: bytes per byte-counter event, 0 = off"));
  v.push_back(uint_key<uint32_t>("rpg_threshold", kDcqcn, d(&DcqcnParams::rpg_threshold),
                                 "F: events of fast recovery after a cut"));
  v.push_back(uint_key<uint32_t>("rpg_ai_rate", kDcqcn, d(&DcqcnParams::rpg_ai_rate),
                                 "R_AI: additive-increase step, Mb/s"));
  v.push_back(uint_key<uint32_t>("rpg_hai_rate", kDcqcn, d(&DcqcnParams::rpg_hai_rate),
                                 "R_HAI: hyper-increase step, Mb/s"));
  v.push_back(uint_key<uint32_t>("rpg_min_rate", kDcqcn, d(&DcqcnParams::rpg_min_rate),
                                 "rate floor, Mb/s"));
  v.push_back(uint_key<uint32_t>("rpg_max_rate", kDcqcn, d(&DcqcnParams::rpg_max_rate),
                                 "rate cap, Mb/s, 0 = the line rate"));
  v.push_back(uint_key<uint32_t>("rpg_gd", kDcqcn, d(&DcqcnParams::rpg_gd),
                                 "cut factor: alpha / 2^(rpg_gd - 10), 10..20"));
  v.push_back(uint_key<uint32_t>("rpg_min_dec_fac", kDcqcn, d(&DcqcnParams::rpg_min_dec_fac),
                                 "a cut keeps at least this % of the rate"));
  v.push_back(uint_key<uint32_t>("rate_to_set_on_first_cnp", kDcqcn,
                                 d(&DcqcnParams::rate_to_set_on_first_cnp),
                                 "rate after the first CNP, Mb/s, 0 = cut as usual"));
  v.push_back(uint_key<uint32_t>("dce_tcp_g", kDcqcn, d(&DcqcnParams::dce_tcp_g),
                                 "alpha gain: g = (1024 - dce_tcp_g) / 1024"));
  v.push_back(uint_key<uint32_t>("dce_tcp_rtt", kDcqcn, d(&DcqcnParams::dce_tcp_rtt),
                                 "K: the alpha period, µs"));
  v.push_back(uint_key<uint32_t>("rate_reduce_monitor_period", kDcqcn,
                                 d(&DcqcnParams::rate_reduce_monitor_period),
                                 "least time between cuts, µs, 0 = none"));
  v.push_back(uint_key<uint32_t>("initial_alpha_value", kDcqcn,
                                 d(&DcqcnParams::initial_alpha_value),
                                 "alpha at the first CNP, /1024"));
  v.push_back(spec::bool_key<CcConfig>("clamp_tgt_rate", kDcqcn, d(&DcqcnParams::clamp_tgt_rate),
                                       "every cut sets the target rate to the current rate"));
  v.push_back(spec::bool_key<CcConfig>(
      "clamp_tgt_rate_after_time_inc", kDcqcn, d(&DcqcnParams::clamp_tgt_rate_after_time_inc),
      "a cut after a timer increase sets the target to the current rate"));
  // uroce's choices where the descriptions of DCQCN differ (params.h).
  v.push_back(enum_key<AlphaUpdate>(
      "alpha_update", kDcqcn, d(&DcqcnParams::alpha_update),
      {{"per_cnp", AlphaUpdate::kPerCnp}, {"periodic", AlphaUpdate::kPeriodic}},
      "alpha updated on each CNP (paper) or once per dce_tcp_rtt (ConnectX)"));
  v.push_back(enum_key<AlphaOrder>(
      "alpha_order", kDcqcn, d(&DcqcnParams::alpha_order),
      {{"cut_first", AlphaOrder::kCutFirst}, {"update_first", AlphaOrder::kUpdateFirst}},
      "per-CNP alpha: the cut uses alpha before or after this CNP's update"));
  v.push_back(enum_key<FrBoundary>("fr_boundary", kDcqcn, d(&DcqcnParams::fr_boundary),
                                   {{"le", FrBoundary::kLe}, {"lt", FrBoundary::kLt}},
                                   "fast recovery while max(T, BC) <= F (le) or < F (lt)"));
  v.push_back(
      enum_key<HyperStep>("hyper_step", kDcqcn, d(&DcqcnParams::hyper_step),
                          {{"linear", HyperStep::kLinear}, {"constant", HyperStep::kConstant}},
                          "hyper increase adds i·R_HAI (linear) or R_HAI (constant)"));
  v.push_back(enum_key<Tie>("tie", kDcqcn, d(&DcqcnParams::tie),
                            {{"timer_first", Tie::kTimerFirst}, {"cnp_first", Tie::kCnpFirst}},
                            "a CNP and a timer due at the same instant: which goes first"));
  // Notification point, mlx5 names (roce_np) [NV]; `np` switches it.
  v.push_back(spec::bool_key<CcConfig>("np", kAny, n(&NpParams::enabled),
                                       "answer CE-marked packets with CNPs (on with dcqcn)"));
  v.push_back(uint_key<uint32_t>("min_time_between_cnps", kAny, n(&NpParams::min_time_between_cnps),
                                 "N: least time between a QP's CNPs, µs, 0 = every mark"));
  v.push_back(uint_key<uint8_t>("cnp_dscp", kAny, n(&NpParams::cnp_dscp), "DSCP of CNPs"));
  v.push_back(uint_key<uint8_t>("cnp_802p_prio", kAny, n(&NpParams::cnp_802p_prio),
                                "802.1p priority of CNPs on a VLAN"));
  // The pacer, for either algorithm.
  v.push_back(uint_key<uint64_t>(
      "pacer_burst", kPacer, [](auto& c) -> auto& { return c.pacer_burst; },
      "bytes a paced QP may send beyond its rate after a pause"));
  // The send window's cap, for any algorithm (uroce's own).
  v.push_back(uint_key<uint64_t>(
      "max_inflight", kAny, [](auto& c) -> auto& { return c.max_inflight; },
      "most bytes of payload a QP has unacknowledged, 0 = no cap"));
  // TIMELY [TIMELY].
  v.push_back(uint_key<uint32_t>("timely_t_low", kTimely, t(&TimelyParams::t_low),
                                 "RTT below which the rate increases additively, µs"));
  v.push_back(uint_key<uint32_t>("timely_t_high", kTimely, t(&TimelyParams::t_high),
                                 "RTT above which the rate decreases, µs"));
  v.push_back(uint_key<uint32_t>("timely_min_rtt", kTimely, t(&TimelyParams::min_rtt),
                                 "the gradient's normaliser, µs"));
  v.push_back(uint_key<uint32_t>("timely_ai_rate", kTimely, t(&TimelyParams::ai_rate),
                                 "δ: additive-increase step, Mb/s"));
  v.push_back(double_key("timely_beta", kTimely, t(&TimelyParams::beta),
                         "β: multiplicative-decrease factor, (0, 1]"));
  v.push_back(double_key("timely_ewma", kTimely, t(&TimelyParams::ewma),
                         "α: weight of a new RTT difference, (0, 1]"));
  v.push_back(uint_key<uint32_t>("timely_hai_thresh", kTimely, t(&TimelyParams::hai_thresh),
                                 "negative gradients in a row before hyper increase"));
  v.push_back(uint_key<uint32_t>("timely_hai_factor", kTimely, t(&TimelyParams::hai_factor),
                                 "N: the hyper-increase multiple of δ"));
  v.push_back(uint_key<uint32_t>("timely_min_rate", kTimely, t(&TimelyParams::min_rate),
                                 "rate floor, Mb/s"));
  v.push_back(uint_key<uint32_t>("timely_max_rate", kTimely, t(&TimelyParams::max_rate),
                                 "rate cap, Mb/s, 0 = the line rate"));
  return s;
}

void set_err(std::string* err, std::string msg) {
  if (err) *err = std::move(msg);
}

}  // namespace

const spec::Schema<CcConfig>& schema() {
  static const spec::Schema<CcConfig> s = make_schema();
  return s;
}

spec::Scopes scope(Algorithm a) {
  return scope_of(a);
}

std::optional<CcConfig> parse_cc(std::string_view text, std::string* err) {
  const size_t comma = text.find(',');
  const std::string_view name = spec::trim(text.substr(0, comma));
  Algorithm algo;
  if (name == "none") {
    algo = Algorithm::kNone;
  } else if (name == "dcqcn") {
    algo = Algorithm::kDcqcn;
  } else if (name == "timely") {
    algo = Algorithm::kTimely;
  } else {
    set_err(
        err,
        name.empty()
            ? std::string("missing algorithm (none, dcqcn or timely)")
            : std::string("unknown algorithm '").append(name).append("' (none, dcqcn or timely)"));
    return std::nullopt;
  }
  CcConfig c = make_config(algo);
  if (comma != std::string_view::npos &&
      !spec::apply(schema(), spec::entries(text.substr(comma + 1), ','), c, err,
                   {.scope = scope_of(algo)})) {
    return std::nullopt;
  }
  if (!validate(c, err)) return std::nullopt;
  return c;
}

std::string format_cc(const CcConfig& c) {
  std::string s = to_string(c.algorithm);
  for (const Key& k : schema().keys) {
    if (!(k.scopes & scope_of(c.algorithm))) continue;
    s += ",";
    s += k.name;
    s += "=";
    s += k.get(c);
  }
  return s;
}

}  // namespace uroce::transport::cc

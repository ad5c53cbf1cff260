// transport/cc/parse.cc: the UROCE_CC spec of one device — presets, mlx5 names, the options,
// and a clear error naming the field for every bad input.
#include "transport/cc/parse.h"

#include <gtest/gtest.h>

namespace uroce::transport::cc {
namespace {

CcConfig ok(const std::string& spec) {
  std::string err;
  std::optional<CcConfig> c = parse_cc(spec, &err);
  EXPECT_TRUE(c.has_value()) << spec << ": " << err;
  return c.value_or(CcConfig{});
}

std::string error_of(const std::string& spec) {
  std::string err;
  EXPECT_FALSE(parse_cc(spec, &err).has_value()) << spec;
  return err;
}

TEST(ParseCc, Algorithms) {
  EXPECT_EQ(ok("none").algorithm, Algorithm::kNone);
  EXPECT_FALSE(ok("none").np.enabled);
  const CcConfig d = ok("dcqcn");
  EXPECT_EQ(d.algorithm, Algorithm::kDcqcn);
  EXPECT_EQ(d.preset, Preset::kCx);  // what a ConnectX user expects by default
  EXPECT_TRUE(d.np.enabled);
  EXPECT_EQ(d.np.min_time_between_cnps, 4u);
  EXPECT_EQ(d.dcqcn.rpg_time_reset, 300u);
  EXPECT_EQ(d.dcqcn.alpha_update, AlphaUpdate::kPeriodic);
  EXPECT_EQ(ok("timely").algorithm, Algorithm::kTimely);
  EXPECT_FALSE(ok("timely").np.enabled);
  EXPECT_TRUE(ok("none,np=1").np.enabled);
  EXPECT_FALSE(ok("dcqcn,np=0").np.enabled);
  EXPECT_EQ(ok(" dcqcn , rpg_ai_rate = 7 ").dcqcn.rpg_ai_rate, 7u);
}

TEST(ParseCc, PresetsAndOverrides) {
  const CcConfig p = ok("dcqcn,preset=paper");
  EXPECT_EQ(p.dcqcn.rpg_time_reset, 55u);
  EXPECT_EQ(p.dcqcn.rpg_byte_reset, 10'000'000u);
  EXPECT_EQ(p.dcqcn.rpg_threshold, 5u);
  EXPECT_EQ(p.dcqcn.rpg_ai_rate, 40u);
  EXPECT_EQ(p.dcqcn.rpg_hai_rate, 200u);
  EXPECT_EQ(p.dcqcn.rpg_min_rate, 100u);
  EXPECT_DOUBLE_EQ(p.dcqcn.g(), 1.0 / 256);
  EXPECT_EQ(p.dcqcn.dce_tcp_rtt, 55u);
  EXPECT_DOUBLE_EQ(p.dcqcn.initial_alpha(), 1.0);
  EXPECT_EQ(p.np.min_time_between_cnps, 50u);
  EXPECT_EQ(p.dcqcn.alpha_update, AlphaUpdate::kPerCnp);
  EXPECT_EQ(p.dcqcn.hyper_step, HyperStep::kLinear);
  // The preset applies first wherever it stands; the other keys override it.
  const CcConfig o = ok("dcqcn,rpg_ai_rate=7,preset=paper,fr_boundary=lt,tie=cnp_first");
  EXPECT_EQ(o.dcqcn.rpg_ai_rate, 7u);
  EXPECT_EQ(o.dcqcn.rpg_time_reset, 55u);
  EXPECT_EQ(o.dcqcn.fr_boundary, FrBoundary::kLt);
  EXPECT_EQ(o.dcqcn.tie, Tie::kCnpFirst);
  const CcConfig all =
      ok("dcqcn,rpg_time_reset=10,rpg_byte_reset=0,rpg_threshold=3,rpg_hai_rate=99,"
         "rpg_min_rate=2,rpg_max_rate=25000,rpg_gd=12,rpg_min_dec_fac=20,"
         "rate_to_set_on_first_cnp=1000,dce_tcp_g=1000,dce_tcp_rtt=9,"
         "rate_reduce_monitor_period=0,initial_alpha_value=1024,clamp_tgt_rate=1,"
         "clamp_tgt_rate_after_time_inc=0,alpha_update=per_cnp,alpha_order=update_first,"
         "hyper_step=linear,min_time_between_cnps=0,cnp_dscp=26,cnp_802p_prio=3");
  EXPECT_EQ(all.dcqcn.rpg_byte_reset, 0u);
  EXPECT_EQ(all.dcqcn.rpg_max_rate, 25000u);
  EXPECT_EQ(all.dcqcn.rpg_gd, 12u);
  EXPECT_DOUBLE_EQ(all.dcqcn.g(), 24.0 / 1024);
  EXPECT_TRUE(all.dcqcn.clamp_tgt_rate);
  EXPECT_FALSE(all.dcqcn.clamp_tgt_rate_after_time_inc);
  EXPECT_EQ(all.dcqcn.alpha_order, AlphaOrder::kUpdateFirst);
  EXPECT_EQ(all.np.cnp_dscp, 26);
  EXPECT_EQ(all.np.cnp_802p_prio, 3);
  EXPECT_EQ(ok("dcqcn").pacer_burst, kDefaultPacerBurstBytes);
  EXPECT_EQ(ok("dcqcn,pacer_burst=0").pacer_burst, 0u);
  EXPECT_EQ(ok("timely,pacer_burst=4096").pacer_burst, 4096u);
  const CcConfig t = ok("timely,timely_t_low=10,timely_t_high=500,timely_beta=0.5,timely_ewma=1");
  EXPECT_EQ(t.timely.t_high, 500u);
  EXPECT_DOUBLE_EQ(t.timely.beta, 0.5);
}

TEST(ParseCc, FormatRoundTrips) {
  for (const char* spec :
       {"none", "none,np=1,cnp_dscp=40", "dcqcn", "dcqcn,preset=paper",
        "dcqcn,preset=paper,rpg_ai_rate=3,tie=cnp_first,hyper_step=constant",
        "timely,timely_beta=0.25,timely_max_rate=5000", "none,max_inflight=32768"}) {
    const CcConfig a = ok(spec);
    const std::string f = format_cc(a);
    const CcConfig b = ok(f);
    EXPECT_EQ(format_cc(b), f) << spec;
    EXPECT_EQ(b.dcqcn.rpg_ai_rate, a.dcqcn.rpg_ai_rate) << spec;
    EXPECT_EQ(b.np.enabled, a.np.enabled) << spec;
    EXPECT_DOUBLE_EQ(b.timely.beta, a.timely.beta) << spec;
    EXPECT_EQ(b.max_inflight, a.max_inflight) << spec;
  }
  EXPECT_NE(format_cc(ok("dcqcn")).find("rpg_time_reset=300"), std::string::npos);
  EXPECT_EQ(format_cc(ok("timely")).find("rpg_"), std::string::npos);
}

TEST(ParseCc, ErrorsNameTheField) {
  struct Case {
    const char* spec;
    const char* message;
  };
  const Case cases[] = {
      {"", "missing algorithm (none, dcqcn or timely)"},
      {"dctcp", "unknown algorithm 'dctcp' (none, dcqcn or timely)"},
      {"dcqcn,rpg_ai_rate=fast", "rpg_ai_rate 'fast' is not an unsigned integer"},
      {"dcqcn,rpg_ai_rate=-5", "rpg_ai_rate '-5' is not an unsigned integer"},
      {"dcqcn,rpg_ai_rate=", "rpg_ai_rate '' is not an unsigned integer"},
      {"dcqcn,rpg_ai_rate=0x10", "rpg_ai_rate '0x10' is not an unsigned integer"},
      {"dcqcn,rpg_gd=9", "rpg_gd 9 is out of range [10, 20]"},
      {"dcqcn,rpg_time_reset=0", "rpg_time_reset 0 is out of range [1, 2147483648]"},
      {"dcqcn,rpg_time_reset=99999999999",
       "rpg_time_reset '99999999999' is out of range [0, 4294967295]"},
      {"dcqcn,dce_tcp_g=1024", "dce_tcp_g 1024 is out of range [0, 1023]"},
      {"dcqcn,initial_alpha_value=2000", "initial_alpha_value 2000 is out of range [0, 1024]"},
      {"dcqcn,rpg_min_dec_fac=101", "rpg_min_dec_fac 101 is out of range [0, 100]"},
      {"dcqcn,cnp_dscp=64", "cnp_dscp 64 is out of range [0, 63]"},
      {"dcqcn,cnp_dscp=300", "cnp_dscp '300' is out of range [0, 255]"},
      {"dcqcn,cnp_802p_prio=8", "cnp_802p_prio 8 is out of range [0, 7]"},
      {"dcqcn,max_inflight=2000000000", "max_inflight 2000000000 is out of range [0, 1073741824]"},
      {"dcqcn,rpg_max_rate=50,rpg_min_rate=100", "rpg_max_rate 50 is below rpg_min_rate 100"},
      {"dcqcn,clamp_tgt_rate=2", "clamp_tgt_rate '2' is not 0 or 1"},
      {"dcqcn,alpha_update=sometimes", "alpha_update 'sometimes' is not one of per_cnp, periodic"},
      {"dcqcn,tie=random", "tie 'random' is not one of timer_first, cnp_first"},
      {"dcqcn,preset=fast", "preset 'fast' is not one of paper, cx"},
      {"dcqcn,preset=cx,preset=paper", "key 'preset' given twice"},
      {"dcqcn,rpg_ai_rate=5,rpg_ai_rate=6", "key 'rpg_ai_rate' given twice"},
      {"dcqcn,rpg_ai_rate", "'rpg_ai_rate' is not key=value"},
      {"dcqcn,,rpg_ai_rate=1", "empty entry"},
      {"dcqcn,", "empty entry"},
      {"timely,rpg_ai_rate=5", "key 'rpg_ai_rate' applies to dcqcn, not timely"},
      {"none,rpg_ai_rate=5", "key 'rpg_ai_rate' applies to dcqcn, not none"},
      {"dcqcn,timely_beta=0.5", "key 'timely_beta' applies to timely, not dcqcn"},
      {"timely,timely_beta=1.5", "timely_beta 1.500000 is out of range (0, 1]"},
      {"timely,timely_beta=nan", "timely_beta 'nan' is not a decimal number"},
      {"timely,timely_ewma=0", "timely_ewma 0.000000 is out of range (0, 1]"},
      {"timely,timely_t_low=2000", "timely_t_low 2000 must be below timely_t_high 1000"},
      {"timely,timely_min_rtt=0", "timely_min_rtt 0 is out of range [1, 2147483648]"},
      {"none,pacer_burst=0", "key 'pacer_burst' applies to dcqcn or timely, not none"},
      {"dcqcn,pacer_burst=99999999", "pacer_burst 99999999 is out of range [0, 16777216]"},
      {"dcqcn,np=yes", "np 'yes' is not 0 or 1"},
  };
  for (const Case& c : cases) EXPECT_EQ(error_of(c.spec), c.message) << c.spec;
}

// An unknown key is named, with the keys the spec's algorithm takes (and only those).
TEST(ParseCc, UnknownKeysListTheAlgorithmsKeys) {
  const std::string dcqcn = error_of("dcqcn,rpg_foo=1");
  EXPECT_EQ(dcqcn.rfind("unknown key 'rpg_foo' (known: preset, rpg_time_reset, ", 0), 0u) << dcqcn;
  EXPECT_NE(dcqcn.find(", max_inflight)"), std::string::npos) << dcqcn;
  EXPECT_EQ(dcqcn.find("timely_"), std::string::npos) << dcqcn;
  const std::string none = error_of("none,rpg_foo=1");
  EXPECT_EQ(none,
            "unknown key 'rpg_foo' (known: preset, np, min_time_between_cnps, cnp_dscp, "
            "cnp_802p_prio, max_inflight)");
}

}  // namespace
}  // namespace uroce::transport::cc

// src/sim/cli.{h,cc}: uroce-sim's command line on the shared key-table parser — each subcommand
// with its required flags only takes every documented default, and a bad command line is
// refused with the wording every spec uses. (tests/sim/cli.sh and rp_shape.sh run the binary.)
#include "sim/cli.h"

#include <gtest/gtest.h>

namespace uroce::sim::cli {
namespace {

bool parse_line(std::vector<std::string_view> args, Flags* f, std::string* err) {
  std::string help;
  return parse(args, f, &help, err);
}

TEST(SimCli, EachSubcommandTakesItsDefaults) {
  const std::vector<std::vector<std::string_view>> lines = {
      {"rp", "--duration-us", "10"},
      {"dumbbell", "--flows", "2", "--duration-ms", "1"},
      {"incast", "--senders", "2", "--msg-bytes", "1000"},
      {"leafspine", "--leaves", "2", "--spines", "2", "--hosts-per-leaf", "2"},
      {"plot", "--csv", "a", "--svg", "b", "--x", "c", "--y", "d"},
  };
  for (const auto& line : lines) {
    Flags f;
    std::string err;
    EXPECT_TRUE(parse_line(line, &f, &err)) << line[0] << ": " << err;
  }
  // The defaults the table documents are the values the runs get.
  Flags f;
  f.fabric.link_gbps = 1;  // overwritten by the documented default
  std::string err;
  ASSERT_TRUE(parse_line(lines[1], &f, &err)) << err;
  EXPECT_EQ(f.command, kDumbbell);
  EXPECT_EQ(f.fabric.link_gbps, 40);
  EXPECT_EQ(f.fabric.mtu, 1024u);
  EXPECT_EQ(f.fabric.quanta, 0xffffu);
  EXPECT_EQ(f.dumbbell.msg_bytes, 1u << 20);
  EXPECT_EQ(f.dumbbell.start, "sync");
  EXPECT_EQ(f.fabric.xoff_kb, -1);  // not given: --pfc's own default applies
  Flags ls;
  ASSERT_TRUE(parse_line(lines[3], &ls, &err)) << err;
  EXPECT_EQ(ls.leafspine.duration_ms, 10);
}

TEST(SimCli, FlagsParseTheirValues) {
  Flags f;
  std::string err;
  ASSERT_TRUE(parse_line({"rp", "--cnp-us", "0,5.5", "--cnp-us=7", "--duration-us", "10",
                          "--preset", "cx", "--start-gbps", "20"},
                         &f, &err))
      << err;
  EXPECT_EQ(f.rp.cnp_us, (std::vector<double>{0, 5.5, 7}));
  EXPECT_EQ(f.rp.preset, "cx");
  EXPECT_EQ(f.rp.start_gbps, 20);
  ASSERT_TRUE(parse_line({"leafspine", "--leaves", "3", "--spines", "2", "--hosts-per-leaf", "2",
                          "--scenario", "pfc-spread", "--entropy", "--pfc", "--fabric-gbps", "100"},
                         &f, &err))
      << err;
  EXPECT_TRUE(f.leafspine.entropy);
  EXPECT_TRUE(f.fabric.pfc);
  EXPECT_EQ(f.fabric.fabric_gbps, 100);
}

TEST(SimCli, LabTakesItsNameFirstAndTheFabricFlagsParse) {
  Flags f;
  std::string err;
  ASSERT_TRUE(parse_line({"lab", "pfc-storm", "--quick", "--svg", "x.svg"}, &f, &err)) << err;
  EXPECT_EQ(f.command, kLab);
  EXPECT_EQ(f.lab.name, "pfc-storm");
  EXPECT_TRUE(f.lab.quick);
  EXPECT_FALSE(f.lab.list);
  EXPECT_EQ(f.lab.svg, "x.svg");
  Flags l;
  ASSERT_TRUE(parse_line({"lab", "--list"}, &l, &err)) << err;
  EXPECT_TRUE(l.lab.list);
  EXPECT_TRUE(l.lab.name.empty());
  Flags x;
  ASSERT_TRUE(parse_line({"incast", "--senders", "2", "--msg-bytes", "1", "--pfc", "--pfc-prio",
                          "4", "--dscp", "0", "--link-mtu", "h0-s0=1500,rx-s0=9216"},
                         &x, &err))
      << err;
  EXPECT_EQ(x.fabric.pfc_prio, 4);
  EXPECT_EQ(x.fabric.dscp, 0u);
  EXPECT_EQ(x.fabric.link_mtu, "h0-s0=1500,rx-s0=9216");
  for (const std::vector<std::string_view>& bad :
       {std::vector<std::string_view>{"lab", "x", "--entropy"},
        {"incast", "--senders", "2", "--msg-bytes", "1", "--link-mtu", "h0-s0=20"},
        {"incast", "--senders", "2", "--msg-bytes", "1", "--link-mtu", "h0-s0"},
        {"incast", "--senders", "2", "--msg-bytes", "1", "--pfc-prio", "8"},
        {"incast", "--senders", "2", "--msg-bytes", "1", "--dscp", "64"}}) {
    Flags b;
    EXPECT_FALSE(parse_line(bad, &b, &err)) << bad.back();
  }
  EXPECT_EQ(err, "--dscp '64' is not in [0, 63]");
}

TEST(SimCli, BadCommandLinesInTheSharedWording) {
  const std::pair<std::vector<std::string_view>, const char*> cases[] = {
      {{"dumbbell", "--flows", "2", "--flows", "3", "--duration-ms", "1"},
       "key '--flows' given twice"},
      {{"dumbbell", "--flows", "2", "--duration-ms", "1", "--senders", "3"},
       "key '--senders' applies to incast, not dumbbell"},
      {{"incast", "--senders", "2"}, "missing key '--msg-bytes' (message size, bytes)"},
      {{"rp", "--duration-us", "10", "--line-gbps", "0"}, "--line-gbps '0' is not in (0, 4000]"},
      {{"rp", "--duration-us", "ten"}, "--duration-us 'ten' is not a number"},
      {{"dumbbell", "--flows", "5000", "--duration-ms", "1"}, "--flows '5000' is not in [1, 4096]"},
      {{"incast", "--senders", "2", "--msg-bytes", "1", "--mtu", "1500"},
       "--mtu '1500' is not 256, 512, 1024, 2048 or 4096"},
      {{"incast", "--senders", "2", "--msg-bytes", "1", "--pfc=1"}, "key '--pfc' takes no value"},
      {{"incast", "2"}, "unexpected argument '2'"},
      {{"fly"}, "unknown subcommand 'fly' (rp, dumbbell, incast, leafspine, plot or lab)"},
  };
  for (const auto& [line, want] : cases) {
    Flags f;
    std::string err;
    EXPECT_FALSE(parse_line(line, &f, &err)) << want;
    EXPECT_EQ(err, want);
  }
  Flags f;
  std::string err;
  EXPECT_FALSE(parse_line({"plot", "--csv", "a", "--svg", "b", "--x", "c", "--y", "d", "--z", "1"},
                          &f, &err));
  EXPECT_EQ(err.rfind("unknown key '--z' (known: --csv, --svg, --x, --y, --bars, ", 0), 0u) << err;
}

TEST(SimCli, HelpComesFromTheTable) {
  Flags f;
  std::string help, err;
  EXPECT_FALSE(parse({"incast", "--help"}, &f, &help, &err));
  EXPECT_TRUE(err.empty());
  EXPECT_NE(help.find("  --senders VALUE"), std::string::npos) << help;
  EXPECT_NE(help.find("[required]"), std::string::npos) << help;
  EXPECT_NE(help.find("--limit-ms VALUE"), std::string::npos) << help;
  EXPECT_EQ(help.find("--flows"), std::string::npos) << help;
  EXPECT_FALSE(parse({}, &f, &help, &err));
  EXPECT_NE(help.find("leafspine"), std::string::npos);
}

}  // namespace
}  // namespace uroce::sim::cli

// transport/spec/spec.h: the checks every spec shares — unknown keys, keys of another scope,
// keys given twice, entries that are not key=value, required keys — with one wording, and the
// pieces around them (splitting, command lines, defaults, describe, usage, the value readers).
#include "transport/spec/spec.h"

#include <gtest/gtest.h>

namespace uroce::spec {
namespace {

// A small configuration with one key of each sort.
struct Cfg {
  int a = 1;
  std::string b = "x";
  std::vector<std::string> many;
  bool on = false;
  std::string mode = "default";
  std::string order;  // the order setters ran in
};

constexpr Scopes kOne = 1, kTwo = 2;

Schema<Cfg> schema() {
  Schema<Cfg> s;
  s.scope_names = {"one", "two"};
  s.keys.push_back(Key<Cfg>{.name = "a",
                            .set =
                                [](Cfg& c, std::string_view v, std::string* why) {
                                  uint64_t n = 0;
                                  if (!read_uint(v, 0, 9, &n)) {
                                    *why = "is not a digit";
                                    return false;
                                  }
                                  c.a = int(n);
                                  c.order += "a";
                                  return true;
                                },
                            .get = [](const Cfg& c) { return std::to_string(c.a); },
                            .def = "1",
                            .doc = "a digit"});
  s.keys.push_back(Key<Cfg>{.name = "b",
                            .scopes = kOne,
                            .set =
                                [](Cfg& c, std::string_view v, std::string*) {
                                  c.b = std::string(v);
                                  c.order += "b";
                                  return true;
                                },
                            .get = [](const Cfg& c) { return c.b; },
                            .def = "x",
                            .doc = "any text, scope one"});
  s.keys.push_back(Key<Cfg>{.name = "many",
                            .set =
                                [](Cfg& c, std::string_view v, std::string*) {
                                  c.many.emplace_back(v);
                                  return true;
                                },
                            .doc = "repeatable",
                            .repeatable = true});
  s.keys.push_back(Key<Cfg>{.name = "on",
                            .set =
                                [](Cfg& c, std::string_view, std::string*) {
                                  c.on = true;
                                  return true;
                                },
                            .doc = "a switch",
                            .is_switch = true});
  s.keys.push_back(Key<Cfg>{.name = "mode",
                            .scopes = kTwo,
                            .set =
                                [](Cfg& c, std::string_view v, std::string*) {
                                  c.mode = std::string(v);
                                  c.order += "m";
                                  return true;
                                },
                            .get = [](const Cfg& c) { return c.mode; },
                            .def = "default",
                            .doc = "set first",
                            .required = true,
                            .first = true});
  return s;
}

std::string error_of(std::string_view text, Options o = {.scope = kOne}) {
  Cfg c;
  std::string err;
  EXPECT_FALSE(apply(schema(), entries(text, ','), c, &err, o)) << text;
  return err;
}

TEST(Spec, AppliesEntriesInOrderWithFirstKeysFirst) {
  Cfg c;
  std::string err;
  ASSERT_TRUE(apply(schema(), entries(" a = 3 , many=p,b=y z,many=q, mode=m", ','), c, &err,
                    {.scope = kTwo | kOne}))
      << err;
  EXPECT_EQ(c.a, 3);
  EXPECT_EQ(c.b, "y z");
  EXPECT_EQ(c.many, (std::vector<std::string>{"p", "q"}));
  EXPECT_EQ(c.mode, "m");
  EXPECT_EQ(c.order, "mab");  // `mode` first wherever it stands
}

TEST(Spec, OneWordingForEveryProblem) {
  EXPECT_EQ(error_of("a=1,zz=2"), "unknown key 'zz' (known: a, b, many, on)");
  EXPECT_EQ(error_of("mode=x"), "key 'mode' applies to two, not one");
  EXPECT_EQ(error_of("a=1,a=2"), "key 'a' given twice");
  EXPECT_EQ(error_of("a"), "'a' is not key=value");
  EXPECT_EQ(error_of("a=1,,b=2"), "empty entry");
  EXPECT_EQ(error_of("on=1"), "key 'on' takes no value");
  EXPECT_EQ(error_of("a=12"), "a '12' is not a digit");
  EXPECT_EQ(error_of("a=1", {.scope = kTwo}), "missing key 'mode' (set first)");
  // The prefix goes before every key the message names.
  EXPECT_EQ(error_of("zz=1", {.scope = kOne, .prefix = "k:"}),
            "unknown key 'k:zz' (known: k:a, k:b, k:many, k:on)");
  EXPECT_EQ(error_of("a=x", {.scope = kOne, .prefix = "--"}), "--a 'x' is not a digit");
}

TEST(Spec, EntriesMayCarryTheirOwnNameAndScope) {
  std::vector<Entry> in = entries("x.a=1,y.a=2", ',');
  in[0].name = in[1].name = "a";  // as UROCE_FAULTS strips rx./tx.
  in[0].scope = in[1].scope = kOne;
  Cfg c;
  std::string err;
  EXPECT_FALSE(apply(schema(), in, c, &err));
  EXPECT_EQ(err, "key 'y.a' given twice (first as 'x.a')");
}

TEST(Spec, SkipsEmptyEntriesWhereTheGrammarAllowsThem) {
  Cfg c;
  std::string err;
  EXPECT_TRUE(
      apply(schema(), entries(";a=4;;b=q;", ';'), c, &err, {.scope = kOne, .skip_empty = true}))
      << err;
  EXPECT_EQ(c.a, 4);
}

TEST(Spec, SplitsOutsideParentheses) {
  EXPECT_EQ(split("u0=dpdk(dev=x,role=server;ip=1.2.3.4), u1=lo", ','),
            (std::vector<std::string_view>{"u0=dpdk(dev=x,role=server;ip=1.2.3.4)", "u1=lo"}));
  EXPECT_EQ(split("a,,b,", ','), (std::vector<std::string_view>{"a", "", "b", ""}));
}

TEST(Spec, DefaultsAreSetFromTheirTextWhenAsked) {
  Cfg c;
  c.a = 7;
  c.b = "other";
  std::string err;
  ASSERT_TRUE(
      apply(schema(), entries("b=given", ','), c, &err, {.scope = kOne, .set_defaults = true}))
      << err;
  EXPECT_EQ(c.a, 1);  // from "1"
  EXPECT_EQ(c.b, "given");
}

TEST(Spec, CommandLines) {
  const Schema<Cfg> s = schema();
  std::vector<Entry> in;
  std::string err;
  const std::vector<std::string_view> args = {"--a", "5", "--on", "--b=-x", "--many", "--p"};
  ASSERT_TRUE(entries_from_args(s, args, &in, &err)) << err;
  ASSERT_EQ(in.size(), 4u);
  EXPECT_EQ(in[0].key, "a");
  EXPECT_EQ(in[0].value, "5");
  EXPECT_EQ(in[1].key, "on");
  EXPECT_FALSE(in[1].has_value);
  EXPECT_EQ(in[2].value, "-x");
  EXPECT_EQ(in[3].value, "--p");  // a known key takes the next argument whatever it looks like
  Cfg c;
  ASSERT_TRUE(apply(s, in, c, &err, {.scope = kOne})) << err;
  EXPECT_TRUE(c.on);
  in.clear();
  EXPECT_FALSE(entries_from_args(s, {"5"}, &in, &err));
  EXPECT_EQ(err, "unexpected argument '5'");
  in.clear();
  ASSERT_TRUE(entries_from_args(s, {"--nope", "3", "--a", "1"}, &in, &err));
  ASSERT_EQ(in.size(), 2u);  // the unknown key's value went with it
  EXPECT_FALSE(apply(s, in, c, &err, {.scope = kOne, .prefix = "--"}));
  EXPECT_EQ(err, "unknown key '--nope' (known: --a, --b, --many, --on)");
}

TEST(Spec, DescribeAndUsage) {
  Cfg c;
  c.a = 4;
  EXPECT_EQ(describe(schema(), c, kOne, "  "),
            "  a=4  a digit (default 1)\n"
            "  b=x  any text, scope one\n");
  EXPECT_EQ(usage(schema(), kTwo),
            "  --a VALUE     a digit [default: 1]\n"
            "  --many VALUE  repeatable\n"
            "  --on          a switch\n"
            "  --mode VALUE  set first [required]\n");
}

TEST(Spec, ValueReaders) {
  uint32_t ip = 0;
  EXPECT_TRUE(read_ipv4("10.1.2.3", &ip));
  EXPECT_EQ(ip, 0x0a010203u);
  EXPECT_EQ(ipv4_text(ip), "10.1.2.3");
  for (const char* bad : {"1.2.3", "1.2.3.4.5", "256.1.1.1", "01.2.3.4", "1.2.3.4 ", "", "a.b.c.d",
                          "1..2.3", "1.2.3.-4"})
    EXPECT_FALSE(read_ipv4(bad, &ip)) << bad;
  uint8_t mac[6];
  EXPECT_TRUE(read_mac("02:aB:00:00:00:ff", mac));
  EXPECT_EQ(mac_text(mac), "02:ab:00:00:00:ff");
  EXPECT_FALSE(read_mac("02:ab:00:00:00", mac));
  EXPECT_FALSE(read_mac("02-ab-00-00-00-ff", mac));
  uint64_t n = 0;
  EXPECT_TRUE(read_uint("4094", 1, 4094, &n));
  EXPECT_FALSE(read_uint("4095", 1, 4094, &n));
  EXPECT_FALSE(read_uint("+1", 0, 9, &n));
  EXPECT_FALSE(read_uint("", 0, 9, &n));
}

}  // namespace
}  // namespace uroce::spec

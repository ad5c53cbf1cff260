// perftest's set-up messages (src/tools/perf/setup.h): the key message's exact text and size,
// what perftest sends parses, and anything else is refused; the extension message's fields.
#include "tools/perf/setup.h"

#include <gtest/gtest.h>

#include <cstring>
#include <string>

namespace uroce::perf {
namespace {

Dest sample() {
  Dest d;
  d.lid = 0x12;
  d.out_reads = 16;
  d.qpn = 0xabcdef;
  d.psn = 0x123456;
  d.rkey = 0xdeadbeef;
  d.vaddr = 0x00007f0123456000ull;
  const uint8_t gid[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 127, 0, 60, 1};
  std::memcpy(d.gid.raw, gid, 16);
  return d;
}

TEST(SetupTest, KeyMessageWithGidIsPerftestsText) {
  std::string m = format_dest(sample(), true);
  ASSERT_EQ(m.size(), 108u);  // KEY_MSG_SIZE_GID, NUL included
  EXPECT_EQ(std::string(m.c_str()),
            "0012:0010:abcdef:123456:deadbeef:00007f0123456000:"
            "00:00:00:00:00:00:00:00:00:00:ff:ff:7f:00:3c:01:00000000:");
  EXPECT_EQ(m.back(), '\0');
}

TEST(SetupTest, KeyMessageWithoutGidIsPerftestsText) {
  std::string m = format_dest(sample(), false);
  ASSERT_EQ(m.size(), 59u);  // KEY_MSG_SIZE
  EXPECT_EQ(std::string(m.c_str()), "0012:0010:abcdef:123456:deadbeef:00007f0123456000:00000000");
}

TEST(SetupTest, KeyMessagesRoundTrip) {
  for (bool gid : {true, false}) {
    auto d = parse_dest(format_dest(sample(), gid), gid);
    ASSERT_TRUE(d.has_value());
    EXPECT_EQ(d->lid, 0x12u);
    EXPECT_EQ(d->out_reads, 16u);
    EXPECT_EQ(d->qpn, 0xabcdefu);
    EXPECT_EQ(d->psn, 0x123456u);
    EXPECT_EQ(d->rkey, 0xdeadbeefu);
    EXPECT_EQ(d->vaddr, 0x00007f0123456000ull);
    if (gid) {
      EXPECT_EQ(std::memcmp(d->gid.raw, sample().gid.raw, 16), 0);
    }
  }
}

TEST(SetupTest, WhatPerftestSendsParses) {
  // As ib_write_bw 6.06 writes it (upper- or lower-case hex, the NUL-padded buffer).
  std::string m =
      "0000:0001:000011:36060b:00000100:00007fd871a36000:00:00:00:00:00:00:00:00:00:00:"
      "FF:FF:7F:00:32:01:00000000:";
  m.resize(108, '\0');
  auto d = parse_dest(m, true);
  ASSERT_TRUE(d.has_value());
  EXPECT_EQ(d->qpn, 0x11u);
  EXPECT_EQ(d->psn, 0x36060bu);
  EXPECT_EQ(d->vaddr, 0x7fd871a36000ull);
  EXPECT_EQ(d->gid.raw[15], 1);
  EXPECT_EQ(d->gid.raw[10], 0xff);
}

TEST(SetupTest, MalformedKeyMessagesAreRefused) {
  std::string good = format_dest(sample(), true);
  EXPECT_FALSE(parse_dest(format_dest(sample(), false), true).has_value());  // no GID
  EXPECT_FALSE(parse_dest(good, false).has_value());                         // unexpected GID
  EXPECT_FALSE(parse_dest(std::string(108, '\0'), true).has_value());        // empty
  std::string bad = good;
  bad[2] = 'x';
  EXPECT_FALSE(parse_dest(bad, true).has_value());  // not hex
  bad = good;
  bad.replace(0, 4, "12345");  // a field too wide
  EXPECT_FALSE(parse_dest(bad, true).has_value());
  EXPECT_FALSE(parse_dest("garbage", true).has_value());
}

TEST(SetupTest, ExtensionFieldsRoundTrip) {
  Fields f{{"test", "write_bw"}, {"sent.0", "1000"}, {"empty", ""}, {"check.first", "a=b c"}};
  auto g = decode_fields(encode_fields(f));
  ASSERT_TRUE(g.has_value());
  EXPECT_EQ(*g, f);
  EXPECT_FALSE(decode_fields("no newline").has_value());
  EXPECT_FALSE(decode_fields("=no key\n").has_value());
  EXPECT_FALSE(decode_fields("no equals\n").has_value());
  EXPECT_TRUE(decode_fields("")->empty());
}

TEST(SetupTest, TheVersionStringReadsAsPerftests) {
  // perftest reads the peer's version with atof and needs >= 5.70.
  EXPECT_DOUBLE_EQ(std::atof(kVersionString), kProtocolVersion);
  EXPECT_LE(sizeof(kVersionString), kVersionLen);
}

}  // namespace
}  // namespace uroce::perf

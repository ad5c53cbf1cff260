// LinkWatch's parsing of rtnetlink messages, on hand-built buffers (no netlink socket needed):
// which message decides the state, and that malformed input ends the walk without reading past
// the buffer. tests/verbs/port_test.cc drives the whole path on a real veth pair.
#include "ports/link_watch.h"

#include <gtest/gtest.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <net/if.h>

#include <cstring>
#include <vector>

namespace uroce {
namespace {

// Appends one RTM_*LINK message (header + ifinfomsg, no attributes) to `buf`.
void add_link_msg(std::vector<uint8_t>& buf, uint16_t type, int ifindex, unsigned flags) {
  size_t at = buf.size();
  buf.resize(at + NLMSG_SPACE(sizeof(ifinfomsg)));
  nlmsghdr h{};
  h.nlmsg_len = NLMSG_LENGTH(sizeof(ifinfomsg));
  h.nlmsg_type = type;
  std::memcpy(buf.data() + at, &h, sizeof h);
  ifinfomsg ifi{};
  ifi.ifi_index = ifindex;
  ifi.ifi_flags = flags;
  std::memcpy(buf.data() + at + NLMSG_HDRLEN, &ifi, sizeof ifi);
}

std::optional<bool> parse(const std::vector<uint8_t>& buf, int ifindex) {
  // Netlink buffers are 4-byte aligned; a vector's data is at least that.
  return LinkWatch::link_state_in(buf.data(), buf.size(), ifindex);
}

TEST(LinkWatchTest, UpNeedsAdminUpAndRunning) {
  std::vector<uint8_t> b;
  add_link_msg(b, RTM_NEWLINK, 7, IFF_UP | IFF_RUNNING);
  EXPECT_EQ(parse(b, 7), true);
  b.clear();
  add_link_msg(b, RTM_NEWLINK, 7, IFF_UP);  // no carrier
  EXPECT_EQ(parse(b, 7), false);
  b.clear();
  add_link_msg(b, RTM_NEWLINK, 7, IFF_RUNNING);  // cannot really happen; still not up
  EXPECT_EQ(parse(b, 7), false);
}

TEST(LinkWatchTest, LastMessageAboutTheInterfaceWins) {
  std::vector<uint8_t> b;
  add_link_msg(b, RTM_NEWLINK, 7, IFF_UP);
  add_link_msg(b, RTM_NEWLINK, 8, 0);  // another interface: ignored
  add_link_msg(b, RTM_NEWLINK, 7, IFF_UP | IFF_RUNNING);
  add_link_msg(b, RTM_NEWADDR, 7, 0);  // not a link message
  EXPECT_EQ(parse(b, 7), true);
  EXPECT_EQ(parse(b, 8), false);
  EXPECT_EQ(parse(b, 9), std::nullopt);
  add_link_msg(b, RTM_DELLINK, 7, IFF_UP | IFF_RUNNING);  // the interface went away
  EXPECT_EQ(parse(b, 7), false);
}

TEST(LinkWatchTest, MalformedInputEndsTheWalk) {
  std::vector<uint8_t> b;
  add_link_msg(b, RTM_NEWLINK, 7, IFF_UP | IFF_RUNNING);
  // A truncated second message (its header claims more than the buffer holds) is not read.
  std::vector<uint8_t> t = b;
  add_link_msg(t, RTM_NEWLINK, 7, 0);
  t.resize(t.size() - 8);
  EXPECT_EQ(parse(t, 7), true);
  // A link message too short for its ifinfomsg stops the walk.
  std::vector<uint8_t> s = b;
  nlmsghdr h{};
  h.nlmsg_len = NLMSG_HDRLEN + 4;
  h.nlmsg_type = RTM_NEWLINK;
  size_t at = s.size();
  s.resize(at + NLMSG_ALIGN(h.nlmsg_len));
  std::memcpy(s.data() + at, &h, sizeof h);
  EXPECT_EQ(parse(s, 7), true);
  // A header whose length is below the header size, and buffers too short for any header.
  std::vector<uint8_t> z(sizeof(nlmsghdr), 0);
  EXPECT_EQ(parse(z, 0), std::nullopt);
  EXPECT_EQ(LinkWatch::link_state_in(b.data(), 3, 7), std::nullopt);
  EXPECT_EQ(LinkWatch::link_state_in(b.data(), 0, 7), std::nullopt);
}

TEST(LinkWatchTest, OpenReportsAnUnknownInterface) {
  std::string err;
  EXPECT_EQ(LinkWatch::open("no-such-if0", &err), nullptr);
  EXPECT_NE(err.find("no-such-if0"), std::string::npos);
  // Loopback exists everywhere and is up.
  auto lo = LinkWatch::open("lo", &err);
  ASSERT_NE(lo, nullptr) << err;
  EXPECT_TRUE(lo->up());
  EXPECT_GE(lo->fd(), 0);
  EXPECT_FALSE(lo->drain());  // nothing changed
}

}  // namespace
}  // namespace uroce

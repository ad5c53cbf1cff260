// The sysfs view of uroce devices (src/verbs/sysfs_view.h), alone: paths in, nodes and texts out,
// no file system. tests/verbs/discovery_test.cc checks the same view through libc's calls.
#include "sysfs_view.h"

#include <gtest/gtest.h>

#include <array>
#include <cerrno>
#include <string>

namespace uroce::verbs {
namespace {

using What = SysfsView::Found::What;
using Kind = SysfsView::Kind;

std::vector<ViewDevice> two_devices() {
  ViewDevice a;
  a.name = "uroce0";
  a.ipv4 = 0x7f000001;  // 127.0.0.1
  a.netdev = "lo";
  a.guid = 0x7f00fffe000001ull;
  a.fw_ver = "uroce 1.2.3";
  ViewDevice b;
  b.name = "dpdk0";
  b.ipv4 = 0x0a090001;  // 10.9.0.1, on a DPDK port: no netdev, RoCE v1 beside v2
  b.roce_v1 = true;
  return {a, b};
}

class SysfsViewTest : public ::testing::Test {
 protected:
  bool link = true;
  std::string asked;
  SysfsView view{two_devices(), [this](const std::string& n) {
                   asked = n;
                   return link;
                 }};

  std::string text(const char* path) {
    auto f = view.find(path, true);
    EXPECT_EQ(f.what, What::kNode) << path;
    if (f.what != What::kNode) return "<none>";
    EXPECT_EQ(f.node->kind, Kind::kFile) << path;
    return std::string(view.read(*f.node));
  }
  std::vector<std::string> list(const char* path) {
    auto f = view.find(path, true);
    EXPECT_EQ(f.what, What::kNode) << path;
    if (f.what != What::kNode) return {};
    EXPECT_EQ(f.node->kind, Kind::kDir) << path;
    return f.node->children;
  }
};

TEST(SysfsViewClaims, OnlyTheTwoDirectoriesAndWhatLiesBelow) {
  EXPECT_TRUE(SysfsView::claims("/sys/class/infiniband"));
  EXPECT_TRUE(SysfsView::claims("/sys/class/infiniband/"));
  EXPECT_TRUE(SysfsView::claims("/sys/class/infiniband/uroce0/ports/1/gids/0"));
  EXPECT_TRUE(SysfsView::claims("/dev/infiniband"));
  EXPECT_TRUE(SysfsView::claims("/dev/infiniband/uroce0"));
  EXPECT_FALSE(SysfsView::claims("/sys/class/infiniband_verbs/abi_version"));
  EXPECT_FALSE(SysfsView::claims("/sys/class/infinibandx"));
  EXPECT_FALSE(SysfsView::claims("/sys/class/infini"));
  EXPECT_FALSE(SysfsView::claims("/sys/class/net/lo"));
  EXPECT_FALSE(SysfsView::claims("/dev/infinibandx"));
  EXPECT_FALSE(SysfsView::claims("/dev/null"));
  EXPECT_FALSE(SysfsView::claims("/"));
  EXPECT_FALSE(SysfsView::claims(""));
  EXPECT_FALSE(SysfsView::claims("sys/class/infiniband"));
  EXPECT_FALSE(SysfsView::claims(nullptr));
}

TEST(SysfsViewNormalize, CollapsesDotsAndSlashes) {
  char out[64];
  bool dir_only = false;
  ASSERT_TRUE(SysfsView::normalize("/sys//class/./infiniband/", out, sizeof out, &dir_only));
  EXPECT_STREQ(out, "/sys/class/infiniband");
  EXPECT_TRUE(dir_only);
  ASSERT_TRUE(
      SysfsView::normalize("/sys/class/infiniband/uroce0/../x", out, sizeof out, &dir_only));
  EXPECT_STREQ(out, "/sys/class/infiniband/x");
  EXPECT_FALSE(dir_only);
  ASSERT_TRUE(SysfsView::normalize("/../..", out, sizeof out, &dir_only));
  EXPECT_STREQ(out, "/");
  ASSERT_TRUE(SysfsView::normalize("/a/.", out, sizeof out, &dir_only));
  EXPECT_STREQ(out, "/a");
  EXPECT_TRUE(dir_only);  // "." names a directory
  EXPECT_FALSE(SysfsView::normalize("relative", out, sizeof out, &dir_only));
  EXPECT_FALSE(SysfsView::normalize(
      "/a/very/long/path/that/does/not/fit/in/the/buffer/given/here/x", out, 16, &dir_only));
}

TEST_F(SysfsViewTest, ListsTheDevicesAndTheirNodes) {
  EXPECT_EQ(list("/sys/class/infiniband"), (std::vector<std::string>{"dpdk0", "uroce0"}));
  EXPECT_EQ(list("/dev/infiniband"), (std::vector<std::string>{"dpdk0", "uroce0"}));
  EXPECT_EQ(list("/sys/class/infiniband/uroce0"),
            (std::vector<std::string>{"device", "fw_ver", "node_guid", "node_type", "ports",
                                      "sys_image_guid"}));
  EXPECT_EQ(list("/sys/class/infiniband/uroce0/ports"), (std::vector<std::string>{"1"}));
  EXPECT_EQ(list("/sys/class/infiniband/uroce0/ports/1/gids"), (std::vector<std::string>{"0"}));
  EXPECT_EQ(list("/sys/class/infiniband/dpdk0/ports/1/gids"), (std::vector<std::string>{"0", "1"}));
  EXPECT_EQ(list("/sys/class/infiniband/uroce0/device/net"), (std::vector<std::string>{"lo"}));
  EXPECT_TRUE(list("/sys/class/infiniband/dpdk0/device/net").empty());
  EXPECT_TRUE(list("/sys/class/infiniband/dpdk0/ports/1/gid_attrs/ndevs").empty());
  auto f = view.find("/sys/class/infiniband/uroce0/ports", true);
  ASSERT_EQ(f.what, What::kNode);
  EXPECT_EQ(f.node->subdirs, 1u);
}

TEST_F(SysfsViewTest, TextsAreTheKernelsForWhatTheVerbsReport) {
  EXPECT_EQ(text("/sys/class/infiniband/uroce0/node_type"), "1: CA\n");
  EXPECT_EQ(text("/sys/class/infiniband/uroce0/node_guid"), "007f:00ff:fe00:0001\n");
  EXPECT_EQ(text("/sys/class/infiniband/uroce0/fw_ver"), "uroce 1.2.3\n");
  EXPECT_EQ(text("/sys/class/infiniband/uroce0/ports/1/link_layer"), "Ethernet\n");
  EXPECT_EQ(text("/sys/class/infiniband/uroce0/ports/1/gids/0"),
            "0000:0000:0000:0000:0000:ffff:7f00:0001\n");
  EXPECT_EQ(text("/sys/class/infiniband/uroce0/ports/1/gid_attrs/types/0"), "RoCE v2\n");
  EXPECT_EQ(text("/sys/class/infiniband/uroce0/ports/1/gid_attrs/ndevs/0"), "lo\n");
  EXPECT_EQ(text("/sys/class/infiniband/uroce0/ports/1/pkeys/0"), "0xffff\n");
  EXPECT_EQ(text("/sys/class/infiniband/uroce0/ports/1/cap_mask"), "0x04000000\n");
  EXPECT_EQ(text("/sys/class/infiniband/uroce0/ports/1/rate"), "25 Gb/sec (1X EDR)\n");
  EXPECT_EQ(text("/sys/class/infiniband/dpdk0/ports/1/gids/1"),
            "0000:0000:0000:0000:0000:ffff:0a09:0001\n");
  EXPECT_EQ(text("/sys/class/infiniband/dpdk0/ports/1/gid_attrs/types/0"), "RoCE v2\n");
  EXPECT_EQ(text("/sys/class/infiniband/dpdk0/ports/1/gid_attrs/types/1"), "IB/RoCE v1\n");
}

// An IPv6 device: GID 0 is the address itself (not IPv4-mapped), a RoCE v2 GID, as
// ibv_query_gid_type reads it from gid_attrs/types.
TEST(SysfsViewIpv6, GidZeroIsThePlainIpv6Address) {
  ViewDevice d;
  d.name = "uroce6";
  d.ipv6 = wire::IpAddr(std::array<uint8_t, 16>{0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 2});
  d.netdev = "eth0";
  SysfsView view({d}, [](const std::string&) { return true; });
  auto read = [&](const char* path) {
    auto f = view.find(path, true);
    EXPECT_EQ(f.what, What::kNode) << path;
    return f.what == What::kNode ? std::string(view.read(*f.node)) : std::string("<none>");
  };
  EXPECT_EQ(read("/sys/class/infiniband/uroce6/ports/1/gids/0"),
            "fd00:0000:0000:0000:0000:0000:0001:0002\n");
  EXPECT_EQ(read("/sys/class/infiniband/uroce6/ports/1/gid_attrs/types/0"), "RoCE v2\n");
  EXPECT_EQ(view.find("/sys/class/infiniband/uroce6/ports/1/gids/1", true).what, What::kError);
}

TEST_F(SysfsViewTest, PortStateFollowsTheNetdevsLink) {
  EXPECT_EQ(text("/sys/class/infiniband/uroce0/ports/1/state"), "4: ACTIVE\n");
  EXPECT_EQ(asked, "lo");
  EXPECT_EQ(text("/sys/class/infiniband/uroce0/ports/1/phys_state"), "5: LinkUp\n");
  link = false;
  EXPECT_EQ(text("/sys/class/infiniband/uroce0/ports/1/state"), "1: DOWN\n");
  EXPECT_EQ(text("/sys/class/infiniband/uroce0/ports/1/phys_state"), "3: Disabled\n");
  // Without a netdev (DPDK) the port is ACTIVE, as `uroce devices` says.
  asked.clear();
  EXPECT_EQ(text("/sys/class/infiniband/dpdk0/ports/1/state"), "4: ACTIVE\n");
  EXPECT_EQ(asked, "");
}

TEST_F(SysfsViewTest, TheNetdevLinkLeadsToSysClassNet) {
  auto link = view.find("/sys/class/infiniband/uroce0/device/net/lo", false);
  ASSERT_EQ(link.what, What::kNode);
  EXPECT_EQ(link.node->kind, Kind::kLink);
  EXPECT_EQ(link.node->content, "../../../../net/lo");
  auto followed = view.find("/sys/class/infiniband/uroce0/device/net/lo", true);
  ASSERT_EQ(followed.what, What::kRewrite);
  EXPECT_STREQ(followed.path, "/sys/class/net/lo");
  auto through = view.find("/sys/class/infiniband/uroce0/device/net/lo/mtu", false);
  ASSERT_EQ(through.what, What::kRewrite);
  EXPECT_STREQ(through.path, "/sys/class/net/lo/mtu");
  auto slash = view.find("/sys/class/infiniband/uroce0/device/net/lo/", false);
  ASSERT_EQ(slash.what, What::kRewrite);
  EXPECT_STREQ(slash.path, "/sys/class/net/lo/");
}

TEST_F(SysfsViewTest, MissingPathsAndFilesAsDirectoriesAreErrors) {
  auto none = view.find("/sys/class/infiniband/uroce9", true);
  EXPECT_EQ(none.what, What::kError);
  EXPECT_EQ(none.error, ENOENT);
  auto below_file = view.find("/sys/class/infiniband/uroce0/node_type/x", true);
  EXPECT_EQ(below_file.what, What::kError);
  EXPECT_EQ(below_file.error, ENOTDIR);
  auto file_slash = view.find("/sys/class/infiniband/uroce0/node_type/", true);
  EXPECT_EQ(file_slash.what, What::kError);
  EXPECT_EQ(file_slash.error, ENOTDIR);
  auto marker = view.find("/dev/infiniband/uroce0", true);
  ASSERT_EQ(marker.what, What::kNode);
  EXPECT_EQ(marker.node->kind, Kind::kMarker);
  EXPECT_EQ(view.find("/dev/infiniband/rdma_cm", true).what, What::kError);
  EXPECT_EQ(view.find("/sys/class/net", true).what, What::kNotOurs);
  // Normalised before the look-up.
  auto dotted = view.find("/sys/class/infiniband/./uroce0//ports/1/../1/gids/0", true);
  ASSERT_EQ(dotted.what, What::kNode);
  EXPECT_STREQ(dotted.path, "/sys/class/infiniband/uroce0/ports/1/gids/0");
  // Out of the view by "..": not ours, the real file system answers.
  EXPECT_EQ(view.find("/sys/class/infiniband/../net", true).what, What::kNotOurs);
}

TEST(SysfsViewNames, NamesThatWouldLeaveTheDirectoryAreNotShown) {
  std::vector<ViewDevice> devs(3);
  devs[0].name = "..";
  devs[1].name = "a/b";
  devs[2].name = "ok0";
  SysfsView view(devs, nullptr);
  auto f = view.find("/sys/class/infiniband", true);
  ASSERT_EQ(f.what, What::kNode);
  EXPECT_EQ(f.node->children, (std::vector<std::string>{"ok0"}));
  EXPECT_FALSE(view.empty());
  EXPECT_TRUE(SysfsView({}, nullptr).empty());
}

}  // namespace
}  // namespace uroce::verbs

// Port state and IBV_EVENT_PORT_ERR / IBV_EVENT_PORT_ACTIVE: a uroce device bound to one end of a
// veth pair follows that link. Taking the peer end down removes the carrier (the port goes DOWN
// and every open context gets PORT_ERR); bringing it back up gives PORT_ACTIVE.
//
// Each test runs in a network namespace of its own, created by the test itself: with
// unshare(CLONE_NEWNET) as root, or else inside a new user namespace, which Debian allows
// unprivileged users. Where neither is possible the test is skipped and says why.
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <sys/stat.h>
#include <sys/types.h>

#include <cerrno>
#include <fstream>
#include <string>

#include "verbs_test_util.h"

namespace uroce::test {
namespace {

bool write_file(const char* path, const std::string& text) {
  std::ofstream f(path);
  f << text;
  f.flush();
  return static_cast<bool>(f);
}

// Enters a private network namespace (and, unprivileged, a user namespace that maps the caller
// to root so that `ip` may configure it). Must run before any thread is started.
bool enter_private_netns(std::string* why) {
  if (unshare(CLONE_NEWNET) == 0) return true;
  uid_t uid = geteuid();
  gid_t gid = getegid();
  if (unshare(CLONE_NEWUSER | CLONE_NEWNET) != 0) {
    *why = std::string("cannot create a network namespace: ") + std::strerror(errno);
    return false;
  }
  if (!write_file("/proc/self/setgroups", "deny") ||
      !write_file("/proc/self/uid_map", "0 " + std::to_string(uid) + " 1") ||
      !write_file("/proc/self/gid_map", "0 " + std::to_string(gid) + " 1")) {
    *why = "cannot map the user namespace's ids";
    return false;
  }
  return true;
}

bool sh(const std::string& cmd) {
  return std::system(cmd.c_str()) == 0;
}

// Expects the next event on `ctx` to be `type` for port 1, and acknowledges it.
void expect_port_event(ibv_context* ctx, ibv_event_type type) {
  ibv_async_event ev{};
  ASSERT_TRUE(next_event(ctx, &ev)) << "no " << ibv_event_type_str(type);
  EXPECT_EQ(ev.event_type, type) << ibv_event_type_str(ev.event_type);
  EXPECT_EQ(ev.element.port_num, 1);
  ibv_ack_async_event(&ev);
}

ibv_port_state port_state(ibv_context* ctx, uint8_t* phys = nullptr) {
  ibv_port_attr a{};
  EXPECT_EQ(ibv_query_port(ctx, 1, &a), 0);
  if (phys) *phys = a.phys_state;
  return a.state;
}

class PortTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why;
    if (!enter_private_netns(&why)) GTEST_SKIP() << why;
    if (!sh("ip link set lo up && ip link add uv0 type veth peer name uv1 && "
            "ip addr add 10.77.0.1/24 dev uv0 && ip link set uv0 up && ip link set uv1 up"))
      GTEST_SKIP() << "cannot create a veth pair (is iproute2 installed?)";
    // The netdev form of UROCE_DEVICES: the device takes uv0's address and watches uv0.
    setenv("UROCE_DEVICES", "uroce0=uv0", 1);
  }
};

TEST_F(PortTest, FollowsTheLinkAndTellsEveryContext) {
  // veth has no carrier until both ends are up; wait for the kernel to settle before opening.
  for (int i = 0; i < 100 && !sh("ip link show uv0 | grep -q LOWER_UP"); ++i) usleep(20000);
  ibv_context* a = open_named("uroce0");
  ibv_context* b = open_named("uroce0");  // a second context on the same device
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  uint8_t phys = 0;
  EXPECT_EQ(port_state(a, &phys), IBV_PORT_ACTIVE);
  EXPECT_EQ(phys, 5);  // LinkUp

  // The peer end going down takes the carrier away from uv0.
  ASSERT_TRUE(sh("ip link set uv1 down"));
  for (ibv_context* c : {a, b}) expect_port_event(c, IBV_EVENT_PORT_ERR);
  EXPECT_EQ(port_state(a, &phys), IBV_PORT_DOWN);
  EXPECT_EQ(phys, 3);  // Disabled

  ASSERT_TRUE(sh("ip link set uv1 up"));
  for (ibv_context* c : {a, b}) expect_port_event(c, IBV_EVENT_PORT_ACTIVE);
  EXPECT_EQ(port_state(b), IBV_PORT_ACTIVE);

  // Administratively down is down too; a closed context gets nothing (and does not crash).
  ASSERT_EQ(ibv_close_device(b), 0);
  ASSERT_TRUE(sh("ip link set uv0 down"));
  expect_port_event(a, IBV_EVENT_PORT_ERR);
  EXPECT_EQ(port_state(a), IBV_PORT_DOWN);
  // No second event for one transition.
  pollfd p{a->async_fd, POLLIN, 0};
  EXPECT_EQ(poll(&p, 1, 200), 0);
  ASSERT_EQ(ibv_close_device(a), 0);
}

TEST_F(PortTest, OpensDownWhenTheLinkIsDown) {
  ASSERT_TRUE(sh("ip link set uv1 down"));
  for (int i = 0; i < 100 && sh("ip link show uv0 | grep -q LOWER_UP"); ++i) usleep(20000);
  ibv_context* a = open_named("uroce0");
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(port_state(a), IBV_PORT_DOWN);
  ASSERT_TRUE(sh("ip link set uv1 up"));
  expect_port_event(a, IBV_EVENT_PORT_ACTIVE);
  EXPECT_EQ(port_state(a), IBV_PORT_ACTIVE);
  ASSERT_EQ(ibv_close_device(a), 0);
}

}  // namespace
}  // namespace uroce::test

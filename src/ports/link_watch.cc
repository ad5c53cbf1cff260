#include "ports/link_watch.h"

#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <net/if.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace uroce {

namespace {

bool flags_up(unsigned flags) {
  return (flags & IFF_UP) && (flags & IFF_RUNNING);
}

}  // namespace

std::unique_ptr<LinkWatch> LinkWatch::open(const std::string& netdev, std::string* err) {
  unsigned idx = if_nametoindex(netdev.c_str());
  if (idx == 0) {
    if (err) *err = "no interface named '" + netdev + "'";
    return nullptr;
  }
  int fd = socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC | SOCK_NONBLOCK, NETLINK_ROUTE);
  if (fd < 0) {
    if (err) *err = std::string("netlink socket: ") + std::strerror(errno);
    return nullptr;
  }
  sockaddr_nl sa{};
  sa.nl_family = AF_NETLINK;
  sa.nl_groups = RTMGRP_LINK;
  if (bind(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0) {
    if (err) *err = std::string("netlink bind: ") + std::strerror(errno);
    close(fd);
    return nullptr;
  }
  std::unique_ptr<LinkWatch> w(new LinkWatch(fd, static_cast<int>(idx), netdev));
  w->up_.store(w->read_flags(), std::memory_order_release);
  return w;
}

LinkWatch::LinkWatch(int fd, int ifindex, std::string netdev)
    : fd_(fd), ifindex_(ifindex), netdev_(std::move(netdev)) {}

LinkWatch::~LinkWatch() {
  close(fd_);
}

bool LinkWatch::read_flags() {
  // By index: the interface may have been renamed since open.
  ifreq ifr{};
  if (!if_indextoname(static_cast<unsigned>(ifindex_), ifr.ifr_name)) return false;  // gone
  int s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (s < 0) return up();  // cannot tell: keep what we knew
  bool up_now = ioctl(s, SIOCGIFFLAGS, &ifr) == 0 && flags_up(static_cast<unsigned>(ifr.ifr_flags));
  close(s);
  return up_now;
}

bool LinkWatch::drain() {
  const bool before = up();
  bool now = before;
  alignas(nlmsghdr) char buf[16384];
  for (;;) {
    sockaddr_nl from{};
    socklen_t fromlen = sizeof from;
    ssize_t n = recvfrom(fd_, buf, sizeof buf, 0, reinterpret_cast<sockaddr*>(&from), &fromlen);
    if (n < 0) {
      if (errno == EINTR) continue;
      // The kernel dropped notifications (socket buffer full): what we know may be stale.
      if (errno == ENOBUFS) {
        now = read_flags();
        continue;
      }
      break;  // EAGAIN: all read
    }
    // Only the kernel (port id 0) speaks for interfaces; anything else on the group is ignored.
    if (from.nl_pid != 0) continue;
    if (auto s = link_state_in(buf, static_cast<size_t>(n), ifindex_)) now = *s;
  }
  up_.store(now, std::memory_order_release);
  return now != before;
}

std::optional<bool> LinkWatch::link_state_in(const void* buf, size_t len, int ifindex) {
  std::optional<bool> state;
  // NLMSG_OK checks that a whole header fits and that nlmsg_len stays within what is left.
  int left = static_cast<int>(std::min<size_t>(len, 1u << 30));
  // NLMSG_NEXT may take `left` below 0 (the last message's alignment); NLMSG_OK then gets an
  // exact unsigned (comparing nlmsg_len with a signed int is what clang's -Wsign-compare flags).
  for (auto* h = static_cast<const nlmsghdr*>(buf);
       left > 0 && NLMSG_OK(h, static_cast<unsigned>(left)); h = NLMSG_NEXT(h, left)) {
    if (h->nlmsg_type != RTM_NEWLINK && h->nlmsg_type != RTM_DELLINK) continue;
    if (h->nlmsg_len < NLMSG_LENGTH(sizeof(ifinfomsg))) break;  // malformed: stop here
    const auto* ifi = static_cast<const ifinfomsg*>(NLMSG_DATA(h));
    if (ifi->ifi_index != ifindex) continue;
    state = h->nlmsg_type == RTM_NEWLINK && flags_up(ifi->ifi_flags);
  }
  return state;
}

}  // namespace uroce

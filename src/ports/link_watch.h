// The link state of the network interface a device's address lives on, watched over rtnetlink:
// what a RoCE NIC's port state is. rdma_rxe does the same with netdev notifiers; uroce, in user
// space, subscribes to the RTMGRP_LINK multicast group and reads RTM_NEWLINK / RTM_DELLINK.
//
// The link is up while the interface is administratively up (IFF_UP) and operationally running
// (IFF_RUNNING: carrier present, RFC 2863 operstate up). A device maps that to ibv_query_port's
// state (ACTIVE / DOWN) and raises IBV_EVENT_PORT_ACTIVE / IBV_EVENT_PORT_ERR on transitions
// (IBTA 11.6.3: port state change events are unaffiliated asynchronous events).
//
// Not thread-safe except up(): one thread (the engine) calls drain(); anyone may read up().
#pragma once

#include <atomic>
#include <cstddef>
#include <memory>
#include <optional>
#include <string>

namespace uroce {

class LinkWatch {
 public:
  // Subscribes to link notifications, then reads the interface's current flags (in that order,
  // so no transition between the two is missed). nullptr and *err when the interface does not
  // exist or netlink is unavailable.
  static std::unique_ptr<LinkWatch> open(const std::string& netdev, std::string* err);
  ~LinkWatch();
  LinkWatch(const LinkWatch&) = delete;
  LinkWatch& operator=(const LinkWatch&) = delete;

  int fd() const { return fd_; }  // readable when notifications are pending
  bool up() const { return up_.load(std::memory_order_acquire); }
  int ifindex() const { return ifindex_; }

  // Reads every pending notification (non-blocking). Returns true when up() changed. After a
  // notification overrun (ENOBUFS) the state is read afresh, so it never stays stale.
  bool drain();

  // The link state the last message about `ifindex` in a buffer of netlink messages reports
  // (RTM_NEWLINK: IFF_UP && IFF_RUNNING; RTM_DELLINK: down), or nullopt when none is about it.
  // Truncated or malformed messages end the walk; they never read past `len`.
  static std::optional<bool> link_state_in(const void* buf, size_t len, int ifindex);

 private:
  LinkWatch(int fd, int ifindex, std::string netdev);
  bool read_flags();  // the interface's current IFF_UP && IFF_RUNNING (down if it is gone)

  int fd_;
  int ifindex_;
  std::string netdev_;
  std::atomic<bool> up_{false};
};

}  // namespace uroce

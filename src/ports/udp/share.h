// The shared UDP port's group (docs/architecture.md, "One device, many processes"): the registry
// every process of a device address keeps in shared memory, this process's slot in it, its
// socket in the kernel's SO_REUSEPORT group, the probe rounds that measure where each member's
// socket sits in the group, and the steering program (steering.h) attached from that.
//
// The registry (/dev/shm/uroce-share.<uid>.<netns inode>.<a.b.c.d>.<port>) is a fixed layout
// guarded by flock on its file: a lock that dies with its holder, so a killed process never leaves
// it taken. Under the lock: joining, leaving, reclaiming dead members, claims, and the rounds.
// Without it, with atomic stores: a member's QPN counter (its own) and the answers of its receive
// path to probes.
//
// Threads: join() on the opening thread; on_probe() on whichever thread receives (the port's
// rx_burst); the CM's claim calls on any thread; a watcher thread per share that waits on the
// other members' pidfds and repairs the group when one dies.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "ports/port.h"
#include "ports/udp/steering.h"

namespace uroce {

class UdpShare : public PortShare {
 public:
  // Opens a socket bound to the group's address and port with SO_REUSEPORT: -1 and errno on
  // failure (EADDRINUSE: a socket without SO_REUSEPORT, or another user's, holds it).
  using SocketFactory = std::function<int()>;

  // Joins the group of ip:port: takes a slot, opens this process's socket with `make_socket`,
  // and runs a probe round so that datagrams for this slot come to it from now on. nullptr and
  // *err on failure.
  // An IPv6 address (the port's sockets are then AF_INET6) takes its interface index when it is
  // link-local (scope_id), for the relay and probe sockets.
  static std::unique_ptr<UdpShare> join(const wire::IpAddr& ip, uint32_t scope_id, uint16_t port,
                                        SocketFactory make_socket, std::string* err);
  static std::unique_ptr<UdpShare> join(uint32_t ip, uint16_t port, SocketFactory make_socket,
                                        std::string* err) {
    return join(wire::IpAddr(ip), 0, port, std::move(make_socket), err);
  }
  // Leaves: frees the slot (its QPN counter stays for a successor), releases its claims, closes
  // the socket and lets the remaining members' positions be measured again.
  ~UdpShare() override;
  UdpShare(const UdpShare&) = delete;
  UdpShare& operator=(const UdpShare&) = delete;

  int fd() const { return fd_; }
  uint32_t slot() const { return slot_; }

  // The relay (docs/architecture.md, "One device, many processes"): while the group's program
  // is stale — members came or went, a round is under way — the kernel can bring a datagram to
  // the wrong member. That member passes it on to the owner's relay socket, a UDP socket of its
  // own on the device's address, with the datagram's origin in front; the owner's receive path
  // reads it as if it had come to its own socket.
  struct RelayHeader {
    uint32_t magic;
    uint16_t src_port;  // host order
    uint8_t tos;        // its IP TOS byte or IPv6 Traffic Class (ECN, DSCP)
    uint8_t pad;
    wire::IpAddr src_ip;  // the datagram's origin (IPv4-mapped for IPv4)
  };
  static_assert(sizeof(RelayHeader) == 24);
  static constexpr uint32_t kRelayMagic = 0x75725232;  // "urR2": 2 since src_ip is IPv6-wide
  int relay_fd() const { return relay_fd_; }
  // The live member a datagram is for (share::destination_of, with the registry's listeners),
  // or -1 when no member owns it (a free slot, a REQ nobody listens to) or it is ours.
  int owner_of(const uint8_t* data, size_t len) const {
    return owner(share::destination_of(data, len));
  }
  int owner(const share::Destination& d) const;
  // Sends a datagram on to `slot`'s relay socket; false when that member has none, or its
  // socket refused it (full): the caller drops it.
  bool relay(uint32_t slot, const RelayHeader& h, const uint8_t* data, size_t len);
  // Whether a datagram that came to the relay socket from `ip`:`port` (host order) came from a
  // member's relay socket: nobody else can send from those (each is bound, without
  // SO_REUSEADDR, by a process of ours).
  bool from_member(const wire::IpAddr& ip, uint16_t port) const;
  // How many datagrams members have relayed to us, ever (wrapping): the receive path reads the
  // relay socket when it moved, without a system call per empty poll.
  uint32_t relay_seq() const;
  // The receive path found a probe: note the position it reached us at.
  void on_probe(const share::Probe& p);

  // PortShare.
  uint32_t qpn_base() const override { return slot_ << share::kQpnSlotShift; }
  uint32_t qpn_count() const override { return share::kQpnsPerSlot; }
  uint32_t* qpn_cursor() override;
  uint32_t comm_id_base() const override { return slot_ << share::kCommIdSlotShift; }
  uint32_t comm_id_count() const override { return 1u << share::kCommIdSlotShift; }
  int claim_service(uint16_t port_space, uint16_t port) override;
  void release_service(uint16_t port_space, uint16_t port) override;
  void set_listening(uint16_t port_space, uint16_t port, bool on) override;

  // For tests and `uroce`: the registry's file name for ip:port (the address as text: dotted
  // decimal, or IPv6's RFC 5952 form, colons and all).
  static std::string registry_path(const wire::IpAddr& ip, uint16_t port);
  static std::string registry_path(uint32_t ip, uint16_t port) {
    return registry_path(wire::IpAddr(ip), port);
  }
  // Removes this user's registries (other than `keep`) that no live process holds: a last member
  // killed with SIGKILL leaves its own behind. Returns how many it removed. join() calls it.
  static size_t remove_stale_registries(const std::string& keep);
  // How long a round waits for members that do not answer (tests shorten it).
  static void set_round_timeout_ms(int ms);
  // For tests and `uroce`: the registry's members as they stand (read without its lock).
  struct Member {
    uint32_t slot;
    pid_t pid;
    bool leaving;      // closing its device: its socket is still in the group
    int32_t position;  // as last measured; -1: not measured
  };
  static std::vector<Member> members(const wire::IpAddr& ip, uint16_t port);
  static std::vector<Member> members(uint32_t ip, uint16_t port) {
    return members(wire::IpAddr(ip), port);
  }
  // The rounds of this process that ended without a live member's answer (its slot then has no
  // position until the next round).
  static uint64_t rounds_timed_out();

  struct Registry;  // the shared layout (share_registry.h)

 private:
  UdpShare() = default;
  // flock on the registry file, reopening it when the last member removed it meanwhile.
  // `drain`: a leaver, whose engine no longer reads its socket: while it waits it passes on what
  // the kernel brings that socket for other members (pass_on_astray).
  bool lock(std::string* err, bool drain = false);
  // Reads `fd` dry, relaying every datagram another live member owns. A probe of round
  // `probe_round` (when given) is answered; the rest is dropped: our own slot's (a leaver is
  // closing; a joiner owns nothing yet) and datagrams for no member.
  void pass_on(int fd, std::optional<uint32_t> probe_round);
  void pass_on_astray() { pass_on(fd_, std::nullopt); }
  void unlock();
  // With the lock: frees the slots of members that died (true when any did).
  bool reap_dead();
  // With the lock: the slot whose socket the kernel moves into `gone`'s position when `gone`'s
  // socket leaves the group (the group's last one), or -1 when `gone`'s was last or unknown.
  int moved_by_leaving(uint32_t gone) const;
  // With the lock: slot `s` is free again, its claims (ports, listeners) released.
  void free_slot(uint32_t s);
  // With the lock: measures every live member's position (draining `drain_fd` for its own probe,
  // -1 when its receive path runs) and attaches the program from `attach_fd`. True when a member
  // died during the round (it measured again without it).
  bool round(int attach_fd, int drain_fd);
  // With the lock: builds the program from what the registry knows and attaches it.
  void attach(int attach_fd);
  void watch();  // the watcher thread
  void stop_watcher();

  wire::IpAddr ip_{};
  uint32_t scope_id_ = 0;  // a link-local IPv6 address's interface
  uint16_t port_ = 0;
  std::string path_;
  SocketFactory make_socket_;
  int file_ = -1;  // the registry file (flock)
  Registry* reg_ = nullptr;
  uint32_t slot_ = 0;
  int fd_ = -1;        // this process's socket in the group
  int relay_fd_ = -1;  // ip:ephemeral, where other members pass on datagrams for our slot
  int prober_ = -1;    // an unbound UDP socket the probes leave from
  int wake_ = -1;      // eventfd: the watcher rescans (or stops)
  std::mutex mu_;      // this object's users of the registry lock (threads of one process)
  std::atomic<bool> stopping_{false};
  std::thread watcher_;
};

}  // namespace uroce

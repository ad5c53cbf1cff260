// What the share's files share (share.h is the interface): the registry's layout in shared
// memory with who writes each field, the slot states and the atomic access every reader without
// the lock uses. share.cc keeps the registry (join, leave, claims, the watcher), share_rounds.cc
// the probe rounds and the steering program, share_relay.cc the datagrams passed between members.
// Internal to the kernel-UDP port.
#pragma once

#include <sys/socket.h>
#include <sys/types.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>

#include "ports/udp/share.h"

namespace uroce {
namespace share_detail {

// The service claims the registry holds (Registry::claims).
inline constexpr size_t kMaxClaims = 4096;

// A slot's state (Registry::Slot::state).
enum : uint32_t { kFree = 0, kLive = 1, kLeaving = 2 };

// A field of the registry, which every member maps, as an atomic: at(f) to store or read-modify-
// write, load(f) for a relaxed read without the lock.
template <typename T>
std::atomic_ref<T> at(T& v) {
  return std::atomic_ref<T>(v);
}
template <typename T>
T load(const T& v) {
  return std::atomic_ref<T>(const_cast<T&>(v)).load(std::memory_order_relaxed);
}

// The address as text (dotted decimal, or IPv6's), for the log and the registry's name.
std::string format_ip(const wire::IpAddr& ip);
// A socket address for ip:port (AF_INET for an IPv4-mapped address, else AF_INET6).
struct ShareAddr {
  sockaddr_storage ss{};
  socklen_t len = 0;
  ShareAddr(const wire::IpAddr& ip, uint16_t port, uint32_t scope_id);
  const sockaddr* get() const { return reinterpret_cast<const sockaddr*>(&ss); }
};
// The address and port recvmsg wrote into `ss`; false for no address of either family.
bool read_share_addr(const sockaddr_storage& ss, wire::IpAddr* ip, uint16_t* port);

// Whether the member process (pid, started at `started`) is gone with all its threads (share.cc).
bool gone(pid_t pid, uint64_t started);

}  // namespace share_detail

// The registry's layout, the same in every process (kVersion names it). Each field says who
// writes it: "lock" fields only under the flock; the others with atomic stores by the slot's
// owner.
struct UdpShare::Registry {
  char magic[8];
  uint32_t version;
  uint32_t bytes;  // sizeof(Registry)
  uint32_t round;  // lock: the last probe round started
  uint32_t freed;  // lock: counts slots freed (Slot::freed_at orders them)
  struct Slot {
    uint32_t state;        // lock (kLive → kLeaving: the owner, atomically)
    int32_t pid;           // lock
    uint64_t start_time;   // lock: the owner's start time (/proc/<pid>/stat), against pid reuse
    uint32_t qpn_cursor;   // owner, atomically; kept when the slot is freed
    int32_t position;      // owner's receive path: where its socket sits in the group
    uint32_t acked_round;  // owner's receive path: the round `position` answers
    uint32_t freed_at;     // lock: Registry::freed when the slot was last freed
    uint32_t relay_port;   // lock, read atomically: the owner's relay socket (0: none)
    uint32_t relay_seq;    // relayers, atomically: datagrams relayed to the owner, ever
  } slots[share::kSlots];
  struct Claim {
    uint16_t port_space;
    uint16_t port;
    uint8_t used;
    uint8_t slot;
    uint8_t listening;
    uint8_t pad;
    uint32_t refs;  // claims of the owner's ids
  } claims[share_detail::kMaxClaims];
};

}  // namespace uroce

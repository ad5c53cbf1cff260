// The DPDK host's book of its clients (host_proto.h): which slot each holds, the rdma_cm ports
// they claimed and listen on, and where a received datagram goes — decided as the kernel-UDP
// port's steering decides it (share::destination_of: the slot in its destination QPN, or in the
// CM communication ID its MAD names; a REQ or SIDR REQ to the listener of its service). Pure: no
// socket, no DPDK, so tests/dpdk checks it without an EAL.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <map>

#include "ports/udp/steering.h"

namespace uroce::dpdk::host {

class Router {
 public:
  // A slot for a new client: never used ones first (lowest first), then the one freed longest
  // ago, so that its QPNs come back as late as possible. -1 when all are taken.
  int join();
  // The client of `slot` is gone: its slot and claims are free.
  void leave(uint32_t slot);
  bool live(uint32_t slot) const { return slot < share::kSlots && live_[slot]; }
  size_t members() const;

  // rdma_cm ports, as PortShare's: 0, or EADDRINUSE when another slot holds (space, port).
  int claim(uint32_t slot, uint16_t space, uint16_t port);
  void release(uint32_t slot, uint16_t space, uint16_t port);
  void listen(uint32_t slot, uint16_t space, uint16_t port, bool on);

  // The live slot a received UDP payload (BTH …) is for, or -1 (no live owner, a REQ nobody
  // listens to, too short to tell).
  int route(const uint8_t* data, size_t len) const;

 private:
  struct Claim {
    uint32_t slot = 0;
    uint32_t refs = 0;
    bool listening = false;
  };
  static uint32_t key(uint16_t space, uint16_t port) { return uint32_t{space} << 16 | port; }
  std::array<bool, share::kSlots> live_{};
  std::array<uint64_t, share::kSlots> freed_at_{};  // 0: never used
  uint64_t freed_ = 0;
  std::map<uint32_t, Claim> claims_;  // by service (space << 16 | port)
};

}  // namespace uroce::dpdk::host

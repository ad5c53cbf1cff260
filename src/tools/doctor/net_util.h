// The socket plumbing doctor's probes share: ICMP errors from a socket's error queue
// (IP_RECVERR), the TOS byte of a received datagram (IP_RECVTOS), waiting for a reply with a
// deadline, and how ECN and DSCP read in a TOS byte.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>

#include <sys/types.h>

namespace uroce::doctor {

// An ICMP error the kernel queued on a socket for a datagram it sent (IP_RECVERR), or a local
// one (EMSGSIZE: larger than the interface or the known path MTU).
struct IcmpError {
  bool local = false;  // raised by this host (SO_EE_ORIGIN_LOCAL), not received
  int err = 0;         // the errno it maps to (ECONNREFUSED, EHOSTUNREACH, EMSGSIZE, …)
  uint8_t type = 0, code = 0;
  uint32_t info = 0;      // ICMP "fragmentation needed": the next hop's MTU
  uint32_t offender = 0;  // who sent it (host order); 0 when unknown
  std::string text()
      const;  // "port unreachable from 10.0.0.2", "fragmentation needed (MTU 1500) from 10.0.1.1"
};
// The oldest error queued on fd, if any (non-blocking).
std::optional<IcmpError> read_icmp_error(int fd);
// Turns IP_RECVERR on; false if the kernel refuses.
bool enable_recverr(int fd);

// One datagram read without waiting: its length (<= 0: none), its source and its TOS byte (from
// IP_RECVTOS; 0 on a socket that does not report it).
struct Datagram {
  ssize_t len = -1;
  uint32_t from_ip = 0;  // host order
  uint8_t tos = 0;
};
Datagram recv_datagram(int fd, uint8_t* buf, size_t size);

// Waits until fd is readable (or has an error queued, POLLERR) or the deadline passes; false on
// timeout.
bool wait_readable(int fd, std::chrono::steady_clock::time_point deadline);

// "DSCP 26, ECT(0)"; ecn_name: "ECT(0)" (RFC 3168's names of the ECN field's four values).
std::string describe_tos(uint8_t tos);
const char* ecn_name(uint8_t tos);
inline uint8_t dscp_of(uint8_t tos) {
  return tos >> 2;
}
inline uint8_t ecn_of(uint8_t tos) {
  return tos & 3;
}

}  // namespace uroce::doctor

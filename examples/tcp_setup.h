// TCP plumbing shared by the examples and tests/stress/uroce_stress: the connection set-up that
// swaps QP coordinates, the way ibv_rc_pingpong and perftest do. The data moves over RDMA; TCP
// carries only the set-up and the final verdicts. Errors end the process through die().
#pragma once

#include <arpa/inet.h>
#include <infiniband/verbs.h>
#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cinttypes>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

namespace example {

// How die() reports: a program may set its own prefix and exit status (the stress tool tells a
// set-up failure from a data error by it).
struct DieStyle {
  const char* prefix = "error: ";
  int exit_code = 1;
};
inline DieStyle& die_style() {
  static DieStyle style;
  return style;
}

[[noreturn]] inline void die(const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  std::fputs(die_style().prefix, stderr);
  std::vfprintf(stderr, fmt, ap);
  std::fputc('\n', stderr);
  va_end(ap);
  std::exit(die_style().exit_code);
}

// What each side tells the other so that it can address the peer's QP and memory.
struct Endpoint {
  uint32_t qpn = 0, psn = 0, rkey = 0;
  uint64_t addr = 0, len = 0;  // the registered buffer the peer may access
  ibv_gid gid{};
};

// Server (`server` empty): listens on `tcp_port` and takes one client. Client: connects to it.
// A server says it is waiting on `announce` (nullptr: says nothing; a program whose stdout is a
// report, such as uroce-perf --json, keeps it clean).
inline int tcp_connect(const std::string& server, uint16_t tcp_port, FILE* announce = stdout) {
  addrinfo hints{}, *res = nullptr;
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  const std::string port = std::to_string(tcp_port);
  if (server.empty()) hints.ai_flags = AI_PASSIVE;
  if (int rc = getaddrinfo(server.empty() ? nullptr : server.c_str(), port.c_str(), &hints, &res))
    die("getaddrinfo: %s", gai_strerror(rc));
  int fd = socket(res->ai_family, res->ai_socktype, res->ai_protocol);
  if (fd < 0) die("socket: %s", std::strerror(errno));
  if (server.empty()) {
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (bind(fd, res->ai_addr, res->ai_addrlen) || listen(fd, 1))
      die("listen on port %u: %s", tcp_port, std::strerror(errno));
    if (announce) {
      std::fprintf(announce, "waiting for a client on TCP port %u\n", tcp_port);
      std::fflush(announce);  // a script may wait for this line
    }
    int conn = accept(fd, nullptr, nullptr);
    if (conn < 0) die("accept: %s", std::strerror(errno));
    close(fd);
    fd = conn;
  } else if (connect(fd, res->ai_addr, res->ai_addrlen)) {
    die("connect to %s:%u: %s", server.c_str(), tcp_port, std::strerror(errno));
  }
  freeaddrinfo(res);
  return fd;
}

inline void tcp_write(int fd, const void* p, size_t n) {
  if (send(fd, p, n, MSG_NOSIGNAL) != static_cast<ssize_t>(n)) die("TCP send failed");
}
inline void tcp_read(int fd, void* p, size_t n) {
  if (recv(fd, p, n, MSG_WAITALL) != static_cast<ssize_t>(n)) die("peer closed the TCP connection");
}

// Swaps one byte both ways: a barrier, and a way to hand the peer a verdict (0 = OK).
inline uint8_t tcp_exchange_byte(int fd, uint8_t mine) {
  uint8_t theirs;
  tcp_write(fd, &mine, 1);
  tcp_read(fd, &theirs, 1);
  return theirs;
}

// Sent as fixed-width text so the two hosts need not agree on endianness or struct layout.
inline Endpoint tcp_exchange(int fd, const Endpoint& local) {
  char msg[128] = {}, gid[33];
  for (int i = 0; i < 16; ++i) std::snprintf(gid + 2 * i, 3, "%02x", local.gid.raw[i]);
  std::snprintf(msg, sizeof msg, "%06x %06x %08x %016" PRIx64 " %016" PRIx64 " %s", local.qpn,
                local.psn, local.rkey, local.addr, local.len, gid);
  tcp_write(fd, msg, sizeof msg);
  tcp_read(fd, msg, sizeof msg);
  msg[sizeof msg - 1] = '\0';
  Endpoint r;
  if (std::sscanf(msg, "%x %x %x %" SCNx64 " %" SCNx64 " %32s", &r.qpn, &r.psn, &r.rkey, &r.addr,
                  &r.len, gid) != 6)
    die("malformed endpoint from the peer: '%s'", msg);
  for (int i = 0; i < 16; ++i)
    r.gid.raw[i] = static_cast<uint8_t>(std::stoul(std::string(gid + 2 * i, 2), nullptr, 16));
  return r;
}

}  // namespace example

// For udp_share_test: joins the shared group of ADDRESS:4791 and exits without leaving it, as a
// process killed with SIGKILL would (its registry slot stays taken by a dead pid). A process of
// its own: forking the multi-threaded test binary and joining in the child can deadlock (a lock
// another thread held at the fork, e.g. the sanitizers' allocator).
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdio>
#include <string>

#include "ports/udp/share.h"
#include "wire/wire.h"

int main(int argc, char** argv) {
  in_addr a{};
  if (argc != 2 || inet_pton(AF_INET, argv[1], &a) != 1) {
    std::fprintf(stderr, "usage: %s IPV4_ADDRESS\n", argv[0]);
    return 2;
  }
  const uint32_t ip = ntohl(a.s_addr);
  std::string err;
  auto s = uroce::UdpShare::join(
      ip, uroce::wire::kRoceV2UdpPort,
      [ip] {
        const int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
        int on = 1;
        sockaddr_in sa{};
        sa.sin_family = AF_INET;
        sa.sin_addr.s_addr = htonl(ip);
        sa.sin_port = htons(uroce::wire::kRoceV2UdpPort);
        if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &on, sizeof on) != 0 ||
            bind(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0)
          return -1;
        return fd;
      },
      &err);
  if (!s) {
    std::fprintf(stderr, "join: %s\n", err.c_str());
    return 1;
  }
  _exit(0);  // no destructor: the slot is left as a killed process leaves it
}

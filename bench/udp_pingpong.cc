// The baselines for uroce's latency benchmark: a raw UDP (or, with --tcp, a kernel TCP)
// ping-pong between two processes over the same addresses, measured the way ibv_rc_pingpong
// measures (one iteration = one message each way, reported as microseconds per iteration). By
// default both sides block in recv, as uroce's engine sleeps in epoll when idle; --busy-poll
// makes them spin on non-blocking receives instead, as ibv_rc_pingpong spins on its CQ.
//
//   udp_pingpong --bind 127.0.0.1 --port 19000 -s 64 -n 10000                 # server
//   udp_pingpong --bind 127.0.0.2 --peer 127.0.0.1 --port 19000 -s 64 -n 10000 # client
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

namespace {

sockaddr_in make_addr(const std::string& ip, uint16_t port) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  if (inet_pton(AF_INET, ip.c_str(), &a.sin_addr) != 1) {
    std::fprintf(stderr, "udp_pingpong: bad IPv4 address '%s'\n", ip.c_str());
    std::exit(2);
  }
  return a;
}

bool tcp = false;    // --tcp: one connected stream instead of datagrams
int recv_flags = 0;  // MSG_DONTWAIT with --busy-poll

// Messages larger than a datagram are split into datagrams of at most `mtu` bytes, as uroce
// segments by path MTU (TCP segments by itself); the receiver counts bytes until the whole
// message is in.
bool send_msg(int fd, const sockaddr_in& to, const std::vector<char>& buf, size_t size,
              size_t mtu) {
  if (tcp) mtu = std::max<size_t>(size, 1);
  for (size_t off = 0; off < size || (size == 0 && off == 0);) {
    size_t n = std::min(mtu, size - off);
    ssize_t r =
        tcp ? send(fd, buf.data() + off, std::max<size_t>(n, 1), 0)
            : sendto(fd, buf.data() + off, n, 0, reinterpret_cast<const sockaddr*>(&to), sizeof to);
    if (r < 0) {
      if (errno == EINTR) continue;
      std::perror("udp_pingpong: send");
      return false;
    }
    if (size == 0) break;
    off += tcp ? static_cast<size_t>(r) : n;
  }
  return true;
}

bool recv_msg(int fd, std::vector<char>& buf, size_t size, sockaddr_in* from) {
  size_t got = 0;
  const size_t want = tcp ? std::max<size_t>(size, 1) : size;  // a 0-byte TCP message is 1 byte
  do {
    socklen_t len = sizeof *from;
    ssize_t n = tcp ? recv(fd, buf.data() + got, want - got, recv_flags)
                    : recvfrom(fd, buf.data() + got, buf.size() - got, recv_flags,
                               reinterpret_cast<sockaddr*>(from), &len);
    if (n < 0) {
      if (errno == EINTR || errno == EAGAIN) continue;
      std::perror("udp_pingpong: recv");
      return false;
    }
    if (n == 0 && tcp) {
      std::fprintf(stderr, "udp_pingpong: the peer closed the connection\n");
      return false;
    }
    got += static_cast<size_t>(n);
  } while (got < want);
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Raw UDP ping-pong, the baseline for uroce's latency benchmark"};
  std::string bind_ip = "127.0.0.1", peer_ip;
  uint16_t port = 19000;
  size_t size = 64, mtu = 1024;
  long iters = 10000;
  app.add_option("--bind", bind_ip, "local IPv4 address");
  app.add_option("--peer", peer_ip, "server address (client mode)");
  app.add_option("-p,--port", port, "UDP port");
  app.add_option("-s,--size", size, "message size in bytes")->check(CLI::Range(0, 1 << 20));
  app.add_option("-m,--mtu", mtu, "largest datagram payload")->check(CLI::Range(256, 65000));
  app.add_option("-n,--iters", iters, "iterations")->check(CLI::PositiveNumber);
  bool busy_poll = false;
  app.add_flag("--tcp", tcp, "a kernel TCP ping-pong (TCP_NODELAY) instead of UDP");
  app.add_flag("--busy-poll", busy_poll, "spin on non-blocking receives instead of blocking");
  CLI11_PARSE(app, argc, argv);
  if (busy_poll) recv_flags = MSG_DONTWAIT;

  int fd = socket(AF_INET, tcp ? SOCK_STREAM : SOCK_DGRAM, 0);
  int rcvbuf = 8 << 20, one = 1;
  setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof rcvbuf);
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  const bool client = !peer_ip.empty();
  sockaddr_in local = make_addr(bind_ip, client ? 0 : port);
  if (bind(fd, reinterpret_cast<sockaddr*>(&local), sizeof local) < 0) {
    std::perror("udp_pingpong: bind");
    return 1;
  }
  std::vector<char> buf(std::max<size_t>(size, 1) + 65536, 'u');
  sockaddr_in peer = client ? make_addr(peer_ip, port) : sockaddr_in{};
  if (tcp) {
    int conn = -1;
    if (client) {
      // The server may not listen yet: retry for up to 5 s.
      for (int i = 0; i < 100; ++i) {
        if (connect(fd, reinterpret_cast<const sockaddr*>(&peer), sizeof peer) == 0) break;
        if (i == 99) {
          std::perror("udp_pingpong: connect");
          return 1;
        }
        close(fd);
        fd = socket(AF_INET, SOCK_STREAM, 0);
        usleep(50'000);
      }
      conn = fd;
    } else {
      if (listen(fd, 1) < 0 || (conn = accept(fd, nullptr, nullptr)) < 0) {
        std::perror("udp_pingpong: listen/accept");
        return 1;
      }
      close(fd);
    }
    setsockopt(conn, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    fd = conn;
  }

  auto start = std::chrono::steady_clock::now();
  for (long i = 0; i < iters; ++i) {
    if (client) {
      if (!send_msg(fd, peer, buf, size, mtu) || !recv_msg(fd, buf, size, &peer)) return 1;
    } else {
      if (!recv_msg(fd, buf, size, &peer) || !send_msg(fd, peer, buf, size, mtu)) return 1;
      if (i == 0) start = std::chrono::steady_clock::now();
    }
  }
  double usec =
      std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count();
  std::printf("%zu bytes in %.2f seconds = %.2f Mbit/sec\n", size * 2 * iters, usec / 1e6,
              size * 2 * iters * 8 / usec);
  std::printf("%ld iters in %.2f seconds = %.2f usec/iter\n", iters, usec / 1e6, usec / iters);
  return 0;
}

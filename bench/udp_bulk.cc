// The baseline for uroce's bandwidth benchmark: a raw UDP bulk transfer between two processes over
// the same addresses, with datagrams as large as the payload of one uroce packet at the path MTU.
// The sender sends as fast as the kernel takes datagrams (sendmmsg batches, as uroce's socket
// datapath does); the receiver (recvmmsg) measures what arrived, from the first datagram to the
// end marker, and reports it the way perftest does: MB/sec with MB = 2^20 bytes. UDP has no flow
// control, so datagrams the receiver could not take are lost and reported, not counted. With
// --tcp, one kernel TCP stream carries the same bytes instead.
//
//   udp_bulk --bind 127.0.0.1 --port 19100                                      # receiver
//   udp_bulk --bind 127.0.0.2 --peer 127.0.0.1 --port 19100 -s 65536 -n 5000   # sender
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cerrno>
#include <chrono>
#include <cinttypes>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

namespace {

constexpr size_t kBatch = 32;     // datagrams per sendmmsg / recvmmsg
constexpr size_t kEndMarker = 8;  // a datagram of this size ends the transfer
constexpr int kEndCopies = 16;    // sent several times: a lost marker would leave a 1 s wait

sockaddr_in make_addr(const std::string& ip, uint16_t port) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  if (inet_pton(AF_INET, ip.c_str(), &a.sin_addr) != 1) {
    std::fprintf(stderr, "udp_bulk: bad IPv4 address '%s'\n", ip.c_str());
    std::exit(2);
  }
  return a;
}

int bound_socket(const std::string& ip, uint16_t port) {
  int fd = socket(AF_INET, SOCK_DGRAM, 0);
  if (fd < 0) {
    std::perror("udp_bulk: socket");
    std::exit(2);
  }
  // As large as the system allows: the receiver's buffer is what absorbs the sender's bursts.
  int big = 64 << 20;
  setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &big, sizeof big);
  setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &big, sizeof big);
  sockaddr_in a = make_addr(ip, port);
  if (bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a)) {
    std::fprintf(stderr, "udp_bulk: bind %s:%u: %s\n", ip.c_str(), port, std::strerror(errno));
    std::exit(2);
  }
  return fd;
}

int send_bulk(int fd, const sockaddr_in& to, size_t size, size_t mtu, long iters) {
  if (connect(fd, reinterpret_cast<const sockaddr*>(&to), sizeof to)) {
    std::perror("udp_bulk: connect");
    return 2;
  }
  const uint64_t datagrams_per_msg = (size + mtu - 1) / mtu;
  const uint64_t total = datagrams_per_msg * static_cast<uint64_t>(iters);
  std::vector<char> buf(kBatch * mtu, 'u');
  mmsghdr msgs[kBatch] = {};
  iovec iov[kBatch];
  const auto start = std::chrono::steady_clock::now();
  uint64_t seq = 0;
  while (seq < total) {
    size_t n = 0;
    for (; n < kBatch && seq + n < total; ++n) {
      const uint64_t s = seq + n;
      const size_t off_in_msg = (s % datagrams_per_msg) * mtu;
      iov[n] = {buf.data() + n * mtu, std::min(mtu, size - off_in_msg)};
      std::memcpy(iov[n].iov_base, &s, sizeof s);  // the receiver counts gaps
      msgs[n].msg_hdr = {};
      msgs[n].msg_hdr.msg_iov = &iov[n];
      msgs[n].msg_hdr.msg_iovlen = 1;
    }
    int sent = sendmmsg(fd, msgs, static_cast<unsigned>(n), 0);
    if (sent < 0) {
      if (errno == EINTR || errno == ENOBUFS || errno == EAGAIN) continue;
      std::perror("udp_bulk: sendmmsg");
      return 1;
    }
    seq += static_cast<uint64_t>(sent);
  }
  const double secs =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  char end[kEndMarker] = {};
  for (int i = 0; i < kEndCopies; ++i) send(fd, end, sizeof end, 0);
  std::printf("sent %" PRIu64 " datagrams of up to %zu bytes in %.3f s (%.2f MB/sec offered)\n",
              total, mtu, secs, static_cast<double>(size) * iters / secs / (1 << 20));
  return 0;
}

int receive_bulk(int fd, size_t mtu) {
  std::vector<char> buf(kBatch * (mtu + 64));
  mmsghdr msgs[kBatch] = {};
  iovec iov[kBatch];
  for (size_t i = 0; i < kBatch; ++i) {
    iov[i] = {buf.data() + i * (mtu + 64), mtu + 64};
    msgs[i].msg_hdr.msg_iov = &iov[i];
    msgs[i].msg_hdr.msg_iovlen = 1;
  }
  uint64_t bytes = 0, datagrams = 0, highest = 0;
  std::chrono::steady_clock::time_point first{}, last{};
  bool started = false, ended = false;
  while (!ended) {
    // Until the first datagram, wait as long as it takes; after it, a 1 s silence ends the run.
    if (started) {
      timeval tv{1, 0};
      setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    }
    int n = recvmmsg(fd, msgs, kBatch, MSG_WAITFORONE, nullptr);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) break;
      std::perror("udp_bulk: recvmmsg");
      return 1;
    }
    const auto now = std::chrono::steady_clock::now();
    for (int i = 0; i < n; ++i) {
      const size_t len = msgs[i].msg_len;
      if (len == kEndMarker) {
        ended = started;
        continue;
      }
      if (!started) first = now;
      started = true;
      last = now;
      bytes += len;
      ++datagrams;
      uint64_t s = 0;
      if (len >= sizeof s) std::memcpy(&s, iov[i].iov_base, sizeof s);
      highest = std::max(highest, s + 1);
    }
  }
  const double secs = std::chrono::duration<double>(last - first).count();
  const uint64_t lost = highest > datagrams ? highest - datagrams : 0;
  std::printf("received %" PRIu64 " bytes in %" PRIu64 " datagrams, %" PRIu64
              " lost (%.2f%%), %.3f s\n",
              bytes, datagrams, lost, highest ? 100.0 * lost / highest : 0.0, secs);
  std::printf("BW average: %.2f MB/sec\n", secs > 0 ? bytes / secs / (1 << 20) : 0.0);
  return started ? 0 : 1;
}

// --tcp: the same transfer over one kernel TCP stream (the baseline a user compares RDMA with):
// the sender writes `size`-byte messages `iters` times and closes; the receiver reads until EOF
// and reports like receive_bulk (nothing is lost: TCP has flow control and retransmission).
int tcp_send(const std::string& bind_ip, const sockaddr_in& to, size_t size, long iters) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in me = make_addr(bind_ip, 0);
  if (fd < 0 || bind(fd, reinterpret_cast<sockaddr*>(&me), sizeof me) ||
      connect(fd, reinterpret_cast<const sockaddr*>(&to), sizeof to)) {
    std::perror("udp_bulk --tcp: connect");
    return 2;
  }
  std::vector<char> buf(size, 'u');
  const auto start = std::chrono::steady_clock::now();
  for (long i = 0; i < iters; ++i) {
    for (size_t off = 0; off < size;) {
      const ssize_t k = send(fd, buf.data() + off, size - off, 0);
      if (k < 0) {
        if (errno == EINTR) continue;
        std::perror("udp_bulk --tcp: send");
        return 1;
      }
      off += static_cast<size_t>(k);
    }
  }
  shutdown(fd, SHUT_WR);
  char c;
  while (recv(fd, &c, 1, 0) > 0) {
  }  // the receiver's close: everything was read
  const double secs =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  close(fd);
  std::printf("sent %.0f bytes in %.3f s (%.2f MB/sec)\n", static_cast<double>(size) * iters, secs,
              static_cast<double>(size) * iters / secs / (1 << 20));
  return 0;
}

int tcp_receive(const std::string& ip, uint16_t port) {
  int ls = socket(AF_INET, SOCK_STREAM, 0);
  int on = 1;
  setsockopt(ls, SOL_SOCKET, SO_REUSEADDR, &on, sizeof on);
  sockaddr_in a = make_addr(ip, port);
  if (ls < 0 || bind(ls, reinterpret_cast<sockaddr*>(&a), sizeof a) || listen(ls, 1)) {
    std::fprintf(stderr, "udp_bulk --tcp: listen %s:%u: %s\n", ip.c_str(), port,
                 std::strerror(errno));
    return 2;
  }
  int fd = accept(ls, nullptr, nullptr);
  close(ls);
  if (fd < 0) {
    std::perror("udp_bulk --tcp: accept");
    return 2;
  }
  std::vector<char> buf(1 << 20);
  uint64_t bytes = 0;
  std::chrono::steady_clock::time_point first{}, last{};
  for (;;) {
    const ssize_t k = recv(fd, buf.data(), buf.size(), 0);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) break;
    last = std::chrono::steady_clock::now();
    if (bytes == 0) first = last;
    bytes += static_cast<uint64_t>(k);
  }
  close(fd);
  const double secs = std::chrono::duration<double>(last - first).count();
  std::printf("received %" PRIu64 " bytes in 1 stream, 0 lost (0.00%%), %.3f s\n", bytes, secs);
  std::printf("BW average: %.2f MB/sec\n", secs > 0 ? bytes / secs / (1 << 20) : 0.0);
  return bytes > 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Raw UDP bulk transfer, the baseline for uroce's bandwidth benchmark"};
  std::string bind_ip = "127.0.0.1", peer_ip;
  uint16_t port = 19100;
  size_t size = 65536, mtu = 4096;
  long iters = 5000;
  app.add_option("--bind", bind_ip, "local IPv4 address");
  app.add_option("--peer", peer_ip, "receiver address (sender mode)");
  app.add_option("-p,--port", port, "UDP port");
  app.add_option("-s,--size", size, "message size in bytes")->check(CLI::Range(1, 1 << 30));
  app.add_option("-m,--mtu", mtu, "datagram payload (uroce: the path MTU)")
      ->check(CLI::Range(static_cast<int>(kEndMarker) + 1, 65000));
  app.add_option("-n,--iters", iters, "messages")->check(CLI::PositiveNumber);
  bool tcp = false;
  app.add_flag("--tcp", tcp, "one kernel TCP stream instead of UDP datagrams");
  CLI11_PARSE(app, argc, argv);

  if (tcp)
    return peer_ip.empty() ? tcp_receive(bind_ip, port)
                           : tcp_send(bind_ip, make_addr(peer_ip, port), size, iters);

  int fd = bound_socket(bind_ip, peer_ip.empty() ? port : 0);
  int rc = peer_ip.empty() ? receive_bulk(fd, mtu)
                           : send_bulk(fd, make_addr(peer_ip, port), size, mtu, iters);
  close(fd);
  return rc;
}

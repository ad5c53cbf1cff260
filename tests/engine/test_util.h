// Helpers shared by the engine tests: loopback addresses, IB packet building, a plain UDP sender
// that frames RoCEv2 datagrams by hand (to inject foreign, corrupted or malformed packets).
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <span>
#include <vector>

#include "wire/icrc.h"
#include "wire/wire.h"

namespace uroce::test {

// 127.<net>.<sub>.<host>: every test uses its own addresses so that tests running in parallel
// (ctest -j) and other programs on 127.0.0.1/127.0.0.2 never share a 4791 socket.
constexpr uint32_t loopback(uint8_t net, uint8_t sub, uint8_t host) {
  return 0x7f000000u | uint32_t(net) << 16 | uint32_t(sub) << 8 | host;
}

// BTH (+ headers of `opcode`) + payload + pad. Returns the bytes written.
inline size_t build_packet(uint8_t* out, wire::Opcode opcode, uint32_t dest_qp, uint32_t psn,
                           std::span<const uint8_t> payload) {
  wire::Packet p;
  p.bth.opcode = static_cast<uint8_t>(opcode);
  p.bth.dest_qp = dest_qp;
  p.bth.psn = psn;
  p.bth.pad = wire::pad_for(payload.size());
  size_t n = wire::build_headers(p, out);
  if (!payload.empty()) std::memcpy(out + n, payload.data(), payload.size());
  n += payload.size();
  std::memset(out + n, 0, p.bth.pad);
  return n + p.bth.pad;
}

// A plain UDP socket standing in for a foreign RoCEv2 sender.
class RawSender {
 public:
  RawSender(uint32_t ip, uint16_t port = 0) : ip_(ip) {
    fd_ = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(ip);
    a.sin_port = htons(port);
    ok_ = fd_ >= 0 && bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
    socklen_t len = sizeof a;
    if (ok_ && getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len) == 0)
      port_ = ntohs(a.sin_port);
  }
  ~RawSender() {
    if (fd_ >= 0) close(fd_);
  }
  bool ok() const { return ok_; }
  uint16_t port() const { return port_; }
  int fd() const { return fd_; }

  // Sends `ib` + its ICRC computed for the given IP ID; `corrupt_at` >= 0 flips a bit of that byte
  // after the ICRC is computed.
  bool send_ib(uint32_t dst, std::span<const uint8_t> ib, uint16_t ip_id = 0, int corrupt_at = -1) {
    wire::Ipv4UdpFraming f;
    f.src_ip = ip_;
    f.dst_ip = dst;
    f.ip_id = ip_id;
    f.dont_fragment = true;
    f.src_port = port_;
    f.dst_port = wire::kRoceV2UdpPort;
    std::vector<uint8_t> d(ib.begin(), ib.end());
    d.resize(ib.size() + 4);
    wire::store_le32(d.data() + ib.size(), wire::icrc(f, ib));
    if (corrupt_at >= 0) d[static_cast<size_t>(corrupt_at)] ^= 0x10;
    return send_raw(dst, d);
  }
  bool send_raw(uint32_t dst, std::span<const uint8_t> bytes) {
    sockaddr_in to{};
    to.sin_family = AF_INET;
    to.sin_addr.s_addr = htonl(dst);
    to.sin_port = htons(wire::kRoceV2UdpPort);
    return sendto(fd_, bytes.data(), bytes.size(), 0, reinterpret_cast<sockaddr*>(&to),
                  sizeof to) == static_cast<ssize_t>(bytes.size());
  }

 private:
  int fd_ = -1;
  uint32_t ip_;
  uint16_t port_ = 0;
  bool ok_ = false;
};

inline bool wait_readable(int fd, int timeout_ms) {
  pollfd p{fd, POLLIN, 0};
  return poll(&p, 1, timeout_ms) == 1;
}

}  // namespace uroce::test

#include "tools/perf/setup.h"

#include <arpa/inet.h>
#include <endian.h>
#include <unistd.h>

#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "examples/tcp_setup.h"

namespace uroce::perf {

namespace {

std::optional<uint64_t> parse_hex(const std::string& s, unsigned max_digits) {
  if (s.empty() || s.size() > max_digits) return std::nullopt;
  uint64_t v = 0;
  for (char c : s) {
    int d;
    if (c >= '0' && c <= '9')
      d = c - '0';
    else if (c >= 'a' && c <= 'f')
      d = c - 'a' + 10;
    else if (c >= 'A' && c <= 'F')
      d = c - 'A' + 10;
    else
      return std::nullopt;
    v = v << 4 | static_cast<uint64_t>(d);
  }
  return v;
}

uint64_t double_bits(double d) {
  uint64_t u;
  std::memcpy(&u, &d, sizeof u);
  return u;
}
double bits_double(uint64_t u) {
  double d;
  std::memcpy(&d, &u, sizeof d);
  return d;
}

}  // namespace

std::string format_dest(const Dest& d, bool with_gid) {
  char msg[128];
  int n = std::snprintf(msg, sizeof msg, "%04x:%04x:%06x:%06x:%08x:%016" PRIx64 ":", d.lid & 0xffff,
                        d.out_reads & 0xffff, d.qpn & 0xffffff, d.psn & 0xffffff, d.rkey, d.vaddr);
  if (with_gid)
    for (int i = 0; i < 16; ++i) n += std::snprintf(msg + n, sizeof msg - n, "%02x:", d.gid.raw[i]);
  n += std::snprintf(msg + n, sizeof msg - n, with_gid ? "%08x:" : "%08x", d.srqn);
  std::string s(msg, static_cast<size_t>(n));
  s.resize(dest_msg_size(with_gid), '\0');  // the NUL (and nothing else) pads to the fixed size
  return s;
}

std::optional<Dest> parse_dest(const std::string& msg, bool with_gid) {
  std::string text(msg.c_str());  // up to the NUL
  std::vector<std::string> f;
  size_t start = 0;
  for (;;) {
    size_t colon = text.find(':', start);
    f.push_back(text.substr(start, colon == std::string::npos ? std::string::npos : colon - start));
    if (colon == std::string::npos) break;
    start = colon + 1;
  }
  // With a GID the message ends in ':' (an empty last field).
  if (with_gid) {
    if (f.size() != 24 || !f.back().empty()) return std::nullopt;
    f.pop_back();
  } else if (f.size() != 7) {
    return std::nullopt;
  }
  Dest d;
  auto lid = parse_hex(f[0], 4), reads = parse_hex(f[1], 4), qpn = parse_hex(f[2], 6),
       psn = parse_hex(f[3], 6), rkey = parse_hex(f[4], 8), vaddr = parse_hex(f[5], 16),
       srqn = parse_hex(f.back(), 8);
  if (!lid || !reads || !qpn || !psn || !rkey || !vaddr || !srqn) return std::nullopt;
  d.lid = static_cast<uint32_t>(*lid);
  d.out_reads = static_cast<uint32_t>(*reads);
  d.qpn = static_cast<uint32_t>(*qpn);
  d.psn = static_cast<uint32_t>(*psn);
  d.rkey = static_cast<uint32_t>(*rkey);
  d.vaddr = *vaddr;
  d.srqn = static_cast<uint32_t>(*srqn);
  if (with_gid) {
    for (int i = 0; i < 16; ++i) {
      auto b = parse_hex(f[6 + i], 2);
      if (!b) return std::nullopt;
      d.gid.raw[i] = static_cast<uint8_t>(*b);
    }
  }
  return d;
}

std::string encode_fields(const Fields& f) {
  std::string s;
  for (const auto& [k, v] : f) s += k + "=" + v + "\n";
  return s;
}

std::optional<Fields> decode_fields(const std::string& s) {
  Fields f;
  size_t start = 0;
  while (start < s.size()) {
    size_t nl = s.find('\n', start);
    if (nl == std::string::npos) return std::nullopt;
    std::string line = s.substr(start, nl - start);
    size_t eq = line.find('=');
    if (eq == std::string::npos || eq == 0) return std::nullopt;
    f[line.substr(0, eq)] = line.substr(eq + 1);
    start = nl + 1;
  }
  return f;
}

Channel::Channel(const std::string& server, uint16_t port) : client_(!server.empty()) {
  example::die_style().prefix = "uroce-perf: ";
  // A server says nothing here: it printed perftest's "Waiting for client" banner already.
  fd_ = example::tcp_connect(server, port, nullptr);
}

Channel::~Channel() {
  if (fd_ >= 0) close(fd_);
}

void Channel::write(const void* p, size_t n) {
  example::tcp_write(fd_, p, n);
}

void Channel::read(void* p, size_t n) {
  example::tcp_read(fd_, p, n);
}

void Channel::exchange(const void* mine, void* theirs, size_t n) {
  if (client_) {
    write(mine, n);
    read(theirs, n);
  } else {
    read(theirs, n);
    write(mine, n);
  }
}

void Channel::exchange_versions(bool skip) {
  if (skip) return;
  char mine[kVersionLen] = {}, theirs[kVersionLen] = {};
  std::memcpy(mine, kVersionString, sizeof kVersionString);
  exchange(mine, theirs, kVersionLen);
  peer_.version.assign(theirs, strnlen(theirs, kVersionLen));
  peer_.version_number = std::atof(peer_.version.c_str());
  peer_.uroce_perf = peer_.version.find(" uroce-perf") != std::string::npos;
  if (peer_.version_number < kOldestPeer)
    example::die("the peer speaks perftest version '%s'; versions before %.2f are not supported",
                 peer_.version.c_str(), kOldestPeer);
}

void Channel::exchange_sys_data(uint32_t* cycle_buffer, uint32_t* cache_line) {
  if (peer_.version.empty() || peer_.version_number < 5.32) return;
  for (uint32_t* v : {cycle_buffer, cache_line}) {
    uint32_t mine = htonl(*v), theirs = 0;
    exchange(&mine, &theirs, sizeof mine);
    *v = std::max(*v, ntohl(theirs));
  }
}

void Channel::exchange_mtu(ibv_mtu* mtu) {
  if (peer_.version.empty() || peer_.version_number < 5.1) return;
  const size_t n = peer_.version_number >= 5.31 ? 2 : 4;
  char mine[4] = {}, theirs[5] = {};
  std::snprintf(mine, sizeof mine, "%d", static_cast<int>(*mtu));
  exchange(mine, theirs, n);
  long rem = std::strtol(theirs, nullptr, 10);
  if (rem >= IBV_MTU_256 && rem <= IBV_MTU_4096 && rem < *mtu) *mtu = static_cast<ibv_mtu>(rem);
}

Dest Channel::handshake(const Dest& mine, bool with_gid) {
  const std::string msg = format_dest(mine, with_gid);
  std::string theirs(msg.size(), '\0');
  exchange(msg.data(), theirs.data(), msg.size());
  auto d = parse_dest(theirs, with_gid);
  if (!d)
    example::die("malformed QP coordinates from the peer: '%s' (do both sides use a GID? -x)",
                 std::string(theirs.c_str()).c_str());
  return *d;
}

Dest Channel::handshakes(const Dest& mine, bool with_gid, int n) {
  Dest d;
  for (int i = 0; i < n; ++i) d = handshake(mine, with_gid);
  return d;
}

BwReport Channel::exchange_bw_report(const BwReport& mine) {
  BwReport r;
  uint64_t v = htobe64(mine.size), t = 0;
  exchange(&v, &t, 8);
  r.size = be64toh(t);
  if (peer_.version.empty() || peer_.version_number >= 5.33) {
    v = htobe64(mine.iters);
    exchange(&v, &t, 8);
    r.iters = be64toh(t);
  } else {
    uint32_t i = htonl(static_cast<uint32_t>(mine.iters)), ti = 0;
    exchange(&i, &ti, 4);
    r.iters = ntohl(ti);
  }
  for (auto [m, out] : {std::pair{mine.bw_peak, &r.bw_peak}, std::pair{mine.bw_avg, &r.bw_avg},
                        std::pair{mine.msg_rate, &r.msg_rate}}) {
    v = htobe64(double_bits(m));
    exchange(&v, &t, 8);
    *out = bits_double(be64toh(t));
  }
  return r;
}

void Channel::close_connection(const Dest& mine, bool with_gid) {
  handshake(mine, with_gid);
  static const char kDone[] = "done";
  write(kDone, sizeof kDone);
  close(fd_);
  fd_ = -1;
}

void Channel::send_fields(const Fields& mine) {
  const std::string body = encode_fields(mine);
  uint32_t len = htonl(static_cast<uint32_t>(body.size()));
  write(&len, 4);
  write(body.data(), body.size());
}

Fields Channel::receive_fields() {
  uint32_t len = 0;
  read(&len, 4);
  len = ntohl(len);
  if (len > (1u << 24)) example::die("the peer sent a %u-byte extension message", len);
  std::string body(len, '\0');
  read(body.data(), len);
  auto f = decode_fields(body);
  if (!f) example::die("malformed extension message from the peer");
  return *f;
}

Fields Channel::exchange_fields(const Fields& mine) {
  if (client_) {
    send_fields(mine);
    return receive_fields();
  }
  Fields theirs = receive_fields();
  send_fields(mine);
  return theirs;
}

}  // namespace uroce::perf

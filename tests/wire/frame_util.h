// Test helpers: load the known-answer frames (tests/wire/vectors/*.hex) and split an Ethernet /
// IPv4 (or IPv6) / UDP / RoCEv2 frame into the pieces the wire API takes.
//
// The .hex files are the frame's bytes as hex digits, in any grouping, separated by whitespace
// (the layout of `xxd -p` or of Wireshark's "copy as hex stream" broken into groups).
#pragma once

#include <cctype>
#include <cstdint>
#include <fstream>
#include <span>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "transport/wire/icrc.h"
#include "transport/wire/wire.h"

namespace uroce::wire::testing {

inline std::string vector_path(const std::string& name) {
  return std::string(UROCE_WIRE_VECTOR_DIR) + "/" + name;
}

// Parses hex digits, ignoring whitespace; throws on any other character or an odd digit count so
// a damaged vector file fails the test instead of silently testing something else.
inline std::vector<uint8_t> parse_hex(const std::string& text) {
  std::vector<uint8_t> out;
  int hi = -1;
  for (char c : text) {
    if (std::isspace(static_cast<unsigned char>(c))) continue;
    if (!std::isxdigit(static_cast<unsigned char>(c)))
      throw std::runtime_error(std::string("bad hex character '") + c + "'");
    const int v = std::isdigit(static_cast<unsigned char>(c))
                      ? c - '0'
                      : std::tolower(static_cast<unsigned char>(c)) - 'a' + 10;
    if (hi < 0) {
      hi = v;
    } else {
      out.push_back(static_cast<uint8_t>(hi << 4 | v));
      hi = -1;
    }
  }
  if (hi >= 0) throw std::runtime_error("odd number of hex digits");
  return out;
}

inline std::vector<uint8_t> load_hex_file(const std::string& name) {
  std::ifstream in(vector_path(name));
  if (!in) throw std::runtime_error("cannot open " + vector_path(name));
  std::stringstream ss;
  ss << in.rdbuf();
  return parse_hex(ss.str());
}

inline uint16_t be16(const uint8_t* p) {
  return static_cast<uint16_t>(p[0] << 8 | p[1]);
}
inline uint32_t be32(const uint8_t* p) {
  return uint32_t(p[0]) << 24 | uint32_t(p[1]) << 16 | uint32_t(p[2]) << 8 | uint32_t(p[3]);
}

// One captured RoCEv2-over-IPv4 Ethernet frame, split into its layers.
struct Frame {
  std::vector<uint8_t> bytes;
  size_t ip_off = 14;  // Ethernet II header, no VLAN tag
  size_t ip_len = 0;   // IPv4 total length, ICRC included
  size_t ihl = 0;

  static Frame load(const std::string& name) {
    Frame f;
    f.bytes = load_hex_file(name);
    if (f.bytes.size() < 14 + 20 + 8 + 12 + 4 || be16(&f.bytes[12]) != 0x0800)
      throw std::runtime_error(name + ": not an Ethernet/IPv4 frame");
    const uint8_t* ip = &f.bytes[f.ip_off];
    f.ihl = size_t(ip[0] & 0x0f) * 4;
    f.ip_len = be16(ip + 2);
    if (f.ip_off + f.ip_len > f.bytes.size() || ip[9] != 17)
      throw std::runtime_error(name + ": bad IPv4 header");
    return f;
  }
  const uint8_t* ip() const { return &bytes[ip_off]; }
  const uint8_t* udp() const { return ip() + ihl; }
  // IPv4 packet up to (excluding) the ICRC.
  std::span<const uint8_t> ip_without_icrc() const { return {ip(), ip_len - kIcrcBytes}; }
  // BTH .. payload + pad (the UDP payload without the ICRC).
  std::span<const uint8_t> ib() const { return {udp() + 8, ip_len - ihl - 8 - kIcrcBytes}; }
  uint32_t wire_icrc() const { return load_le32(ip() + ip_len - kIcrcBytes); }
  uint16_t ip_id() const { return be16(ip() + 4); }
  Ipv4UdpFraming framing() const {
    Ipv4UdpFraming f;
    f.src_ip = be32(ip() + 12);
    f.dst_ip = be32(ip() + 16);
    f.ip_id = ip_id();
    f.dont_fragment = be16(ip() + 6) & 0x4000;
    f.src_port = be16(udp());
    f.dst_port = be16(udp() + 2);
    return f;
  }
};

// One RoCEv2-over-IPv6 Ethernet frame (the roce_ipv6_*.hex vectors, written by icrc_vectors.py),
// split into its layers. The UDP header follows the 40-byte IPv6 header directly.
struct Frame6 {
  static constexpr size_t kIpOff = 14;
  static constexpr size_t kIpv6Header = 40;
  std::vector<uint8_t> bytes;
  size_t ip_len = 0;  // IPv6 header + Payload Length, ICRC included

  static Frame6 load(const std::string& name) {
    Frame6 f;
    f.bytes = load_hex_file(name);
    if (f.bytes.size() < kIpOff + kIpv6Header + 8 + 12 + 4 || be16(&f.bytes[12]) != 0x86dd)
      throw std::runtime_error(name + ": not an Ethernet/IPv6 frame");
    const uint8_t* ip = &f.bytes[kIpOff];
    f.ip_len = kIpv6Header + be16(ip + 4);
    if (ip[0] >> 4 != 6 || ip[6] != 17 || kIpOff + f.ip_len != f.bytes.size())
      throw std::runtime_error(name + ": bad IPv6 header");
    return f;
  }
  const uint8_t* ip() const { return &bytes[kIpOff]; }
  const uint8_t* udp() const { return ip() + kIpv6Header; }
  // The IPv6 packet up to (excluding) the ICRC.
  std::span<const uint8_t> ip_without_icrc() const { return {ip(), ip_len - kIcrcBytes}; }
  // BTH .. payload + pad.
  std::span<const uint8_t> ib() const { return {udp() + 8, ip_len - kIpv6Header - 8 - kIcrcBytes}; }
  uint32_t wire_icrc() const { return load_le32(ip() + ip_len - kIcrcBytes); }
  Ipv6UdpFraming framing() const {
    Ipv6UdpFraming f;
    f.src = IpAddr::from_bytes(ip() + 8);
    f.dst = IpAddr::from_bytes(ip() + 24);
    f.src_port = be16(udp());
    f.dst_port = be16(udp() + 2);
    return f;
  }
};

}  // namespace uroce::wire::testing

// A packet capture of what a device sends and receives, written by uroce itself
// (UROCE_PCAP=FILE), so that a RoCE exchange can be inspected in Wireshark or tshark without
// root and on any datapath.
//
// The file is a classic pcap with nanosecond timestamps and LINKTYPE_IPV4 (an IPv6 device's:
// LINKTYPE_IPV6): each record is an IP datagram whose IP and UDP headers are rebuilt from what
// the port knows (the simulator writes
// LINKTYPE_ETHERNET files of whole frames with the same headers, stamped in virtual time). They
// carry exactly the fields the ICRC covers (addresses, IP ID, DF, ports), so the ICRC in every
// record verifies; the fields the ICRC masks are written as a kernel would (TTL 64, a valid header
// checksum, UDP checksum 0, the ECN bits the packet was sent or received with).
#pragma once

#include <cstdint>
#include <cstdio>
#include <initializer_list>
#include <memory>
#include <mutex>
#include <span>
#include <string>

#include "wire/icrc.h"

namespace uroce {

class PcapWriter {
 public:
  // What a record starts with: the IPv4 header (a device's capture, write()), or an Ethernet
  // header (frames as a tap on a link sees them, without FCS: the simulator's link captures).
  enum class LinkType : uint32_t { kIpv4 = 228, kIpv6 = 229, kEthernet = 1 };
  static constexpr size_t kIpv4UdpHeaderBytes = 28;
  static constexpr size_t kIpv6UdpHeaderBytes = 48;

  // Creates (truncates) `path` and writes the file header; nullptr and *err on failure.
  static std::unique_ptr<PcapWriter> open(const std::string& path, std::string* err,
                                          LinkType link_type = LinkType::kIpv4);
  ~PcapWriter();
  PcapWriter(const PcapWriter&) = delete;
  PcapWriter& operator=(const PcapWriter&) = delete;

  // Appends one RoCEv2 packet: `ib` is BTH..pad and `icrc` its four ICRC bytes as on the wire;
  // `tos` is the IPv4 TOS byte it travelled with (DSCP << 2 | ECN).
  // Any thread; records are written whole and flushed, so a killed process leaves a valid file.
  void write(const wire::Ipv4UdpFraming& f, uint8_t tos, std::span<const uint8_t> ib,
             const uint8_t* icrc);
  // The same over IPv6 (a file opened with LinkType::kIpv6): `tclass` is the traffic class (DSCP
  // << 2 | ECN). Flow label 0, hop limit 64 and a valid UDP checksum, as the kernel sends them
  // (the ICRC masks all three).
  void write6(const wire::Ipv6UdpFraming& f, uint8_t tclass, std::span<const uint8_t> ib,
              const uint8_t* icrc);
  // Appends one record stamped `ts_ns` nanoseconds after the epoch (the simulator's virtual
  // time), whose bytes are `parts` one after the other.
  void write_record(uint64_t ts_ns, std::initializer_list<std::span<const uint8_t>> parts);
  // The IPv4 and UDP headers write() puts in front of an IB packet of `ib_len` bytes (+ ICRC).
  static void ipv4_udp_headers(const wire::Ipv4UdpFraming& f, uint8_t tos, size_t ib_len,
                               uint8_t out[kIpv4UdpHeaderBytes]);

  // The IPv6 and UDP headers write6() puts in front of `ib` and its ICRC.
  static void ipv6_udp_headers(const wire::Ipv6UdpFraming& f, uint8_t tclass,
                               std::span<const uint8_t> ib, const uint8_t* icrc,
                               uint8_t out[kIpv6UdpHeaderBytes]);

  uint64_t records() const;

 private:
  explicit PcapWriter(FILE* file) : file_(file) {}
  mutable std::mutex mu_;
  FILE* file_;
  uint64_t records_ = 0;  // guarded by mu_
};

}  // namespace uroce

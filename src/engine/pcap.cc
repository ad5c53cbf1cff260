#include "engine/pcap.h"

#include "wire/wire.h"

#include <cerrno>
#include <cstring>
#include <ctime>

namespace uroce {

namespace {

constexpr uint32_t kPcapMagicNanos = 0xa1b23c4d;  // pcap with nanosecond timestamps
constexpr uint32_t kSnapLen = 65535;
constexpr size_t kIpv4HeaderBytes = 20;
constexpr size_t kUdpHeaderBytes = 8;

}  // namespace

std::unique_ptr<PcapWriter> PcapWriter::open(const std::string& path, std::string* err,
                                             LinkType link_type) {
  FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) {
    if (err) *err = "cannot create capture file '" + path + "': " + std::strerror(errno);
    return nullptr;
  }
  // The global header in the writer's byte order; readers detect it from the magic.
  struct {
    uint32_t magic;
    uint16_t major, minor;
    int32_t thiszone;
    uint32_t sigfigs, snaplen, linktype;
  } hdr{kPcapMagicNanos, 2, 4, 0, 0, kSnapLen, static_cast<uint32_t>(link_type)};
  if (std::fwrite(&hdr, sizeof hdr, 1, f) != 1 || std::fflush(f) != 0) {
    if (err) *err = "cannot write capture file '" + path + "': " + std::strerror(errno);
    std::fclose(f);
    return nullptr;
  }
  return std::unique_ptr<PcapWriter>(new PcapWriter(f));
}

PcapWriter::~PcapWriter() {
  std::fclose(file_);
}

void PcapWriter::ipv4_udp_headers(const wire::Ipv4UdpFraming& f, uint8_t tos, size_t ib_len,
                                  uint8_t out[kIpv4UdpHeaderBytes]) {
  const size_t udp_len = kUdpHeaderBytes + ib_len + wire::kIcrcBytes;
  const size_t ip_len = kIpv4HeaderBytes + udp_len;
  uint8_t* h = out;
  h[0] = 0x45;  // IPv4, 5-word header
  h[1] = tos;   // DSCP << 2 | ECN
  wire::put_be16(h + 2, static_cast<uint16_t>(ip_len));
  wire::put_be16(h + 4, f.ip_id);
  wire::put_be16(h + 6, f.dont_fragment ? 0x4000 : 0);
  h[8] = 64;  // TTL
  h[9] = 17;  // UDP
  wire::put_be16(h + 10, 0);
  wire::put_be32(h + 12, f.src_ip);
  wire::put_be32(h + 16, f.dst_ip);
  wire::put_be16(h + 10, wire::ipv4_checksum(h, kIpv4HeaderBytes));
  uint8_t* u = h + kIpv4HeaderBytes;
  wire::put_be16(u, f.src_port);
  wire::put_be16(u + 2, f.dst_port);
  wire::put_be16(u + 4, static_cast<uint16_t>(udp_len));
  wire::put_be16(u + 6, 0);  // no UDP checksum, as RoCEv2 senders do
}

void PcapWriter::write(const wire::Ipv4UdpFraming& f, uint8_t tos, std::span<const uint8_t> ib,
                       const uint8_t* icrc) {
  uint8_t h[kIpv4UdpHeaderBytes];
  ipv4_udp_headers(f, tos, ib.size(), h);
  timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  write_record(uint64_t(ts.tv_sec) * 1'000'000'000u + uint64_t(ts.tv_nsec),
               {std::span<const uint8_t>(h, sizeof h), ib, {icrc, wire::kIcrcBytes}});
}

namespace {

// One's-complement sum of 16-bit big-endian words (RFC 1071), `bytes` continuing a sum whose
// byte count so far was even.
uint32_t sum16(uint32_t sum, std::span<const uint8_t> bytes) {
  size_t i = 0;
  for (; i + 1 < bytes.size(); i += 2) sum += uint32_t{bytes[i]} << 8 | bytes[i + 1];
  if (i < bytes.size()) sum += uint32_t{bytes[i]} << 8;
  return sum;
}

}  // namespace

void PcapWriter::ipv6_udp_headers(const wire::Ipv6UdpFraming& f, uint8_t tclass,
                                  std::span<const uint8_t> ib, const uint8_t* icrc,
                                  uint8_t out[kIpv6UdpHeaderBytes]) {
  const size_t udp_len = kUdpHeaderBytes + ib.size() + wire::kIcrcBytes;
  uint8_t* h = out;
  h[0] = static_cast<uint8_t>(0x60 | tclass >> 4);  // version 6, traffic class, flow label 0
  h[1] = static_cast<uint8_t>((tclass & 0x0f) << 4);
  h[2] = h[3] = 0;
  wire::put_be16(h + 4, static_cast<uint16_t>(udp_len));  // payload length
  h[6] = 17;                                              // UDP
  h[7] = 64;                                              // hop limit
  std::memcpy(h + 8, f.src.data(), 16);
  std::memcpy(h + 24, f.dst.data(), 16);
  uint8_t* u = h + 40;
  wire::put_be16(u, f.src_port);
  wire::put_be16(u + 2, f.dst_port);
  wire::put_be16(u + 4, static_cast<uint16_t>(udp_len));
  wire::put_be16(u + 6, 0);
  // IPv6 has no header checksum, so UDP's is mandatory (RFC 8200 §8.1): over the pseudo-header
  // (addresses, length, next header), the UDP header and the payload, ICRC included.
  uint8_t pseudo[8] = {};
  wire::put_be32(pseudo, static_cast<uint32_t>(udp_len));
  pseudo[7] = 17;
  uint32_t sum = sum16(0, {h + 8, 32});
  sum = sum16(sum, {pseudo, sizeof pseudo});
  sum = sum16(sum, {u, kUdpHeaderBytes});
  sum = sum16(sum, ib);
  // ib.size() is a multiple of 4 (IBTA 9.2.2: payload and pad), so the ICRC's words align.
  sum = sum16(sum, {icrc, wire::kIcrcBytes});
  while (sum >> 16) sum = (sum & 0xffff) + (sum >> 16);
  const uint16_t csum = static_cast<uint16_t>(~sum);
  wire::put_be16(u + 6, csum == 0 ? 0xffff : csum);  // 0 means "none", which IPv6 forbids
}

void PcapWriter::write6(const wire::Ipv6UdpFraming& f, uint8_t tclass, std::span<const uint8_t> ib,
                        const uint8_t* icrc) {
  uint8_t h[kIpv6UdpHeaderBytes];
  ipv6_udp_headers(f, tclass, ib, icrc, h);
  timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  write_record(uint64_t(ts.tv_sec) * 1'000'000'000u + uint64_t(ts.tv_nsec),
               {std::span<const uint8_t>(h, sizeof h), ib, {icrc, wire::kIcrcBytes}});
}

void PcapWriter::write_record(uint64_t ts_ns,
                              std::initializer_list<std::span<const uint8_t>> parts) {
  size_t len = 0;
  for (const auto& p : parts) len += p.size();
  const uint32_t rec[4] = {static_cast<uint32_t>(ts_ns / 1'000'000'000u),
                           static_cast<uint32_t>(ts_ns % 1'000'000'000u),
                           static_cast<uint32_t>(len), static_cast<uint32_t>(len)};
  std::lock_guard<std::mutex> g(mu_);
  std::fwrite(rec, sizeof rec, 1, file_);
  for (const auto& p : parts) std::fwrite(p.data(), 1, p.size(), file_);
  std::fflush(file_);
  ++records_;
}

uint64_t PcapWriter::records() const {
  std::lock_guard<std::mutex> g(mu_);
  return records_;
}

}  // namespace uroce

// The RDMA IP CM Service (IBTA vol. 1 Annex A11): how an IP address and port become an IB CM
// connection. The service ID names the port space and the port (A11.2.1: 0x0000000001PPNNNN,
// PP the IP protocol, NNNN the port), and the first 36 bytes of a REQ's (and SIDR REQ's) private
// data carry the IP addresses and the source port (A11.2.2, table 337). This is what Linux's
// rdma_cm sends and checks, so a uroce process and a kernel CM (Linux rxe) understand each other.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

namespace uroce::cm {

// Port spaces, as librdmacm's enum rdma_port_space numbers them (value = 0x0100 | IP protocol
// for TCP and UDP); the service ID is (port space << 16) | port.
inline constexpr uint16_t kPsTcp = 0x0106;
inline constexpr uint16_t kPsUdp = 0x0111;
inline constexpr uint16_t kPsIpoib = 0x0002;

inline constexpr uint64_t service_id(uint16_t port_space, uint16_t port) {
  return (uint64_t{port_space} << 16) | port;
}
inline constexpr uint16_t service_port(uint64_t sid) {
  return static_cast<uint16_t>(sid);
}
inline constexpr uint16_t service_port_space(uint64_t sid) {
  return static_cast<uint16_t>(sid >> 16);
}
// True for a service ID of the IP CM service (A11.2.1): bits 63..32 zero, bits 31..24 = 0x01.
inline constexpr bool is_ip_service_id(uint64_t sid) {
  return (sid >> 24) == 0x01;
}

// The private-data header (A11.2.2): version byte (major 0, minor 0), IP version in the high
// nibble of the second byte (4 or 6), the source port, then the source and destination addresses
// in 16 bytes each. An IPv4 address takes the last 4 of its 16 bytes, the rest zero (A11.2.2.1).
inline constexpr size_t kIpCmHeaderBytes = 36;
inline constexpr uint8_t kIpCmVersion = 0x00;

struct IpCmHeader {
  uint8_t ip_version = 4;
  uint16_t src_port = 0;  // host order
  uint32_t src_ip = 0;    // IPv4, host order
  uint32_t dst_ip = 0;
};

// The header followed by `user` (the consumer's private data). Returns nullopt when the result
// would not fit `field_len` bytes (92 for a REQ, 216 for a SIDR REQ).
std::optional<std::vector<uint8_t>> make_ip_private_data(const IpCmHeader& h,
                                                         std::span<const uint8_t> user,
                                                         size_t field_len);
// Parses the header at the front of a REQ's or SIDR REQ's private data. nullopt when the
// version is not 0 or the IP version not 4 (uroce speaks IPv4 only; see docs/rdma-cm.md).
std::optional<IpCmHeader> parse_ip_private_data(std::span<const uint8_t> pd);

}  // namespace uroce::cm

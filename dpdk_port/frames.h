// Ethernet framing of RoCE, with DPDK's own protocol headers (rte_ether.h, rte_ip.h, rte_udp.h,
// rte_arp.h, rte_icmp.h): building the Ethernet / 802.1Q / IPv4 or IPv6 / UDP headers in front of
// a RoCEv2 packet, ARP and IPv6 neighbour discovery, and sorting a received frame into what the
// port does with it. Pure functions over bytes: no mbufs, no EAL, so they are tested on buffers.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "dpdk_port/neighbours.h"
#include "transport/wire/ip.h"

namespace uroce::dpdk {

inline constexpr uint16_t kEtherTypeIpv4 = 0x0800;
inline constexpr uint16_t kEtherTypeArp = 0x0806;
inline constexpr uint16_t kEtherTypeIpv6 = 0x86dd;
inline constexpr uint16_t kEtherTypeVlan = 0x8100;
inline constexpr uint16_t kEtherTypeRoceV1 = 0x8915;      // IBTA Annex A16 (RoCE)
inline constexpr uint16_t kEtherTypeMacControl = 0x8808;  // IEEE 802.3 annex 31A
inline constexpr uint16_t kMacControlPause = 0x0001;      // 802.3 annex 31B
inline constexpr uint16_t kMacControlPfc = 0x0101;        // 802.1Qbb
inline constexpr uint16_t kRoceV2Port = 4791;
inline constexpr size_t kEthBytes = 14, kVlanBytes = 4, kIpv4Bytes = 20, kUdpBytes = 8;
inline constexpr size_t kIpv6Bytes = 40;
// ICMPv6 (RFC 4443) and neighbour discovery (RFC 4861 4.3, 4.4) message types.
inline constexpr uint8_t kIpProtoIcmpv6 = 58;
inline constexpr uint8_t kIcmpv6EchoRequest = 128, kIcmpv6EchoReply = 129;
inline constexpr uint8_t kNdNeighbourSolicit = 135, kNdNeighbourAdvert = 136;
inline constexpr size_t kGrhBytes = 40;
// The destination of PAUSE frames (802.3 annex 31B.1: MAC Control reserved multicast).
inline constexpr Mac kPauseMac = {0x01, 0x80, 0xc2, 0x00, 0x00, 0x01};
inline constexpr Mac kBroadcastMac = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff};

// The MAC an IPv4 multicast group maps to (RFC 1112 6.4: 01:00:5e and the group's low 23 bits).
Mac multicast_mac(uint32_t group);
// The MAC an IPv6 multicast address maps to (RFC 2464 7: 33:33 and its low 32 bits).
Mac multicast_mac(const wire::IpAddr& group);
// The solicited-node multicast address of `ip` (RFC 4291 2.7.1: ff02::1:ff00:0/104 and the
// address's low 24 bits), where neighbour solicitations for it are sent.
wire::IpAddr solicited_node(const wire::IpAddr& ip);
// ff02::1, all nodes on the link (RFC 4291 2.7.1): where unsolicited advertisements go.
wire::IpAddr all_nodes();

// Bytes of Ethernet (+ 802.1Q) + IPv4 or IPv6 + UDP in front of a RoCEv2 packet.
constexpr size_t roce_v2_header_bytes(bool vlan, bool ipv6 = false) {
  return kEthBytes + (vlan ? kVlanBytes : 0) + (ipv6 ? kIpv6Bytes : kIpv4Bytes) + kUdpBytes;
}
// Bytes of Ethernet (+ 802.1Q) + GRH in front of a RoCE v1 packet.
constexpr size_t roce_v1_header_bytes(bool vlan) {
  return kEthBytes + (vlan ? kVlanBytes : 0) + kGrhBytes;
}

struct L2 {
  Mac dst{}, src{};
  uint16_t vlan = 0;  // 0: untagged
  uint8_t pcp = 0;    // 802.1p priority, on a VLAN
};

struct RoceV2Headers {
  L2 l2;
  // Both IPv4 (IPv4-mapped: an IPv4 frame) or both IPv6: the destination decides.
  wire::IpAddr src_ip, dst_ip;
  uint8_t tos = 0;  // DSCP << 2 | ECN: the IPv4 TOS byte or the IPv6 Traffic Class
  uint16_t ip_id = 0;
  uint32_t flow_label = 0;  // IPv6 (20 bits)
  uint16_t src_port = 0, dst_port = kRoceV2Port;
  bool ip_checksum = true;  // false: leave it 0 for the NIC to fill (checksum offload; IPv4)
};

// Writes the headers into p[0, roce_v2_header_bytes(vlan, ipv6)) for a UDP payload (IB packet
// and ICRC) of `payload_len` bytes. IPv4: DF set, TTL 64. IPv6: hop limit 64, no extension
// header. UDP checksum 0 on both: RoCEv2 lets the ICRC protect the packet (Annex A17.4.2), and
// rxe and RNICs send IPv6 RoCE so and accept it (a kernel socket needs UDP_NO_CHECK6_RX).
void write_roce_v2(uint8_t* p, const RoceV2Headers& h, size_t payload_len);

// RoCE v1: Ethernet (EtherType 0x8915) and a GRH (IBTA 8.3) whose GIDs are the IPv4-mapped
// addresses (::ffff:a.b.c.d), next header 0x1B (BTH).
struct RoceV1Headers {
  L2 l2;
  uint32_t src_ip = 0, dst_ip = 0;
  uint8_t traffic_class = 0;
  uint32_t flow_label = 0;
  uint8_t hop_limit = 64;
};
void write_roce_v1(uint8_t* p, const RoceV1Headers& h, size_t payload_len);

// What a received frame is, for this port.
enum class Kind {
  kRoceV2,    // IPv4 or IPv6 UDP to port 4791 for us: `payload` is the UDP payload (IB packet
              // + ICRC)
  kRoceV1,    // EtherType 0x8915 for us: `payload` is BTH..ICRC, the GRH at `grh`
  kArp,       // `arp` at l2_bytes
  kNd,        // IPv6 neighbour solicitation or advertisement (hop limit 255): parse_nd()
  kIcmpEcho,  // an ICMP or ICMPv6 echo request to our address
  kPause,     // 802.3 PAUSE or 802.1Qbb PFC: pause_mask, quanta
  kNotForUs,  // another unicast MAC, or an IP destination that is not ours (nor a group)
  kNonRoce,   // for us, but another EtherType, IP protocol or UDP port
  kBadIp,     // a bad IP header: version, length, checksum, options, a fragment
  kTooShort,  // shorter than its headers say
};

struct Classified {
  Kind kind = Kind::kTooShort;
  size_t l2_bytes = 0;  // Ethernet + 802.1Q
  uint16_t vlan_tci = 0;
  // IP (kRoceV2, kIcmpEcho, kNd): fields the ICRC covers. IPv4 addresses IPv4-mapped.
  wire::IpAddr src_ip, dst_ip;
  bool ipv6 = false;
  uint16_t ip_id = 0;  // IPv4
  bool dont_fragment = false;
  uint8_t tos = 0;        // IPv4 TOS or IPv6 Traffic Class
  uint8_t hop_limit = 0;  // IPv6
  uint16_t src_port = 0, dst_port = 0;
  const uint8_t* payload = nullptr;
  size_t payload_len = 0;
  const uint8_t* grh = nullptr;  // kRoceV1
  // kPause (quanta: all eight set for kPause only; left uninitialised otherwise, so that the
  // struct every received frame starts from is a few stores, not a `rep stos`: a twelfth of a
  // receiving engine's time in a memif profile)
  uint8_t pause_mask = 0;
  uint16_t quanta[8];
};

// Who this port is: its MAC and address (IPv4-mapped or IPv6), and the IPv4 multicast groups it
// joined.
struct Identity {
  Mac mac{};
  wire::IpAddr ip;
  std::span<const uint32_t> groups;
};

// Sorts a frame. Never reads outside [f, f + len).
Classified classify(const uint8_t* f, size_t len, const Identity& me);

// ARP (RFC 826) for IPv4 over Ethernet.
struct Arp {
  uint16_t op = 0;  // 1 request, 2 reply
  Mac sha{}, tha{};
  uint32_t spa = 0, tpa = 0;
};
// Parses the ARP packet of a kArp frame; false when it is not Ethernet/IPv4 ARP.
bool parse_arp(const uint8_t* f, size_t len, const Classified& c, Arp* out);
// Writes a whole ARP frame (Ethernet header, ARP, padded to 60 bytes) into p[0, 64); returns
// its length.
size_t write_arp(uint8_t* p, const L2& l2, const Arp& arp);

// IPv6 neighbour discovery (RFC 4861): a solicitation asks who has `target`, an advertisement
// answers with its link-layer address.
struct Nd {
  uint8_t type = 0;  // kNdNeighbourSolicit or kNdNeighbourAdvert
  wire::IpAddr target;
  // The source (solicitation, option 1) or target (advertisement, option 2) link-layer address.
  bool has_lladdr = false;
  Mac lladdr{};
  bool solicited = false;  // advertisement: the S flag
};
// Parses the ICMPv6 message of a kNd frame, checking it as RFC 4861 7.1 asks (checksum, code 0,
// length, options whose length is not 0, a target that is not multicast); false otherwise.
bool parse_nd(const uint8_t* f, size_t len, const Classified& c, Nd* out);
// Writes a neighbour solicitation for `target` from `src` (our address, and our MAC l2.src in a
// source link-layer option) to its solicited-node group; returns the frame's length (< 128).
size_t write_nd_solicit(uint8_t* p, L2 l2, const wire::IpAddr& src, const wire::IpAddr& target);
// Writes a solicited advertisement (S and O set) of our `target` address at our MAC (l2.src) to
// `dst`; returns the frame's length (< 128).
size_t write_nd_advert(uint8_t* p, const L2& l2, const wire::IpAddr& target,
                       const wire::IpAddr& dst);

// Turns an ICMP or ICMPv6 echo request frame (kIcmpEcho) into its reply in place: addresses
// swapped, type echo reply, checksums recomputed. `mine` is the port's MAC.
void make_echo_reply(uint8_t* f, size_t len, const Classified& c, const Mac& mine);

}  // namespace uroce::dpdk

#include "dpdk_port/frames.h"

#include <rte_arp.h>
#include <rte_byteorder.h>
#include <rte_ether.h>
#include <rte_icmp.h>
#include <rte_ip.h>
#include <rte_udp.h>

#include <algorithm>
#include <cstring>

namespace uroce::dpdk {
namespace {

static_assert(sizeof(rte_ether_hdr) == kEthBytes);
static_assert(sizeof(rte_vlan_hdr) == kVlanBytes);
static_assert(sizeof(rte_ipv4_hdr) == kIpv4Bytes);
static_assert(sizeof(rte_udp_hdr) == kUdpBytes);
static_assert(sizeof(rte_arp_hdr) == 28);
static_assert(sizeof(rte_ipv6_hdr) == kIpv6Bytes);

uint16_t load16(const uint8_t* p) {
  return static_cast<uint16_t>(p[0] << 8 | p[1]);
}
void store16(uint8_t* p, uint16_t v) {
  p[0] = static_cast<uint8_t>(v >> 8);
  p[1] = static_cast<uint8_t>(v);
}
void store32(uint8_t* p, uint32_t v) {
  store16(p, static_cast<uint16_t>(v >> 16));
  store16(p + 2, static_cast<uint16_t>(v));
}
uint32_t load32(const uint8_t* p) {
  return uint32_t(load16(p)) << 16 | load16(p + 2);
}

bool same(const uint8_t* a, const Mac& b) {
  return std::memcmp(a, b.data(), 6) == 0;
}

// Ethernet header (and 802.1Q tag) at p; returns its length.
size_t write_l2(uint8_t* p, const L2& l2, uint16_t ether_type) {
  auto* eth = reinterpret_cast<rte_ether_hdr*>(p);
  std::memcpy(eth->dst_addr.addr_bytes, l2.dst.data(), 6);
  std::memcpy(eth->src_addr.addr_bytes, l2.src.data(), 6);
  if (l2.vlan == 0) {
    eth->ether_type = rte_cpu_to_be_16(ether_type);
    return kEthBytes;
  }
  eth->ether_type = rte_cpu_to_be_16(kEtherTypeVlan);
  auto* vh = reinterpret_cast<rte_vlan_hdr*>(p + kEthBytes);
  // TCI: PCP (3 bits), DEI 0, VLAN id (12 bits) — IEEE 802.1Q 9.6.
  vh->vlan_tci = rte_cpu_to_be_16(static_cast<uint16_t>((l2.pcp & 7) << 13 | (l2.vlan & 0xfff)));
  vh->eth_proto = rte_cpu_to_be_16(ether_type);
  return kEthBytes + kVlanBytes;
}

// Writes an IPv4-mapped GID (::ffff:a.b.c.d, IBTA Annex A17.4.5.1).
void write_mapped_gid(uint8_t* g, uint32_t ip) {
  std::memset(g, 0, 10);
  g[10] = g[11] = 0xff;
  store32(g + 12, ip);
}

// An IPv6 header at p (RFC 8200 3): version 6, the class and flow label, no extension header.
void write_ipv6(uint8_t* p, uint8_t tclass, uint32_t flow_label, size_t payload_len, uint8_t next,
                uint8_t hop_limit, const wire::IpAddr& src, const wire::IpAddr& dst) {
  store32(p, 6u << 28 | uint32_t(tclass) << 20 | (flow_label & 0xfffff));
  store16(p + 4, static_cast<uint16_t>(payload_len));
  p[6] = next;
  p[7] = hop_limit;
  std::memcpy(p + 8, src.data(), 16);
  std::memcpy(p + 24, dst.data(), 16);
}

// The ICMPv6 checksum of the message after the IPv6 header at ip6 (RFC 4443 2.3: over the
// pseudo-header and the message, its checksum field zero).
uint16_t icmpv6_checksum(const uint8_t* ip6) {
  rte_ipv6_hdr h;
  std::memcpy(&h, ip6, sizeof h);  // rte_ipv6_hdr is packed, the frame need not be aligned
  return rte_ipv6_udptcp_cksum(&h, ip6 + kIpv6Bytes);
}

// A whole ICMPv6 frame: L2, IPv6 (hop limit 255, as neighbour discovery requires: RFC 4861
// 7.1.1), the message body of `body_len` bytes already at p + its offset, checksum filled.
size_t finish_icmpv6(uint8_t* p, const L2& l2, const wire::IpAddr& src, const wire::IpAddr& dst,
                     size_t body_len) {
  const size_t l2n = write_l2(p, l2, kEtherTypeIpv6);
  uint8_t* ip6 = p + l2n;
  write_ipv6(ip6, 0, 0, body_len, kIpProtoIcmpv6, 255, src, dst);
  store16(ip6 + kIpv6Bytes + 2, 0);
  const uint16_t ck = icmpv6_checksum(ip6);
  std::memcpy(ip6 + kIpv6Bytes + 2, &ck, 2);  // rte_ipv6_udptcp_cksum: network order already
  return l2n + kIpv6Bytes + body_len;
}

const wire::IpAddr kAllNodes = [] {
  std::array<uint8_t, 16> b{};
  b[0] = 0xff;
  b[1] = 0x02;
  b[15] = 1;
  return wire::IpAddr(b);
}();

}  // namespace

Mac multicast_mac(const wire::IpAddr& group) {
  const auto& b = group.bytes();
  return {0x33, 0x33, b[12], b[13], b[14], b[15]};
}

wire::IpAddr solicited_node(const wire::IpAddr& ip) {
  std::array<uint8_t, 16> b{};
  b[0] = 0xff;
  b[1] = 0x02;
  b[11] = 0x01;
  b[12] = 0xff;
  b[13] = ip.bytes()[13];
  b[14] = ip.bytes()[14];
  b[15] = ip.bytes()[15];
  return wire::IpAddr(b);
}

wire::IpAddr all_nodes() {
  return kAllNodes;
}

Mac multicast_mac(uint32_t group) {
  return {0x01,
          0x00,
          0x5e,
          static_cast<uint8_t>((group >> 16) & 0x7f),
          static_cast<uint8_t>(group >> 8),
          static_cast<uint8_t>(group)};
}

void write_roce_v2(uint8_t* p, const RoceV2Headers& h, size_t payload_len) {
  if (!h.dst_ip.is_v4()) {
    const size_t l2 = write_l2(p, h.l2, kEtherTypeIpv6);
    write_ipv6(p + l2, h.tos, h.flow_label, kUdpBytes + payload_len, IPPROTO_UDP, 64, h.src_ip,
               h.dst_ip);
    uint8_t* udp = p + l2 + kIpv6Bytes;
    store16(udp, h.src_port);
    store16(udp + 2, h.dst_port);
    store16(udp + 4, static_cast<uint16_t>(kUdpBytes + payload_len));
    store16(udp + 6, 0);
    return;
  }
  size_t l2 = write_l2(p, h.l2, kEtherTypeIpv4);
  auto* ip = reinterpret_cast<rte_ipv4_hdr*>(p + l2);
  ip->version_ihl = 0x45;
  ip->type_of_service = h.tos;
  ip->total_length = rte_cpu_to_be_16(static_cast<uint16_t>(kIpv4Bytes + kUdpBytes + payload_len));
  ip->packet_id = rte_cpu_to_be_16(h.ip_id);
  ip->fragment_offset = rte_cpu_to_be_16(RTE_IPV4_HDR_DF_FLAG);
  ip->time_to_live = 64;
  ip->next_proto_id = IPPROTO_UDP;
  ip->hdr_checksum = 0;
  ip->src_addr = rte_cpu_to_be_32(h.src_ip.v4());
  ip->dst_addr = rte_cpu_to_be_32(h.dst_ip.v4());
  if (h.ip_checksum) ip->hdr_checksum = rte_ipv4_cksum(ip);
  auto* udp = reinterpret_cast<rte_udp_hdr*>(p + l2 + kIpv4Bytes);
  udp->src_port = rte_cpu_to_be_16(h.src_port);
  udp->dst_port = rte_cpu_to_be_16(h.dst_port);
  udp->dgram_len = rte_cpu_to_be_16(static_cast<uint16_t>(kUdpBytes + payload_len));
  udp->dgram_cksum = 0;
}

void write_roce_v1(uint8_t* p, const RoceV1Headers& h, size_t payload_len) {
  uint8_t* g = p + write_l2(p, h.l2, kEtherTypeRoceV1);
  // GRH (IBTA 8.3.1): IPVer 6, TClass, FlowLabel; PayLen (after the GRH, ICRC included);
  // NxtHdr 0x1B (the BTH follows, IBTA 8.3.1 / Annex A16.4); HopLmt; SGID; DGID.
  store32(g, 6u << 28 | uint32_t(h.traffic_class) << 20 | (h.flow_label & 0xfffff));
  store16(g + 4, static_cast<uint16_t>(payload_len));
  g[6] = 0x1b;
  g[7] = h.hop_limit;
  write_mapped_gid(g + 8, h.src_ip);
  write_mapped_gid(g + 24, h.dst_ip);
}

namespace {

// The IPv6 part of classify(): the Ethernet header said 0x86dd. No extension headers: RoCEv2
// packets carry none (Annex A17.4.3), nor does neighbour discovery.
Classified classify_ipv6(const uint8_t* f, size_t len, const Identity& me, bool to_me, bool mcast,
                         Classified c) {
  const size_t off = c.l2_bytes;
  if (!to_me && !mcast) {
    c.kind = Kind::kNotForUs;
    return c;
  }
  if (me.ip.is_v4()) {  // an IPv4 device has no IPv6 to speak
    c.kind = Kind::kNonRoce;
    return c;
  }
  if (len < off + kIpv6Bytes) return c;  // kTooShort
  const uint8_t* ip6 = f + off;
  if ((ip6[0] >> 4) != 6) {
    c.kind = Kind::kBadIp;
    return c;
  }
  const size_t pay = load16(ip6 + 4);
  if (len < off + kIpv6Bytes + pay) return c;  // kTooShort
  c.ipv6 = true;
  c.src_ip = wire::IpAddr::from_bytes(ip6 + 8);
  c.dst_ip = wire::IpAddr::from_bytes(ip6 + 24);
  c.tos = static_cast<uint8_t>(load32(ip6) >> 20);
  c.hop_limit = ip6[7];
  // Ours: our address, or the groups neighbour discovery uses to reach us.
  const bool mine = c.dst_ip == me.ip;
  if (!mine && c.dst_ip != solicited_node(me.ip) && c.dst_ip != kAllNodes) {
    c.kind = Kind::kNotForUs;
    return c;
  }
  const uint8_t* l4 = ip6 + kIpv6Bytes;
  c.kind = Kind::kNonRoce;
  if (ip6[6] == kIpProtoIcmpv6) {
    if (pay < 4 || l4[1] != 0) return c;
    if ((l4[0] == kNdNeighbourSolicit || l4[0] == kNdNeighbourAdvert) && c.hop_limit == 255)
      c.kind = Kind::kNd;
    else if (l4[0] == kIcmpv6EchoRequest && mine)
      c.kind = Kind::kIcmpEcho;
    return c;
  }
  if (!mine || ip6[6] != IPPROTO_UDP || pay < kUdpBytes) return c;
  const size_t ulen = load16(l4 + 4);
  if (ulen < kUdpBytes || ulen > pay) {
    c.kind = Kind::kBadIp;
    return c;
  }
  c.src_port = load16(l4);
  c.dst_port = load16(l4 + 2);
  if (c.dst_port != kRoceV2Port) return c;
  c.kind = Kind::kRoceV2;
  c.payload = l4 + kUdpBytes;
  c.payload_len = ulen - kUdpBytes;
  return c;
}

}  // namespace

Classified classify(const uint8_t* f, size_t len, const Identity& me) {
  Classified c;
  if (len < kEthBytes) return c;
  const bool to_me = same(f, me.mac);
  const bool bcast = same(f, kBroadcastMac);
  const bool pause = same(f, kPauseMac);
  const bool mcast = (f[0] & 1) != 0;
  uint16_t type = load16(f + 12);
  size_t off = kEthBytes;
  if (type == kEtherTypeVlan) {
    if (len < kEthBytes + kVlanBytes) return c;
    c.vlan_tci = load16(f + 14);
    type = load16(f + 16);
    off += kVlanBytes;
  }
  c.l2_bytes = off;
  if (type == kEtherTypeMacControl) {
    c.kind = Kind::kNonRoce;
    if (!pause || len < off + 4) return c;
    const uint16_t op = load16(f + off);
    if (op == kMacControlPause) {
      // 802.3 annex 31B: one pause time for the whole link.
      if (len < off + 4) return c;
      c.kind = Kind::kPause;
      c.pause_mask = 0xff;
      std::fill(std::begin(c.quanta), std::end(c.quanta), load16(f + off + 2));
    } else if (op == kMacControlPfc) {
      // 802.1Qbb 36.1.3: class-enable vector (low 8 bits), then eight pause times.
      if (len < off + 4 + 16) {
        c.kind = Kind::kTooShort;
        return c;
      }
      c.kind = Kind::kPause;
      c.pause_mask = static_cast<uint8_t>(load16(f + off + 2));
      for (int p = 0; p < 8; ++p) c.quanta[p] = load16(f + off + 4 + 2 * p);
    }
    return c;
  }
  if (type == kEtherTypeArp) {
    c.kind = (to_me || bcast) ? Kind::kArp : Kind::kNotForUs;
    return c;
  }
  if (type == kEtherTypeRoceV1) {
    if (!to_me) {
      c.kind = Kind::kNotForUs;
      return c;
    }
    if (len < off + kGrhBytes) return c;
    const uint8_t* g = f + off;
    if ((g[0] >> 4) != 6 || g[6] != 0x1b) {
      c.kind = Kind::kNonRoce;
      return c;
    }
    const size_t pay = load16(g + 4);
    if (len < off + kGrhBytes + pay) return c;
    c.kind = Kind::kRoceV1;
    c.grh = g;
    c.tos = static_cast<uint8_t>((load16(g) >> 4) & 0xff);
    c.payload = g + kGrhBytes;
    c.payload_len = pay;
    return c;
  }
  if (type == kEtherTypeIpv6) return classify_ipv6(f, len, me, to_me, mcast, c);
  if (type != kEtherTypeIpv4) {
    c.kind = (to_me || bcast || mcast) ? Kind::kNonRoce : Kind::kNotForUs;
    return c;
  }
  if (!to_me && !mcast) {
    c.kind = Kind::kNotForUs;
    return c;
  }
  if (len < off + kIpv4Bytes) return c;
  const auto* ip = reinterpret_cast<const rte_ipv4_hdr*>(f + off);
  const size_t ihl = (ip->version_ihl & 0xf) * 4u;
  const size_t total = rte_be_to_cpu_16(ip->total_length);
  c.kind = Kind::kBadIp;
  if ((ip->version_ihl >> 4) != 4 || ihl < kIpv4Bytes || total < ihl) return c;
  if (len < off + total) {
    c.kind = Kind::kTooShort;
    return c;
  }
  if (rte_raw_cksum(ip, ihl) != 0xffff) return c;  // a valid header sums to all ones
  const uint16_t frag = rte_be_to_cpu_16(ip->fragment_offset);
  if ((frag & RTE_IPV4_HDR_MF_FLAG) || (frag & RTE_IPV4_HDR_OFFSET_MASK)) return c;
  const uint32_t dst4 = rte_be_to_cpu_32(ip->dst_addr);
  c.src_ip = wire::IpAddr(rte_be_to_cpu_32(ip->src_addr));
  c.dst_ip = wire::IpAddr(dst4);
  c.ip_id = rte_be_to_cpu_16(ip->packet_id);
  c.dont_fragment = (frag & RTE_IPV4_HDR_DF_FLAG) != 0;
  c.tos = ip->type_of_service;
  const bool mine = me.ip.is_v4() && dst4 == me.ip.v4();
  // The device's own address is unicast: a frame to it is no group's (the search is skipped).
  const bool group =
      !mine && std::find(me.groups.begin(), me.groups.end(), dst4) != me.groups.end();
  if (!mine && !group) {
    c.kind = Kind::kNotForUs;
    return c;
  }
  const uint8_t* l4 = f + off + ihl;
  const size_t l4_len = total - ihl;
  if (ip->next_proto_id == IPPROTO_ICMP && !group) {
    c.kind = Kind::kNonRoce;
    if (l4_len >= sizeof(rte_icmp_hdr) && l4[0] == RTE_IP_ICMP_ECHO_REQUEST && l4[1] == 0)
      c.kind = Kind::kIcmpEcho;
    return c;
  }
  c.kind = Kind::kNonRoce;
  if (ip->next_proto_id != IPPROTO_UDP || l4_len < kUdpBytes || ihl != kIpv4Bytes) return c;
  const auto* udp = reinterpret_cast<const rte_udp_hdr*>(l4);
  const size_t ulen = rte_be_to_cpu_16(udp->dgram_len);
  if (ulen < kUdpBytes || ulen > l4_len) {
    c.kind = Kind::kBadIp;
    return c;
  }
  c.src_port = rte_be_to_cpu_16(udp->src_port);
  c.dst_port = rte_be_to_cpu_16(udp->dst_port);
  if (c.dst_port != kRoceV2Port) return c;
  c.kind = Kind::kRoceV2;
  c.payload = l4 + kUdpBytes;
  c.payload_len = ulen - kUdpBytes;
  return c;
}

bool parse_arp(const uint8_t* f, size_t len, const Classified& c, Arp* out) {
  if (len < c.l2_bytes + sizeof(rte_arp_hdr)) return false;
  // Copied out: rte_arp_hdr is 2-byte aligned, and a frame's bytes need not be (fuzz_frames).
  rte_arp_hdr a;
  std::memcpy(&a, f + c.l2_bytes, sizeof a);
  if (rte_be_to_cpu_16(a.arp_hardware) != RTE_ARP_HRD_ETHER ||
      rte_be_to_cpu_16(a.arp_protocol) != kEtherTypeIpv4 || a.arp_hlen != 6 || a.arp_plen != 4)
    return false;
  out->op = rte_be_to_cpu_16(a.arp_opcode);
  std::memcpy(out->sha.data(), a.arp_data.arp_sha.addr_bytes, 6);
  std::memcpy(out->tha.data(), a.arp_data.arp_tha.addr_bytes, 6);
  out->spa = rte_be_to_cpu_32(a.arp_data.arp_sip);
  out->tpa = rte_be_to_cpu_32(a.arp_data.arp_tip);
  return true;
}

size_t write_arp(uint8_t* p, const L2& l2, const Arp& arp) {
  size_t off = write_l2(p, l2, kEtherTypeArp);
  auto* a = reinterpret_cast<rte_arp_hdr*>(p + off);
  a->arp_hardware = rte_cpu_to_be_16(RTE_ARP_HRD_ETHER);
  a->arp_protocol = rte_cpu_to_be_16(kEtherTypeIpv4);
  a->arp_hlen = 6;
  a->arp_plen = 4;
  a->arp_opcode = rte_cpu_to_be_16(arp.op);
  std::memcpy(a->arp_data.arp_sha.addr_bytes, arp.sha.data(), 6);
  std::memcpy(a->arp_data.arp_tha.addr_bytes, arp.tha.data(), 6);
  a->arp_data.arp_sip = rte_cpu_to_be_32(arp.spa);
  a->arp_data.arp_tip = rte_cpu_to_be_32(arp.tpa);
  off += sizeof(rte_arp_hdr);
  // The minimum Ethernet frame is 60 bytes before the FCS (IEEE 802.3 3.2.8): pad with zeros.
  const size_t min = 60;
  if (off < min) {
    std::memset(p + off, 0, min - off);
    off = min;
  }
  return off;
}

bool parse_nd(const uint8_t* f, size_t len, const Classified& c, Nd* out) {
  if (c.kind != Kind::kNd || len < c.l2_bytes + kIpv6Bytes) return false;
  const uint8_t* ip6 = f + c.l2_bytes;
  const size_t pay = load16(ip6 + 4);
  const uint8_t* m = ip6 + kIpv6Bytes;
  // RFC 4861 7.1.1 / 7.1.2: ICMP length 24 or more, a valid checksum, a target that is not
  // multicast. (classify() checked the hop limit, 255, and the code, 0.)
  if (pay < 24 || len < c.l2_bytes + kIpv6Bytes + pay) return false;
  if (icmpv6_checksum(ip6) != 0) return false;  // over a correct checksum the sum is all ones
  out->type = m[0];
  out->target = wire::IpAddr::from_bytes(m + 8);
  if (out->target.bytes()[0] == 0xff) return false;
  out->solicited = out->type == kNdNeighbourAdvert && (m[4] & 0x40) != 0;
  out->has_lladdr = false;
  // Options (RFC 4861 4.6): type, length in units of 8 bytes (0 is invalid), value.
  const uint8_t want = out->type == kNdNeighbourSolicit ? 1 : 2;
  for (size_t o = 24; o < pay;) {
    if (pay - o < 2 || m[o + 1] == 0) return false;
    const size_t olen = size_t(m[o + 1]) * 8;
    if (olen > pay - o) return false;
    if (m[o] == want && olen >= 8) {
      out->has_lladdr = true;
      std::memcpy(out->lladdr.data(), m + o + 2, 6);
    }
    o += olen;
  }
  return true;
}

size_t write_nd_solicit(uint8_t* p, L2 l2, const wire::IpAddr& src, const wire::IpAddr& target) {
  const wire::IpAddr group = solicited_node(target);
  l2.dst = multicast_mac(group);
  uint8_t* m = p + kEthBytes + (l2.vlan != 0 ? kVlanBytes : 0) + kIpv6Bytes;
  std::memset(m, 0, 32);
  m[0] = kNdNeighbourSolicit;
  std::memcpy(m + 8, target.data(), 16);
  m[24] = 1;  // source link-layer address
  m[25] = 1;
  std::memcpy(m + 26, l2.src.data(), 6);
  return finish_icmpv6(p, l2, src, group, 32);
}

size_t write_nd_advert(uint8_t* p, const L2& l2, const wire::IpAddr& target,
                       const wire::IpAddr& dst) {
  uint8_t* m = p + kEthBytes + (l2.vlan != 0 ? kVlanBytes : 0) + kIpv6Bytes;
  std::memset(m, 0, 32);
  m[0] = kNdNeighbourAdvert;
  m[4] = 0x60;  // S (solicited) and O (override): RFC 4861 7.2.4
  std::memcpy(m + 8, target.data(), 16);
  m[24] = 2;  // target link-layer address
  m[25] = 1;
  std::memcpy(m + 26, l2.src.data(), 6);
  return finish_icmpv6(p, l2, target, dst, 32);
}

void make_echo_reply(uint8_t* f, size_t len, const Classified& c, const Mac& mine) {
  (void)len;
  // The MACs as bytes: rte_ether_hdr is 2-byte aligned, the frame need not be.
  std::memcpy(f, f + 6, 6);  // the destination becomes the sender
  std::memcpy(f + 6, mine.data(), 6);
  if (c.ipv6) {
    // RFC 4443 4.2: the reply carries the request's data; from the address it was sent to
    // (classify() took only echoes to our unicast address).
    uint8_t* ip6 = f + c.l2_bytes;
    uint8_t a[16];
    std::memcpy(a, ip6 + 8, 16);
    std::memcpy(ip6 + 8, ip6 + 24, 16);
    std::memcpy(ip6 + 24, a, 16);
    ip6[7] = 64;
    uint8_t* m = ip6 + kIpv6Bytes;
    m[0] = kIcmpv6EchoReply;
    store16(m + 2, 0);
    const uint16_t ck = icmpv6_checksum(ip6);
    std::memcpy(m + 2, &ck, 2);
    return;
  }
  auto* ip = reinterpret_cast<rte_ipv4_hdr*>(f + c.l2_bytes);
  const size_t ihl = (ip->version_ihl & 0xf) * 4u;
  const size_t total = rte_be_to_cpu_16(ip->total_length);
  const rte_be32_t src = ip->src_addr;
  ip->src_addr = ip->dst_addr;
  ip->dst_addr = src;
  ip->time_to_live = 64;
  ip->hdr_checksum = 0;
  ip->hdr_checksum = rte_ipv4_cksum(ip);
  auto* icmp = reinterpret_cast<rte_icmp_hdr*>(f + c.l2_bytes + ihl);
  icmp->icmp_type = RTE_IP_ICMP_ECHO_REPLY;
  icmp->icmp_cksum = 0;
  icmp->icmp_cksum = static_cast<uint16_t>(~rte_raw_cksum(icmp, total - ihl));
}

}  // namespace uroce::dpdk

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

}  // namespace

Mac multicast_mac(uint32_t group) {
  return {0x01,
          0x00,
          0x5e,
          static_cast<uint8_t>((group >> 16) & 0x7f),
          static_cast<uint8_t>(group >> 8),
          static_cast<uint8_t>(group)};
}

void write_roce_v2(uint8_t* p, const RoceV2Headers& h, size_t payload_len) {
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
  ip->src_addr = rte_cpu_to_be_32(h.src_ip);
  ip->dst_addr = rte_cpu_to_be_32(h.dst_ip);
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
  c.kind = Kind::kBadIpv4;
  if ((ip->version_ihl >> 4) != 4 || ihl < kIpv4Bytes || total < ihl) return c;
  if (len < off + total) {
    c.kind = Kind::kTooShort;
    return c;
  }
  if (rte_raw_cksum(ip, ihl) != 0xffff) return c;  // a valid header sums to all ones
  const uint16_t frag = rte_be_to_cpu_16(ip->fragment_offset);
  if ((frag & RTE_IPV4_HDR_MF_FLAG) || (frag & RTE_IPV4_HDR_OFFSET_MASK)) return c;
  c.src_ip = rte_be_to_cpu_32(ip->src_addr);
  c.dst_ip = rte_be_to_cpu_32(ip->dst_addr);
  c.ip_id = rte_be_to_cpu_16(ip->packet_id);
  c.dont_fragment = (frag & RTE_IPV4_HDR_DF_FLAG) != 0;
  c.tos = ip->type_of_service;
  // The device's own address is unicast: a frame to it is no group's (the search is skipped).
  const bool group = c.dst_ip != me.ipv4 &&
                     std::find(me.groups.begin(), me.groups.end(), c.dst_ip) != me.groups.end();
  if (c.dst_ip != me.ipv4 && !group) {
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
    c.kind = Kind::kBadIpv4;
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

void make_echo_reply(uint8_t* f, size_t len, const Classified& c, const Mac& mine) {
  (void)len;
  // The MACs as bytes: rte_ether_hdr is 2-byte aligned, the frame need not be.
  std::memcpy(f, f + 6, 6);  // the destination becomes the sender
  std::memcpy(f + 6, mine.data(), 6);
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

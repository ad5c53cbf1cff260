// A tc classifier (cls_bpf, direct action) that breaks exactly one thing on a veth, for
// doctor.sh: this kernel has neither act_gact (tc … action drop) nor act_pedit, and the
// machine has no iptables or nft, so the rules are this one program, built with -D:
//   -DDROP_UDP_DPORT=4791        drop UDP datagrams to that port (a firewall's DROP)
//   -DTOS_MASK=0xfc -DTOS_SET=0  rewrite the DSCP of every packet to 0 (a remarking switch)
//   -DTOS_MASK=0x03 -DTOS_SET=0  clear the ECN field of every packet (Not-ECT)
// IPv4 and IPv6 alike (IPv6: the Traffic Class, no extension headers before UDP).
// Attached with `tc filter add dev VETH {ingress|egress} bpf da obj doctor_tc.o sec tc`.
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <linux/ip.h>
#include <linux/ipv6.h>
#include <linux/pkt_cls.h>
#include <linux/udp.h>
#include <bpf/bpf_endian.h>
#include <bpf/bpf_helpers.h>

#ifndef TOS_MASK
#define TOS_MASK 0
#endif
#ifndef TOS_SET
#define TOS_SET 0
#endif

SEC("tc")
int doctor_break(struct __sk_buff* skb) {
  void* data = (void*)(long)skb->data;
  void* end = (void*)(long)skb->data_end;
  struct ethhdr* eth = data;
  if ((void*)(eth + 1) > end) return TC_ACT_OK;
  if (eth->h_proto == bpf_htons(ETH_P_IPV6)) {
    struct ipv6hdr* ip6 = (void*)(eth + 1);
    if ((void*)(ip6 + 1) > end) return TC_ACT_OK;
#ifdef DROP_UDP_DPORT
    if (ip6->nexthdr == IPPROTO_UDP) {
      struct udphdr* udp = (void*)(ip6 + 1);
      if ((void*)(udp + 1) <= end && udp->dest == bpf_htons(DROP_UDP_DPORT)) return TC_ACT_SHOT;
    }
#endif
    // The Traffic Class straddles the first two bytes (version 4 bits, TC 8, flow label 20);
    // IPv6 has no header checksum, and the ICMPv6 and UDP ones do not cover it.
    const __u8* h = (const __u8*)ip6;
    const __u8 old_tc = (__u8)(h[0] << 4 | h[1] >> 4);
    const __u8 new_tc = (old_tc & ~TOS_MASK) | (TOS_SET & TOS_MASK);
    if (TOS_MASK == 0 || new_tc == old_tc) return TC_ACT_OK;
    const __u8 b[2] = {(__u8)((h[0] & 0xf0) | new_tc >> 4), (__u8)(new_tc << 4 | (h[1] & 0x0f))};
    bpf_skb_store_bytes(skb, ETH_HLEN, b, 2, 0);
    return TC_ACT_OK;
  }
  if (eth->h_proto != bpf_htons(ETH_P_IP)) return TC_ACT_OK;
  struct iphdr* ip = (void*)(eth + 1);
  if ((void*)(ip + 1) > end) return TC_ACT_OK;
#ifdef DROP_UDP_DPORT
  if (ip->protocol == IPPROTO_UDP && ip->ihl == 5) {
    struct udphdr* udp = (void*)(ip + 1);
    if ((void*)(udp + 1) <= end && udp->dest == bpf_htons(DROP_UDP_DPORT)) return TC_ACT_SHOT;
  }
#endif
  const __u8 old_tos = ip->tos;
  const __u8 new_tos = (old_tos & ~TOS_MASK) | (TOS_SET & TOS_MASK);
  if (TOS_MASK == 0 || new_tos == old_tos) return TC_ACT_OK;
  // The TOS byte is the low byte of the header's first 16-bit word: fix the checksum for that
  // word, then write the byte (RFC 1624 incremental update, done by the helper).
  const __u16 old_word = bpf_htons((__u16)(*(__u8*)ip) << 8 | old_tos);
  const __u16 new_word = bpf_htons((__u16)(*(__u8*)ip) << 8 | new_tos);
  bpf_l3_csum_replace(skb, ETH_HLEN + offsetof(struct iphdr, check), old_word, new_word, 2);
  bpf_skb_store_bytes(skb, ETH_HLEN + offsetof(struct iphdr, tos), &new_tos, 1, 0);
  return TC_ACT_OK;
}

char _license[] SEC("license") = "GPL";

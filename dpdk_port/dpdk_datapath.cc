// The datapath of the DPDK port: bursts in and out, framing (IPv4 or IPv6), ARP and IPv6
// neighbour discovery, ICMP echo, PAUSE. Setup is dpdk_port.cc.
#include <rte_arp.h>
#include <rte_ethdev.h>
#include <rte_mbuf.h>

#include <algorithm>
#include <cstring>
#include <ctime>
#include <cstddef>
#include <new>

#include <unistd.h>

#include "dpdk_port/dpdk_port.h"
#include "dpdk_port/eal.h"

namespace uroce::dpdk {
namespace {

// The port's clock for ARP retries and PAUSE (CLOCK_MONOTONIC, as the engine's).
transport::Time clock_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<transport::Time>(ts.tv_sec) * 1'000'000'000ull +
         static_cast<transport::Time>(ts.tv_nsec);
}

// A clock of scheduler-tick resolution that costs next to nothing, for the close linger.
transport::Time coarse_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
  return static_cast<transport::Time>(ts.tv_sec) * 1'000'000'000ull +
         static_cast<transport::Time>(ts.tv_nsec);
}

// The IPv4 address of an IPv4-mapped GID (::ffff:a.b.c.d, 16 bytes at g); false for any other.
bool mapped_gid(const uint8_t* g, uint32_t* ip) {
  for (int i = 0; i < 10; ++i)
    if (g[i] != 0) return false;
  if (g[10] != 0xff || g[11] != 0xff) return false;
  *ip = uint32_t(g[12]) << 24 | uint32_t(g[13]) << 16 | uint32_t(g[14]) << 8 | g[15];
  return true;
}

// A gathered frame's payload belongs to the application's memory region: nothing to free when
// the PMD is done with it.
void keep_payload(void* /*addr*/, void* /*opaque*/) {}

}  // namespace

// The TxBuf of a transmit mbuf: at the start of its data room.
const transport::TxBuf* DpdkPort::txbuf_of(const rte_mbuf* m) {
  return static_cast<const transport::TxBuf*>(m->buf_addr);
}

rte_mbuf* DpdkPort::mbuf_of(transport::TxBuf* b) {
  // rte_pktmbuf_pool_create with no private area puts the data room right after the mbuf.
  return reinterpret_cast<rte_mbuf*>(reinterpret_cast<uint8_t*>(b) - sizeof(rte_mbuf));
}

std::span<const int> DpdkPort::wait_fds() const {
  if (rx_intr_fd_ < 0) return {};
  return {&rx_intr_fd_, 1};
}

bool DpdkPort::arm_wait() {
  if (rx_intr_fd_ < 0) return false;
  if (!intr_armed_) intr_armed_ = rte_eth_dev_rx_intr_enable(port_id_, 0) == 0;
  return intr_armed_;
}

void DpdkPort::disarm_wait() {
  if (!intr_armed_) return;
  rte_eth_dev_rx_intr_disable(port_id_, 0);
  intr_armed_ = false;
  // Drain the eventfd so the next sleep does not return at once for an old arrival.
  uint64_t v;
  while (read(rx_intr_fd_, &v, sizeof v) > 0) {
  }
}

// --- receive ---

// rx_burst() stores each of these fields itself: one added to RxFrame must be stored there too.
static_assert(sizeof(RxFrame) == 64, "a new RxFrame field: set it in DpdkPort::rx_burst()");

std::span<const RxFrame> DpdkPort::rx_burst() {
  // One bulk put per pool for the whole burst (a put per mbuf, each with its lcore lookup, was 3 %
  // of a receiving engine's time at MTU 1024).
  if (rx_count_ != 0) rte_pktmbuf_free_bulk(rx_mbufs_, rx_count_);
  rx_count_ = 0;
  rx_out_n_ = 0;
  rx_linear_.clear();
  rte_mbuf* ms[kRxBurst];
  const uint16_t n = rte_eth_rx_burst(port_id_, 0, ms, kRxBurst);
  if (n == 0) return {};
  // The PMD allocates a burst's mbufs from the caller's cache (eal.h); asked only once something
  // arrived, so that the empty polls a busy-polling application spins in stay short.
  eal_thread_enter();
  std::vector<uint32_t> groups;  // copied only when there are any: they are rare
  if (has_groups_.load(std::memory_order_acquire)) {
    std::lock_guard<std::mutex> g(ctl_mu_);
    groups = groups_;
  }
  Identity me{mac_, opt_.ip, groups};
  rx_linear_.reserve(n);
  for (uint16_t i = 0; i < n; ++i) {
    rte_mbuf* m = ms[i];
    const uint8_t* f = rte_pktmbuf_mtod(m, const uint8_t*);
    size_t len = rte_pktmbuf_data_len(m);
    if (m->nb_segs > 1) {
      // A frame in several segments (a jumbo frame in 2 KiB buffers): copied whole, so the
      // checks and the transport see one contiguous packet.
      std::vector<uint8_t>& lin = rx_linear_.emplace_back(rte_pktmbuf_pkt_len(m));
      const void* d = rte_pktmbuf_read(m, 0, lin.size(), lin.data());
      if (d != lin.data()) std::memcpy(lin.data(), d, lin.size());
      f = lin.data();
      len = lin.size();
      counters_.rx_linearized.add();
    }
    const Classified c = classify(f, len, me);
    switch (c.kind) {
      case Kind::kRoceV2: {
        // Every field stored in place (at most one frame a received frame: kRxBurst). Assigning a
        // temporary, `fr = RxFrame{}`, built it on the stack in byte and vector stores and read it
        // back across them: stalled store forwarding, 2 % of a receiving engine's time.
        RxFrame& fr = rx_out_[rx_out_n_++];
        fr.data = c.payload;
        fr.len = static_cast<uint32_t>(c.payload_len);
        fr.truncated = false;
        fr.src_ip = c.src_ip;
        fr.dst_ip = c.dst_ip;
        fr.src_port = c.src_port;
        fr.dst_port = c.dst_port;
        fr.tos = c.tos;
        fr.ip_id_known = !c.ipv6;  // IPv6 has no ID: its ICRC is checked exactly anyway
        fr.dont_fragment = c.dont_fragment;
        fr.ip_id = c.ip_id;
        fr.roce_v1 = false;
        rx_mbufs_[rx_count_++] = m;  // the frame points into it until the next burst
        continue;
      }
      case Kind::kRoceV1: {
        // uroce's RoCE v1 GIDs are IPv4-mapped (::ffff:a.b.c.d): such a GRH names the sender and
        // receiver; another GID (a link-local fe80::, say) is no peer uroce can answer.
        uint32_t src = 0, dst = 0;
        if (!opt_.roce_v1 || !mapped_gid(c.grh + 8, &src) || !mapped_gid(c.grh + 24, &dst)) {
          counters_.rx_non_roce.add();
          break;
        }
        if (!opt_.ip.is_v4() || dst != opt_.ip.v4()) {
          counters_.rx_not_for_us.add();
          break;
        }
        counters_.rx_roce_v1.add();
        RxFrame& fr = rx_out_[rx_out_n_++];
        fr.data = c.payload;
        fr.len = static_cast<uint32_t>(c.payload_len);
        fr.truncated = false;
        fr.src_ip = wire::IpAddr(src);
        fr.dst_ip = wire::IpAddr(dst);
        fr.src_port = 0;
        fr.dst_port = 0;
        fr.tos = c.tos;
        fr.ip_id_known = false;
        fr.dont_fragment = true;
        fr.ip_id = 0;
        fr.roce_v1 = true;
        rx_mbufs_[rx_count_++] = m;
        continue;
      }
      case Kind::kArp:
      case Kind::kNd:
      case Kind::kIcmpEcho:
      case Kind::kPause:
        ctl_dirty_.store(true, std::memory_order_release);
        if (handle_control(m, f, len, c, clock_ns())) continue;  // it kept the mbuf
        break;
      case Kind::kNotForUs:
        counters_.rx_not_for_us.add();
        break;
      case Kind::kNonRoce:
        counters_.rx_non_roce.add();
        break;
      case Kind::kBadIp:
      case Kind::kTooShort:
        counters_.rx_bad_ipv4.add();
        break;
    }
    rte_pktmbuf_free(m);
  }
  return {rx_out_, rx_out_n_};
}

bool DpdkPort::handle_control(rte_mbuf* m, const uint8_t* f, size_t len, const Classified& c,
                              transport::Time now) {
  std::lock_guard<std::mutex> g(ctl_mu_);
  if (c.kind == Kind::kPause) {
    counters_.rx_pause_frames.add();
    pause_.on_pause(c.pause_mask, c.quanta, quantum_ns_, now);
    for (int p = 0; p < 8; ++p) {
      if (!(c.pause_mask & (1u << p)) || c.quanta[p] == 0) continue;
      counters_.rx_prio_pause[p].add();
      counters_.rx_prio_pause_duration[p].add(
          static_cast<uint64_t>(c.quanta[p] * quantum_ns_ / 1000.0));
    }
    return false;
  }
  if (c.kind == Kind::kIcmpEcho) {
    if (m->nb_segs > 1) return false;  // a ping that large is not worth a copy
    make_echo_reply(rte_pktmbuf_mtod(m, uint8_t*), len, c, mac_);
    ctl_queue_.push_back(m);
    counters_.icmp_echo_replies.add();
    return true;
  }
  if (c.kind == Kind::kNd) return handle_nd(m, f, len, c, now);
  Arp arp;
  if (!parse_arp(f, len, c, &arp)) {
    counters_.rx_non_roce.add();
    return false;
  }
  counters_.arp_rx.add();
  // RFC 826's merge: update a known sender; add it when the packet is for us.
  const bool for_us = opt_.ip.is_v4() && arp.tpa == opt_.ip.v4();
  learn_neighbour(wire::IpAddr(arp.spa), arp.sha, now, for_us);
  if (arp.op == RTE_ARP_OP_REQUEST && for_us && m->nb_segs == 1) {
    // The reply goes back in the request's own buffer.
    Arp reply;
    reply.op = RTE_ARP_OP_REPLY;
    reply.sha = mac_;
    reply.spa = opt_.ip.v4();
    reply.tha = arp.sha;
    reply.tpa = arp.spa;
    rte_pktmbuf_reset(m);
    uint8_t* p = reinterpret_cast<uint8_t*>(rte_pktmbuf_append(m, 64));
    if (!p) return false;
    const size_t flen = write_arp(p, reply_l2(arp.sha, c), reply);
    rte_pktmbuf_trim(m, static_cast<uint16_t>(64 - flen));
    ctl_queue_.push_back(m);
    counters_.arp_tx_replies.add();
    return true;
  }
  return false;
}

L2 DpdkPort::reply_l2(const Mac& to, const Classified& c) const {
  L2 l2;
  l2.dst = to;
  l2.src = mac_;
  l2.vlan = static_cast<uint16_t>(c.vlan_tci & 0xfff);
  l2.pcp = static_cast<uint8_t>(c.vlan_tci >> 13);
  return l2;
}

void DpdkPort::learn_neighbour(const wire::IpAddr& ip, const Mac& mac, transport::Time now,
                               bool create) {
  scratch_released_.clear();
  neigh_.learn(ip, mac, now, create, &scratch_released_);
  for (void* p : scratch_released_) {
    rte_mbuf* pm = static_cast<rte_mbuf*>(p);
    // Held packets were framed but for their destination MAC (the first 6 bytes).
    std::memcpy(rte_pktmbuf_mtod(pm, uint8_t*), mac.data(), 6);
    ctl_queue_.push_back(pm);
    counters_.sent_pkts.add();
    counters_.sent_bytes.add(rte_pktmbuf_pkt_len(pm) - header_bytes(*txbuf_of(pm)));
  }
}

// IPv6 neighbour discovery (RFC 4861), counted with ARP (arp_* counters: the same job).
bool DpdkPort::handle_nd(rte_mbuf* m, const uint8_t* f, size_t len, const Classified& c,
                         transport::Time now) {
  Nd nd;
  if (opt_.ip.is_v4() || !parse_nd(f, len, c, &nd)) {
    counters_.rx_non_roce.add();
    return false;
  }
  counters_.arp_rx.add();
  if (nd.type == kNdNeighbourAdvert) {
    // 7.2.5: an advertisement updates the entry of its target (created: we asked for it).
    if (nd.has_lladdr) learn_neighbour(nd.target, nd.lladdr, now, nd.solicited);
    return false;
  }
  if (nd.target != opt_.ip) return false;
  // 7.2.3: a solicitation for our address from a unicast source teaches us the sender (its
  // source link-layer option) and gets a solicited advertisement back, in its own buffer. One
  // from the unspecified address (duplicate address detection) is answered to all nodes.
  const bool dad = c.src_ip == wire::IpAddr{};
  if (!dad && nd.has_lladdr) learn_neighbour(c.src_ip, nd.lladdr, now, true);
  if (m->nb_segs != 1) return false;
  const Mac to = dad || !nd.has_lladdr ? multicast_mac(all_nodes()) : nd.lladdr;
  rte_pktmbuf_reset(m);
  uint8_t* p = reinterpret_cast<uint8_t*>(rte_pktmbuf_append(m, 128));
  if (!p) return false;
  const size_t flen = write_nd_advert(p, reply_l2(to, c), opt_.ip, dad ? all_nodes() : c.src_ip);
  rte_pktmbuf_trim(m, static_cast<uint16_t>(128 - flen));
  ctl_queue_.push_back(m);
  counters_.arp_tx_replies.add();
  return true;
}

size_t DpdkPort::header_bytes(const transport::TxBuf& b) const {
  const bool vlan = opt_.vlan != 0;
  return b.roce_v1 ? roce_v1_header_bytes(vlan) : roce_v2_header_bytes(vlan, !b.dst_ip.is_v4());
}

// --- transmit ---

transport::TxBuf* DpdkPort::tx_alloc() {
  eal_thread_enter();
  rte_mbuf* m = rte_pktmbuf_alloc(tx_pool_);
  if (!m) return nullptr;
  return new (m->buf_addr) transport::TxBuf;
}

void DpdkPort::tx_free(transport::TxBuf* buf) {
  rte_pktmbuf_free(mbuf_of(buf));
}

void DpdkPort::make_whole(rte_mbuf* m) {
  if (m->nb_segs == 1) return;
  counters_.tx_gather_copied.add();
  // The TxBuf behind the first segment has room for the largest packet and its ICRC.
  uint8_t* end = rte_pktmbuf_mtod(m, uint8_t*) + m->data_len;
  for (const rte_mbuf* s = m->next; s != nullptr; s = s->next) {
    std::memcpy(end, rte_pktmbuf_mtod(s, const uint8_t*), s->data_len);
    end += s->data_len;
  }
  rte_pktmbuf_free(m->next);
  m->next = nullptr;
  m->nb_segs = 1;
  m->data_len = static_cast<uint16_t>(m->pkt_len);
}

wire::IpAddr DpdkPort::next_hop(const wire::IpAddr& ip) const {
  if (opt_.prefix_len == 0 || is_multicast(ip)) return ip;
  // On the subnet when the first prefix_len bits (of the 128, or of the IPv4 address's 32 in
  // its mapped form) agree with ours.
  const uint32_t bits = opt_.prefix_len + (ip.is_v4() ? 96 : 0);
  const auto& a = ip.bytes();
  const auto& b = opt_.ip.bytes();
  const uint32_t whole = bits / 8;
  bool same = std::memcmp(a.data(), b.data(), whole) == 0;
  if (same && bits % 8 != 0) {
    const uint8_t mask = static_cast<uint8_t>(0xff00 >> (bits % 8));
    same = (a[whole] & mask) == (b[whole] & mask);
  }
  if (same) return ip;
  return opt_.gateway;  // :: when none: it never resolves, and the packets are dropped
}

bool DpdkPort::is_multicast(const wire::IpAddr& ip) {
  return ip.is_v4() ? (ip.v4() >> 28) == 0xe : ip.bytes()[0] == 0xff;
}

int DpdkPort::priority_of(const transport::TxBuf& b) const {
  if (b.pcp != transport::kPcpPortDefault) return b.pcp & 7;  // its own (a CNP: cnp_802p_prio)
  if (opt_.vlan != 0 && b.dscp == opt_.data_dscp) return opt_.priority;
  return (b.dscp >> 3) & 7;
}

rte_mbuf* DpdkPort::frame(transport::TxBuf* b, const Mac& dst) {
  rte_mbuf* m = mbuf_of(b);
  const bool vlan = opt_.vlan != 0;
  const bool v1 = b->roce_v1;
  const size_t hdr = header_bytes(*b);
  // The UDP payload: the IB packet (wherever its payload lies) and the ICRC.
  const size_t payload = b->ib_len() + transport::kTxTailroom;
  // The headers end where the packet begins, inside the TxBuf's headroom.
  uint8_t* start = reinterpret_cast<uint8_t*>(b) + offsetof(transport::TxBuf, data) - hdr;
  const uint8_t tos = static_cast<uint8_t>((b->dscp & 0x3f) << 2 | (b->ecn & 3));
  L2 l2;
  l2.dst = dst;
  l2.src = mac_;
  l2.vlan = opt_.vlan;
  l2.pcp = static_cast<uint8_t>(priority_of(*b));
  if (v1) {
    RoceV1Headers h;
    h.l2 = l2;
    h.src_ip = opt_.ip.v4();
    h.dst_ip = b->dst_ip.v4();  // IPv4-mapped (tx_burst)
    h.traffic_class = tos;      // the GRH carries the class RoCEv2 puts in the TOS byte
    write_roce_v1(start, h, payload);
  } else {
    RoceV2Headers h;
    h.l2 = l2;
    h.src_ip = opt_.ip;
    h.dst_ip = b->dst_ip;  // of the device's family (tx_burst)
    h.tos = tos;
    h.ip_id = b->ip_id;
    // IPv6: the flow label carries the source port's entropy too, for switches that hash the
    // IPv6 flow label (RFC 6438); the ICRC masks it (Annex A17.4.5.1).
    h.flow_label = b->src_port;
    h.src_port = b->src_port;
    h.ip_checksum = !tx_ip_csum_offload_;
    write_roce_v2(start, h, payload);
  }
  m->data_off = static_cast<uint16_t>(start - static_cast<uint8_t*>(m->buf_addr));
  m->data_len = static_cast<uint16_t>(hdr + payload);
  m->pkt_len = m->data_len;
  m->nb_segs = 1;
  m->next = nullptr;
  rte_mbuf* segs[2];
  if (b->ext_len != 0 && rte_pktmbuf_alloc_bulk(seg_pool_, segs, 2) == 0) {
    // Headers here, then the payload where it lies, then the ICRC (at data[len], where the
    // datapath put it) in a segment of its own.
    rte_mbuf* x = segs[0];
    rte_mbuf* t = segs[1];
    auto* shinfo = static_cast<rte_mbuf_ext_shared_info*>(rte_mbuf_to_priv(x));
    shinfo->free_cb = keep_payload;
    shinfo->fcb_opaque = nullptr;
    rte_mbuf_ext_refcnt_set(shinfo, 1);
    rte_pktmbuf_attach_extbuf(x, const_cast<uint8_t*>(b->ext), RTE_BAD_IOVA,
                              static_cast<uint16_t>(b->ext_len), shinfo);
    x->data_len = static_cast<uint16_t>(b->ext_len);
    std::memcpy(rte_pktmbuf_append(t, transport::kTxTailroom), b->data + b->len,
                transport::kTxTailroom);
    m->data_len = static_cast<uint16_t>(hdr + b->len);
    m->nb_segs = 3;
    m->next = x;
    x->next = t;
  } else if (b->ext_len != 0) {
    // No segment mbufs left: the payload is copied in after all.
    counters_.tx_gather_copied.add();
    std::memmove(b->data + b->ib_len(), b->data + b->len, transport::kTxTailroom);
    std::memcpy(b->data + b->len, b->ext, b->ext_len);
  }
  if (tx_ip_csum_offload_ && !v1 && b->dst_ip.is_v4()) {
    m->ol_flags = RTE_MBUF_F_TX_IPV4 | RTE_MBUF_F_TX_IP_CKSUM;
    m->l2_len = static_cast<uint64_t>(kEthBytes + (vlan ? kVlanBytes : 0));
    m->l3_len = kIpv4Bytes;
  } else {
    m->ol_flags = 0;
  }
  return m;
}

size_t DpdkPort::tx_burst(std::span<transport::TxBuf* const> bufs) {
  // Read only when a packet needs it: a neighbour not resolved, a priority that was paused.
  transport::Time now = 0;
  const auto clock = [&now] { return now != 0 ? now : (now = clock_ns()); };
  rte_mbuf* out[256];
  uint16_t n = 0;
  size_t sent = 0;
  {
    std::lock_guard<std::mutex> g(ctl_mu_);
    for (transport::TxBuf* b : bufs) {
      // A packet of the other family than the device's address has no source address to go
      // out with (the engine routes by the device's family: this is a transport bug's guard).
      if (b->dst_ip.is_v4() != opt_.ip.is_v4()) {
        counters_.tx_errors.add();
        tx_free(b);
        continue;
      }
      const wire::IpAddr hop = next_hop(b->dst_ip);
      Mac dst;
      bool resolved = false;
      if (is_multicast(b->dst_ip)) {
        dst = b->dst_ip.is_v4() ? multicast_mac(b->dst_ip.v4()) : multicast_mac(b->dst_ip);
        resolved = true;
      } else if (neigh_.lookup(hop, &dst)) {
        resolved = true;
      } else {
        ctl_dirty_.store(true, std::memory_order_release);
        bool request = false;
        switch (neigh_.resolve(hop, clock(), &dst, &request)) {
          case NeighbourTable::Lookup::kResolved:
            resolved = true;
            break;
          case NeighbourTable::Lookup::kPending: {
            if (request) send_neighbour_request(hop);
            rte_mbuf* m = frame(b, Mac{});
            make_whole(m);
            if (!neigh_.hold(hop, m)) {
              counters_.tx_no_neighbour.add();
              rte_pktmbuf_free(m);
            }
            continue;
          }
          case NeighbourTable::Lookup::kFailed:
            counters_.tx_no_neighbour.add();
            tx_free(b);
            continue;
        }
      }
      (void)resolved;
      const int prio = priority_of(*b);
      const uint64_t bytes = b->ib_len() + transport::kTxTailroom;
      rte_mbuf* m = frame(b, dst);
      // Behind packets already held for its priority, or held itself while it is paused.
      if (!held_[prio].empty() || (pause_.ever_paused(prio) && pause_.paused(prio, clock()))) {
        ctl_dirty_.store(true, std::memory_order_release);
        if (held_count_ >= kMaxHeld) {
          counters_.tx_pause_drops.add();
          rte_pktmbuf_free(m);
          continue;
        }
        make_whole(m);
        held_[prio].push_back(m);
        ++held_count_;
        counters_.tx_pause_held.add();
      } else {
        out[n++] = m;
      }
      // Counted when it leaves the transport: a held packet goes out when its pause ends.
      counters_.sent_bytes.add(bytes);
      ++sent;
      if (n == 256) {
        transmit(out, n);
        n = 0;
      }
    }
  }
  if (n) transmit(out, n);
  counters_.sent_pkts.add(sent);
  return sent;
}

void DpdkPort::transmit(rte_mbuf** ms, uint16_t n) {
  last_tx_ = coarse_ns();
  flush_backlog();
  uint16_t done = backlog_.empty() ? rte_eth_tx_burst(port_id_, 0, ms, n) : 0;
  // The PMD's ring is full: keep the rest, in order, for the next pass (they hold pool mbufs,
  // so a stuck peer ends in tx_alloc() backpressure, not in unbounded memory).
  for (uint16_t i = done; i < n; ++i) {
    make_whole(ms[i]);
    backlog_.push_back(ms[i]);
  }
  if (done < n) ctl_dirty_.store(true, std::memory_order_release);
}

void DpdkPort::flush_backlog() {
  while (!backlog_.empty()) {
    rte_mbuf* chunk[64];
    uint16_t k = 0;
    for (auto it = backlog_.begin(); it != backlog_.end() && k < 64; ++it) chunk[k++] = *it;
    const uint16_t done = rte_eth_tx_burst(port_id_, 0, chunk, k);
    backlog_.erase(backlog_.begin(), backlog_.begin() + done);
    if (done < k) return;
  }
}

void DpdkPort::send_neighbour_request(const wire::IpAddr& ip) {
  rte_mbuf* m = rte_pktmbuf_alloc(tx_pool_);
  if (!m) return;
  L2 l2;
  l2.dst = kBroadcastMac;
  l2.src = mac_;
  l2.vlan = opt_.vlan;
  l2.pcp = opt_.priority;
  if (!ip.is_v4()) {
    uint8_t* p = reinterpret_cast<uint8_t*>(rte_pktmbuf_append(m, 128));
    rte_pktmbuf_trim(m, static_cast<uint16_t>(128 - write_nd_solicit(p, l2, opt_.ip, ip)));
  } else {
    uint8_t* p = reinterpret_cast<uint8_t*>(rte_pktmbuf_append(m, 64));
    Arp req;
    req.op = RTE_ARP_OP_REQUEST;
    req.sha = mac_;
    req.spa = opt_.ip.v4();
    req.tpa = ip.v4();
    rte_pktmbuf_trim(m, static_cast<uint16_t>(64 - write_arp(p, l2, req)));
  }
  ctl_queue_.push_back(m);
  counters_.arp_tx_requests.add();
}

void DpdkPort::send_control(transport::Time now) {
  std::vector<rte_mbuf*> q;
  {
    std::lock_guard<std::mutex> g(ctl_mu_);
    scratch_requests_.clear();
    scratch_dropped_.clear();
    neigh_.poll(now, &scratch_requests_, &scratch_dropped_);
    for (const wire::IpAddr& ip : scratch_requests_) send_neighbour_request(ip);
    for (void* p : scratch_dropped_) {
      counters_.tx_no_neighbour.add();
      rte_pktmbuf_free(static_cast<rte_mbuf*>(p));
    }
    counters_.arp_failures.add(neigh_.failures() - counters_.arp_failures.get());
    q.swap(ctl_queue_);
  }
  if (!q.empty()) transmit(q.data(), static_cast<uint16_t>(q.size()));
}

void DpdkPort::release_held(transport::Time now) {
  if (held_count_ == 0) return;
  for (int p = 0; p < 8; ++p) {
    if (held_[p].empty()) continue;
    {
      std::lock_guard<std::mutex> g(ctl_mu_);
      if (pause_.paused(p, now)) continue;
    }
    std::vector<rte_mbuf*> v(held_[p].begin(), held_[p].end());
    held_count_ -= v.size();
    held_[p].clear();
    for (size_t i = 0; i < v.size(); i += 256)
      transmit(v.data() + i, static_cast<uint16_t>(std::min<size_t>(256, v.size() - i)));
  }
}

bool DpdkPort::poll(transport::Time now) {
  eal_thread_enter();
  if (ctl_dirty_.load(std::memory_order_acquire) || now >= ctl_due_) {
    // Cleared first: a change from now on marks it again, and the next pass looks again.
    ctl_dirty_.store(false, std::memory_order_relaxed);
    send_control(now);
    release_held(now);
    flush_backlog();
    ctl_due_ = compute_deadline();
  }
  if (now < next_link_check_) return false;
  const bool was = link_up();
  check_link(now);
  return link_up() != was;
}

transport::Time DpdkPort::next_deadline() const {
  if (!ctl_dirty_.load(std::memory_order_acquire)) return std::min(ctl_due_, next_link_check_);
  return std::min(compute_deadline(), next_link_check_);
}

transport::Time DpdkPort::compute_deadline() const {
  transport::Time t = transport::kNever;
  std::lock_guard<std::mutex> g(ctl_mu_);
  t = std::min(t, neigh_.next_deadline());
  if (!ctl_queue_.empty()) t = 0;
  if (held_count_ > 0) t = std::min(t, pause_.next_expiry(clock_ns()));
  if (!backlog_.empty()) t = std::min(t, clock_ns() + 10'000);  // the PMD's ring frees up
  return t;
}

int DpdkPort::join_group(uint32_t group) {
  if ((group >> 28) != 0xe) return EINVAL;
  std::lock_guard<std::mutex> g(ctl_mu_);
  if (std::find(groups_.begin(), groups_.end(), group) != groups_.end()) return 0;
  // Frames to the group's MAC must reach us; without an IGMP-snooping switch allmulticast is the
  // plain way (no IGMP report is sent: documented in docs/configuration.md).
  if (groups_.empty()) rte_eth_allmulticast_enable(port_id_);
  groups_.push_back(group);
  has_groups_.store(true, std::memory_order_release);
  return 0;
}

void DpdkPort::leave_group(uint32_t group) {
  std::lock_guard<std::mutex> g(ctl_mu_);
  std::erase(groups_, group);
  has_groups_.store(!groups_.empty(), std::memory_order_release);
  if (groups_.empty() && opt_.ip.is_v4()) rte_eth_allmulticast_disable(port_id_);
}

}  // namespace uroce::dpdk

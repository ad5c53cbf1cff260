// Address handles: ibv_create_ah, ibv_destroy_ah, ibv_init_ah_from_wc, ibv_create_ah_from_wc.
#include "ah.h"

#include <cerrno>
#include <cstring>
#include <new>

#include "objects.h"
#include "util/log.h"

namespace uroce::verbs {
namespace {

constexpr uint8_t kV4MappedPrefix[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};

bool is_ipv4_multicast(uint32_t ip) {
  return (ip >> 28) == 0xe;
}  // 224.0.0.0/4

// The IPv4 address a GID stands for: ::ffff:a.b.c.d (Annex A17.4.5.1), which RoCEv2 also uses
// for IPv4 multicast groups (::ffff:239.x.y.z), or ff0e::ffff:a.b.c.d with a.b.c.d a multicast
// address, the MGID form rdma_cm gives IPv4 groups on RoCE v1-era stacks.
bool gid_ipv4(const ibv_gid& g, uint32_t* ip) {
  const uint32_t v4 =
      uint32_t(g.raw[12]) << 24 | uint32_t(g.raw[13]) << 16 | uint32_t(g.raw[14]) << 8 | g.raw[15];
  if (std::memcmp(g.raw, kV4MappedPrefix, sizeof kV4MappedPrefix) == 0) {
    *ip = v4;
    return true;
  }
  if (g.raw[0] == 0xff && g.raw[1] == 0x0e &&
      std::memcmp(g.raw + 2, kV4MappedPrefix + 2, sizeof kV4MappedPrefix - 2) == 0 &&
      is_ipv4_multicast(v4)) {
    *ip = v4;
    return true;
  }
  return false;
}

// RFC 791 checksum over a 20-byte header: 0 when the header's own checksum field is right.
uint16_t ipv4_sum(const uint8_t* h) {
  uint32_t sum = 0;
  for (int i = 0; i < 20; i += 2) sum += uint32_t(h[i]) << 8 | h[i + 1];
  while (sum >> 16) sum = (sum & 0xffff) + (sum >> 16);
  return static_cast<uint16_t>(~sum);
}

}  // namespace

const char* dgid_destination(bool dev_v6, const ibv_gid& dgid, wire::IpAddr* dst) {
  uint32_t ip = 0;
  if (!dev_v6) {
    if (!gid_ipv4(dgid, &ip))
      return "ah_attr.grh.dgid is not an IPv4-mapped GID (::ffff:a.b.c.d), and the device's "
             "address is IPv4";
    *dst = wire::IpAddr(ip);
    return nullptr;
  }
  const wire::IpAddr a = wire::IpAddr::from_bytes(dgid.raw);
  if (a.is_v4() || gid_ipv4(dgid, &ip))
    return "ah_attr.grh.dgid is an IPv4 GID, and the device's address is IPv6";
  if (a == wire::IpAddr{}) return "ah_attr.grh.dgid is the unspecified address ::";
  if (dgid.raw[0] == 0xff)
    return "ah_attr.grh.dgid is an IPv6 multicast GID (an IPv6 device has no multicast)";
  *dst = a;
  return nullptr;
}

ibv_ah* create_ah(ibv_pd* pd, ibv_ah_attr* attr) {
  if (!attr) {
    errno = EINVAL;
    return nullptr;
  }
  wire::IpAddr dst;
  // One port, one GID (index 0; index 1 is the RoCE v1 GID where the port carries v1); RoCE needs
  // the GRH, and a device reaches its own address family only. Each refusal is said once
  // (kFix*, ah.h).
  const bool v1_ok = to_v(pd->context)->dev->roce_v1();
  const auto refuse = [](const char* why, const char* fix) -> ibv_ah* {
    if (fix)
      warn_once(fmt::format("ibv_create_ah: EINVAL: {}; {}", why, fix));
    else
      log().debug("ibv_create_ah: EINVAL: {}", why);
    errno = EINVAL;
    return nullptr;
  };
  if (!attr->is_global) return refuse("ah_attr.is_global is 0: RoCE needs the GRH", kFixNoGrh);
  if (attr->grh.sgid_index != 0 && !(v1_ok && attr->grh.sgid_index == transport::kRoceV1GidIndex))
    return refuse("ah_attr.grh.sgid_index names no GID of the device", kFixGidIndex);
  if (const char* why = dgid_destination(to_v(pd->context)->dev->is_ipv6(), attr->grh.dgid, &dst))
    return refuse(why, kFixIpv6Gid);
  if (attr->port_num != 0 && attr->port_num != 1)
    return refuse("ah_attr.port_num must be 0 or 1", nullptr);
  VAh* ah = new (std::nothrow) VAh();
  if (!ah) {
    errno = ENOMEM;
    return nullptr;
  }
  ah->ctx = to_v(pd->context);
  ah->dst_ip = dst;
  ah->attr = *attr;
  ah->ah.context = pd->context;
  ah->ah.pd = pd;
  ah->ah.handle = 0;
  // Tracked so that closing the context frees the AHs the application left open.
  std::lock_guard<std::mutex> g(ah->ctx->mu);
  ah->ctx->ahs.insert(ah);
  return &ah->ah;
}

int destroy_ah(ibv_ah* ah) {
  VAh* a = to_v(ah);
  {
    std::lock_guard<std::mutex> g(a->ctx->mu);
    if (a->ctx->ahs.erase(a) == 0) return EINVAL;  // not an AH of this context (or freed)
  }
  delete a;
  return 0;
}

int init_ah_from_wc(ibv_context* ctx, uint8_t port, const ibv_wc* wc, const ibv_grh* grh,
                    ibv_ah_attr* ah_attr) {
  (void)ctx;
  // On RoCE every UD receive carries the GRH area (IBV_WC_GRH): over IPv4 its last 20 bytes are
  // the datagram's IPv4 header (Annex A17.4.5.1), over IPv6 all 40 its IPv6 header (next header
  // UDP), whose source is where to answer; RoCE v1 leaves the GRH itself (next header 0x1B).
  if (!wc || !grh || !ah_attr || !(wc->wc_flags & IBV_WC_GRH) || (port != 0 && port != 1)) {
    errno = EINVAL;
    return -1;
  }
  const uint8_t* raw = reinterpret_cast<const uint8_t*>(grh);
  constexpr uint8_t kNextHeaderUdp = 17;
  const bool v6_header = (raw[0] >> 4) == 6;
  const bool v2_ipv6 = v6_header && raw[6] == kNextHeaderUdp;  // RoCEv2 over IPv6
  const bool v1 = v6_header && !v2_ipv6;                       // the GRH itself (IBTA 8.3.1)
  const uint8_t* ip = raw + 20;
  if (!v6_header && (ip[0] != 0x45 || ipv4_sum(ip) != 0)) {
    errno = EINVAL;
    return -1;
  }
  std::memset(ah_attr, 0, sizeof *ah_attr);
  ah_attr->dlid = wc->slid;
  ah_attr->sl = wc->sl;
  ah_attr->src_path_bits = wc->dlid_path_bits;
  ah_attr->port_num = port;
  ah_attr->is_global = 1;
  ah_attr->grh.hop_limit = 0xff;  // as rdma-core answers a received GRH
  if (v6_header) {
    // Answer to its source (the GRH's SGID; the IPv6 header's source address, the same bytes),
    // from the v1 GID or the RoCEv2 one.
    std::memcpy(ah_attr->grh.dgid.raw, raw + 8, 16);
    ah_attr->grh.sgid_index = v1 ? transport::kRoceV1GidIndex : 0;
    ah_attr->grh.traffic_class = static_cast<uint8_t>((raw[0] << 4) | (raw[1] >> 4));
    ah_attr->grh.flow_label = (uint32_t(raw[1] & 0xf) << 16) | uint32_t(raw[2]) << 8 | raw[3];
    return 0;
  }
  std::memcpy(ah_attr->grh.dgid.raw, kV4MappedPrefix, sizeof kV4MappedPrefix);
  std::memcpy(ah_attr->grh.dgid.raw + 12, ip + 12, 4);  // the sender's address
  ah_attr->grh.sgid_index = 0;
  ah_attr->grh.traffic_class = ip[1];
  return 0;
}

ibv_ah* create_ah_from_wc(ibv_pd* pd, const ibv_wc* wc, const ibv_grh* grh, uint8_t port) {
  ibv_ah_attr attr;
  if (init_ah_from_wc(pd->context, port, wc, grh, &attr) != 0) return nullptr;
  return create_ah(pd, &attr);
}

int ud_dest(const ibv_context* ctx, const ibv_send_wr& wr, transport::SendWqe& w) {
  ibv_ah* ah = wr.wr.ud.ah;
  if (!ah || ah->context != ctx) return EINVAL;
  w.ud_dst_ip = to_v(ah)->dst_ip;
  w.ud_remote_qpn = wr.wr.ud.remote_qpn & 0xffffff;
  w.ud_remote_qkey = wr.wr.ud.remote_qkey;
  w.ud_traffic_class = to_v(ah)->attr.grh.traffic_class;
  w.ud_roce_v1 = to_v(ah)->attr.grh.sgid_index == transport::kRoceV1GidIndex;
  return 0;
}

void wr_set_ud_addr(ibv_qp_ex* qpx, ibv_ah* ah, uint32_t remote_qpn, uint32_t remote_qkey) {
  VQp* qp = to_v(qpx);
  if (qp->batch.empty() || !ah || ah->context != qpx->qp_base.context) {
    if (!qp->batch_err) qp->batch_err = EINVAL;
    return;
  }
  transport::SendWqe& w = qp->batch.back();
  w.ud_dst_ip = to_v(ah)->dst_ip;
  w.ud_remote_qpn = remote_qpn & 0xffffff;
  w.ud_remote_qkey = remote_qkey;
  w.ud_traffic_class = to_v(ah)->attr.grh.traffic_class;
  w.ud_roce_v1 = to_v(ah)->attr.grh.sgid_index == transport::kRoceV1GidIndex;
}

int attach_mcast(ibv_qp* qp, const ibv_gid* gid, uint16_t lid) {
  (void)lid;  // RoCE has no LIDs: the group is named by its GID alone
  uint32_t group = 0;
  if (!qp || !gid || !gid_ipv4(*gid, &group) || !is_ipv4_multicast(group)) return EINVAL;
  VQp* q = to_v(qp);
  return q->ctx->dev->attach_mcast(q->tqp, group);
}

int detach_mcast(ibv_qp* qp, const ibv_gid* gid, uint16_t lid) {
  (void)lid;
  uint32_t group = 0;
  if (!qp || !gid || !gid_ipv4(*gid, &group) || !is_ipv4_multicast(group)) return EINVAL;
  VQp* q = to_v(qp);
  return q->ctx->dev->detach_mcast(q->tqp, group);
}

}  // namespace uroce::verbs

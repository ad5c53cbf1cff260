// Address handles (UD): the GRH address vector of a RoCEv2 destination, resolved once to the
// IP address the port sends to. RoCE addresses by GID only, so every AH needs a GRH (is_global)
// whose DGID is the destination's address in the device's own family (Annex A17.4): an
// IPv4-mapped GID ::ffff:a.b.c.d (or a multicast group's MGID, attach_mcast below) on an IPv4
// device, a plain IPv6 unicast GID on an IPv6 device.
#pragma once

#include <infiniband/verbs.h>

#include <cstdint>
#include <type_traits>

#include "transport/qp.h"

namespace uroce::verbs {

class VContext;

struct AhAbi {
  ibv_ah ah;
};
static_assert(std::is_standard_layout_v<AhAbi>);

class VAh : public AhAbi {
 public:
  VContext* ctx = nullptr;
  // grh.dgid's address: IPv4-mapped on an IPv4 device (an ff0e::ffff:a.b.c.d group GID too:
  // gid_ipv4, ah.cc), the IPv6 GID itself on an IPv6 device.
  wire::IpAddr dst_ip{};
  ibv_ah_attr attr{};  // as created
};

inline VAh* to_v(ibv_ah* a) {
  return static_cast<VAh*>(reinterpret_cast<AhAbi*>(a));
}

// What to do about a refused RoCE address — an AH's, or an RC/UC QP's IBV_QP_AV — said once at
// the default log level (warn_once) after what was refused: a program written for InfiniBand
// that builds LID-only addresses (qperf; the pingpong programs without -g) fails in its first
// call, and the errno alone (EINVAL, as rdma-core's RoCE providers and the kernel give) does not
// say why.
inline constexpr const char* kFixNoGrh =
    "a RoCE address needs a GRH: is_global=1 with a GID index (ibv_rc_pingpong -g 0); a LID-only "
    "address cannot reach a RoCE peer";
inline constexpr const char* kFixGidIndex =
    "use GID index 0, the device's RoCEv2 GID (ibv_devinfo -v lists the GID table)";
inline constexpr const char* kFixIpv6Gid =
    "a device reaches its own address family only: an IPv6 GID needs a device on an IPv6 "
    "address (UROCE_DEVICES=uroce0=fd00::1), an IPv4-mapped GID (::ffff:a.b.c.d) one on an "
    "IPv4 address; use the peer's GID of that family (GID index 0 on both sides)";

// Where a RoCEv2 DGID leads from a device whose address is IPv6 (`dev_v6`) or IPv4: *dst, and
// nullptr; or why the device cannot send there (the other family; on an IPv6 device a
// multicast or unspecified GID), for an EINVAL. IPv4 multicast MGIDs count as IPv4 (gid_ipv4).
const char* dgid_destination(bool dev_v6, const ibv_gid& dgid, wire::IpAddr* dst);

ibv_ah* create_ah(ibv_pd* pd, ibv_ah_attr* attr);
int destroy_ah(ibv_ah* ah);
// ibv_init_ah_from_wc: 0, or -1 with errno set (EINVAL: no GRH, or the GRH area holds neither an
// IPv4 header, nor an IPv6 one of RoCEv2 (next header UDP), nor a RoCE v1 GRH).
int init_ah_from_wc(ibv_context* ctx, uint8_t port, const ibv_wc* wc, const ibv_grh* grh,
                    ibv_ah_attr* ah_attr);
// Fills the UD address of a send WQE from wr.wr.ud (AH, remote QPN, remote Q_Key). EINVAL when
// the AH is missing or belongs to another context (ibv_post_send(3)).
int ud_dest(const ibv_context* ctx, const ibv_send_wr& wr, transport::SendWqe& w);

// ibv_wr_set_ud_addr for UD QPs created with IBV_QP_INIT_ATTR_SEND_OPS_FLAGS: sets the address
// of the WR being built; a missing or foreign AH fails the batch with EINVAL (wr_complete).
void wr_set_ud_addr(ibv_qp_ex* qpx, ibv_ah* ah, uint32_t remote_qpn, uint32_t remote_qkey);

ibv_ah* create_ah_from_wc(ibv_pd* pd, const ibv_wc* wc, const ibv_grh* grh, uint8_t port);

// ibv_attach_mcast / ibv_detach_mcast for UD QPs: the MGID names an IPv4 multicast group
// (::ffff:224.0.0.0/4, or ff0e::ffff:a.b.c.d); an AH whose DGID is that MGID sends to the group
// (remote QPN 0xFFFFFF). 0 or an errno: EINVAL for another MGID, a non-UD QP, a detach of a QP
// not attached; ENOMEM at the
// device's multicast limits (ibv_query_device); the port's error joining the group. The LID is
// ignored (RoCE has none).
int attach_mcast(ibv_qp* qp, const ibv_gid* gid, uint16_t lid);
int detach_mcast(ibv_qp* qp, const ibv_gid* gid, uint16_t lid);

}  // namespace uroce::verbs

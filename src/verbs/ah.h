// Address handles (UD): the GRH address vector of a RoCEv2 destination, resolved once to the
// IPv4 address the port sends to. RoCE addresses by GID only, so every AH needs a GRH
// (is_global) whose DGID is an IPv4-mapped GID ::ffff:a.b.c.d (Annex A17.4), or a multicast
// group's MGID (attach_mcast below).
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
  // grh.dgid's address, IPv4-mapped (an ff0e::ffff:a.b.c.d group GID too: gid_ipv4, ah.cc).
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
    "IPv6 is not supported: uroce's RoCE is IPv4 only, addressed by IPv4-mapped GIDs "
    "(::ffff:a.b.c.d)";

ibv_ah* create_ah(ibv_pd* pd, ibv_ah_attr* attr);
int destroy_ah(ibv_ah* ah);
// ibv_init_ah_from_wc: 0, or -1 with errno set (EINVAL: no GRH, or not an IPv4 RoCEv2 header).
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

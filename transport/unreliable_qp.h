// The UD and UC parts of a QP and the hooks through which qp.cc hands UD/UC QPs to them: work
// posting checks, state transitions, packet reception and transmission. RC never reaches here.
#pragma once

#include <infiniband/verbs.h>

#include "transport/qp.h"
#include "transport/uc.h"
#include "transport/ud.h"

namespace uroce::transport {

struct UnreliableRoles {
  UdSender ud_tx;
  UcSender uc_tx;
  UcReceiver uc_rx;
  bool seen_packet = false;  // UC: a valid packet arrived since RTR (IBV_EVENT_COMM_EST)
};

// Whether a UD/UC QP may post `wqe`'s opcode (the QP types of its row in wr_opcode.h: UD carries
// SEND and SEND with immediate, UC adds RDMA WRITE with and without immediate). A UD WQE also
// needs a destination (from its AH): EINVAL without one.
bool unreliable_wqe_ok(ibv_qp_type type, const SendWqe& wqe);
// Called by Qp::modify after the attributes are applied and before the state changes.
void unreliable_on_modify(Qp::Impl& q, ibv_qp_state cur, ibv_qp_state next);
// Qp::receive for UD/UC: state, service, P_Key and (UC) source checks, then the NP (a CE mark)
// and the receiver.
void unreliable_receive(Qp::Impl& q, const wire::Packet& pkt, const RxInfo& rx, Time now);
// Qp::pump for UD/UC in RTS/SQD: sends and completes, as far as the port and the QP's pacer
// allow; a send error moves the QP to SQE.
void unreliable_pump(Qp::Impl& q, Time now);
// Whether the send queue holds packets the QP may send in its state (the pacer aside).
bool unreliable_has_work(const Qp::Impl& q);

}  // namespace uroce::transport

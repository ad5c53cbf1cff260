// The state machine of an rdma_cm id as liburoce serves librdmacm's API (src/cm/rdma_cm_*.cc):
// what each application call and each event of the CM agent (agent.h) does to an id in each
// state — the state it enters and the event the application is given — and which calls are
// refused, with the errno librdmacm gives (the kernel's rdma_cm checks the id's state the same
// way: cma_comp_exch(), -EINVAL).
//
// Pure: one table of transitions (id_transitions()), a name for every state and event, and the
// diagram in docs/architecture.md drawn from that table (id_state_diagram();
// tests/cm/id_state_test.cc keeps the two in step and feeds the machine the events of two real
// agents). The rdma_cm layer asks id_step() before it acts and enters the step's state after it
// acted, with one debug line per transition ("rdma_cm: id 0x… CONNECT --REJ--> REJECTED"), so a
// refused call changes nothing.
#pragma once

#include <rdma/rdma_cma.h>

#include <cstdint>
#include <optional>
#include <span>
#include <string>

#include "cm/agent.h"

namespace uroce::cm {

// States follow the kernel's rdma_cm (enum rdma_cm_state) where it has one; its CONNECT is split
// into the active side's and the passive side's, and its DISCONNECT into before and after the
// application was told.
enum class IdState : uint8_t {
  kIdle,            // rdma_create_id: no address yet
  kBound,           // a source address: rdma_bind_addr, or the wildcard bind of listen/resolve
  kAddrResolved,    // rdma_resolve_addr: the destination and the device are known
  kRouteResolved,   // rdma_resolve_route: the path is filled in
  kListen,          // rdma_listen: REQs and SIDR REQs for its port make new ids
  kConnect,         // active: REQ (SIDR REQ) out, until the REP (SIDR REP) is taken
  kConnectRequest,  // passive: a new id whose REQ (SIDR REQ) waits for rdma_accept/rdma_reject
  kAccepting,       // passive: REP out, waiting for the RTU
  kConnected,
  kDisconnecting,  // rdma_disconnect: DREQ out; DISCONNECTED comes with the answer
  kDisconnected,   // DISCONNECTED given (once per connection); TIMEWAIT_EXIT follows
  kRejected,       // the attempt is over: REJ either way, no answer, or the QP could not move
  kForwarded,      // the system librdmacm's id (rdma_cm_forward.cc); uroce keeps no state for it
  kDestroyed,      // rdma_destroy_id: kept until its events are acknowledged
};
inline constexpr size_t kIdStateCount = static_cast<size_t>(IdState::kDestroyed) + 1;

enum class IdEvent : uint8_t {
  // The application's calls.
  kBind,           // rdma_bind_addr; rdma_listen/rdma_resolve_addr bind an idle id to "any"
  kForward,        // the first address is another RDMA device's: the id becomes the system's
  kForwardFailed,  // the system librdmacm refused that first address: the id is uroce's again
  kListen,
  kResolveAddr,
  kResolveRoute,
  kConnect,            // RC: REQ out; UD: SIDR REQ out
  kEstablish,          // rdma_establish after CONNECT_RESPONSE: RTU out
  kAccept,             // RC: REP out
  kAcceptSidr,         // UD: SIDR REP out (the passive side hears nothing more, as the kernel's)
  kReject,             // REJ (RC) or a refusing SIDR REP (UD) out
  kDisconnect,         // RC: DREQ out, or the DREP of the peer's DREQ (UD ids: no-op, no step)
  kNotifyEstablished,  // rdma_notify(IBV_EVENT_COMM_EST): the QP saw traffic before the RTU
  kDestroy,            // rdma_destroy_id, from every state
  // The CM agent's events (agent.h), as id_event_of() names them.
  kReq,             // for a listener: applied to the new id
  kSidrReq,         // likewise
  kRepToApp,        // REP; the id has no QP: the application establishes
  kRepEstablished,  // REP; rdma_cm moved the QP to RTR and RTS and sent the RTU
  kRepQpError,      // REP; the QP could not be moved, REJ sent
  kRtu,             // passive: RTU received
  kRej,
  kReqTimeout,  // active: REQ retries exhausted
  kRepTimeout,  // passive: REP retries exhausted (no RTU)
  kDreq,        // the peer disconnects (or its DREQ crossed ours)
  kDrep,        // the answer to our DREQ
  kDreqTimeout,
  kTimeWaitExit,
  kSidrRep,         // a SIDR REP with a QP
  kSidrRepRefused,  // a SIDR REP without (status ≠ 0)
  kSidrTimeout,
};
inline constexpr size_t kIdEventCount = static_cast<size_t>(IdEvent::kSidrTimeout) + 1;

const char* id_state_name(IdState s);
const char* id_event_name(IdEvent e);
// librdmacm's name of an rdma_cm event ("RDMA_CM_EVENT_ESTABLISHED"), as rdma_event_str gives it.
const char* cm_event_name(rdma_cm_event_type t);

// One row of the table: in state `from`, `event` leads to `to`, and the application is given
// `report` (an rdma_cm event the caller fills in and queues), or nothing.
struct IdTransition {
  IdState from;
  IdEvent event;
  IdState to;
  std::optional<rdma_cm_event_type> report;
};
std::span<const IdTransition> id_transitions();

struct IdStep {
  bool ok = false;
  IdState next = IdState::kIdle;             // ok: the state the id enters
  std::optional<rdma_cm_event_type> report;  // ok: what the application is given
  // Refused: the call's errno — EINVAL, as librdmacm; 0 where the call succeeds and does nothing
  // (rdma_notify). An agent event that is refused is ignored.
  int err = 0;
};
IdStep id_step(IdState from, IdEvent event);

// What rdma_cm made of a REP (agent Event::kRep): the id has no QP, so the application is told and
// establishes itself; or its QP reached RTS and the RTU went out; or the QP could not be moved.
enum class RepOutcome : uint8_t { kToApp, kQpReady, kQpError };
// The id event of a CM agent event (a SIDR REP's by its status, a REP's by `rep`).
IdEvent id_event_of(const Event& ev, RepOutcome rep = RepOutcome::kToApp);

// Whether the id knows its peer's QPN and PSN, which the moves of a QP to RTR need
// (rdma_init_qp_attr, and rdma_cm's own moves).
bool id_knows_peer(IdState s);
// Whether the id holds its port against another bind in the same port space: not before it has
// an address, nor once it is the system's or destroyed.
bool id_holds_port(IdState s);

// The table as a Mermaid state diagram (docs/architecture.md): one edge per pair of states and
// report, labelled "event, event / REPORT"; destroy, allowed from every state, is drawn once.
std::string id_state_diagram();

}  // namespace uroce::cm

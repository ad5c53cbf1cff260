#include "cm/id_state.h"

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <vector>

namespace uroce::cm {
namespace {

using S = IdState;
using E = IdEvent;
constexpr std::optional<rdma_cm_event_type> kNothing = std::nullopt;

// Every transition there is; a (state, event) pair not listed is refused. The agent's events
// are listed only in the states where the agent can raise them for the id (its connection states
// behind each id state: CONNECT = REQ_SENT, MRA_REQ_RCVD or REP_RCVD; CONNECT_REQUEST = REQ_RCVD
// or MRA_REQ_SENT; ACCEPTING = REP_SENT; CONNECTED = ESTABLISHED; DISCONNECTING = DREQ_SENT;
// DISCONNECTED = DREQ_RCVD or TIMEWAIT); tests/cm/id_state_test.cc runs two agents through
// connections, losses and crossings and checks that the machine takes every event they raise.
constexpr IdTransition kTable[] = {
    // Addresses (rdma_cm_address.cc). Resolving is local: the events are queued at once.
    {S::kIdle, E::kBind, S::kBound, kNothing},
    {S::kIdle, E::kForward, S::kForwarded, kNothing},
    {S::kForwarded, E::kForwardFailed, S::kIdle, kNothing},
    {S::kBound, E::kListen, S::kListen, kNothing},
    {S::kBound, E::kResolveAddr, S::kAddrResolved, RDMA_CM_EVENT_ADDR_RESOLVED},
    {S::kAddrResolved, E::kResolveRoute, S::kRouteResolved, RDMA_CM_EVENT_ROUTE_RESOLVED},

    // The active side (rdma_cm_connect.cc, rdma_cm_events.cc). A REP: with a QP, rdma_cm moves
    // it to RTS and sends the RTU itself (the kernel's cma_rep_recv); without, the application
    // hears CONNECT_RESPONSE and calls rdma_establish.
    {S::kRouteResolved, E::kConnect, S::kConnect, kNothing},
    {S::kConnect, E::kRepToApp, S::kConnect, RDMA_CM_EVENT_CONNECT_RESPONSE},
    {S::kConnect, E::kEstablish, S::kConnected, kNothing},
    {S::kConnect, E::kRepEstablished, S::kConnected, RDMA_CM_EVENT_ESTABLISHED},
    {S::kConnect, E::kRepQpError, S::kRejected, RDMA_CM_EVENT_CONNECT_ERROR},
    {S::kConnect, E::kRej, S::kRejected, RDMA_CM_EVENT_REJECTED},
    {S::kConnect, E::kReqTimeout, S::kRejected, RDMA_CM_EVENT_UNREACHABLE},
    // UD: SIDR. A refused SIDR REP is UNREACHABLE with the SIDR status, as the kernel's.
    {S::kConnect, E::kSidrRep, S::kConnected, RDMA_CM_EVENT_ESTABLISHED},
    {S::kConnect, E::kSidrRepRefused, S::kRejected, RDMA_CM_EVENT_UNREACHABLE},
    {S::kConnect, E::kSidrTimeout, S::kRejected, RDMA_CM_EVENT_UNREACHABLE},

    // The passive side: a REQ for a listener makes a new id, given on the listener's channel.
    {S::kIdle, E::kReq, S::kConnectRequest, RDMA_CM_EVENT_CONNECT_REQUEST},
    {S::kIdle, E::kSidrReq, S::kConnectRequest, RDMA_CM_EVENT_CONNECT_REQUEST},
    {S::kConnectRequest, E::kAccept, S::kAccepting, kNothing},
    {S::kConnectRequest, E::kAcceptSidr, S::kConnected, kNothing},
    {S::kConnectRequest, E::kReject, S::kRejected, kNothing},
    {S::kConnectRequest, E::kRej, S::kRejected, RDMA_CM_EVENT_REJECTED},
    {S::kAccepting, E::kRtu, S::kConnected, RDMA_CM_EVENT_ESTABLISHED},
    {S::kAccepting, E::kNotifyEstablished, S::kConnected, RDMA_CM_EVENT_ESTABLISHED},
    {S::kAccepting, E::kRej, S::kRejected, RDMA_CM_EVENT_REJECTED},
    {S::kAccepting, E::kRepTimeout, S::kRejected, RDMA_CM_EVENT_UNREACHABLE},

    // Disconnection. The agent raises DREQ also before establishment (REP_RCVD, REP_SENT), and
    // for a DREQ that crossed ours. DISCONNECTED is given once per connection: when the
    // application disconnected first, with the peer's answer.
    {S::kAccepting, E::kDisconnect, S::kDisconnecting, kNothing},
    {S::kConnected, E::kDisconnect, S::kDisconnecting, kNothing},
    {S::kDisconnecting, E::kDisconnect, S::kDisconnecting, kNothing},
    {S::kDisconnected, E::kDisconnect, S::kDisconnected, kNothing},
    {S::kConnect, E::kDreq, S::kDisconnected, RDMA_CM_EVENT_DISCONNECTED},
    {S::kAccepting, E::kDreq, S::kDisconnected, RDMA_CM_EVENT_DISCONNECTED},
    {S::kConnected, E::kDreq, S::kDisconnected, RDMA_CM_EVENT_DISCONNECTED},
    {S::kDisconnecting, E::kDreq, S::kDisconnected, RDMA_CM_EVENT_DISCONNECTED},
    {S::kDisconnecting, E::kDrep, S::kDisconnected, RDMA_CM_EVENT_DISCONNECTED},
    {S::kDisconnecting, E::kDreqTimeout, S::kDisconnected, RDMA_CM_EVENT_DISCONNECTED},
    {S::kDisconnected, E::kTimeWaitExit, S::kDisconnected, RDMA_CM_EVENT_TIMEWAIT_EXIT},
};

// (state, event) → index into kTable, or -1: refused. Built at compile time, which also proves
// that no pair is listed twice.
constexpr auto kIndex = [] {
  std::array<std::array<int8_t, kIdEventCount>, kIdStateCount> t{};
  for (auto& row : t) row.fill(-1);
  for (size_t i = 0; i < std::size(kTable); ++i) {
    int8_t& cell = t[static_cast<size_t>(kTable[i].from)][static_cast<size_t>(kTable[i].event)];
    if (cell != -1) throw "a (state, event) pair is listed twice";  // not a constant expression
    cell = static_cast<int8_t>(i);
  }
  return t;
}();
static_assert(std::size(kTable) < 128);

// The errno of a refused application call. librdmacm's (the kernel's) is EINVAL for a call in
// the wrong state; rdma_notify succeeds whatever the state (uroce's CM acts on COMM_EST only
// while the REP waits for its RTU). Agent events: 0, ignored.
int refusal(IdEvent e) {
  switch (e) {
    case E::kBind:
    case E::kForward:
    case E::kForwardFailed:
    case E::kListen:
    case E::kResolveAddr:
    case E::kResolveRoute:
    case E::kConnect:
    case E::kEstablish:
    case E::kAccept:
    case E::kAcceptSidr:
    case E::kReject:
    case E::kDisconnect:
      return EINVAL;
    default:
      return 0;
  }
}

}  // namespace

const char* id_state_name(IdState s) {
  switch (s) {
    case S::kIdle:
      return "IDLE";
    case S::kBound:
      return "BOUND";
    case S::kAddrResolved:
      return "ADDR_RESOLVED";
    case S::kRouteResolved:
      return "ROUTE_RESOLVED";
    case S::kListen:
      return "LISTEN";
    case S::kConnect:
      return "CONNECT";
    case S::kConnectRequest:
      return "CONNECT_REQUEST";
    case S::kAccepting:
      return "ACCEPTING";
    case S::kConnected:
      return "CONNECTED";
    case S::kDisconnecting:
      return "DISCONNECTING";
    case S::kDisconnected:
      return "DISCONNECTED";
    case S::kRejected:
      return "REJECTED";
    case S::kForwarded:
      return "FORWARDED";
    case S::kDestroyed:
      return "DESTROYED";
  }
  return "?";
}

const char* id_event_name(IdEvent e) {
  switch (e) {
    case E::kBind:
      return "bind_addr";
    case E::kForward:
      return "forward";
    case E::kForwardFailed:
      return "forward_failed";
    case E::kListen:
      return "listen";
    case E::kResolveAddr:
      return "resolve_addr";
    case E::kResolveRoute:
      return "resolve_route";
    case E::kConnect:
      return "connect";
    case E::kEstablish:
      return "establish";
    case E::kAccept:
      return "accept";
    case E::kAcceptSidr:
      return "accept_sidr";
    case E::kReject:
      return "reject";
    case E::kDisconnect:
      return "disconnect";
    case E::kNotifyEstablished:
      return "notify_comm_est";
    case E::kDestroy:
      return "destroy_id";
    case E::kReq:
      return "REQ";
    case E::kSidrReq:
      return "SIDR_REQ";
    case E::kRepToApp:
      return "REP_TO_APP";
    case E::kRepEstablished:
      return "REP_QP_RTS";
    case E::kRepQpError:
      return "REP_QP_ERROR";
    case E::kRtu:
      return "RTU";
    case E::kRej:
      return "REJ";
    case E::kReqTimeout:
      return "REQ_TIMEOUT";
    case E::kRepTimeout:
      return "REP_TIMEOUT";
    case E::kDreq:
      return "DREQ";
    case E::kDrep:
      return "DREP";
    case E::kDreqTimeout:
      return "DREQ_TIMEOUT";
    case E::kTimeWaitExit:
      return "TIMEWAIT_EXIT";
    case E::kSidrRep:
      return "SIDR_REP";
    case E::kSidrRepRefused:
      return "SIDR_REP_REFUSED";
    case E::kSidrTimeout:
      return "SIDR_TIMEOUT";
  }
  return "?";
}

const char* cm_event_name(rdma_cm_event_type t) {
  switch (t) {
    case RDMA_CM_EVENT_ADDR_RESOLVED:
      return "RDMA_CM_EVENT_ADDR_RESOLVED";
    case RDMA_CM_EVENT_ADDR_ERROR:
      return "RDMA_CM_EVENT_ADDR_ERROR";
    case RDMA_CM_EVENT_ROUTE_RESOLVED:
      return "RDMA_CM_EVENT_ROUTE_RESOLVED";
    case RDMA_CM_EVENT_ROUTE_ERROR:
      return "RDMA_CM_EVENT_ROUTE_ERROR";
    case RDMA_CM_EVENT_CONNECT_REQUEST:
      return "RDMA_CM_EVENT_CONNECT_REQUEST";
    case RDMA_CM_EVENT_CONNECT_RESPONSE:
      return "RDMA_CM_EVENT_CONNECT_RESPONSE";
    case RDMA_CM_EVENT_CONNECT_ERROR:
      return "RDMA_CM_EVENT_CONNECT_ERROR";
    case RDMA_CM_EVENT_UNREACHABLE:
      return "RDMA_CM_EVENT_UNREACHABLE";
    case RDMA_CM_EVENT_REJECTED:
      return "RDMA_CM_EVENT_REJECTED";
    case RDMA_CM_EVENT_ESTABLISHED:
      return "RDMA_CM_EVENT_ESTABLISHED";
    case RDMA_CM_EVENT_DISCONNECTED:
      return "RDMA_CM_EVENT_DISCONNECTED";
    case RDMA_CM_EVENT_DEVICE_REMOVAL:
      return "RDMA_CM_EVENT_DEVICE_REMOVAL";
    case RDMA_CM_EVENT_MULTICAST_JOIN:
      return "RDMA_CM_EVENT_MULTICAST_JOIN";
    case RDMA_CM_EVENT_MULTICAST_ERROR:
      return "RDMA_CM_EVENT_MULTICAST_ERROR";
    case RDMA_CM_EVENT_ADDR_CHANGE:
      return "RDMA_CM_EVENT_ADDR_CHANGE";
    case RDMA_CM_EVENT_TIMEWAIT_EXIT:
      return "RDMA_CM_EVENT_TIMEWAIT_EXIT";
  }
  return "UNKNOWN EVENT";
}

std::span<const IdTransition> id_transitions() {
  return kTable;
}

IdStep id_step(IdState from, IdEvent event) {
  IdStep s;
  if (event == E::kDestroy) {  // from every state: the application is done with the id
    s.ok = true;
    s.next = S::kDestroyed;
    return s;
  }
  const int8_t i = kIndex[static_cast<size_t>(from)][static_cast<size_t>(event)];
  if (i < 0) {
    s.err = refusal(event);
    return s;
  }
  s.ok = true;
  s.next = kTable[i].to;
  s.report = kTable[i].report;
  return s;
}

IdEvent id_event_of(const Event& ev, RepOutcome rep) {
  using T = Event::Type;
  switch (ev.type) {
    case T::kReq:
      return E::kReq;
    case T::kRep:
      return rep == RepOutcome::kToApp     ? E::kRepToApp
             : rep == RepOutcome::kQpReady ? E::kRepEstablished
                                           : E::kRepQpError;
    case T::kEstablished:
      return E::kRtu;
    case T::kRej:
      return E::kRej;
    case T::kReqTimeout:
      return E::kReqTimeout;
    case T::kRepTimeout:
      return E::kRepTimeout;
    case T::kDreq:
      return E::kDreq;
    case T::kDrep:
      return E::kDrep;
    case T::kDreqTimeout:
      return E::kDreqTimeout;
    case T::kTimeWaitExit:
      return E::kTimeWaitExit;
    case T::kSidrReq:
      return E::kSidrReq;
    case T::kSidrRep:
      return ev.sidr_rep.status == SidrStatus::kQpValid ? E::kSidrRep : E::kSidrRepRefused;
    case T::kSidrTimeout:
      return E::kSidrTimeout;
  }
  return E::kRej;  // not reached: every agent event is named above
}

bool id_knows_peer(IdState s) {
  return s == S::kConnect || s == S::kConnectRequest || s == S::kAccepting || s == S::kConnected;
}

bool id_holds_port(IdState s) {
  return s != S::kIdle && s != S::kForwarded && s != S::kDestroyed;
}

std::string id_state_diagram() {
  // One edge per (from, to, report), labelled with its events in table order.
  struct Edge {
    IdState from, to;
    std::optional<rdma_cm_event_type> report;
    std::string events;
  };
  std::vector<Edge> edges;
  for (const IdTransition& t : kTable) {
    auto e = std::find_if(edges.begin(), edges.end(), [&](const Edge& x) {
      return x.from == t.from && x.to == t.to && x.report == t.report;
    });
    if (e == edges.end()) e = edges.insert(edges.end(), Edge{t.from, t.to, t.report, ""});
    if (!e->events.empty()) e->events += ", ";
    e->events += id_event_name(t.event);
  }
  const size_t prefix = std::strlen("RDMA_CM_EVENT_");
  std::string out = "stateDiagram-v2\n    [*] --> IDLE\n";
  for (const Edge& e : edges) {
    out += std::string("    ") + id_state_name(e.from) + " --> " + id_state_name(e.to) + " : " +
           e.events;
    if (e.report) out += std::string(" / ") + (cm_event_name(*e.report) + prefix);
    out += "\n";
  }
  out += std::string("    state \"every state\" as ANY\n    ANY --> DESTROYED : ") +
         id_event_name(E::kDestroy) + "\n";
  return out;
}

}  // namespace uroce::cm

// The state machine of an rdma_cm id (src/cm/id_state.h), without liburoce: its table checked
// against itself and against librdmacm's refusals, then fed the events two real CM agents raise
// over a lossy virtual link (agent_link.h) — connections, rejections, timeouts, crossing
// disconnections, SIDR — by consumers that answer as rdma_cm does for its applications. Every
// agent event must be taken (a refused one would be an rdma_cm event the application never gets)
// and each id must tell its application what librdmacm's would. Last, the diagram in
// docs/architecture.md must be the one the table draws.
#include "cm/id_state.h"

#include <gtest/gtest.h>

#include <cerrno>
#include <fstream>
#include <memory>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "agent_link.h"

namespace uroce::cm {
namespace {

using S = IdState;
using E = IdEvent;
using T = Event::Type;

// ---- the table ------------------------------------------------------------------------------

TEST(IdState, EveryStateAndEventHasItsOwnName) {
  std::set<std::string> names;
  for (size_t i = 0; i < kIdStateCount; ++i) {
    std::string n = id_state_name(static_cast<S>(i));
    EXPECT_NE(n, "?") << "state " << i;
    EXPECT_TRUE(names.insert(n).second) << n;
  }
  names.clear();
  for (size_t i = 0; i < kIdEventCount; ++i) {
    std::string n = id_event_name(static_cast<E>(i));
    EXPECT_NE(n, "?") << "event " << i;
    EXPECT_TRUE(names.insert(n).second) << n;
  }
}

// From IDLE every state can be reached, and every state but the end states (REJECTED,
// DESTROYED) and DISCONNECTED (which only waits for time wait) is left by some event.
TEST(IdState, EveryStateIsReachedFromIdle) {
  std::set<S> seen{S::kIdle};
  std::vector<S> todo{S::kIdle};
  while (!todo.empty()) {
    S s = todo.back();
    todo.pop_back();
    for (size_t e = 0; e < kIdEventCount; ++e) {
      IdStep st = id_step(s, static_cast<E>(e));
      if (st.ok && seen.insert(st.next).second) todo.push_back(st.next);
    }
  }
  for (size_t i = 0; i < kIdStateCount; ++i)
    EXPECT_TRUE(seen.count(static_cast<S>(i))) << id_state_name(static_cast<S>(i));
  for (const IdTransition& t : id_transitions()) EXPECT_NE(t.from, S::kDestroyed);
}

TEST(IdState, DestroyIsTakenFromEveryState) {
  for (size_t i = 0; i < kIdStateCount; ++i) {
    IdStep s = id_step(static_cast<S>(i), E::kDestroy);
    EXPECT_TRUE(s.ok);
    EXPECT_EQ(s.next, S::kDestroyed);
    EXPECT_FALSE(s.report);
  }
}

// A call in the wrong state fails as librdmacm's does (the kernel's cma_comp_exch: EINVAL) and
// changes nothing; rdma_notify succeeds doing nothing; an agent event out of place is ignored.
TEST(IdState, RefusalsCarryLibrdmacmsErrno) {
  struct Case {
    S from;
    E event;
    int err;
  };
  const Case cases[] = {
      {S::kBound, E::kBind, EINVAL},            // bound twice
      {S::kListen, E::kResolveAddr, EINVAL},    // a listener cannot connect
      {S::kIdle, E::kResolveRoute, EINVAL},     // route before address
      {S::kAddrResolved, E::kConnect, EINVAL},  // connect before the route
      {S::kListen, E::kListen, EINVAL},
      {S::kConnect, E::kAccept, EINVAL},  // accept on the active side
      {S::kAccepting, E::kAccept, EINVAL},
      {S::kConnected, E::kReject, EINVAL},    // reject after the fact
      {S::kConnect, E::kDisconnect, EINVAL},  // before establishment: reject instead
      {S::kConnectRequest, E::kDisconnect, EINVAL},
      {S::kRejected, E::kDisconnect, EINVAL},
      {S::kConnected, E::kNotifyEstablished, 0},
      {S::kForwarded, E::kBind, EINVAL},
      {S::kListen, E::kRej, 0},
      {S::kConnected, E::kTimeWaitExit, 0},
      {S::kIdle, E::kRtu, 0},
  };
  for (const Case& c : cases) {
    IdStep s = id_step(c.from, c.event);
    EXPECT_FALSE(s.ok) << id_state_name(c.from) << " " << id_event_name(c.event);
    EXPECT_EQ(s.err, c.err) << id_state_name(c.from) << " " << id_event_name(c.event);
  }
}

// rdma_cm_events.cc checks a REP against the id's state before it moves the QP, and takes the
// outcome's step after: the three outcomes must be taken from the same state.
TEST(IdState, TheOutcomesOfARepShareAState) {
  for (size_t i = 0; i < kIdStateCount; ++i) {
    const S s = static_cast<S>(i);
    const bool to_app = id_step(s, E::kRepToApp).ok;
    EXPECT_EQ(id_step(s, E::kRepEstablished).ok, to_app) << id_state_name(s);
    EXPECT_EQ(id_step(s, E::kRepQpError).ok, to_app) << id_state_name(s);
  }
}

TEST(IdState, AgentEventsAreNamed) {
  Event rep{T::kRep};
  EXPECT_EQ(id_event_of(rep), E::kRepToApp);
  EXPECT_EQ(id_event_of(rep, RepOutcome::kQpReady), E::kRepEstablished);
  EXPECT_EQ(id_event_of(rep, RepOutcome::kQpError), E::kRepQpError);
  Event sidr{T::kSidrRep};
  sidr.sidr_rep.status = SidrStatus::kQpValid;
  EXPECT_EQ(id_event_of(sidr), E::kSidrRep);
  sidr.sidr_rep.status = SidrStatus::kRejected;
  EXPECT_EQ(id_event_of(sidr), E::kSidrRepRefused);
  EXPECT_EQ(id_event_of(Event{T::kEstablished}), E::kRtu);
  EXPECT_EQ(id_event_of(Event{T::kTimeWaitExit}), E::kTimeWaitExit);
}

// ---- fed by two agents ----------------------------------------------------------------------

// An rdma_cm id as the machine sees it, with what its application was told and its trace.
struct Id {
  S state = S::kIdle;
  std::vector<rdma_cm_event_type> told;
  std::string trace;

  bool take(E e) {
    IdStep s = id_step(state, e);
    trace += std::string(id_state_name(state)) + " --" + id_event_name(e) + "--> ";
    if (!s.ok) {
      trace += "refused\n";
      return false;
    }
    trace += std::string(id_state_name(s.next)) + "\n";
    state = s.next;
    if (s.report) told.push_back(*s.report);
    return true;
  }
  // An application call, which the test makes only where librdmacm's would succeed.
  void call(E e) { EXPECT_TRUE(take(e)) << trace; }
  // An agent event: never refused.
  void hear(const Event& ev, RepOutcome rep = RepOutcome::kToApp) {
    EXPECT_TRUE(take(id_event_of(ev, rep))) << trace;
  }
};

using Told = std::vector<rdma_cm_event_type>;

// An active id on agent a and the passive id a listener on agent b makes of its REQ, answered as
// rdma_cm and a typical application (rping, ucmatose) answer: the passive application accepts
// (or rejects); a REP on an id with a QP is established by rdma_cm itself, one without by the
// application; an application that hears DISCONNECTED calls rdma_disconnect.
struct Connection {
  AgentPair p;
  Id act;
  std::unique_ptr<Id> pas;
  uint32_t act_conn = 0, pas_conn = 0;
  bool ud = false;
  bool qp = true;      // the active id has a QP
  bool accept = true;  // else the passive application rejects
  bool answer = true;  // the passive application answers the REQ at all

  Connection() {
    p.b.listen(kSid, 1);
    p.b.listen(service_id(kPsUdp, 7174), 2);
    p.on_a = [this](const Event& e) {
      if (e.type == T::kRep) {
        if (qp) {
          EXPECT_EQ(p.a.establish(e.id, {}, p.now), 0);
          act.hear(e, RepOutcome::kQpReady);
        } else {
          act.hear(e, RepOutcome::kToApp);
          act.call(E::kEstablish);  // the application, on CONNECT_RESPONSE
          EXPECT_EQ(p.a.establish(e.id, {}, p.now), 0);
        }
        return;
      }
      act.hear(e);
      if (e.type == T::kDreq || e.type == T::kDrep || e.type == T::kDreqTimeout)
        disconnect(act, p.a, act_conn);
    };
    p.on_b = [this](const Event& e) {
      if (e.type == T::kReq || e.type == T::kSidrReq) {
        pas = std::make_unique<Id>();
        pas->hear(e);
        pas_conn = e.id;
        if (answer) e.type == T::kReq ? answer_req() : answer_sidr_req(e);
        return;
      }
      ASSERT_TRUE(pas);
      pas->hear(e);
      if (e.type == T::kDreq || e.type == T::kDrep || e.type == T::kDreqTimeout)
        disconnect(*pas, p.b, pas_conn);
    };
  }
  void answer_req() {
    if (!accept) {
      pas->call(E::kReject);
      EXPECT_EQ(p.b.reject(pas_conn, 28, {}, p.now), 0);
      return;
    }
    pas->call(E::kAccept);
    Rep rep;
    rep.local_qpn = 0x22;
    rep.starting_psn = 0x200;
    EXPECT_EQ(p.b.accept(pas_conn, rep, p.now), 0);
  }
  void answer_sidr_req(const Event& e) {
    pas->call(accept ? E::kAcceptSidr : E::kReject);
    SidrRep r;
    r.status = accept ? SidrStatus::kQpValid : SidrStatus::kRejected;
    r.qpn = 0x99;
    r.service_id = e.sidr_req.service_id;
    EXPECT_EQ(p.b.sidr_reply(pas_conn, r, p.now), 0);
  }
  // rdma_disconnect as rdma_cm_connect.cc makes it: the step first, then the agent.
  void disconnect(Id& id, Agent& agent, uint32_t conn) {
    id.call(E::kDisconnect);
    EXPECT_EQ(agent.disconnect(conn, {}, p.now), 0);
  }
  void connect() {
    for (E e : {E::kBind, E::kResolveAddr, E::kResolveRoute, E::kConnect}) act.call(e);
    if (ud) {
      SidrReq q;
      q.service_id = service_id(kPsUdp, 7174);
      act_conn = p.a.sidr_request(kIpB, q, p.now);
    } else {
      act_conn = p.a.connect(kIpB, basic_req(0x11), p.now);
    }
  }
};

const Told kActiveLife{RDMA_CM_EVENT_ADDR_RESOLVED, RDMA_CM_EVENT_ROUTE_RESOLVED,
                       RDMA_CM_EVENT_ESTABLISHED, RDMA_CM_EVENT_DISCONNECTED,
                       RDMA_CM_EVENT_TIMEWAIT_EXIT};
const Told kPassiveLife{RDMA_CM_EVENT_CONNECT_REQUEST, RDMA_CM_EVENT_ESTABLISHED,
                        RDMA_CM_EVENT_DISCONNECTED, RDMA_CM_EVENT_TIMEWAIT_EXIT};

TEST(IdStateWithAgents, ActiveSideDisconnects) {
  Connection c;
  c.connect();
  c.p.run(1);
  EXPECT_EQ(c.act.state, S::kConnected) << c.act.trace;
  ASSERT_TRUE(c.pas);
  EXPECT_EQ(c.pas->state, S::kConnected) << c.pas->trace;
  c.disconnect(c.act, c.p.a, c.act_conn);
  EXPECT_EQ(c.act.state, S::kDisconnecting);
  c.p.run();
  EXPECT_EQ(c.act.told, kActiveLife) << c.act.trace;
  EXPECT_EQ(c.pas->told, kPassiveLife) << c.pas->trace;
  EXPECT_EQ(c.act.state, S::kDisconnected);
  EXPECT_EQ(c.pas->state, S::kDisconnected);
}

TEST(IdStateWithAgents, PassiveSideDisconnects) {
  Connection c;
  c.connect();
  c.p.run(1);
  c.disconnect(*c.pas, c.p.b, c.pas_conn);
  c.p.run();
  EXPECT_EQ(c.act.told, kActiveLife) << c.act.trace;
  EXPECT_EQ(c.pas->told, kPassiveLife) << c.pas->trace;
}

// Both applications disconnect at once: the DREQs cross (IBTA 12.9.8.3) and each is told
// DISCONNECTED exactly once.
TEST(IdStateWithAgents, CrossingDisconnectsTellEachSideOnce) {
  Connection c;
  c.connect();
  c.p.run(1);
  c.disconnect(c.act, c.p.a, c.act_conn);
  c.disconnect(*c.pas, c.p.b, c.pas_conn);
  c.p.run();
  EXPECT_EQ(c.act.told, kActiveLife) << c.act.trace;
  EXPECT_EQ(c.pas->told, kPassiveLife) << c.pas->trace;
}

// An active id without a QP hears CONNECT_RESPONSE and establishes itself (rdma_establish).
TEST(IdStateWithAgents, ApplicationWithoutQpEstablishes) {
  Connection c;
  c.qp = false;
  c.connect();
  c.p.run(1);
  EXPECT_EQ(c.act.told, (Told{RDMA_CM_EVENT_ADDR_RESOLVED, RDMA_CM_EVENT_ROUTE_RESOLVED,
                              RDMA_CM_EVENT_CONNECT_RESPONSE}))
      << c.act.trace;
  EXPECT_EQ(c.act.state, S::kConnected);
  EXPECT_EQ(c.pas->state, S::kConnected) << c.pas->trace;
}

// A REP the QP could not take: rdma_cm rejects it and tells the application CONNECT_ERROR; the
// passive side hears the REJ.
TEST(IdStateWithAgents, QpThatCannotMoveEndsTheAttempt) {
  Connection c;
  c.p.on_a = [&](const Event& e) {
    ASSERT_EQ(e.type, T::kRep);
    EXPECT_EQ(c.p.a.reject(e.id, 28, {}, c.p.now), 0);
    c.act.hear(e, RepOutcome::kQpError);
  };
  c.connect();
  c.p.run();
  EXPECT_EQ(c.act.told.back(), RDMA_CM_EVENT_CONNECT_ERROR) << c.act.trace;
  EXPECT_EQ(c.act.state, S::kRejected);
  EXPECT_EQ(c.pas->told.back(), RDMA_CM_EVENT_REJECTED) << c.pas->trace;
  EXPECT_EQ(c.pas->state, S::kRejected);
}

TEST(IdStateWithAgents, RejectedByTheApplicationOrForWantOfAListener) {
  Connection c;
  c.accept = false;
  c.connect();
  c.p.run();
  EXPECT_EQ(c.act.told.back(), RDMA_CM_EVENT_REJECTED) << c.act.trace;
  EXPECT_EQ(c.act.state, S::kRejected);
  EXPECT_EQ(c.pas->state, S::kRejected);
  EXPECT_EQ(c.pas->told, Told{RDMA_CM_EVENT_CONNECT_REQUEST});

  Connection n;  // nobody listens on the port: REJ reason 8 at once
  n.p.b.unlisten(kSid);
  n.connect();
  n.p.run(0);
  EXPECT_EQ(n.act.told.back(), RDMA_CM_EVENT_REJECTED) << n.act.trace;
  EXPECT_FALSE(n.pas);
}

// No answer to the REQ: UNREACHABLE. No RTU to the REP (an application without a QP that never
// establishes): the passive side is UNREACHABLE, the active side hears the REJ "timeout".
TEST(IdStateWithAgents, TimeoutsEndTheAttempt) {
  Connection c;
  c.p.drop = [](const OutMad&, bool from_a) { return !from_a; };
  c.connect();
  c.p.run();
  EXPECT_EQ(c.act.told.back(), RDMA_CM_EVENT_UNREACHABLE) << c.act.trace;
  EXPECT_EQ(c.act.state, S::kRejected);

  Connection r;
  r.p.on_a = [&](const Event& e) { r.act.hear(e, RepOutcome::kToApp); };  // never establishes
  r.connect();
  r.p.run();
  EXPECT_EQ(r.pas->told.back(), RDMA_CM_EVENT_UNREACHABLE) << r.pas->trace;
  EXPECT_EQ(r.act.told.back(), RDMA_CM_EVENT_REJECTED) << r.act.trace;
  EXPECT_EQ(r.act.state, S::kRejected);
}

// The RTU is lost and the passive application sees traffic first (rdma_notify(COMM_EST)); the
// REP retransmission then draws no second ESTABLISHED.
TEST(IdStateWithAgents, NotifyEstablishesBeforeTheRtu) {
  Connection c;
  c.p.drop = [](const OutMad& m, bool from_a) {
    return from_a && m.mad[17] == static_cast<uint8_t>(AttrId::kRtu);
  };
  c.connect();
  c.p.run(1);
  ASSERT_EQ(c.pas->state, S::kAccepting) << c.pas->trace;
  c.pas->call(E::kNotifyEstablished);
  EXPECT_EQ(c.p.b.notify_established(c.pas_conn), 0);
  c.p.drop = [](const OutMad&, bool) { return false; };
  c.disconnect(c.act, c.p.a, c.act_conn);
  c.p.run();
  EXPECT_EQ(c.act.told, kActiveLife) << c.act.trace;
  EXPECT_EQ(c.pas->told, kPassiveLife) << c.pas->trace;
}

// The active side disconnects while its RTU is lost: the passive id hears the DREQ in ACCEPTING
// and is told DISCONNECTED without ESTABLISHED, as the kernel's CM tells it.
TEST(IdStateWithAgents, DreqBeforeTheRtu) {
  Connection c;
  c.p.drop = [](const OutMad& m, bool from_a) {
    return from_a && m.mad[17] == static_cast<uint8_t>(AttrId::kRtu);
  };
  c.connect();
  c.p.run(1);
  c.disconnect(c.act, c.p.a, c.act_conn);
  c.p.run();
  EXPECT_EQ(c.act.told, kActiveLife) << c.act.trace;
  EXPECT_EQ(c.pas->told, (Told{RDMA_CM_EVENT_CONNECT_REQUEST, RDMA_CM_EVENT_DISCONNECTED,
                               RDMA_CM_EVENT_TIMEWAIT_EXIT}))
      << c.pas->trace;
}

// The passive application disconnects while the active one, without a QP, has not established
// yet: the active id hears the DREQ in CONNECT.
TEST(IdStateWithAgents, DreqBeforeTheApplicationEstablishes) {
  Connection c;
  c.p.on_a = [&](const Event& e) {
    c.act.hear(e, RepOutcome::kToApp);  // and the application does not establish
    if (e.type == T::kDreq) c.disconnect(c.act, c.p.a, c.act_conn);
  };
  c.connect();
  c.p.run(1);
  ASSERT_EQ(c.act.state, S::kConnect) << c.act.trace;
  c.disconnect(*c.pas, c.p.b, c.pas_conn);
  c.p.run();
  EXPECT_EQ(c.act.told, (Told{RDMA_CM_EVENT_ADDR_RESOLVED, RDMA_CM_EVENT_ROUTE_RESOLVED,
                              RDMA_CM_EVENT_CONNECT_RESPONSE, RDMA_CM_EVENT_DISCONNECTED,
                              RDMA_CM_EVENT_TIMEWAIT_EXIT}))
      << c.act.trace;
  EXPECT_EQ(c.pas->told, (Told{RDMA_CM_EVENT_CONNECT_REQUEST, RDMA_CM_EVENT_DISCONNECTED,
                               RDMA_CM_EVENT_TIMEWAIT_EXIT}))
      << c.pas->trace;
}

TEST(IdStateWithAgents, Sidr) {
  Connection c;
  c.ud = true;
  c.connect();
  c.p.run();
  EXPECT_EQ(c.act.told.back(), RDMA_CM_EVENT_ESTABLISHED) << c.act.trace;
  EXPECT_EQ(c.act.state, S::kConnected);
  EXPECT_EQ(c.pas->state, S::kConnected);
  EXPECT_EQ(c.pas->told, Told{RDMA_CM_EVENT_CONNECT_REQUEST});

  Connection r;  // refused by the application
  r.ud = true;
  r.accept = false;
  r.connect();
  r.p.run();
  EXPECT_EQ(r.act.told.back(), RDMA_CM_EVENT_UNREACHABLE) << r.act.trace;
  EXPECT_EQ(r.pas->state, S::kRejected);

  Connection t;  // never answered
  t.ud = true;
  t.answer = false;
  t.connect();
  t.p.run();
  EXPECT_EQ(t.act.told.back(), RDMA_CM_EVENT_UNREACHABLE) << t.act.trace;
  EXPECT_EQ(t.act.state, S::kRejected);
}

// Connections over a link that loses 20% of MADs each way, closed by either side: whatever is
// lost and retransmitted, each id takes every event its agent raises, the active application is
// told librdmacm's sequence, and the passive one CONNECT_REQUEST, at most one ESTABLISHED, then
// DISCONNECTED once and TIMEWAIT_EXIT.
TEST(IdStateWithAgents, EveryEventIsTakenUnderLoss) {
  for (uint32_t seed = 1; seed <= 40; ++seed) {
    Connection c;
    std::mt19937 rng(seed);
    c.p.drop = [&](const OutMad&, bool) { return rng() % 5 == 0; };
    c.connect();
    c.p.run(60'000'000'000ull);
    ASSERT_EQ(c.act.state, S::kConnected) << "seed " << seed << "\n" << c.act.trace;
    ASSERT_TRUE(c.pas);
    if (seed % 2) {
      c.disconnect(c.act, c.p.a, c.act_conn);
    } else if (c.pas->state == S::kConnected || c.pas->state == S::kAccepting) {
      c.disconnect(*c.pas, c.p.b, c.pas_conn);
    }
    c.p.run();
    EXPECT_EQ(c.act.told, kActiveLife) << "seed " << seed << "\n" << c.act.trace;
    const Told& told = c.pas->told;
    ASSERT_GE(told.size(), 3u) << "seed " << seed << "\n" << c.pas->trace;
    EXPECT_EQ(told.front(), RDMA_CM_EVENT_CONNECT_REQUEST);
    EXPECT_EQ(told[told.size() - 2], RDMA_CM_EVENT_DISCONNECTED) << c.pas->trace;
    EXPECT_EQ(told.back(), RDMA_CM_EVENT_TIMEWAIT_EXIT) << c.pas->trace;
    EXPECT_LE(told.size(), 4u) << c.pas->trace;
    EXPECT_EQ(c.p.a.connection_count() + c.p.b.connection_count(), 0u) << "seed " << seed;
  }
}

// ---- the diagram ----------------------------------------------------------------------------

// docs/architecture.md carries the diagram between two markers; after a change of the table,
// paste what this test prints there.
TEST(IdState, DiagramInTheDocsIsTheTables) {
  const std::string path = std::string(UROCE_SOURCE_DIR) + "/docs/architecture.md";
  std::ifstream in(path);
  ASSERT_TRUE(in) << path;
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string doc = ss.str();
  const std::string begin =
      "<!-- id-state-diagram: generated from src/cm/id_state.cc -->\n```mermaid\n";
  const std::string end = "```\n";
  const size_t b = doc.find(begin);
  ASSERT_NE(b, std::string::npos) << "marker missing in " << path;
  const size_t from = b + begin.size();
  const size_t e = doc.find(end, from);
  ASSERT_NE(e, std::string::npos);
  EXPECT_EQ(doc.substr(from, e - from), id_state_diagram())
      << "docs/architecture.md's diagram is not the table's; it should read:\n"
      << begin << id_state_diagram() << end;
}

}  // namespace
}  // namespace uroce::cm

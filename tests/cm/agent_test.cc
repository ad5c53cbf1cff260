// The CM state machine in virtual time: two agents on a link that can lose MADs (agent_link.h),
// consumers scripted per test, and assertions on the events each side reports and on what went out.
#include "cm/agent.h"

#include <gtest/gtest.h>

#include <functional>
#include <random>

#include "agent_link.h"
#include "cm/ip_cm.h"

namespace uroce::cm {
namespace {

using Pair = AgentPair;

using T = Event::Type;

TEST(Agent, ConnectAcceptEstablishDisconnect) {
  Pair p;
  ASSERT_EQ(p.b.listen(kSid, 77), 0);
  EXPECT_EQ(p.b.listen(kSid, 78), EADDRINUSE);
  p.auto_answer();
  Req req = basic_req(0x11);
  req.private_data = {1, 2, 3};
  uint32_t id = p.a.connect(kIpB, req, p.now);
  ASSERT_NE(id, 0u);
  EXPECT_EQ(p.a.state(id), ConnState::kReqSent);
  p.run(1);  // deliver without advancing time
  ASSERT_EQ(types(p.ev_b), (std::vector<T>{T::kReq, T::kEstablished}));
  ASSERT_EQ(types(p.ev_a), (std::vector<T>{T::kRep}));
  const Event& req_ev = p.ev_b[0];
  EXPECT_EQ(req_ev.listen_cookie, 77u);
  EXPECT_EQ(req_ev.peer_ip, kIpA);
  EXPECT_EQ(req_ev.req.local_qpn, 0x11u);
  EXPECT_EQ(req_ev.req.local_comm_id, id);
  EXPECT_EQ(req_ev.req.local_ca_guid, 0xau);
  EXPECT_EQ(req_ev.req.private_data[2], 3);
  const Event& rep_ev = p.ev_a[0];
  EXPECT_EQ(rep_ev.rep.local_qpn, 0x22u);
  EXPECT_EQ(rep_ev.rep.remote_comm_id, id);
  EXPECT_EQ(rep_ev.rep.private_data[0], 0xb0);
  EXPECT_EQ(p.a.state(id), ConnState::kEstablished);
  EXPECT_EQ(p.b.state(p.ev_b[0].id), ConnState::kEstablished);
  EXPECT_EQ(p.wire, (std::vector<AttrId>{AttrId::kReq, AttrId::kRep, AttrId::kRtu}));

  // Active disconnects; the passive consumer answers the DREQ.
  p.on_b = [&](const Event& e) {
    if (e.type == T::kDreq) {
      EXPECT_EQ(p.b.disconnect(e.id, {}, p.now), 0);
    }
  };
  EXPECT_EQ(p.a.disconnect(id, {}, p.now), 0);
  EXPECT_EQ(p.a.disconnect(id, {}, p.now), 0);  // already disconnecting: nothing more sent
  p.run();
  EXPECT_EQ(types(p.ev_a), (std::vector<T>{T::kRep, T::kDrep, T::kTimeWaitExit}));
  EXPECT_EQ(types(p.ev_b), (std::vector<T>{T::kReq, T::kEstablished, T::kDreq, T::kTimeWaitExit}));
  EXPECT_EQ(p.a.connection_count(), 0u);
  EXPECT_EQ(p.b.connection_count(), 0u);
  EXPECT_EQ(p.a.counters().retransmits + p.b.counters().retransmits, 0u);
}

TEST(Agent, NobodyListeningIsRejectedAtOnce) {
  Pair p;
  uint32_t id = p.a.connect(kIpB, basic_req(0x11), p.now);
  p.run(0);  // no time passes: the answer does not wait for a timer
  ASSERT_EQ(types(p.ev_a), (std::vector<T>{T::kRej}));
  EXPECT_EQ(p.ev_a[0].id, id);
  EXPECT_EQ(p.ev_a[0].rej.reason, static_cast<uint16_t>(RejReason::kInvalidServiceId));
  EXPECT_EQ(p.ev_a[0].rej.message_rejected, MsgRef::kReq);
  EXPECT_EQ(p.now, 0u);
  EXPECT_EQ(p.b.counters().rej_no_listener, 1u);
  EXPECT_EQ(p.a.connection_count(), 0u);
}

// A REQ for a service bound but not yet listened to (reserve) waits for the listen; the active
// side's retransmission replaces the waiting copy (one event, not two).
TEST(Agent, ARequestForAReservedServiceWaitsForTheListen) {
  Pair p;
  p.b.reserve(kSid);
  p.auto_answer();
  uint32_t id = p.a.connect(kIpB, basic_req(0x11), p.now);
  p.run(0);
  EXPECT_TRUE(p.ev_a.empty());
  EXPECT_TRUE(p.ev_b.empty());
  EXPECT_EQ(p.b.counters().held, 1u);
  EXPECT_EQ(p.b.counters().rej_no_listener, 0u);
  p.run(p.a.next_deadline());  // the REQ's first retransmission
  EXPECT_EQ(p.a.counters().retransmits, 1u);
  EXPECT_TRUE(p.ev_b.empty());
  ASSERT_EQ(p.b.listen(kSid, 5), 0);
  p.b.take_held(kSid, p.now);
  p.run(p.now);
  ASSERT_EQ(types(p.ev_b), (std::vector<T>{T::kReq, T::kEstablished}));
  EXPECT_EQ(p.ev_b[0].listen_cookie, 5u);
  ASSERT_EQ(types(p.ev_a), (std::vector<T>{T::kRep}));
  EXPECT_EQ(p.a.state(id), ConnState::kEstablished);
  EXPECT_EQ(p.b.counters().held, 1u);
}

// Reserved, then released without a listen: what waited is answered as nobody listening is (REJ,
// SIDR REP "not supported"); a service nobody reserved is rejected at once, and so is a REQ past
// the kMaxHeld that wait.
TEST(Agent, ARequestForAServiceReleasedWithoutListeningIsRejected) {
  Pair p;
  p.b.reserve(kSid);
  p.b.reserve(kSid);  // counted: one release leaves it reserved
  uint32_t id = p.a.connect(kIpB, basic_req(0x11), p.now);
  SidrReq q;
  q.service_id = kSid;
  p.a.sidr_request(kIpB, q, p.now);
  p.run(0);
  EXPECT_TRUE(p.ev_a.empty());
  EXPECT_EQ(p.b.counters().held, 2u);
  p.b.unreserve(kSid, p.now);
  p.run(0);
  EXPECT_TRUE(p.ev_a.empty());
  p.b.unreserve(kSid, p.now);
  p.run(0);
  ASSERT_EQ(types(p.ev_a), (std::vector<T>{T::kRej, T::kSidrRep}));
  EXPECT_EQ(p.ev_a[0].id, id);
  EXPECT_EQ(p.ev_a[0].rej.reason, static_cast<uint16_t>(RejReason::kInvalidServiceId));
  EXPECT_EQ(p.ev_a[1].sidr_rep.status, SidrStatus::kServiceIdNotSupported);
  EXPECT_EQ(p.b.counters().rej_no_listener, 2u);

  Pair full;
  full.b.reserve(kSid);
  for (size_t i = 0; i < Agent::kMaxHeld + 1; ++i) full.a.connect(kIpB, basic_req(0x11), full.now);
  full.run(0);
  EXPECT_EQ(full.b.counters().held, Agent::kMaxHeld);
  ASSERT_EQ(types(full.ev_a), (std::vector<T>{T::kRej}));
}

TEST(Agent, ConsumerRejectCarriesReasonAndPrivateData) {
  Pair p;
  p.b.listen(kSid, 1);
  p.on_b = [&](const Event& e) {
    const uint8_t why[] = {0xde, 0xad};
    if (e.type == T::kReq) {
      EXPECT_EQ(p.b.reject(e.id, static_cast<uint16_t>(RejReason::kConsumerReject), why, p.now), 0);
    }
  };
  p.a.connect(kIpB, basic_req(1), p.now);
  p.run();
  ASSERT_EQ(types(p.ev_a), (std::vector<T>{T::kRej}));
  EXPECT_EQ(p.ev_a[0].rej.reason, 28);
  EXPECT_EQ(p.ev_a[0].rej.private_data[1], 0xad);
  EXPECT_EQ(p.b.connection_count(), 0u);
}

TEST(Agent, LostReqIsResentAfterTheResponseTimeout) {
  Pair p;
  p.b.listen(kSid, 1);
  p.auto_answer();
  int reqs = 0;
  p.drop = [&](const OutMad& m, bool) { return m.mad[17] == 0x10 && reqs++ == 0; };
  uint32_t id = p.a.connect(kIpB, basic_req(1), p.now);
  p.run();
  EXPECT_EQ(p.a.state(id), ConnState::kEstablished);
  EXPECT_EQ(p.a.counters().retransmits, 1u);
  // One wait: 4.096 µs × 2^16 + 2 × 4.096 µs × 2^12.
  EXPECT_EQ(p.now, cm_timeout_ns(16) + 2 * cm_timeout_ns(12));
}

TEST(Agent, LostRtuIsRecoveredByTheRepRetransmission) {
  Pair p;
  p.b.listen(kSid, 1);
  p.auto_answer();
  int rtus = 0;
  p.drop = [&](const OutMad& m, bool) { return m.mad[17] == 0x14 && rtus++ == 0; };
  p.a.connect(kIpB, basic_req(1), p.now);
  p.run();
  ASSERT_EQ(types(p.ev_b), (std::vector<T>{T::kReq, T::kEstablished}));
  EXPECT_EQ(p.b.counters().retransmits, 1u);  // the REP
  EXPECT_EQ(p.a.counters().duplicates, 1u);   // answered with the cached RTU
}

TEST(Agent, SlowConsumerGetsAnMraAndTheActiveSideWaits) {
  Pair p;
  p.b.listen(kSid, 1);
  uint32_t pending = 0;
  p.on_b = [&](const Event& e) {
    if (e.type == T::kReq) pending = e.id;  // answered later
  };
  p.on_a = [&](const Event& e) {
    if (e.type == T::kRep) p.a.establish(e.id, {}, p.now);
  };
  uint32_t id = p.a.connect(kIpB, basic_req(1), p.now);
  // Run past the first REQ timeout: the duplicate REQ draws an MRA.
  p.run(cm_timeout_ns(16) + 2 * cm_timeout_ns(12));
  ASSERT_NE(pending, 0u);
  EXPECT_EQ(p.b.state(pending), ConnState::kMraReqSent);
  EXPECT_EQ(p.a.state(id), ConnState::kMraReqRcvd);
  const Time mra_wait = cm_timeout_ns(21) + 2 * cm_timeout_ns(12);
  EXPECT_EQ(p.a.next_deadline(), p.now + mra_wait);
  // Well within the MRA wait, the consumer accepts.
  p.now += 1'000'000'000;
  Rep rep;
  rep.local_qpn = 2;
  ASSERT_EQ(p.b.accept(pending, rep, p.now), 0);
  p.run();
  EXPECT_EQ(p.a.state(id), ConnState::kEstablished);
  EXPECT_EQ(types(p.ev_b), (std::vector<T>{T::kReq, T::kEstablished}));
  EXPECT_EQ(std::count(p.wire.begin(), p.wire.end(), AttrId::kMra), 1);
}

TEST(Agent, UnansweredReqTimesOutAfterMaxRetries) {
  Pair p;
  p.drop = [](const OutMad&, bool) { return true; };  // the peer is gone
  uint32_t id = p.a.connect(kIpB, basic_req(1), p.now);
  p.run();
  ASSERT_EQ(types(p.ev_a), (std::vector<T>{T::kReqTimeout}));
  EXPECT_EQ(p.ev_a[0].id, id);
  EXPECT_EQ(p.a.counters().retransmits, 15u);
  EXPECT_EQ(p.now, 16 * (cm_timeout_ns(16) + 2 * cm_timeout_ns(12)));
  EXPECT_EQ(p.a.connection_count(), 0u);
}

// The peer's address answered with ICMP port unreachable (nothing on its UDP 4791): what waits on
// it for an answer ends at once, marked unreachable, with no retransmission and no REJ; what
// needs no answer is left alone.
TEST(Agent, AnUnreachablePeerEndsWhatWaitsOnItAtOnce) {
  Pair p;
  p.drop = [](const OutMad&, bool) { return true; };  // nothing there answers
  const uint32_t req = p.a.connect(kIpB, basic_req(1), p.now);
  SidrReq q;
  q.service_id = service_id(kPsUdp, 7174);
  const uint32_t sidr = p.a.sidr_request(kIpB, q, p.now);
  p.run(0);
  EXPECT_TRUE(p.ev_a.empty());
  EXPECT_EQ(p.a.on_unreachable(kIpB, p.now), 2u);
  p.run(0);  // no time passes
  ASSERT_EQ(types(p.ev_a), (std::vector<T>{T::kReqTimeout, T::kSidrTimeout}));
  EXPECT_EQ(p.ev_a[0].id, req);
  EXPECT_TRUE(p.ev_a[0].unreachable);
  EXPECT_EQ(p.ev_a[1].id, sidr);
  EXPECT_TRUE(p.ev_a[1].unreachable);
  EXPECT_EQ(p.a.counters().retransmits, 0u);
  EXPECT_EQ(p.a.state(req), ConnState::kIdle);
  EXPECT_EQ(p.a.on_unreachable(kIpB, p.now), 0u);  // nothing left to end
  p.run();
  EXPECT_EQ(p.ev_a.size(), 2u);
  EXPECT_EQ(p.a.counters().retransmits, 0u);

  // The passive side's REP to an active side that vanished: REP_TIMEOUT, and no REJ sent.
  Pair r;
  r.b.listen(kSid, 1);
  r.auto_answer();
  r.on_a = [](const Event&) {};  // the active consumer never establishes, then is gone
  r.drop = [](const OutMad& m, bool from_a) { return !from_a && m.mad[17] == 0x13; };  // REP
  r.a.connect(kIpB, basic_req(1), r.now);
  r.run(0);
  ASSERT_EQ(types(r.ev_b), (std::vector<T>{T::kReq}));
  const size_t sent = r.wire.size();
  EXPECT_EQ(r.b.on_unreachable(kIpA, r.now), 1u);
  r.run(0);
  ASSERT_EQ(types(r.ev_b), (std::vector<T>{T::kReq, T::kRepTimeout}));
  EXPECT_TRUE(r.ev_b[1].unreachable);
  EXPECT_EQ(r.wire.size(), sent);  // no REJ

  // An established connection needs no answer: its QPs learn of a vanished peer themselves.
  Pair e;
  e.b.listen(kSid, 1);
  e.auto_answer();
  const uint32_t est = e.a.connect(kIpB, basic_req(1), e.now);
  e.run(0);
  ASSERT_EQ(e.a.state(est), ConnState::kEstablished);
  EXPECT_EQ(e.a.on_unreachable(kIpB, e.now), 0u);
  EXPECT_EQ(e.a.state(est), ConnState::kEstablished);
}

TEST(Agent, UnansweredRepIsRejectedWithTimeout) {
  Pair p;
  p.b.listen(kSid, 1);
  p.auto_answer();
  p.on_a = [](const Event&) {};  // the active consumer never establishes
  p.drop = [](const OutMad& m, bool from_a) { return from_a && m.mad[17] != 0x10; };
  Req req = basic_req(1);
  p.a.connect(kIpB, req, p.now);
  p.run();
  ASSERT_EQ(types(p.ev_b), (std::vector<T>{T::kReq, T::kRepTimeout}));
  EXPECT_EQ(p.b.counters().retransmits, 15u);  // the REQ's Max CM Retries
  EXPECT_EQ(p.wire.back(), AttrId::kRej);
}

TEST(Agent, DreqForAGoneConnectionGetsADrep) {
  Pair p;
  Dreq d;
  d.local_comm_id = 5;
  d.remote_comm_id = 12345;
  Mad m;
  encode(d, 9, m);
  p.b.on_mad(kIpA, m, 0);
  auto out = p.b.take_mads();
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].mad[17], 0x16);
  Drep r = decode_drep(out[0].mad.data() + kMadHeaderBytes);
  EXPECT_EQ(r.remote_comm_id, 5u);
  EXPECT_EQ(r.local_comm_id, 12345u);
}

TEST(Agent, SimultaneousDisconnect) {
  Pair p;
  p.b.listen(kSid, 1);
  p.auto_answer();
  uint32_t id = p.a.connect(kIpB, basic_req(1), p.now);
  p.run(1);
  uint32_t bid = p.ev_b.at(0).id;
  p.a.disconnect(id, {}, p.now);
  p.b.disconnect(bid, {}, p.now);
  p.run();
  // Each side hears the other's DREQ (or the DREP), and both time-wait out.
  EXPECT_EQ(p.ev_a.back().type, T::kTimeWaitExit);
  EXPECT_EQ(p.ev_b.back().type, T::kTimeWaitExit);
  EXPECT_EQ(p.a.connection_count() + p.b.connection_count(), 0u);
}

TEST(Agent, DestroyedConnectionsTidyUpSilently) {
  Pair p;
  p.b.listen(kSid, 1);
  p.auto_answer();
  uint32_t id = p.a.connect(kIpB, basic_req(1), p.now);
  p.run(1);
  p.on_b = [&](const Event& e) {
    if (e.type == T::kDreq) p.b.destroy(e.id, p.now);  // consumer answers by destroying
  };
  p.a.destroy(id, p.now);  // DREQ, no events for A any more
  p.run();
  EXPECT_EQ(types(p.ev_a), (std::vector<T>{T::kRep}));
  EXPECT_EQ(p.ev_b.back().type, T::kDreq);
  EXPECT_EQ(p.a.connection_count() + p.b.connection_count(), 0u);
  // A REQ destroyed before an answer: the passive side hears REJ "timeout".
  Pair q;
  q.b.listen(kSid, 1);
  uint32_t id2 = q.a.connect(kIpB, basic_req(1), q.now);
  q.step();
  q.a.destroy(id2, q.now);
  q.run();
  ASSERT_EQ(types(q.ev_b), (std::vector<T>{T::kReq, T::kRej}));
  EXPECT_EQ(q.ev_b[1].rej.reason, static_cast<uint16_t>(RejReason::kTimeout));
  EXPECT_TRUE(q.ev_a.empty());
}

TEST(Agent, MalformedAndUnexpectedMadsAreCountedAndDropped) {
  Agent a(config(1, 1));
  Mad m{};
  a.on_mad(kIpB, m, 0);                                        // not a CM MAD
  a.on_mad(kIpB, std::span<const uint8_t>(m.data(), 100), 0);  // short
  Rtu r;
  r.remote_comm_id = 999;
  encode(r, 1, m);
  a.on_mad(kIpB, m, 0);  // unknown connection
  EXPECT_EQ(a.counters().dropped, 3u);
  EXPECT_TRUE(a.take_events().empty());
  // Every bit pattern after a valid header decodes to something harmless.
  std::mt19937 rng(1);
  for (int i = 0; i < 2000; ++i) {
    for (size_t k = kMadHeaderBytes; k < kMadBytes; ++k) m[k] = static_cast<uint8_t>(rng());
    m[17] = static_cast<uint8_t>(0x10 + rng() % 9);
    a.on_mad(kIpB, m, 0);
  }
  a.take_mads();
}

TEST(Agent, SidrResolvesAQpnAndAnswersDuplicatesFromCache) {
  Pair p;
  const uint64_t sid = service_id(kPsUdp, 7174);
  p.b.listen(sid, 5);
  p.on_b = [&](const Event& e) {
    if (e.type == T::kSidrReq) {
      SidrRep r;
      r.qpn = 0x99;
      r.qkey = 0x01234567;
      r.service_id = e.sidr_req.service_id;
      EXPECT_EQ(p.b.sidr_reply(e.id, r, p.now), 0);
    }
  };
  int reps = 0;
  p.drop = [&](const OutMad& m, bool) { return m.mad[17] == 0x18 && reps++ == 0; };
  SidrReq q;
  q.service_id = sid;
  uint32_t id = p.a.sidr_request(kIpB, q, p.now);
  p.run();
  ASSERT_EQ(types(p.ev_a), (std::vector<T>{T::kSidrRep}));
  EXPECT_EQ(p.ev_a[0].id, id);
  EXPECT_EQ(p.ev_a[0].sidr_rep.qpn, 0x99u);
  EXPECT_EQ(p.ev_a[0].sidr_rep.qkey, 0x01234567u);
  ASSERT_EQ(types(p.ev_b), (std::vector<T>{T::kSidrReq}));  // the duplicate made no new event
  EXPECT_EQ(p.b.counters().duplicates, 1u);

  Pair n;  // nobody listens
  n.a.sidr_request(kIpB, q, n.now);
  n.run(0);
  ASSERT_EQ(types(n.ev_a), (std::vector<T>{T::kSidrRep}));
  EXPECT_EQ(n.ev_a[0].sidr_rep.status, SidrStatus::kServiceIdNotSupported);
}

// Many connections over a link that loses 20% of MADs each way: every one is established and
// closed on both sides, whatever is lost, and nothing is left behind.
TEST(Agent, SurvivesHeavyLoss) {
  for (uint32_t seed = 1; seed <= 40; ++seed) {
    Pair p;
    p.b.listen(kSid, 1);
    p.auto_answer();
    std::mt19937 rng(seed);
    p.drop = [&](const OutMad&, bool) { return rng() % 5 == 0; };
    uint32_t id = p.a.connect(kIpB, basic_req(1), p.now);
    p.on_b = [&, inner = p.on_b](const Event& e) {
      inner(e);
      if (e.type == T::kDreq) p.b.disconnect(e.id, {}, p.now);
    };
    p.on_a = [&](const Event& e) {
      if (e.type == T::kRep) p.a.establish(e.id, {}, p.now);
    };
    p.run(60'000'000'000ull);
    ASSERT_EQ(p.a.state(id), ConnState::kEstablished) << "seed " << seed;
    // The passive side is established too, or will be once a REP retransmission draws an RTU.
    p.a.disconnect(id, {}, p.now);
    p.run();
    EXPECT_EQ(p.a.connection_count(), 0u) << "seed " << seed;
    EXPECT_EQ(p.b.connection_count(), 0u) << "seed " << seed;
    auto ta = types(p.ev_a);
    EXPECT_EQ(ta.front(), T::kRep) << "seed " << seed;
    EXPECT_EQ(ta.back(), T::kTimeWaitExit) << "seed " << seed;
    EXPECT_EQ(p.ev_b.front().type, T::kReq) << "seed " << seed;
    EXPECT_EQ(p.ev_b.back().type, T::kTimeWaitExit) << "seed " << seed;
  }
}

}  // namespace
}  // namespace uroce::cm

// Two CM agents (src/cm/agent.h) joined by a virtual link that can lose MADs, in virtual time:
// the harness of tests/cm/agent_test.cc (the agents' own rules) and tests/cm/id_state_test.cc
// (rdma_cm's id state machine fed the events the agents raise).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <vector>

#include "cm/agent.h"
#include "cm/ip_cm.h"

namespace uroce::cm {

inline constexpr IpAddr kIpA{0x0a000001u};
inline constexpr IpAddr kIpB{0x0a000002u};
inline constexpr uint64_t kSid = service_id(kPsTcp, 7174);

inline AgentConfig config(uint32_t first_id, uint64_t guid) {
  AgentConfig c;
  c.ca_guid = guid;
  c.first_comm_id = first_id;
  c.tid_prefix = first_id;
  return c;
}

inline Req basic_req(uint32_t qpn) {
  Req r;
  r.service_id = kSid;
  r.local_qpn = qpn;
  r.starting_psn = 0x100;
  r.responder_resources = 1;
  r.initiator_depth = 1;
  r.retry_count = 7;
  r.rnr_retry_count = 7;
  r.path_mtu = 3;
  return r;
}

// Two agents joined by a link. `drop` decides per MAD whether the link loses it; each side's
// events go to its handler (which may call into its agent) and are kept in order.
struct AgentPair {
  Agent a{config(100, 0xa)};
  Agent b{config(900, 0xb)};
  Time now = 0;
  std::function<bool(const OutMad&, bool from_a)> drop = [](const OutMad&, bool) { return false; };
  std::function<void(const Event&)> on_a = [](const Event&) {};
  std::function<void(const Event&)> on_b = [](const Event&) {};
  std::vector<Event> ev_a, ev_b;
  std::vector<AttrId> wire;  // every MAD sent, in order (lost ones too)

  // Delivers until nothing is in flight, then advances virtual time to the next deadline; stops
  // when no deadline is left or `until` is reached.
  void run(Time until = 600'000'000'000ull) {
    for (int guard = 0; guard < 1'000'000; ++guard) {
      bool moved = step();
      if (moved) continue;
      Time d = std::min(a.next_deadline(), b.next_deadline());
      if (d == kNever || d > until) return;
      now = std::max(now, d);
      a.on_timer(now);
      b.on_timer(now);
    }
    FAIL() << "no quiescence";
  }
  bool step() {
    bool moved = false;
    for (auto& m : a.take_mads()) {
      moved = true;
      wire.push_back(static_cast<AttrId>((m.mad[16] << 8) | m.mad[17]));
      EXPECT_EQ(m.dst_ip, kIpB);
      if (!drop(m, true)) b.on_mad(kIpA, m.mad, now);
    }
    for (auto& m : b.take_mads()) {
      moved = true;
      wire.push_back(static_cast<AttrId>((m.mad[16] << 8) | m.mad[17]));
      EXPECT_EQ(m.dst_ip, kIpA);
      if (!drop(m, false)) a.on_mad(kIpB, m.mad, now);
    }
    for (auto& e : a.take_events()) {
      moved = true;
      ev_a.push_back(e);
      on_a(e);
    }
    for (auto& e : b.take_events()) {
      moved = true;
      ev_b.push_back(e);
      on_b(e);
    }
    return moved;
  }
  // A consumer pair that accepts every REQ and establishes every REP.
  void auto_answer() {
    on_b = [this](const Event& e) {
      if (e.type == Event::Type::kReq) {
        Rep rep;
        rep.local_qpn = 0x22;
        rep.starting_psn = 0x200;
        rep.private_data = {0xb0};
        EXPECT_EQ(b.accept(e.id, rep, now), 0);
      }
    };
    on_a = [this](const Event& e) {
      if (e.type == Event::Type::kRep) {
        EXPECT_EQ(a.establish(e.id, {}, now), 0);
      }
    };
  }
};

inline std::vector<Event::Type> types(const std::vector<Event>& v) {
  std::vector<Event::Type> t;
  for (auto& e : v) t.push_back(e.type);
  return t;
}

}  // namespace uroce::cm

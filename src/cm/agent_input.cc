// The CM agent's inputs (agent.h): every MAD that arrives, dispatched by attribute to the
// handlers of agent.cc and agent_sidr.cc; the timers (retransmission, MRA waits, time wait,
// SIDR retries) and what a peer's ICMP unreachable ends. Apart from the handlers so that the
// one place a MAD or a deadline enters the state machine reads alone.
#include <algorithm>
#include <cerrno>
#include <utility>

#include "cm/agent.h"

namespace uroce::cm {

void Agent::on_mad(IpAddr src_ip, std::span<const uint8_t> mad, Time now) {
  MadHeader h;
  if (!parse_header(mad, &h)) {
    ++counters_.dropped;
    return;
  }
  ++counters_.mads_received;
  const uint8_t* msg = mad.data() + kMadHeaderBytes;
  switch (static_cast<AttrId>(h.attr_id)) {
    case AttrId::kReq:
      if (hold(src_ip, h, mad)) return;
      return on_req(src_ip, h, msg, now);
    case AttrId::kMra:
      return on_mra(src_ip, msg, now);
    case AttrId::kRej:
      return on_rej(src_ip, msg, now);
    case AttrId::kRep:
      return on_rep(src_ip, msg, now);
    case AttrId::kRtu:
      return on_rtu(src_ip, msg, now);
    case AttrId::kDreq:
      return on_dreq(src_ip, h, msg, now);
    case AttrId::kDrep:
      return on_drep(src_ip, msg, now);
    case AttrId::kSidrReq:
      if (hold(src_ip, h, mad)) return;
      return on_sidr_req(src_ip, h, msg, now);
    case AttrId::kSidrRep:
      return on_sidr_rep(src_ip, msg, now);
    default:
      ++counters_.dropped;  // LAP/APR (path migration) and ClassPortInfo are not served
      return;
  }
}

void Agent::on_timer(Time now) {
  for (auto it = conns_.begin(); it != conns_.end();) {
    const uint32_t id = it->first;
    Conn& c = it->second;
    if (c.deadline > now) {
      ++it;
      continue;
    }
    c.deadline = kNever;
    if (c.state == ConnState::kTimeWait) {
      Event ev{Event::Type::kTimeWaitExit};
      emit_for(id, c, std::move(ev));
      remote_index_.erase({c.peer_ip, c.remote_id});
      it = conns_.erase(it);
      continue;
    }
    if (c.retries_left > 0) {
      --c.retries_left;
      ++counters_.retransmits;
      if (c.state == ConnState::kMraReqRcvd) c.state = ConnState::kReqSent;
      c.deadline = now + c.retry_ns;
      send(c.peer_ip, c.retx);
      ++it;
      continue;
    }
    it = give_up(it, now, /*unreachable=*/false);  // out of retries
  }
  for (auto it = sidrs_.begin(); it != sidrs_.end();) {
    Sidr& s = it->second;
    if (s.deadline > now) {
      ++it;
      continue;
    }
    s.deadline = kNever;
    if (!s.active) {  // a passive reply's cache ran out (or it was never answered)
      if (!s.replied) {
        ++it;
        continue;
      }
      sidr_index_.erase({s.peer_ip, s.remote_request_id});
      it = sidrs_.erase(it);
      continue;
    }
    if (s.retries_left > 0) {
      --s.retries_left;
      ++counters_.retransmits;
      s.deadline = now + s.retry_ns;
      send(s.peer_ip, s.retx);
      ++it;
      continue;
    }
    Event ev{Event::Type::kSidrTimeout};
    ev.id = it->first;
    ev.peer_ip = s.peer_ip;
    emit(std::move(ev));
    it = sidrs_.erase(it);
  }
}

std::map<uint32_t, Agent::Conn>::iterator Agent::give_up(std::map<uint32_t, Conn>::iterator it,
                                                         Time now, bool unreachable) {
  const uint32_t id = it->first;
  Conn& c = it->second;
  const auto event = [unreachable](Event::Type t) {
    Event ev{t};
    ev.unreachable = unreachable;
    return ev;
  };
  switch (c.state) {
    case ConnState::kReqSent:
    case ConnState::kMraReqRcvd:
      emit_for(id, c, event(Event::Type::kReqTimeout));
      return conns_.erase(it);
    case ConnState::kRepSent:
      // No RTU: give up and tell the active side (REJ "timeout", 12.9.6.2) — unless nothing
      // there can hear it.
      if (!unreachable)
        send_rej_raw(c.peer_ip, c.tid, id, c.remote_id, MsgRef::kRep,
                     static_cast<uint16_t>(RejReason::kTimeout));
      emit_for(id, c, event(Event::Type::kRepTimeout));
      remote_index_.erase({c.peer_ip, c.remote_id});
      return conns_.erase(it);
    case ConnState::kDreqSent:
      enter_time_wait(id, c, now);
      emit_for(id, c, event(Event::Type::kDreqTimeout));
      return ++it;
    default:
      return ++it;
  }
}

size_t Agent::on_unreachable(IpAddr peer_ip, Time now) {
  size_t ended = 0;
  for (auto it = conns_.begin(); it != conns_.end();) {
    Conn& c = it->second;
    const bool waits = c.state == ConnState::kReqSent || c.state == ConnState::kMraReqRcvd ||
                       c.state == ConnState::kRepSent || c.state == ConnState::kDreqSent;
    if (c.peer_ip != peer_ip || !waits) {
      ++it;
      continue;
    }
    ++ended;
    c.deadline = kNever;
    it = give_up(it, now, /*unreachable=*/true);
  }
  for (auto it = sidrs_.begin(); it != sidrs_.end();) {
    Sidr& s = it->second;
    if (!s.active || s.peer_ip != peer_ip) {
      ++it;
      continue;
    }
    ++ended;
    Event ev{Event::Type::kSidrTimeout};
    ev.id = it->first;
    ev.peer_ip = s.peer_ip;
    ev.unreachable = true;
    emit(std::move(ev));
    it = sidrs_.erase(it);
  }
  return ended;
}

Time Agent::next_deadline() const {
  Time d = kNever;
  for (const auto& [id, c] : conns_) d = std::min(d, c.deadline);
  for (const auto& [id, s] : sidrs_) d = std::min(d, s.deadline);
  return d;
}

}  // namespace uroce::cm

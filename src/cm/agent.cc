// The CM agent's connections (agent.h; IBTA 12.9): the name tables, listening and the REQs held
// for a reserved service, the outboxes, and each connection's handlers and calls — the active
// side (REQ, REP, MRA), the passive side (REQ, accept, RTU), rejection, disconnection (DREQ,
// DREP, time wait) and destroy. Where a MAD or a deadline enters is agent_input.cc; SIDR, which
// has no connection, is agent_sidr.cc.
#include "cm/agent.h"

#include <algorithm>
#include <cerrno>

namespace uroce::cm {

const char* state_name(ConnState s) {
  switch (s) {
    case ConnState::kIdle:
      return "IDLE";
    case ConnState::kReqSent:
      return "REQ_SENT";
    case ConnState::kMraReqRcvd:
      return "MRA_REQ_RCVD";
    case ConnState::kRepRcvd:
      return "REP_RCVD";
    case ConnState::kReqRcvd:
      return "REQ_RCVD";
    case ConnState::kMraReqSent:
      return "MRA_REQ_SENT";
    case ConnState::kRepSent:
      return "REP_SENT";
    case ConnState::kEstablished:
      return "ESTABLISHED";
    case ConnState::kDreqSent:
      return "DREQ_SENT";
    case ConnState::kDreqRcvd:
      return "DREQ_RCVD";
    case ConnState::kTimeWait:
      return "TIMEWAIT";
  }
  return "?";
}

const char* event_name(Event::Type t) {
  using T = Event::Type;
  switch (t) {
    case T::kReq:
      return "REQ";
    case T::kRep:
      return "REP";
    case T::kEstablished:
      return "ESTABLISHED";
    case T::kRej:
      return "REJ";
    case T::kReqTimeout:
      return "REQ_TIMEOUT";
    case T::kRepTimeout:
      return "REP_TIMEOUT";
    case T::kDreq:
      return "DREQ";
    case T::kDrep:
      return "DREP";
    case T::kDreqTimeout:
      return "DREQ_TIMEOUT";
    case T::kTimeWaitExit:
      return "TIMEWAIT_EXIT";
    case T::kSidrReq:
      return "SIDR_REQ";
    case T::kSidrRep:
      return "SIDR_REP";
    case T::kSidrTimeout:
      return "SIDR_TIMEOUT";
  }
  return "?";
}

Agent::Agent(const AgentConfig& cfg)
    : cfg_(cfg), next_id_(cfg.first_comm_id ? cfg.first_comm_id : 1) {}

int Agent::listen(uint64_t service_id, uint64_t cookie) {
  if (!listeners_.emplace(service_id, cookie).second) return EADDRINUSE;
  return 0;
}

void Agent::unlisten(uint64_t service_id) {
  listeners_.erase(service_id);
}

void Agent::reserve(uint64_t service_id) {
  ++reserved_[service_id];
}

void Agent::unreserve(uint64_t service_id, Time now) {
  auto it = reserved_.find(service_id);
  if (it == reserved_.end()) return;
  if (--it->second == 0) {
    reserved_.erase(it);
    replay(service_id, now);  // nobody will listen: answered as such (REJ, SIDR REP)
  }
}

void Agent::take_held(uint64_t service_id, Time now) {
  if (listeners_.count(service_id)) replay(service_id, now);
}

bool Agent::hold(IpAddr src, const MadHeader& h, std::span<const uint8_t> mad) {
  const uint8_t* msg = mad.data() + kMadHeaderBytes;
  const uint64_t sid = static_cast<AttrId>(h.attr_id) == AttrId::kReq
                           ? decode_req(msg).service_id
                           : decode_sidr_req(msg).service_id;
  if (listeners_.count(sid) || !reserved_.count(sid)) return false;
  auto& q = held_[sid];
  for (Held& w : q) {
    if (w.src == src && w.tid == h.tid) {  // the peer resent it: keep the newest copy
      w.mad.assign(mad.begin(), mad.end());
      return true;
    }
  }
  if (q.size() >= kMaxHeld) return false;
  q.push_back({src, h.tid, {mad.begin(), mad.end()}});
  ++counters_.held;
  return true;
}

void Agent::replay(uint64_t service_id, Time now) {
  auto it = held_.find(service_id);
  if (it == held_.end()) return;
  std::vector<Held> q = std::move(it->second);
  held_.erase(it);
  for (const Held& w : q) on_mad(w.src, w.mad, now);
}

uint32_t Agent::alloc_id() {
  for (;;) {
    uint32_t id = cfg_.comm_id_base | (next_id_++ & cfg_.comm_id_mask);
    if (id != 0 && !conns_.count(id) && !sidrs_.count(id)) return id;
  }
}

uint64_t Agent::new_tid() {
  return (uint64_t{cfg_.tid_prefix} << 32) | next_tid_++;
}

Time Agent::wait_for(uint8_t timeout_value) const {
  return cm_timeout_ns(timeout_value) + 2 * cm_timeout_ns(cfg_.packet_lifetime);
}

void Agent::send(IpAddr dst_ip, const Mad& mad) {
  mads_.push_back(OutMad{dst_ip, mad});
  ++counters_.mads_sent;
}

void Agent::emit(Event ev) {
  events_.push_back(std::move(ev));
}

void Agent::emit_for(uint32_t id, const Conn& c, Event ev) {
  if (c.orphan) return;
  ev.id = id;
  ev.peer_ip = c.peer_ip;
  emit(std::move(ev));
}

std::vector<OutMad> Agent::take_mads() {
  std::vector<OutMad> out;
  out.swap(mads_);
  return out;
}

std::vector<Event> Agent::take_events() {
  std::vector<Event> out;
  out.swap(events_);
  return out;
}

ConnState Agent::state(uint32_t id) const {
  auto it = conns_.find(id);
  return it == conns_.end() ? ConnState::kIdle : it->second.state;
}

Agent::Conn* Agent::find(uint32_t id, IpAddr src) {
  auto it = conns_.find(id);
  if (it == conns_.end() || it->second.peer_ip != src) return nullptr;
  return &it->second;
}

void Agent::send_rej_raw(IpAddr dst_ip, uint64_t tid, uint32_t local_id, uint32_t remote_id,
                         MsgRef what, uint16_t reason, std::span<const uint8_t> pd) {
  Rej r;
  r.local_comm_id = local_id;
  r.remote_comm_id = remote_id;
  r.message_rejected = what;
  r.reason = reason;
  r.private_data.assign(pd.begin(),
                        pd.begin() + std::min<size_t>(pd.size(), rej::kPrivateData.len));
  Mad m;
  encode(r, tid, m);
  send(dst_ip, m);
}

void Agent::enter_time_wait(uint32_t id, Conn& c, Time now) {
  c.state = ConnState::kTimeWait;
  c.retries_left = 0;
  c.deadline = now + cm_timeout_ns(cfg_.time_wait);
  (void)id;
}

// ---- active side --------------------------------------------------------------------------

uint32_t Agent::connect(IpAddr dst_ip, Req req, Time now) {
  const uint32_t id = alloc_id();
  req.local_comm_id = id;
  req.local_ca_guid = cfg_.ca_guid;
  req.remote_cm_response_timeout = cfg_.cm_response_timeout;
  req.local_cm_response_timeout = cfg_.cm_response_timeout;
  req.max_cm_retries = cfg_.max_cm_retries;
  Conn c;
  c.state = ConnState::kReqSent;
  c.active = true;
  c.peer_ip = dst_ip;
  c.tid = new_tid();
  if (!encode(req, c.tid, c.retx)) return 0;  // private data too long: caller checked
  c.max_retries = cfg_.max_cm_retries;
  c.retries_left = cfg_.max_cm_retries;
  c.retry_ns = wait_for(cfg_.cm_response_timeout);
  c.deadline = now + c.retry_ns;
  send(dst_ip, c.retx);
  conns_.emplace(id, c);
  return id;
}

int Agent::establish(uint32_t id, std::span<const uint8_t> pd, Time now) {
  auto it = conns_.find(id);
  if (it == conns_.end() || it->second.state != ConnState::kRepRcvd) return EINVAL;
  Conn& c = it->second;
  Rtu r;
  r.local_comm_id = id;
  r.remote_comm_id = c.remote_id;
  r.private_data.assign(pd.begin(), pd.end());
  if (!encode(r, c.tid, c.cached)) return EINVAL;
  c.has_cached = true;  // a duplicate REP (our RTU was lost) is answered with it
  c.state = ConnState::kEstablished;
  c.deadline = kNever;
  send(c.peer_ip, c.cached);
  (void)now;
  return 0;
}

void Agent::on_rep(IpAddr src, const uint8_t* msg, Time now) {
  Rep rep = decode_rep(msg);
  Conn* c = find(rep.remote_comm_id, src);
  if (!c || !c->active) {
    // A REP for a connection we do not know (IBTA 12.9.6: stale): tell the sender.
    ++counters_.dropped;
    send_rej_raw(src, 0, 0, rep.local_comm_id, MsgRef::kRep,
                 static_cast<uint16_t>(RejReason::kInvalidCommId));
    return;
  }
  switch (c->state) {
    case ConnState::kReqSent:
    case ConnState::kMraReqRcvd: {
      c->state = ConnState::kRepRcvd;
      c->remote_id = rep.local_comm_id;
      c->remote_qpn = rep.local_qpn;
      c->retries_left = 0;
      c->deadline = kNever;
      const uint32_t id = rep.remote_comm_id;
      Event ev{Event::Type::kRep};
      ev.rep = std::move(rep);
      emit_for(id, *c, std::move(ev));
      return;
    }
    case ConnState::kEstablished:
      // Our RTU was lost and the passive side resent its REP (12.9.6.2): resend the RTU.
      ++counters_.duplicates;
      if (c->has_cached) send(c->peer_ip, c->cached);
      return;
    default:
      ++counters_.dropped;  // REP_RCVD: the consumer is still deciding; later states: stale
      return;
  }
  (void)now;
}

void Agent::on_mra(IpAddr src, const uint8_t* msg, Time now) {
  Mra mra = decode_mra(msg);
  Conn* c = find(mra.remote_comm_id, src);
  if (!c) {
    ++counters_.dropped;
    return;
  }
  // MRA of our REQ: the passive side needs longer; wait the service timeout before resending
  // (12.6.6). MRA of a REP (we are passive): the active side is slow to RTU; likewise.
  const bool of_req = mra.message_mraed == MsgRef::kReq &&
                      (c->state == ConnState::kReqSent || c->state == ConnState::kMraReqRcvd);
  const bool of_rep = mra.message_mraed == MsgRef::kRep && c->state == ConnState::kRepSent;
  if (!of_req && !of_rep) {
    ++counters_.dropped;
    return;
  }
  if (of_req) {
    c->state = ConnState::kMraReqRcvd;
    c->remote_id = mra.local_comm_id;
  }
  c->deadline = now + wait_for(mra.service_timeout);
}

// ---- passive side -------------------------------------------------------------------------

void Agent::on_req(IpAddr src, const MadHeader& h, const uint8_t* msg, Time now) {
  Req req = decode_req(msg);
  // A duplicate: the active side resent its REQ before hearing from us (12.9.6.1).
  auto dup = remote_index_.find({src, req.local_comm_id});
  if (dup != remote_index_.end()) {
    auto it = conns_.find(dup->second);
    if (it != conns_.end()) {
      Conn& c = it->second;
      ++counters_.duplicates;
      switch (c.state) {
        case ConnState::kReqRcvd: {
          // The consumer is still deciding: ask for more time (MRA), then answer duplicates
          // with the same MRA.
          Mra m;
          m.local_comm_id = dup->second;
          m.remote_comm_id = req.local_comm_id;
          m.message_mraed = MsgRef::kReq;
          m.service_timeout = cfg_.mra_service_timeout;
          encode(m, c.tid, c.cached);
          c.has_cached = true;
          c.state = ConnState::kMraReqSent;
          send(src, c.cached);
          return;
        }
        case ConnState::kMraReqSent:
        case ConnState::kRepSent:
          // The MRA, or our REP, was lost: resend it.
          send(src, c.state == ConnState::kRepSent ? c.retx : c.cached);
          return;
        default:
          return;  // established or going away: a stale duplicate
      }
    }
  }
  // Only RC is served (transport service type 0): UC and XRC over rdma_cm are not (docs).
  if (req.transport_service_type != 0) {
    send_rej_raw(src, h.tid, 0, req.local_comm_id, MsgRef::kReq,
                 static_cast<uint16_t>(RejReason::kInvalidTransportType));
    return;
  }
  auto l = listeners_.find(req.service_id);
  if (l == listeners_.end()) {
    // Nobody listens: reject at once with "invalid service ID" (12.6.7 table 112, reason 8),
    // so rdma_connect fails promptly with RDMA_CM_EVENT_REJECTED instead of timing out.
    ++counters_.rej_no_listener;
    send_rej_raw(src, h.tid, 0, req.local_comm_id, MsgRef::kReq,
                 static_cast<uint16_t>(RejReason::kInvalidServiceId));
    return;
  }
  const uint32_t id = alloc_id();
  Conn c;
  c.state = ConnState::kReqRcvd;
  c.peer_ip = src;
  c.remote_id = req.local_comm_id;
  c.remote_qpn = req.local_qpn;
  c.tid = h.tid;  // the whole exchange answers the REQ's transaction
  c.listen_cookie = l->second;
  c.max_retries = req.max_cm_retries;
  c.peer_response_timeout = req.local_cm_response_timeout;
  conns_.emplace(id, c);
  remote_index_[{src, req.local_comm_id}] = id;
  Event ev{Event::Type::kReq, id, l->second, src};
  ev.req = std::move(req);
  emit(std::move(ev));
  (void)now;
}

int Agent::accept(uint32_t id, Rep rep, Time now) {
  auto it = conns_.find(id);
  if (it == conns_.end() ||
      (it->second.state != ConnState::kReqRcvd && it->second.state != ConnState::kMraReqSent))
    return EINVAL;
  Conn& c = it->second;
  rep.local_comm_id = id;
  rep.remote_comm_id = c.remote_id;
  rep.local_ca_guid = cfg_.ca_guid;
  if (!encode(rep, c.tid, c.retx)) return EINVAL;
  c.state = ConnState::kRepSent;
  // Resend the REP until the RTU comes, as often and as patiently as the REQ asked (12.6.5:
  // Local CM Response Timeout and Max CM Retries of the REQ).
  c.retries_left = c.max_retries;
  c.retry_ns = wait_for(c.peer_response_timeout);
  c.deadline = now + c.retry_ns;
  send(c.peer_ip, c.retx);
  return 0;
}

void Agent::on_rtu(IpAddr src, const uint8_t* msg, Time now) {
  Rtu rtu = decode_rtu(msg);
  Conn* c = find(rtu.remote_comm_id, src);
  if (!c || c->remote_id != rtu.local_comm_id) {
    ++counters_.dropped;
    return;
  }
  if (c->state != ConnState::kRepSent) {
    if (c->state == ConnState::kEstablished) ++counters_.duplicates;
    return;  // duplicate RTU, or one after notify_established()
  }
  c->state = ConnState::kEstablished;
  c->retries_left = 0;
  c->deadline = kNever;
  Event ev{Event::Type::kEstablished};
  ev.private_data = std::move(rtu.private_data);
  emit_for(rtu.remote_comm_id, *c, std::move(ev));
  (void)now;
}

int Agent::notify_established(uint32_t id) {
  auto it = conns_.find(id);
  if (it == conns_.end() || it->second.state != ConnState::kRepSent) return EINVAL;
  it->second.state = ConnState::kEstablished;
  it->second.retries_left = 0;
  it->second.deadline = kNever;
  return 0;
}

// ---- rejection ----------------------------------------------------------------------------

int Agent::reject(uint32_t id, uint16_t reason, std::span<const uint8_t> pd, Time now) {
  auto it = conns_.find(id);
  if (it == conns_.end()) return EINVAL;
  Conn& c = it->second;
  MsgRef what;
  switch (c.state) {
    case ConnState::kReqRcvd:
    case ConnState::kMraReqSent:
    case ConnState::kRepSent:
      what = MsgRef::kReq;
      break;
    case ConnState::kRepRcvd:
      what = MsgRef::kRep;
      break;
    default:
      return EINVAL;
  }
  if (pd.size() > rej::kPrivateData.len) return EINVAL;
  send_rej_raw(c.peer_ip, c.tid, id, c.remote_id, what, reason, pd);
  remote_index_.erase({c.peer_ip, c.remote_id});
  conns_.erase(it);
  (void)now;
  return 0;
}

void Agent::on_rej(IpAddr src, const uint8_t* msg, Time now) {
  Rej rej = decode_rej(msg);
  Conn* c = find(rej.remote_comm_id, src);
  if (!c && rej.remote_comm_id == 0) {
    // The active side gave up on its REQ before it learnt our ID (12.6.7: Remote Communication
    // ID 0): find the connection by the sender's ID.
    auto it = remote_index_.find({src, rej.local_comm_id});
    if (it != remote_index_.end()) {
      rej.remote_comm_id = it->second;
      c = find(it->second, src);
    }
  }
  if (!c) {
    ++counters_.dropped;
    return;
  }
  switch (c->state) {
    case ConnState::kReqSent:
    case ConnState::kMraReqRcvd:
    case ConnState::kRepRcvd:
    case ConnState::kReqRcvd:
    case ConnState::kMraReqSent:
    case ConnState::kRepSent:
      break;
    default:
      ++counters_.dropped;  // REJ after establishment is meaningless (12.9.6)
      return;
  }
  const uint32_t id = rej.remote_comm_id;
  Event ev{Event::Type::kRej};
  ev.rej = std::move(rej);
  emit_for(id, *c, std::move(ev));
  remote_index_.erase({c->peer_ip, c->remote_id});
  conns_.erase(id);
  (void)now;
}

// ---- disconnection ------------------------------------------------------------------------

int Agent::disconnect(uint32_t id, std::span<const uint8_t> pd, Time now) {
  auto it = conns_.find(id);
  if (it == conns_.end()) return EINVAL;
  Conn& c = it->second;
  switch (c.state) {
    case ConnState::kEstablished:
    case ConnState::kRepSent: {  // RTU lost but the consumer is done: disconnect anyway
      Dreq d;
      d.local_comm_id = id;
      d.remote_comm_id = c.remote_id;
      d.remote_qpn = c.remote_qpn;
      d.private_data.assign(pd.begin(), pd.end());
      if (!encode(d, new_tid(), c.retx)) return EINVAL;
      c.state = ConnState::kDreqSent;
      c.retries_left = c.max_retries ? c.max_retries : cfg_.max_cm_retries;
      c.retry_ns = wait_for(c.active ? cfg_.cm_response_timeout
                                     : std::max(c.peer_response_timeout, cfg_.cm_response_timeout));
      c.deadline = now + c.retry_ns;
      send(c.peer_ip, c.retx);
      return 0;
    }
    case ConnState::kDreqRcvd: {
      Drep d;
      d.local_comm_id = id;
      d.remote_comm_id = c.remote_id;
      d.private_data.assign(pd.begin(), pd.end());
      if (!encode(d, c.tid, c.cached)) return EINVAL;
      c.has_cached = true;
      send(c.peer_ip, c.cached);
      enter_time_wait(id, c, now);
      return 0;
    }
    case ConnState::kDreqSent:
    case ConnState::kTimeWait:
      return 0;
    default:
      return EINVAL;
  }
}

void Agent::on_dreq(IpAddr src, const MadHeader& h, const uint8_t* msg, Time now) {
  Dreq d = decode_dreq(msg);
  Conn* c = find(d.remote_comm_id, src);
  if (!c || c->remote_id != d.local_comm_id) {
    // A DREQ for a connection that is gone (its time wait ran out): the sender still waits for a
    // DREP, so give it one (12.9.8.1).
    ++counters_.dropped;
    Drep r;
    r.local_comm_id = d.remote_comm_id;
    r.remote_comm_id = d.local_comm_id;
    Mad m;
    encode(r, h.tid, m);
    send(src, m);
    return;
  }
  const uint32_t id = d.remote_comm_id;
  c->tid = h.tid;
  switch (c->state) {
    case ConnState::kEstablished:
    case ConnState::kRepSent:
    case ConnState::kRepRcvd: {
      c->state = ConnState::kDreqRcvd;
      c->retries_left = 0;
      c->deadline = kNever;
      if (c->orphan) {  // nobody to ask: answer now
        disconnect(id, {}, now);
        return;
      }
      Event ev{Event::Type::kDreq};
      ev.private_data = std::move(d.private_data);
      emit_for(id, *c, std::move(ev));
      return;
    }
    case ConnState::kDreqSent: {
      // Both sides disconnected at once (12.9.8.3): answer, and we are done too.
      Drep r;
      r.local_comm_id = id;
      r.remote_comm_id = c->remote_id;
      encode(r, h.tid, c->cached);
      c->has_cached = true;
      send(src, c->cached);
      enter_time_wait(id, *c, now);
      Event ev{Event::Type::kDreq};
      ev.private_data = std::move(d.private_data);
      emit_for(id, *c, std::move(ev));
      return;
    }
    case ConnState::kTimeWait:
      // Our DREP was lost: resend it.
      ++counters_.duplicates;
      if (c->has_cached) {
        send(src, c->cached);
      } else {
        Drep r;
        r.local_comm_id = id;
        r.remote_comm_id = c->remote_id;
        Mad m;
        encode(r, h.tid, m);
        send(src, m);
      }
      return;
    default:
      ++counters_.duplicates;  // DREQ_RCVD: a duplicate while the consumer decides
      return;
  }
}

void Agent::on_drep(IpAddr src, const uint8_t* msg, Time now) {
  Drep d = decode_drep(msg);
  Conn* c = find(d.remote_comm_id, src);
  if (!c || c->state != ConnState::kDreqSent) {
    ++counters_.dropped;
    return;
  }
  const uint32_t id = d.remote_comm_id;
  enter_time_wait(id, *c, now);
  Event ev{Event::Type::kDrep};
  ev.private_data = std::move(d.private_data);
  emit_for(id, *c, std::move(ev));
}

void Agent::destroy(uint32_t id, Time now) {
  auto sit = sidrs_.find(id);
  if (sit != sidrs_.end()) {
    if (!sit->second.active)
      sidr_index_.erase({sit->second.peer_ip, sit->second.remote_request_id});
    sidrs_.erase(sit);
  }
  auto it = conns_.find(id);
  if (it == conns_.end()) return;
  Conn& c = it->second;
  c.orphan = true;
  switch (c.state) {
    case ConnState::kReqSent:
    case ConnState::kMraReqRcvd:
      // The peer may have state for us: tell it we gave up (the kernel sends REJ "timeout").
      send_rej_raw(c.peer_ip, c.tid, id, c.remote_id, MsgRef::kReq,
                   static_cast<uint16_t>(RejReason::kTimeout));
      conns_.erase(it);
      return;
    case ConnState::kReqRcvd:
    case ConnState::kMraReqSent:
    case ConnState::kRepSent:
    case ConnState::kRepRcvd:
      reject(id, static_cast<uint16_t>(RejReason::kConsumerReject), {}, now);
      return;
    case ConnState::kEstablished:
    case ConnState::kDreqRcvd:
      disconnect(id, {}, now);  // DREQ (retried) or DREP, then time wait, silently
      return;
    case ConnState::kDreqSent:
    case ConnState::kTimeWait:
      return;  // runs out by itself
    case ConnState::kIdle:
      conns_.erase(it);
      return;
  }
}

void Agent::destroy_all(Time now) {
  std::vector<uint32_t> ids;
  for (const auto& [id, c] : conns_)
    if (!c.orphan) ids.push_back(id);  // an orphan's goodbye is under way already
  for (uint32_t id : ids) destroy(id, now);
}
}  // namespace uroce::cm

// The CM agent's SIDR (IBTA 12.11, agent.h): the service ID resolution a UD QP makes of a
// peer's QPN and Q_Key — the request with its retries, the listener's answer, the reply. Apart
// from connections (agent.cc): SIDR has no connection state, only a request outstanding.
#include <cerrno>
#include <utility>

#include "cm/agent.h"

namespace uroce::cm {

uint32_t Agent::sidr_request(IpAddr dst_ip, SidrReq req, Time now) {
  const uint32_t id = alloc_id();
  req.request_id = id;
  Sidr s;
  s.active = true;
  s.peer_ip = dst_ip;
  s.tid = new_tid();
  if (!encode(req, s.tid, s.retx)) return 0;
  s.retries_left = cfg_.max_cm_retries;
  s.retry_ns = wait_for(cfg_.cm_response_timeout);
  s.deadline = now + s.retry_ns;
  send(dst_ip, s.retx);
  sidrs_.emplace(id, s);
  return id;
}

void Agent::sidr_cancel(uint32_t id) {
  auto it = sidrs_.find(id);
  if (it != sidrs_.end() && it->second.active) sidrs_.erase(it);
}

void Agent::on_sidr_req(IpAddr src, const MadHeader& h, const uint8_t* msg, Time now) {
  SidrReq req = decode_sidr_req(msg);
  auto dup = sidr_index_.find({src, req.request_id});
  if (dup != sidr_index_.end()) {
    ++counters_.duplicates;
    auto it = sidrs_.find(dup->second);
    if (it != sidrs_.end() && it->second.replied) send(src, it->second.retx);
    return;  // not yet answered: the consumer will
  }
  auto l = listeners_.find(req.service_id);
  if (l == listeners_.end()) {
    ++counters_.rej_no_listener;
    SidrRep r;
    r.request_id = req.request_id;
    r.status = SidrStatus::kServiceIdNotSupported;
    r.service_id = req.service_id;
    Mad m;
    encode(r, h.tid, m);
    send(src, m);
    return;
  }
  const uint32_t id = alloc_id();
  sidrs_.emplace(id, Sidr{.peer_ip = src,
                          .remote_request_id = req.request_id,
                          .tid = h.tid,
                          .listen_cookie = l->second});
  sidr_index_[{src, req.request_id}] = id;
  Event ev{Event::Type::kSidrReq, id, l->second, src};
  ev.sidr_req = std::move(req);
  emit(std::move(ev));
  (void)now;
}

int Agent::sidr_reply(uint32_t id, SidrRep rep, Time now) {
  auto it = sidrs_.find(id);
  if (it == sidrs_.end() || it->second.active || it->second.replied) return EINVAL;
  Sidr& s = it->second;
  rep.request_id = s.remote_request_id;
  if (!encode(rep, s.tid, s.retx)) return EINVAL;
  s.replied = true;
  // Kept for duplicates (our reply lost) until it could no longer be asked for.
  s.deadline = now + cm_timeout_ns(cfg_.time_wait) + wait_for(cfg_.cm_response_timeout);
  send(s.peer_ip, s.retx);
  return 0;
}

void Agent::on_sidr_rep(IpAddr src, const uint8_t* msg, Time now) {
  SidrRep rep = decode_sidr_rep(msg);
  auto it = sidrs_.find(rep.request_id);
  if (it == sidrs_.end() || !it->second.active || it->second.peer_ip != src) {
    ++counters_.dropped;
    return;
  }
  Event ev{Event::Type::kSidrRep};
  ev.id = rep.request_id;
  ev.peer_ip = src;
  ev.sidr_rep = std::move(rep);
  sidrs_.erase(it);
  emit(std::move(ev));
  (void)now;
}

}  // namespace uroce::cm

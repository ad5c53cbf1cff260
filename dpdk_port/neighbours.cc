#include "dpdk_port/neighbours.h"

#include <algorithm>
#include <cmath>

namespace uroce::dpdk {

bool NeighbourTable::lookup(const wire::IpAddr& ip, Mac* mac) const {
  auto it = entries_.find(ip);
  if (it == entries_.end() || it->second.state != State::kResolved) return false;
  *mac = it->second.mac;
  return true;
}

NeighbourTable::Lookup NeighbourTable::resolve(const wire::IpAddr& ip, Time now, Mac* mac,
                                               bool* send_request) {
  *send_request = false;
  auto it = entries_.find(ip);
  if (it != entries_.end()) {
    Entry& e = it->second;
    switch (e.state) {
      case State::kResolved:
        *mac = e.mac;
        return Lookup::kResolved;
      case State::kIncomplete:
        return Lookup::kPending;
      case State::kFailed:
        if (now < e.deadline) return Lookup::kFailed;
        // The hold is over: resolve afresh.
        e.state = State::kIncomplete;
        e.requests = 1;
        e.deadline = now + p_.retry_ns;
        *send_request = true;
        return Lookup::kPending;
    }
  }
  if (learned_ >= p_.max_entries) return Lookup::kFailed;  // a table full of strangers
  Entry& e = entries_[ip];
  ++learned_;
  e.requests = 1;
  e.deadline = now + p_.retry_ns;
  *send_request = true;
  return Lookup::kPending;
}

bool NeighbourTable::hold(const wire::IpAddr& ip, void* pkt) {
  auto it = entries_.find(ip);
  if (it == entries_.end() || it->second.state != State::kIncomplete ||
      it->second.pending.size() >= p_.max_pending)
    return false;
  it->second.pending.push_back(pkt);
  return true;
}

void NeighbourTable::learn(const wire::IpAddr& ip, const Mac& mac, Time now, bool create,
                           std::vector<void*>* released) {
  (void)now;
  auto it = entries_.find(ip);
  if (it == entries_.end()) {
    if (!create || learned_ >= p_.max_entries) return;
    it = entries_.emplace(ip, Entry{}).first;
    ++learned_;
  }
  Entry& e = it->second;
  if (e.is_static) return;  // configured by the operator: ARP does not override it
  e.state = State::kResolved;
  e.mac = mac;
  e.requests = 0;
  e.deadline = kNever;
  for (void* p : e.pending) released->push_back(p);
  e.pending.clear();
}

void NeighbourTable::add_static(const wire::IpAddr& ip, const Mac& mac) {
  Entry& e = entries_[ip];
  e.state = State::kResolved;
  e.is_static = true;
  e.mac = mac;
  e.deadline = kNever;
}

void NeighbourTable::poll(Time now, std::vector<wire::IpAddr>* requests,
                          std::vector<void*>* dropped) {
  for (auto it = entries_.begin(); it != entries_.end();) {
    Entry& e = it->second;
    if (e.state == State::kResolved || e.deadline > now) {
      ++it;
      continue;
    }
    if (e.state == State::kFailed) {
      // The hold is over: forget it, so the next packet starts a new resolution.
      it = entries_.erase(it);
      --learned_;
      continue;
    }
    if (e.requests < p_.max_requests) {
      ++e.requests;
      e.deadline = now + p_.retry_ns;
      requests->push_back(it->first);
    } else {
      e.state = State::kFailed;
      e.deadline = now + p_.failed_hold_ns;
      ++failures_;
      for (void* p : e.pending) dropped->push_back(p);
      e.pending.clear();
    }
    ++it;
  }
}

Time NeighbourTable::next_deadline() const {
  Time t = kNever;
  for (const auto& [ip, e] : entries_)
    if (e.state != State::kResolved) t = std::min(t, e.deadline);
  return t;
}

void PauseState::on_pause(uint8_t mask, const uint16_t quanta[8], double quantum_ns, Time now) {
  for (int p = 0; p < 8; ++p) {
    if (!(mask & (1u << p))) continue;
    // A new PAUSE replaces the running one (802.3 31B.3.7: the timer is reloaded), XON included.
    until_[p] = quanta[p] == 0 ? 0 : now + static_cast<Time>(std::ceil(quanta[p] * quantum_ns));
  }
}

Time PauseState::next_expiry(Time now) const {
  Time t = kNever;
  for (Time u : until_)
    if (u > now) t = std::min(t, u);
  return t;
}

}  // namespace uroce::dpdk

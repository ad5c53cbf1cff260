#include "sim/fabric.h"

#include <deque>
#include <limits>
#include <stdexcept>

namespace uroce::sim {

Fabric::Fabric(uint64_t seed) : seed_(seed) {}

Fabric::~Fabric() {
  flows_.clear();  // before the hosts whose QPs they name
}

Host& Fabric::add_host(const std::string& name, const HostConfig& c) {
  const uint32_t i = uint32_t(hosts_.size());
  hosts_.push_back(std::make_unique<Host>(q_, pool_, name, i, host_ip(i), c, &window_));
  host_adj_.emplace_back();
  return *hosts_.back();
}

Switch& Fabric::add_switch(const std::string& name, const SwitchConfig& c) {
  const uint32_t i = uint32_t(switches_.size());
  switches_.push_back(std::make_unique<Switch>(q_, pool_, name, i, c, &window_, seed_));
  switch_adj_.emplace_back();
  return *switches_.back();
}

std::string Fabric::node_name(NodeRef n) const {
  return n.kind == NodeRef::Kind::kHost ? hosts_[n.index]->name() : switches_[n.index]->name();
}

uint32_t Fabric::connect(NodeRef a, NodeRef b, const LinkSpec& spec) {
  if (a.kind == NodeRef::Kind::kHost && b.kind == NodeRef::Kind::kHost)
    throw std::invalid_argument("a host connects to a switch, not to a host");
  if (a.kind == NodeRef::Kind::kSwitch && b.kind == NodeRef::Kind::kHost) std::swap(a, b);
  if (spec.rate_bps == 0) throw std::invalid_argument("a link needs a rate");
  FabricLink l;
  l.name = node_name(a) + "-" + node_name(b);
  l.a = a;
  l.b = b;
  l.spec = spec;
  link_rngs_.push_back(
      std::make_unique<Rng>(Rng::stream(seed_, 0x11'0000'0000ull + links_.size())));
  Rng& rng = *link_rngs_.back();
  const ChannelParams cp{.delay = spec.delay};
  const ChannelParams lossy{.delay = spec.delay, .loss = spec.loss_to_a};
  // The sinks are set once both ends have their ports.
  Switch& sb = *switches_[b.index];
  auto ab = std::make_unique<Channel>(q_, pool_, rng, cp, nullptr);
  auto ba = std::make_unique<Channel>(q_, pool_, rng, lossy, nullptr);
  l.ab = ab.get();
  l.ba = ba.get();
  if (a.kind == NodeRef::Kind::kHost) {
    Host& h = *hosts_[a.index];
    ba->set_sink(h.sink());
    l.a_port = 0;
    h.attach(std::move(ab), sb.name());
    l.a_tx = &h.nic();
  } else {
    Switch& sa = *switches_[a.index];
    l.a_port = sa.add_port(spec.rate_bps, std::move(ab), sb.name());
    ba->set_sink(sa.sink(l.a_port));
    l.a_tx = sa.port(l.a_port).egress.get();
  }
  l.b_port = sb.add_port(spec.rate_bps, std::move(ba), node_name(a));
  l.ab->set_sink(sb.sink(l.b_port));
  l.b_tx = sb.port(l.b_port).egress.get();
  if (a.kind == NodeRef::Kind::kHost && hosts_[a.index]->config().rate_bps != spec.rate_bps)
    throw std::invalid_argument("host " + node_name(a) + ": its NIC rate differs from the link's");
  adj(a).push_back(Adj{l.a_port, b});
  adj(b).push_back(Adj{l.b_port, a});
  links_.push_back(l);
  return uint32_t(links_.size() - 1);
}

void Fabric::set_link_mtu(uint32_t link, uint32_t mtu) {
  const FabricLink& l = links_.at(link);
  for (auto [n, port] : {std::pair{l.a, l.a_port}, std::pair{l.b, l.b_port}})
    if (n.kind == NodeRef::Kind::kSwitch) switches_[n.index]->port(port).mtu = mtu;
}

void Fabric::compute_routes() {
  constexpr uint32_t kInf = std::numeric_limits<uint32_t>::max();
  for (uint32_t h = 0; h < hosts_.size(); ++h) {
    // Hop distance of every switch from host h (hosts do not forward).
    std::vector<uint32_t> dist(switches_.size(), kInf);
    std::deque<uint32_t> todo;
    for (const Adj& e : host_adj_[h]) {
      if (e.peer.kind == NodeRef::Kind::kSwitch && dist[e.peer.index] == kInf) {
        dist[e.peer.index] = 1;
        todo.push_back(e.peer.index);
      }
    }
    while (!todo.empty()) {
      const uint32_t s = todo.front();
      todo.pop_front();
      for (const Adj& e : switch_adj_[s]) {
        if (e.peer.kind != NodeRef::Kind::kSwitch || dist[e.peer.index] != kInf) continue;
        dist[e.peer.index] = dist[s] + 1;
        todo.push_back(e.peer.index);
      }
    }
    for (uint32_t s = 0; s < switches_.size(); ++s) {
      if (dist[s] == kInf) continue;
      std::vector<uint32_t> group;
      for (const Adj& e : switch_adj_[s]) {
        const bool to_host = e.peer == NodeRef{NodeRef::Kind::kHost, h};
        const bool closer =
            e.peer.kind == NodeRef::Kind::kSwitch && dist[e.peer.index] + 1 == dist[s];
        if (dist[s] == 1 ? to_host : closer) group.push_back(e.port);
      }
      switches_[s]->set_route(host_ip(h), std::move(group));
    }
  }
}

uint32_t Fabric::next_qpn() {
  return qpn_++;
}

Flow& Fabric::add_flow(const FlowSpec& spec) {
  if (spec.src >= hosts_.size() || spec.dst >= hosts_.size() || spec.src == spec.dst)
    throw std::invalid_argument("a flow runs between two different hosts of the fabric");
  FlowSpec s = spec;
  // QPNs unique across the fabric unless given, so that flows differ in their UDP source ports
  // as they would between real hosts.
  if (s.src_qpn == 0) s.src_qpn = next_qpn();
  if (s.dst_qpn == 0) s.dst_qpn = next_qpn();
  flows_.push_back(std::make_unique<Flow>(q_, s, uint32_t(flows_.size()), *hosts_[s.src],
                                          *hosts_[s.dst], &finished_));
  return *flows_.back();
}

const FabricLink* Fabric::find_link(const std::string& name) const {
  for (const FabricLink& l : links_)
    if (l.name == name) return &l;
  return nullptr;
}

void Fabric::run(Time end, bool stop_when_done) {
  size_t finite = 0;
  for (const auto& f : flows_) finite += f->spec().messages != 0;
  const bool can_finish = stop_when_done && finite == flows_.size() && finite > 0;
  while (q_.step(end)) {
    if (can_finish && finished_ == finite) break;
  }
}

void Fabric::finish() {
  const Time now = q_.now();
  for (const FabricLink& l : links_) {
    l.a_tx->finish(now);
    l.b_tx->finish(now);
  }
}

}  // namespace uroce::sim

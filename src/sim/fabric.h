// A simulated fabric: hosts (host.h), switches (switch.h), full-duplex links between them — a
// Channel each way behind an EgressPort, with a rate and a propagation delay — shortest-path
// routes with ECMP groups, a workload of flows (workload.h), one virtual clock. Everything is
// seeded from one number: a run is a function of its configuration and its seed.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "sim/channel.h"
#include "sim/event_queue.h"
#include "sim/frame.h"
#include "sim/host.h"
#include "sim/stats.h"
#include "sim/switch.h"
#include "sim/workload.h"

namespace uroce::sim {

struct LinkSpec {
  uint64_t rate_bps = 40'000'000'000ull;
  Time delay = 1000;  // propagation, ns
  // Probability that a frame b sends towards a is lost (a host's link: the switch's frames to
  // the host, as Fabric::connect puts the host at a), drawn from the link's seeded stream.
  double loss_to_a = 0;
};

// A node: a host or a switch, by index.
struct NodeRef {
  enum class Kind : uint8_t { kHost, kSwitch } kind = Kind::kHost;
  uint32_t index = 0;
  bool operator==(const NodeRef&) const = default;
};

// One full-duplex link. End a's port transmits towards b through `ab`, b's towards a through
// `ba`.
struct FabricLink {
  std::string name;  // "a-b"
  NodeRef a, b;
  uint32_t a_port = 0, b_port = 0;  // port indices at each end (a host's NIC is port 0)
  LinkSpec spec;
  Channel* ab = nullptr;
  Channel* ba = nullptr;
  EgressPort* a_tx = nullptr;  // a's egress onto the link
  EgressPort* b_tx = nullptr;
};

class Fabric {
 public:
  explicit Fabric(uint64_t seed);
  ~Fabric();
  Fabric(const Fabric&) = delete;
  Fabric& operator=(const Fabric&) = delete;

  // Hosts get 10.0.0.1, 10.0.0.2, … in the order they are added.
  Host& add_host(const std::string& name, const HostConfig& c);
  Switch& add_switch(const std::string& name, const SwitchConfig& c);
  // A link between a host and a switch, or two switches. Returns its index.
  uint32_t connect(NodeRef a, NodeRef b, const LinkSpec& spec);
  // Gives both switch ends of link `link` the IP MTU `mtu` (switch.h; 0: none). A host's end
  // keeps its NIC's (SimPort: 9000): the transport sends what the QP's path MTU allows.
  void set_link_mtu(uint32_t link, uint32_t mtu);
  // Fills every switch's routing table: for each host, the ports on a shortest path to it (an
  // ECMP group where there are several).
  void compute_routes();
  Flow& add_flow(const FlowSpec& spec);

  // Runs until `end` (events at exactly `end` included), or until `stop_when_done` and every
  // flow with a message count has completed.
  void run(Time end, bool stop_when_done = false);
  // Closes pause and queue accounting at the current time (after run()).
  void finish();

  EventQueue& queue() { return q_; }
  Window& window() { return window_; }
  const Window& window() const { return window_; }
  uint64_t seed() const { return seed_; }
  FramePool& pool() { return pool_; }

  size_t host_count() const { return hosts_.size(); }
  size_t switch_count() const { return switches_.size(); }
  Host& host(uint32_t i) { return *hosts_[i]; }
  Switch& sw(uint32_t i) { return *switches_[i]; }
  const Host& host(uint32_t i) const { return *hosts_[i]; }
  const Switch& sw(uint32_t i) const { return *switches_[i]; }
  const std::vector<FabricLink>& links() const { return links_; }
  const FabricLink* find_link(const std::string& name) const;
  std::vector<std::unique_ptr<Flow>>& flows() { return flows_; }
  const std::vector<std::unique_ptr<Flow>>& flows() const { return flows_; }
  std::string node_name(NodeRef n) const;

  static uint32_t host_ip(uint32_t index) { return 0x0a000001u + index; }  // 10.0.0.1 + i

 private:
  struct Adj {
    uint32_t port;  // the local port
    NodeRef peer;
  };
  std::vector<Adj>& adj(NodeRef n) {
    return n.kind == NodeRef::Kind::kHost ? host_adj_[n.index] : switch_adj_[n.index];
  }
  uint32_t next_qpn();

  uint64_t seed_;
  EventQueue q_;
  FramePool pool_;
  Window window_;
  std::vector<std::unique_ptr<Host>> hosts_;
  std::vector<std::unique_ptr<Switch>> switches_;
  std::vector<std::vector<Adj>> host_adj_, switch_adj_;
  std::vector<FabricLink> links_;
  std::vector<std::unique_ptr<Rng>> link_rngs_;  // the channels' (unused without impairments)
  std::vector<std::unique_ptr<Flow>> flows_;
  uint32_t qpn_ = 0x100;
  size_t finished_ = 0;  // flows with a message count that completed or failed
};

}  // namespace uroce::sim

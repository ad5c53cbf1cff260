// The CM of this process: one Agent (agent.h) and one GSI QP (gsi.h) per uroce device, and the
// thread that runs them — it sleeps in epoll on every GSI's completion channel, a timerfd set to
// the agents' earliest deadline and a wake-up eventfd, and on each wake-up feeds received MADs to
// the agents, runs their timers, sends what they queued and hands their events to the rdma_cm
// layer (rdma_cm.h).
//
// Locking: one mutex (mu()) serialises the agents, the GSIs and every rdma_cm object (ids,
// listeners, event queues' producers). Lock order: mu() before any device lock (the GSI and the
// QP transitions the rdma_cm layer makes take device locks). The engine threads never take mu().
// An application blocked in rdma_get_cm_event waits on its channel's fd, never holding mu().
//
// Lifetime: a device's port opens on first use (a bind, listen or resolve on it) and stays open
// until the process exits, like the device contexts librdmacm hands out as id->verbs.
#pragma once

#include <infiniband/verbs.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

#include "cm/agent.h"
#include "cm/gsi.h"
#include "engine/device.h"

namespace uroce::verbs {
class VDevice;
}

namespace uroce::cm {

// One uroce device as the CM sees it.
struct CmPort {
  verbs::VDevice* vdev = nullptr;
  wire::IpAddr ip{};            // the device's address (IPv4-mapped for an IPv4 device)
  uint32_t scope_id = 0;        // a link-local IPv6 address's interface
  ibv_context* ctx = nullptr;   // what ids on this device report as id->verbs
  ibv_pd* pd = nullptr;         // the default PD of rdma_create_qp(id, NULL, …)
  std::shared_ptr<Device> dev;  // ctx's engine device
  std::unique_ptr<Gsi> gsi;
  std::unique_ptr<Agent> agent;
  uint8_t mtu_enum = IBV_MTU_1024;  // the device's active MTU as an ibv_mtu
  ibv_gid gid{};                    // GID index 0 (IPv4-mapped, or the IPv6 address)
  bool is_v6() const { return !ip.is_v4(); }
};

class CmService {
 public:
  // The process's service (created on first use, never destroyed: the thread runs until exit).
  static CmService& get();

  // At exit, before the devices drain (verbs::set_before_drain): every agent's destroy_all, sent.
  // Only in the process that made the service (a child forked after it has a copy of the agents
  // but none of their connections), and only if mu() comes free soon: a thread stopped while
  // holding it must not stop the exit.
  static void at_exit();

  std::mutex& mu() { return mu_; }

  // The uroce devices of this process (the verbs registry's list).
  const std::vector<verbs::VDevice*>& devices();
  // The port of the device bound to `ip`, opened if needed; nullptr if no uroce device has that
  // address, or *err (an errno) when the device or its GSI cannot be opened. mu() held.
  CmPort* port_by_ip(const wire::IpAddr& ip, int* err);
  CmPort* port_of(verbs::VDevice* vdev, int* err);

  // Called by the service with mu() held for every event an agent raises.
  using Handler = std::function<void(CmPort&, const Event&)>;
  void set_handler(Handler h);

  // After any call into a port's agent (mu() held): sends its MADs, dispatches its events to the
  // handler (which may call the agent again: handled in the same loop), and makes the thread
  // re-arm its timer.
  void flush(CmPort& p);

  Time now() const;

 private:
  CmService() = default;
  void start_thread();  // mu() held
  void run();
  void arm_timer();       // mu() held
  void drain(CmPort& p);  // sends MADs and dispatches events until the agent is quiet
  // A port's ICMP port unreachable (Device::add_port_event_listener: any thread, no lock but
  // unreach_mu_): queued for the CM thread, which fails the attempts waiting on that address
  // (Agent::on_unreachable) and says so once per address (fail_unreachable, mu() held).
  void queue_unreachable(CmPort* p, const wire::IpAddr& ip, uint16_t port);
  void fail_unreachable(Time now);

  struct Unreachable {
    CmPort* port;
    wire::IpAddr ip;
    uint16_t udp_port;
  };
  std::mutex unreach_mu_;
  std::vector<Unreachable> unreach_;
  std::set<wire::IpAddr> told_unreachable_;  // mu()
  std::mutex mu_;
  std::vector<std::unique_ptr<CmPort>> ports_;
  Handler handler_;
  bool flushing_ = false;
  int epfd_ = -1, timerfd_ = -1, wakefd_ = -1;
  bool started_ = false;
};

}  // namespace uroce::cm

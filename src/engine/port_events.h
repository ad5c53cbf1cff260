// What a device's port learns beside frames (ports/port.h, PortEvent: an ICMP destination
// unreachable for a datagram it sent), fanned out to whoever above wants it — the CM, which
// fails a connection attempt to such an address at once (cm/service.cc) — and said in the log
// once per address, so a user whose RC QP is about to end with retry exceeded reads why.
//
// Threading: the port calls on_port_event() on the thread that read the event (the engine's, or
// one running a receive pass), never with the device lock held; listeners run there, under this
// object's lock, and must not block (queue it for a thread of one's own).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <utility>

#include "ports/port.h"

namespace uroce {

class PortEvents final : public PortEventSink {
 public:
  // `name`: how log lines name the port ("udp 127.0.0.1:4791 on lo").
  explicit PortEvents(std::string name) : name_(std::move(name)) {}

  using Listener = std::function<void(const PortEvent&)>;
  uint64_t add_listener(Listener fn);
  // No call to it is running or follows once this returns.
  void remove_listener(uint64_t id);

  void on_port_event(const PortEvent& ev) override;

  // The log line for an unreachable destination (exposed for tests): what failed and what to
  // check. Empty when nothing is said about it (a CM MAD's: the CM says it).
  static std::string describe(const PortEvent& ev);

 private:
  std::string name_;
  std::mutex mu_;
  std::map<uint64_t, Listener> listeners_;
  uint64_t next_id_ = 1;
  std::set<std::pair<wire::IpAddr, uint8_t>> told_;  // (address, ICMP code) already logged
};

}  // namespace uroce

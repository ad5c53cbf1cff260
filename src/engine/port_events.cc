#include "engine/port_events.h"

#include "engine/config.h"
#include "util/log.h"

namespace uroce {
namespace {

constexpr uint32_t kGsiQpn = 1;  // the CM's MADs (IBTA 13.5): rdma_cm says what failed

// ICMP destination-unreachable codes (RFC 792, RFC 1812 5.2.7.1), as a user reads them.
const char* code_text(uint8_t code) {
  switch (code) {
    case 0:
      return "network unreachable";
    case 1:
      return "host unreachable";
    case 2:
      return "protocol unreachable";
    case 3:
      return "port unreachable";
    case 4:
      return "fragmentation needed";
    case 9:
    case 10:
    case 13:
      return "administratively prohibited";
    default:
      return "destination unreachable";
  }
}

}  // namespace

uint64_t PortEvents::add_listener(Listener fn) {
  std::lock_guard<std::mutex> g(mu_);
  const uint64_t id = next_id_++;
  listeners_.emplace(id, std::move(fn));
  return id;
}

void PortEvents::remove_listener(uint64_t id) {
  std::lock_guard<std::mutex> g(mu_);
  listeners_.erase(id);
}

std::string PortEvents::describe(const PortEvent& ev) {
  if (ev.kind != PortEvent::Kind::kUnreachable || ev.dest_qp == kGsiQpn) return {};
  // [fd00::2]:4791 for IPv6, as a URL writes it; 10.0.0.2:4791 for IPv4.
  const std::string ip = ev.dst_ip.to_string();
  const std::string at = ev.dst_ip.is_v4() ? fmt::format("{}:{}", ip, ev.dst_port)
                                           : fmt::format("[{}]:{}", ip, ev.dst_port);
  const std::string qp = ev.dest_qp == PortEvent::kNoQp
                             ? std::string("packets sent there")
                             : fmt::format("packets for its QP {:#x}", ev.dest_qp);
  if (ev.port_unreachable())
    return fmt::format(
        "no RoCE endpoint at {} (ICMP port unreachable): {} are lost, and an RC QP sending "
        "there ends with retry exceeded (IBV_WC_RETRY_EXC_ERR); is the peer program still "
        "running, on a RoCE device with that address?",
        at, qp);
  const std::string from = ev.reporter_ip != wire::IpAddr{} && ev.reporter_ip != wire::IpAddr(0u) &&
                                   ev.reporter_ip != ev.dst_ip
                               ? " from " + ev.reporter_ip.to_string()
                               : std::string();
  return fmt::format("{} is not reachable (ICMP {}{}): {} are lost until the path is back", at,
                     code_text(ev.icmp_code), from, qp);
}

void PortEvents::on_port_event(const PortEvent& ev) {
  std::lock_guard<std::mutex> g(mu_);
  // Once per address and cause: a QP retrying to a dead peer provokes one ICMP per packet.
  if (told_.insert({ev.dst_ip, ev.icmp_code}).second) {
    const std::string line = describe(ev);
    if (!line.empty()) {
      // Port unreachable is definite (RFC 1122 4.1.3.3: a hard error): warn, the default level.
      // The others may pass (a router's host or network unreachable while a route changes).
      if (ev.port_unreachable())
        log().warn("{}: {}", name_, line);
      else
        log().info("{}: {}", name_, line);
    }
  }
  for (auto& [id, fn] : listeners_) fn(ev);
}

}  // namespace uroce

// Counters a port keeps about its own I/O: what it handed to the wire, what the wire or the
// kernel refused, and port-specific events. One list for every port kind (a counter a port kind
// never touches stays 0, and listings show only non-zero counters), so the names a device
// publishes do not depend on its datapath. Writers: the port, under the serialisation the port
// contract gives (transmit side under the device lock, receive side under the engine's receive
// lock); readers: anyone (util/counter.h).
#pragma once

#include "util/counter.h"

namespace uroce {

struct PortCounters {
  // Datagrams (frames) handed to the wire and their RoCE bytes: UDP payload, i.e. IB packet and
  // ICRC, whatever headers the port adds. Counted after a successful send.
  Counter sent_pkts, sent_bytes;
  // Transmit: packets the kernel or the NIC refused (route missing, message too long for the path
  // MTU, no transmit descriptor…). The transport's retransmission recovers them like losses.
  Counter tx_errors;
  // Receive: frames the port could not attribute to a sender (e.g. a datagram without an IPv4
  // source address). Dropped before the device's receive pipeline sees them.
  Counter rx_port_errors;

  // UDP port (src/ports/udp): send sockets opened for distinct UDP source ports, and packets
  // that had to leave from 4791 because no socket could be had for the requested source port.
  Counter tx_src_port_sockets;
  Counter tx_src_port_fallback;
  // UDP port: send sockets on which the kernel refused UDP GSO (UROCE_GSO; e.g. the route's
  // device has no checksum offload): they send one datagram per packet from then on.
  Counter tx_gso_fallback;

  // Visits every counter with its name; Self is PortCounters or const PortCounters.
  template <typename Self, typename F>
  static void visit(Self& s, F&& f) {
    f("sent_pkts", s.sent_pkts);
    f("sent_bytes", s.sent_bytes);
    f("tx_errors", s.tx_errors);
    f("rx_port_errors", s.rx_port_errors);
    f("tx_src_port_sockets", s.tx_src_port_sockets);
    f("tx_src_port_fallback", s.tx_src_port_fallback);
    f("tx_gso_fallback", s.tx_gso_fallback);
  }
};

}  // namespace uroce

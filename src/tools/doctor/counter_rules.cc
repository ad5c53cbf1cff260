#include "tools/doctor/counter_rules.h"

#include <algorithm>
#include <cstdio>

#include "engine/config.h"

namespace uroce::doctor {
namespace {

struct Reader {
  const DeviceCounterView& v;
  uint64_t operator()(const std::string& name) const {
    auto it = v.counters.find(name);
    return it == v.counters.end() ? 0 : it->second;
  }
  // "name value" for each named counter, comma-separated; zeros kept only when keep_zero.
  std::string list(std::initializer_list<const char*> names, bool keep_zero = false) const {
    std::string out;
    for (const char* n : names) {
      const uint64_t x = (*this)(n);
      if (x == 0 && !keep_zero) continue;
      out += (out.empty() ? "" : ", ") + std::string(n) + " " + std::to_string(x);
    }
    return out;
  }
};

std::string percent(uint64_t part, uint64_t whole) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2g%%", whole ? 100.0 * double(part) / double(whole) : 0.0);
  return buf;
}

// The peers with the most of `field`, largest first: "10.0.0.2 (120), fd00::3 (4)".
template <typename F>
std::string worst_peers(const DeviceCounterView& v, F field) {
  std::vector<std::pair<uint64_t, wire::IpAddr>> by;
  for (const auto& [ip, f] : v.peers)
    if (field(f) > 0) by.emplace_back(field(f), ip);
  std::sort(by.rbegin(), by.rend());
  std::string out;
  for (size_t i = 0; i < by.size() && i < 3; ++i)
    out.append(i ? ", " : "")
        .append(by[i].second.to_string())
        .append(" (")
        .append(std::to_string(by[i].first))
        .append(")");
  return out;
}

Check port_check(const DeviceCounterView& v, const Reader& c) {
  Check k{"counters.port", "port"};
  const uint64_t downs = c("port_down_events");
  if (!v.port_active) {
    k.status = Status::kFail;
    k.evidence = "the port is DOWN: the link of the device's interface is down";
    k.fix = "bring the interface up and check its cable or peer (ip link)";
  } else if (downs > 0) {
    k.status = Status::kWarn;
    k.evidence = "ACTIVE now, but the link went down " + std::to_string(downs) +
                 " times while the process ran (port_down_events)";
    k.fix = "look for a flapping link: the interface's carrier changes (ip -s link)";
  } else {
    k.evidence = "ACTIVE, no link changes (port_down_events 0)";
  }
  return k;
}

Check loss_check(const DeviceCounterView& v, const Reader& c) {
  Check k{"counters.loss", "loss"};
  const uint64_t retx = c("retransmitted_pkts"), sent = c("qp_sent_pkts");
  const uint64_t tmo = c("local_ack_timeout_err"), seq = c("rcvd_seq_err");
  const uint64_t ooo = c("out_of_sequence"), implied = c("implied_nak_seq_err");
  if (retx + tmo + seq + ooo + implied == 0) {
    k.evidence = "no packet lost: " + c.list({"retransmitted_pkts", "local_ack_timeout_err",
                                              "rcvd_seq_err", "out_of_sequence"},
                                             true);
    return k;
  }
  // A loss rate of 0.1% already costs RC a visible share of its throughput (each loss is a
  // go-back-N resend of the window behind it); below that it is worth knowing, not an error.
  k.status = retx * 1000 >= std::max<uint64_t>(sent, 1) || tmo > 0 ? Status::kFail : Status::kWarn;
  k.evidence = "packets are lost between the two devices: retransmitted_pkts " +
               std::to_string(retx) + " of qp_sent_pkts " + std::to_string(sent) + " (" +
               percent(retx, sent) + ")";
  const std::string more =
      c.list({"local_ack_timeout_err", "rcvd_seq_err", "out_of_sequence", "implied_nak_seq_err"});
  if (!more.empty()) k.evidence += ", " + more;
  if (tmo > 0 && seq == 0)
    k.evidence +=
        "; timeouts without sequence NAKs: the last packets of bursts, or the ACKs, "
        "were lost";
  const std::string peers = worst_peers(
      v, [](const PeerFigures& f) { return f.retransmitted_pkts + f.local_ack_timeout_err; });
  if (!peers.empty()) k.evidence += "; towards " + peers;
  const uint64_t injected = c("fault_drops") + c("fault_tx_drops");
  if (injected > 0) {
    k.evidence += "; UROCE_FAULTS dropped " + std::to_string(injected) + " packets on purpose (" +
                  c.list({"fault_drops", "fault_tx_drops"}) + ")";
    k.fix =
        "the loss is injected: unset UROCE_FAULTS (on this process or its peer) to see the "
        "network's own";
  } else {
    k.fix =
        "find where packets are dropped: switch and NIC discard counters, a link with "
        "neither PFC nor ECN, an MTU black hole (uroce doctor PEER)";
  }
  return k;
}

Check retry_check(const Reader& c) {
  Check k{"counters.retry_exceeded", "failed connections"};
  const uint64_t exc = c("retry_exceeded_err"), icmp = c("rx_icmp_unreachable");
  if (exc == 0) {
    k.evidence = "no work request ran out of retries (retry_exceeded_err 0)";
    return k;
  }
  k.status = Status::kFail;
  k.evidence = "the peer stopped answering: " + std::to_string(exc) +
               " work requests failed after every retry (retry_exceeded_err)";
  if (icmp > 0)
    k.evidence += "; rx_icmp_unreachable " + std::to_string(icmp) +
                  ": a peer's host said nothing listens on its UDP 4791";
  k.fix =
      "check that the peer program runs and that its device has the address this side "
      "sends to (uroce devices on the peer)";
  return k;
}

Check rnr_check(const Reader& c) {
  Check k{"counters.rnr", "receives posted in time"};
  const uint64_t nak = c("rcvd_rnr_err") + c("send_rnr_err") + c("rnr_wait_drops");
  const uint64_t exc = c("retry_rnr_exceeded_err"), oob = c("out_of_buffer");
  if (nak + exc + oob == 0) {
    k.evidence = "no RNR: " + c.list({"rcvd_rnr_err", "send_rnr_err"}, true);
    if (c("rnr_waits") > 0) k.evidence += ", " + c.list({"rnr_waits"});
    return k;
  }
  k.status = exc > 0 ? Status::kFail : Status::kWarn;
  k.evidence = "the receiver does not post receives fast enough: " +
               c.list({"send_rnr_err", "rcvd_rnr_err", "rnr_wait_drops", "retry_rnr_exceeded_err",
                       "rnr_waits", "out_of_buffer"});
  if (oob > 0) k.evidence += " (out_of_buffer: UD/UC messages dropped for want of a receive)";
  k.fix =
      "post receives earlier or more of them (a deeper receive queue, an SRQ), and give "
      "senders rnr_retry 7";
  return k;
}

Check icrc_check(const Reader& c) {
  Check k{"counters.icrc", "packet integrity"};
  const uint64_t bad = c("rcvd_icrc_err"), injected = c("fault_rx_corrupted");
  if (bad == 0) {
    k.evidence = "no corrupted packet (rcvd_icrc_err 0)";
    return k;
  }
  k.status = bad > injected ? Status::kFail : Status::kWarn;
  k.evidence = "packets arrived corrupted, or from a peer computing the ICRC differently: " +
               c.list({"rcvd_icrc_err", "rx_icrc_suspect"});
  if (injected > 0) {
    k.evidence += "; UROCE_FAULTS corrupted " + std::to_string(injected) + " (fault_rx_corrupted)";
    k.fix = "the corruption is injected: unset UROCE_FAULTS";
  } else {
    k.fix =
        "run both sides with UROCE_ICRC=zlib: if the count still grows, the bytes change on "
        "the way (a bad link, a middlebox rewriting packets)";
  }
  return k;
}

Check ecn_check(const Reader& c) {
  Check k{"counters.ecn", "congestion (ECN, CNPs)"};
  const uint64_t ce = c("rcvd_ecn_ce"), cnp_sent = c("np_cnp_sent");
  const uint64_t handled = c("rp_cnp_handled"), ignored = c("rp_cnp_ignored");
  if (ce + cnp_sent + handled + ignored == 0) {
    k.evidence =
        "no congestion marks: " + c.list({"rcvd_ecn_ce", "np_cnp_sent", "rp_cnp_handled"}, true);
    return k;
  }
  k.evidence = "the path is congested: " +
               c.list({"rcvd_ecn_ce", "np_cnp_sent", "rp_cnp_handled", "rp_cnp_ignored"});
  if (ce > 0 && cnp_sent == 0) {
    k.status = Status::kWarn;
    k.evidence +=
        "; marks arrive but this device answers none with a CNP: the senders never slow "
        "down";
    k.fix = "UROCE_CC=dcqcn on both ends (or UROCE_CC=none,np=1 on this receiver)";
  } else if (ignored > 0) {
    k.status = Status::kWarn;
    k.evidence += "; CNPs arrive for QPs that run no DCQCN (rp_cnp_ignored)";
    k.fix = "UROCE_CC=dcqcn on this sender";
  }
  return k;
}

// Drops by cause: one row per counter, the sentence that explains it and its fix. Counters of
// the sections above (loss, ICRC, RNR) are not repeated here.
struct DropRule {
  const char* counter;
  Status status;
  const char* sentence;
  const char* fix;
};
constexpr DropRule kDropRules[] = {
    {"rx_unknown_qp", Status::kWarn,
     "packets for QPs that do not exist on this device: a peer still sending to a destroyed QP, "
     "or a wrong QPN exchanged",
     "check that both sides exchange the QPNs of live QPs; a peer's retries after this side "
     "exits are harmless"},
    {"odp_faults", Status::kWarn,
     "accesses to on-demand (ODP) memory were refused: its pages were not mapped, or not "
     "writable, when reached (the peer got a remote access error, or a local SGE a protection "
     "error)",
     "keep on-demand buffers mapped while peers may reach them (or ibv_advise_mr them first), and "
     "check the addresses and lengths the peer was given"},
    {"tx_errors", Status::kFail, "the kernel refused sends: no route to the peer, or no buffer",
     "check the route to the peer (ip route get PEER) and net.core.wmem_max"},
    {"rx_socket_overflow", Status::kFail,
     "the socket's receive buffer overflowed: the process did not read fast enough",
     "raise net.core.rmem_max, or give the engine a core of its own"},
    {"rx_icmp_unreachable", Status::kWarn,
     "a peer's host answered ICMP port unreachable: nothing listened on its UDP 4791",
     "start the peer program, or point this side at the address of the peer's device"},
    {"rx_truncated", Status::kWarn, "datagrams larger than any RoCE packet reached UDP 4791",
     "something other than RoCE sends to this port: find it (tshark -i any udp port 4791)"},
    {"rx_too_short", Status::kWarn, "datagrams too short for RoCE reached UDP 4791",
     "something other than RoCE sends to this port: find it (tshark -i any udp port 4791)"},
    {"rx_parse_bad_opcode", Status::kWarn,
     "packets with opcodes uroce does not know (RD, reserved)",
     "capture them (UROCE_PCAP) and look at the sender"},
    {"rx_parse_too_short", Status::kWarn, "packets shorter than their opcode's headers",
     "capture them (UROCE_PCAP) and look at the sender"},
    {"rx_parse_bad_length", Status::kWarn, "packets longer than their opcode allows",
     "capture them (UROCE_PCAP) and look at the sender"},
    {"qp_dropped_pkts", Status::kWarn,
     "QPs dropped packets (Q_Key mismatches, UD without a receive, UC after a loss)",
     "see qkey_violation and out_of_buffer per QP: uroce stats --qp"},
    {"uc_dropped_msgs", Status::kWarn, "UC messages abandoned after a lost packet",
     "UC does not resend: remove the loss, or use RC"},
    {"xrc_srq_invalid", Status::kWarn,
     "XRC requests named an SRQ that the receive QP's XRC domain does not have in this process "
     "(the sender got an invalid-request NAK)",
     "give the sender the number ibv_get_srq_num returns for an XRC SRQ of the receive QP's "
     "domain; a domain is not shared between processes yet (docs/verbs.md, \"XRC\")"},
    {"rx_share_relay_failed", Status::kWarn,
     "packets of a shared device that reached the wrong process could not be passed on",
     "a process of the shared device stopped reading (a debugger, an overloaded host)"},
    {"fault_rx_queue_drops", Status::kWarn,
     "the injected switch queue (UROCE_FAULTS rx.queue) overflowed",
     "UROCE_CC=dcqcn on the senders, or a larger rx.queue buffer"},
    {"arp_failures", Status::kFail, "the next hop did not answer ARP (DPDK port)",
     "put both ends on one subnet (ip=…/N), set gw=, or give neigh=ip@mac"},
    {"tx_no_neighbour", Status::kFail, "packets dropped for want of the next hop's MAC (DPDK port)",
     "put both ends on one subnet (ip=…/N), set gw=, or give neigh=ip@mac"},
    {"rx_port_errors", Status::kFail, "the NIC reported receive errors (DPDK port)",
     "check the link: cable, optics, FCS errors on the switch port"},
    {"tx_pause_drops", Status::kWarn, "packets dropped while the link partner paused the port",
     "the switch is congested on that priority: enable ECN marking, find the congested port"},
};

void drop_checks(const Reader& c, std::vector<Check>& out) {
  const size_t before = out.size();
  for (const DropRule& r : kDropRules) {
    const uint64_t x = c(r.counter);
    if (x == 0) continue;
    out.push_back({std::string("counters.drops.") + r.counter, "drops", r.status,
                   std::string(r.sentence) + " (" + r.counter + " " + std::to_string(x) + ")",
                   r.fix});
  }
  if (out.size() == before)
    out.push_back({"counters.drops", "drops", Status::kPass,
                   "no drops by any other cause (" +
                       c.list({"rx_unknown_qp", "tx_errors", "rx_socket_overflow",
                               "rx_icmp_unreachable", "qp_dropped_pkts"},
                              true) +
                       ", …)"});
}

void pfc_check(const Reader& c, std::vector<Check>& out) {
  const uint64_t pauses = c("rx_pause_frames"), held = c("tx_pause_held");
  if (pauses + held == 0) return;  // a kernel-UDP device never sees PAUSE frames
  std::string prios;
  for (int p = 0; p < 8; ++p) {
    const std::string n = "rx_prio" + std::to_string(p) + "_pause";
    if (c(n) > 0) prios += (prios.empty() ? "" : ", ") + n + " " + std::to_string(c(n));
  }
  out.push_back(
      {"counters.pfc", "PAUSE / PFC", Status::kWarn,
       "the link partner pauses this port: " + c.list({"rx_pause_frames", "tx_pause_held"}) +
           (prios.empty() ? "" : "; " + prios),
       "a switch queue fills: find the congested port, and check that PFC is "
       "on the priority RoCE uses (prio, commonly 3) and ECN marks before it"});
}

}  // namespace

std::vector<Check> diagnose_counters(const DeviceCounterView& v) {
  const Reader c{v};
  std::vector<Check> out;
  out.push_back(port_check(v, c));
  out.push_back(loss_check(v, c));
  out.push_back(retry_check(c));
  out.push_back(rnr_check(c));
  out.push_back(icrc_check(c));
  out.push_back(ecn_check(c));
  drop_checks(c, out);
  pfc_check(c, out);
  return out;
}

}  // namespace uroce::doctor

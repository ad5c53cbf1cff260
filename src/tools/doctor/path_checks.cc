#include "tools/doctor/path_checks.h"

#include <cstdio>
#include <string>

#include "engine/config.h"

namespace uroce::doctor {
namespace {

std::string us(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, v >= 1000 ? "%.1f ms" : "%.0f µs", v >= 1000 ? v / 1000 : v);
  return buf;
}

constexpr uint32_t kLadder[] = {256, 512, 1024, 2048, 4096};

}  // namespace

Check reach_verdict(const wire::IpAddr& peer, const EchoSummary& e, const RoceProbeResult* roce) {
  Check k{"path.reach", "reachable"};
  const std::string p = peer.to_string();
  const char* icmp = peer.is_v4() ? "ICMP" : "ICMPv6";
  if (e.answered > 0) {
    k.evidence = p + " answers " + icmp + " echo (" + std::to_string(e.answered) + "/" +
                 std::to_string(e.sent) + "), round trip " + us(e.min_rtt_us) + " min, " +
                 us(e.avg_rtt_us) + " average";
    return k;
  }
  const bool roce_answered = roce && roce->outcome == RoceProbeResult::Outcome::kAnswered;
  k.status = roce_answered ? Status::kWarn : Status::kFail;
  k.evidence = p + " does not answer " + icmp + " echo (0/" + std::to_string(e.sent) + ")";
  if (e.error) k.evidence += ": " + e.error->text();
  if (roce_answered)
    k.evidence.append(", but its RoCE CM answered: ")
        .append(icmp)
        .append(" is filtered, the MTU and TOS checks cannot run");
  k.fix =
      roce_answered
          ? std::string("let ").append(icmp).append(" echo through to measure the path MTU and TOS")
          : "check the address, the route (ip route get " + p + ") and that the peer is up";
  return k;
}

Check udp_verdict(const wire::IpAddr& peer, const RoceProbeResult& r) {
  using O = RoceProbeResult::Outcome;
  Check k{"path.udp4791", "UDP 4791"};
  const std::string p = peer.to_string(), p4791 = host_port(peer, 4791);
  switch (r.outcome) {
    case O::kAnswered:
      k.evidence = "a RoCE CM at " + p +
                   " answered the SIDR REQ on QP1 (SIDR REP: " + sidr_status_text(r.sidr_status) +
                   ") in " + us(r.rtt_us) + "; the REP came back with " +
                   describe_tos(r.reply_tos) +
                   " (uroce sends its CM messages ECT(0), Linux rxe Not-ECT)";
      break;
    case O::kPortUnreachable:
      k.status = Status::kFail;
      k.evidence = "nothing listens on " + p4791 + ": " + r.detail +
                   " (conclusive: the host itself said so, or a filter REJECTs the port)";
      k.fix = "start the peer program on a RoCE device with address " + p +
              " (uroce devices there), or remove the REJECT rule";
      break;
    case O::kIcmpError:
      k.status = Status::kFail;
      k.evidence = "the SIDR REQ to " + p4791 + " was refused: " + r.detail;
      k.fix = "fix the route or the filter that answers for " + p;
      break;
    case O::kSilence:
      k.status = Status::kWarn;
      k.evidence = "no answer to " + std::to_string(r.attempts) + " SIDR REQs to " + p4791 +
                   " (inconclusive): a filter drops UDP 4791 on the way there or back, or "
                   "no program there has a RoCE CM on QP1 (a uroce peer only while it uses "
                   "rdma_cm; ibv_rc_pingpong and other verbs-only programs stay silent)";
      k.fix =
          "look for firewall or ACL rules on UDP 4791 along the path (both directions); "
          "with rdma_cm running on the peer this probe is answered";
      break;
    case O::kCannotRun:
      k.status = Status::kSkip;
      k.evidence = r.detail;
      break;
  }
  return k;
}

Check mtu_verdict(const std::vector<MtuStep>& steps, uint32_t device_mtu, uint32_t if_mtu,
                  uint32_t ip_overhead) {
  Check k{"path.mtu", "path MTU"};
  // IPv6 has no DF bit: its routers never fragment, and the probes are sent unfragmented.
  const std::string df = ip_overhead == kRoceIpv6Overhead ? "unfragmented" : "with DF";
  uint32_t best = 0;
  const MtuStep* first_bad = nullptr;
  for (const MtuStep& s : steps) {
    if (s.answered) {
      best = s.ib_mtu;
    } else if (!first_bad) {
      first_bad = &s;
    }
  }
  if (!first_bad) {
    k.evidence = "echo requests of " + std::to_string(steps.empty() ? 0 : steps.back().ip_bytes) +
                 " bytes " + df + " come back: a RoCE packet of MTU " + std::to_string(best) +
                 " fits both ways (the device uses " + std::to_string(device_mtu) + ")";
    return k;
  }
  std::string why = "no answer";
  if (first_bad->error) why = first_bad->error->text();
  k.evidence = "the largest RoCE packet that fits is of MTU " +
               (best ? std::to_string(best) : std::string("none")) + ": " +
               std::to_string(first_bad->ip_bytes) + "-byte echo requests " + df + " get " + why;
  if (best >= device_mtu) {
    // The device never sends larger packets than its MTU: the path is large enough for it.
    k.evidence += "; the device uses " + std::to_string(device_mtu) + ", which fits";
    if (device_mtu < 4096) {
      k.status = Status::kWarn;
      k.fix = "for RoCE MTU 4096 every hop needs an MTU of at least " +
              std::to_string(4096 + ip_overhead) + " (9000 is usual)";
    }
    return k;
  }
  k.status = Status::kFail;
  k.evidence += "; but the device reports active MTU " + std::to_string(device_mtu) +
                (if_mtu ? " (interface MTU " + std::to_string(if_mtu) + ")" : "") +
                ": programs that use it lose every full-size packet";
  if (!first_bad->error) k.evidence += " (an MTU black hole: nothing says why)";
  k.fix = "set an MTU of at least " + std::to_string(device_mtu + ip_overhead) +
          " on every hop (and the peer), or have programs use path MTU " + std::to_string(best) +
          " (ibv_rc_pingpong -m " + std::to_string(best) + ")";
  return k;
}

Check dscp_verdict(uint8_t sent_tos, uint8_t reply_tos) {
  Check k{"path.dscp", "DSCP kept"};
  const uint8_t sent = dscp_of(sent_tos), got = dscp_of(reply_tos);
  if (sent == got) {
    k.evidence = "an echo request with DSCP " + std::to_string(sent) + " came back with it";
    return k;
  }
  k.status = Status::kFail;
  k.evidence = "an echo request sent with DSCP " + std::to_string(sent) + " came back with DSCP " +
               std::to_string(got) +
               ": the path rewrites it (or the peer's stack does not echo the TOS; Linux does)";
  k.fix =
      "make the switches trust DSCP on the RoCE ports (or remark it to the lossless class) "
      "in both directions";
  return k;
}

Check ecn_verdict(uint8_t sent_tos, uint8_t reply_tos) {
  Check k{"path.ecn", "ECN kept"};
  const uint8_t got = ecn_of(reply_tos);
  const std::string was = ecn_name(sent_tos);
  if (got == ecn_of(sent_tos) || got == 3) {
    k.evidence = "an echo request sent " + was + " came back " +
                 (got == 3 ? std::string("CE: a queue on the path marks, as it should") : was);
    return k;
  }
  k.status = Status::kFail;
  k.evidence = "an echo request sent " + was + " came back " + ecn_name(reply_tos) +
               ": the path clears ECN, so no switch can mark congestion and DCQCN never acts";
  k.fix = "stop the ECN bits from being cleared (a remarking policy or a tunnel that drops them)";
  return k;
}

std::vector<Check> check_path(const PathOptions& o) {
  std::vector<Check> out;
  std::string why;
  auto pinger = Pinger::open(o.src, o.peer, o.scope_id, &why);
  EchoSummary es;
  if (pinger) {
    double sum = 0;
    for (int i = 0; i < 5; ++i) {
      EchoResult r = pinger->echo(84, 0, i == 0 ? 2 * o.wait_ms : o.wait_ms);
      ++es.sent;
      if (r.error) es.error = r.error;
      if (!r.answered) continue;
      ++es.answered;
      sum += r.rtt_us;
      if (es.min_rtt_us == 0 || r.rtt_us < es.min_rtt_us) es.min_rtt_us = r.rtt_us;
    }
    if (es.answered) es.avg_rtt_us = sum / es.answered;
  }
  const RoceProbeResult roce = probe_udp4791(o.src, o.peer, o.scope_id, o.attempts, o.wait_ms);
  if (pinger) {
    out.push_back(reach_verdict(o.peer, es, &roce));
  } else {
    out.push_back({"path.reach", "reachable", Status::kSkip, why});
  }
  out.push_back(udp_verdict(o.peer, roce));
  const bool v6 = !o.peer.is_v4();
  if (!pinger || es.answered == 0) {
    const std::string reason =
        pinger ? std::string("needs answers to ").append(v6 ? "ICMPv6" : "ICMP").append(" echo")
               : why;
    out.push_back({"path.mtu", "path MTU", Status::kSkip, reason});
    out.push_back({"path.dscp", "DSCP kept", Status::kSkip, reason});
    out.push_back({"path.ecn", "ECN kept", Status::kSkip, reason});
    return out;
  }
  // The ladder, smallest first; it stops at the first size that does not come back (retried:
  // one lost echo is not an MTU) or that something refuses.
  const uint32_t overhead = v6 ? kRoceIpv6Overhead : kRoceIpOverhead;
  std::vector<MtuStep> steps;
  for (uint32_t m : kLadder) {
    MtuStep s;
    s.ib_mtu = m;
    s.ip_bytes = m + overhead;
    for (int a = 0; a < o.attempts && !s.answered; ++a) {
      EchoResult r = pinger->echo(s.ip_bytes, 0, o.wait_ms);
      s.answered = r.answered;
      s.error = r.error;
      // An answer from the path (fragmentation needed, unreachable) or the interface's own
      // MTU is final; anything else may be one lost or refused packet: try again.
      if (r.error && (!r.error->local || r.error->err == EMSGSIZE)) break;
    }
    steps.push_back(s);
    if (!s.answered) break;
  }
  out.push_back(mtu_verdict(steps, o.device_mtu, o.if_mtu, overhead));
  const uint8_t tos = static_cast<uint8_t>(o.dscp << 2 | 2);  // ECT(0), as RoCE data
  std::optional<EchoResult> tr;
  for (int a = 0; a < o.attempts && !(tr && tr->answered); ++a)
    tr = pinger->echo(84, tos, o.wait_ms);
  if (tr && tr->answered) {
    out.push_back(dscp_verdict(tos, tr->reply_tos));
    out.push_back(ecn_verdict(tos, tr->reply_tos));
  } else {
    const std::string why = "echo requests with TOS " + describe_tos(tos) +
                            " got no answer, while those with TOS 0 did: the path drops them";
    const std::string fix = "find the QoS policy that drops this class";
    out.push_back({"path.dscp", "DSCP kept", Status::kWarn, why, fix});
    out.push_back({"path.ecn", "ECN kept", Status::kWarn, why, fix});
  }
  return out;
}

}  // namespace uroce::doctor

// How a lab's two runs are shown (lab.h): its metrics, the report `uroce-sim lab NAME` prints
// (the headline, per-port PFC, queues, ECN marks and drops, the flows) and the same as JSON.
#include <algorithm>
#include <cstdio>

#include "sim/json.h"
#include "sim/lab.h"

namespace uroce::sim {

std::vector<LabMetric> lab_metrics(const LabRun& r) {
  const RunResult& x = r.run;
  std::vector<LabMetric> m;
  for (const auto& [k, v] : r.extra) {
    static const std::pair<const char*, const char*> labels[] = {
        {"victim_gbps", "victim goodput, Gb/s"},
        {"victim_host_paused_us", "victim's host paused, µs"},
        {"jain", "fairness (Jain's index)"},
        {"min_flow_gbps", "slowest flow's goodput, Gb/s"},
        {"fct_max_us", "completion time of complete flows, max µs"},
        {"fct_mean_us", "completion time of complete flows, mean µs"},
        {"ideal_us", "ideal completion (payload at line rate), µs"},
        {"fct_max_over_ideal", "max completion / ideal"},
        {"completed", "every message completed (1 = yes)"},
        {"flows_failed", "flows failed (QP in error)"},
        {"messages", "messages completed"},
    };
    std::string label = k;
    for (const auto& [key, text] : labels)
      if (k == key) label = text;
    m.push_back({k, label, v});
  }
  double goodput = 0, qmax = 0;
  bool streams = false;  // transfers are measured by their completion times instead
  for (const FlowResult& f : x.flows) {
    goodput += f.goodput_gbps;
    streams = streams || f.wanted == 0;
  }
  for (const PortReport& p : x.ports) qmax = std::max(qmax, p.queue_max_kib);
  if (streams) m.push_back({"goodput_gbps", "goodput of all flows, Gb/s", goodput});
  m.push_back({"pause_frames", "PAUSE frames sent by switches", double(x.pfc_pause_frames)});
  m.push_back({"pause_us", "time ports were paused, µs", x.pfc_pause_time_us});
  m.push_back({"drops", "drops (no buffer, or MTU)", double(x.drops)});
  m.push_back({"mtu_drops", "drops: longer than a port's MTU", double(x.mtu_drops)});
  m.push_back({"ecn_marks", "ECN marks (CE) by switches", double(x.marks)});
  m.push_back({"cnps", "CNPs sent by receivers", double(x.cnps)});
  m.push_back({"retransmitted_packets", "packets retransmitted", double(x.retransmitted_packets)});
  m.push_back({"timeouts", "local ACK timeouts", double(x.timeouts)});
  m.push_back({"completion_errors", "completions in error", double(x.errors)});
  m.push_back({"queue_max_kib", "deepest queue, KiB", qmax});
  for (int k = 0; k < kPriorities; ++k) {
    uint64_t pauses = 0, drops = 0;
    for (const PortReport& p : x.ports) {
      pauses += p.prio[k].tx_pause;
      drops += p.prio[k].drops;
    }
    m.push_back({"pause_frames_p" + std::to_string(k),
                 "PAUSE frames sent, priority " + std::to_string(k), double(pauses)});
    m.push_back({"drops_p" + std::to_string(k), "drops (no buffer), priority " + std::to_string(k),
                 double(drops)});
  }
  return m;
}

namespace {

std::string fmt(double v) {
  char buf[32];
  if (v == double(int64_t(v)) && v < 1e15 && v > -1e15)
    std::snprintf(buf, sizeof buf, "%lld", static_cast<long long>(v));
  else if (v >= 100 || v <= -100)
    std::snprintf(buf, sizeof buf, "%.1f", v);
  else
    std::snprintf(buf, sizeof buf, "%.3g", v);
  return buf;
}

std::string pad(const std::string& s, size_t w, bool right = true) {
  // Width in characters, not bytes: µ is two bytes.
  size_t chars = 0;
  for (unsigned char c : s) chars += (c & 0xc0) != 0x80;
  if (chars >= w) return s;
  return right ? std::string(w - chars, ' ') + s : s + std::string(w - chars, ' ');
}

// "x3.2" (3.2 times more) or "/12" (12 times less) from a before to an after value; "to 0" or
// "from 0" when one of them is 0, nothing when they are equal.
std::string change(double b, double a) {
  if (b == a) return "";
  if (b <= 0 || a <= 0) return a == 0 ? "to 0" : "from 0";
  char buf[32];
  if (a >= b)
    std::snprintf(buf, sizeof buf, "x%.3g", a / b);
  else
    std::snprintf(buf, sizeof buf, "/%.3g", b / a);
  return buf;
}

std::string window_text(const RunResult& r) {
  char buf[96];
  std::snprintf(buf, sizeof buf, "%s-%s ms of %s ms", fmt(r.window_begin_us / 1000).c_str(),
                fmt(r.window_end_us / 1000).c_str(), fmt(r.duration_us / 1000).c_str());
  return buf;
}

}  // namespace

std::string lab_report(const Lab& lab, const LabResult& r) {
  const RunResult& B = r.before.run;
  const RunResult& A = r.after.run;
  std::string o;
  o += std::string("lab ") + lab.name + ": " + lab.title + "\n";
  o += "  before  " + r.before.setup + "\n";
  o += "  after   " + r.after.setup + "\n";
  o += std::string("  look at ") + lab.look + "\n";
  o += std::string("  the fix ") + lab.fix + "\n";
  o += "  counters over " + window_text(B) + " (before), " + window_text(A) + " (after)\n\n";

  // The headline, then every other metric that is not zero in both runs.
  const std::vector<LabMetric> mb = lab_metrics(r.before), ma = lab_metrics(r.after);
  auto row = [&](size_t i) {
    return "  " + pad(mb[i].label, 46, false) + pad(fmt(mb[i].value), 12) +
           pad(fmt(ma[i].value), 12) + "   " + change(mb[i].value, ma[i].value) + "\n";
  };
  o += "  " + pad("", 46, false) + pad("before", 12) + pad("after", 12) + "\n";
  std::vector<bool> shown(mb.size());
  for (const char* key : lab.headline)
    for (size_t i = 0; i < mb.size(); ++i)
      if (mb[i].key == key) {
        o += row(i);
        shown[i] = true;
      }
  o += "  " + std::string(70, '-') + "\n";
  for (size_t i = 0; i < mb.size(); ++i) {
    if (shown[i] || (mb[i].value == 0 && ma[i].value == 0)) continue;
    if (mb[i].key.rfind("pause_frames_p", 0) == 0 || mb[i].key.rfind("drops_p", 0) == 0) continue;
    o += row(i);
  }

  // PFC per port and priority, both runs side by side.
  o += "\npriority-flow-control per port and priority: a switch's ports as `show interface … "
       "priority-flow-control`\nlists them, a host's NIC (h1->leaf0) as `ethtool -S` does "
       "(rx_prio3_pause); priorities without PAUSE are left out:\n";
  o += "  " + pad("", 24, false) + pad("", 5) + "   " + pad("---------- before ----------", 30) +
       "   " + pad("----------- after ----------", 30) + "\n";
  o += "  " + pad("port", 24, false) + pad("prio", 5);
  for (int s = 0; s < 2; ++s)
    o += "   " + pad("RxPause", 9) + pad("TxPause", 9) + pad("paused µs", 12);
  o += "\n";
  bool any = false;
  for (size_t i = 0; i < B.ports.size() && i < A.ports.size(); ++i) {
    for (int k = 0; k < kPriorities; ++k) {
      const auto& b = B.ports[i].prio[k];
      const auto& a = A.ports[i].prio[k];
      if (b.tx_pause + b.rx_pause + a.tx_pause + a.rx_pause == 0 && b.pause_us + a.pause_us == 0)
        continue;
      any = true;
      o += "  " + pad(B.ports[i].port, 24, false) + pad(std::to_string(k), 5);
      for (const auto* c : {&b, &a})
        o += "   " + pad(fmt(double(c->rx_pause)), 9) + pad(fmt(double(c->tx_pause)), 9) +
             pad(fmt(c->pause_us), 12);
      o += "\n";
    }
  }
  if (!any) o += "  (no PAUSE frame in either run)\n";

  // Queues, ECN marks and drops per port: the ports where something happened.
  o += "\nqueues, ECN marks and drops per port (switch ports with a queue of 10 KiB or more, a "
       "mark or a drop; drops as count/priority):\n";
  o += "  " + pad("", 24, false) + "   " + pad("------------- before -------------", 36) + "   " +
       pad("-------------- after -------------", 36) + "\n";
  o += "  " + pad("port", 24, false);
  for (int s = 0; s < 2; ++s)
    o += "   " + pad("max KiB", 9) + pad("ECN", 8) + pad("drops", 10) + pad("MTU drops", 10);
  o += "\n";
  any = false;
  auto drops = [](const PortReport& p) {
    std::string d;
    uint64_t total = 0;
    for (int k = 0; k < kPriorities; ++k) {
      if (p.prio[k].drops == 0) continue;
      total += p.prio[k].drops;
      d = std::to_string(p.prio[k].drops) + "/p" + std::to_string(k);
    }
    return total == 0 ? std::string("0") : d;
  };
  auto busy = [](const PortReport& p) {
    uint64_t d = p.mtu_drops;
    for (const auto& c : p.prio) d += c.drops;
    return (!p.host && p.queue_max_kib >= 10) || p.ecn_marks != 0 || d != 0;
  };
  for (size_t i = 0; i < B.ports.size() && i < A.ports.size(); ++i) {
    if (!busy(B.ports[i]) && !busy(A.ports[i])) continue;
    any = true;
    o += "  " + pad(B.ports[i].port, 24, false);
    for (const PortReport* p : {&B.ports[i], &A.ports[i]})
      o += "   " + pad(fmt(p->queue_max_kib), 9) + pad(fmt(double(p->ecn_marks)), 8) +
           pad(drops(*p), 10) + pad(fmt(double(p->mtu_drops)), 10);
    o += "\n";
  }
  if (!any) o += "  (none)\n";

  // The flows: before / after in each cell.
  o += "\nflows (before / after):\n";
  o += "  " + pad("flow", 11, false) + pad("goodput Gb/s", 16) + pad("messages", 12) +
       pad("FCT µs", 18) + pad("resent", 14) + pad("timeouts", 10) + pad("CNPs", 12) +
       pad("errors", 8) + "   path (before)\n";
  auto pair = [](double b, double a) { return fmt(b) + " / " + fmt(a); };
  // A stream's goodput over the window (a transfer's figure is its completion time, "-" there);
  // a flow's completion time: of its last message, once it has completed them all ("-" for a
  // stream, "never" for a flow that did not).
  auto fct = [](const FlowResult& f) {
    return f.wanted == 0 ? std::string("-") : f.messages == f.wanted ? fmt(f.fct_us) : "never";
  };
  for (size_t i = 0; i < B.flows.size() && i < A.flows.size(); ++i) {
    const FlowResult& b = B.flows[i];
    const FlowResult& a = A.flows[i];
    std::string path;
    for (const std::string& p : b.path) path += (path.empty() ? "" : " ") + p;
    o += "  " + pad(b.name, 11, false) +
         pad(b.wanted ? std::string("-") : pair(b.goodput_gbps, a.goodput_gbps), 16) +
         pad(pair(double(b.messages), double(a.messages)), 12) + pad(fct(b) + " / " + fct(a), 18) +
         pad(pair(double(b.retransmitted), double(a.retransmitted)), 14) +
         pad(pair(double(b.timeouts), double(a.timeouts)), 10) +
         pad(pair(double(b.cnps_handled), double(a.cnps_handled)), 12) +
         pad(pair(double(b.errors), double(a.errors)), 8) + "   " + path + "\n";
    if (a.path != b.path) {
      std::string pa;
      for (const std::string& p : a.path) pa += (pa.empty() ? "" : " ") + p;
      o += "  " + pad("", 11 + 16 + 12 + 18 + 14 + 10 + 12 + 8, false) + "   after: " + pa + "\n";
    }
  }
  return o;
}

std::string lab_json(const Lab& lab, const LabResult& r, bool quick) {
  JsonWriter j;
  j.begin_object();
  j.key("lab").str(lab.name);
  j.key("quick").boolean(quick);
  j.key("wall_s").num(r.wall_s);
  for (int side = 0; side < 2; ++side) {
    const LabRun& x = side ? r.after : r.before;
    j.key(side ? "after" : "before").begin_object();
    j.key("setup").str(x.setup);
    j.key("duration_us").num(x.run.duration_us);
    j.key("window_us")
        .begin_array()
        .num(x.run.window_begin_us)
        .num(x.run.window_end_us)
        .end_array();
    for (const LabMetric& m : lab_metrics(x)) j.key(m.key).num(m.value);
    j.key("ports").begin_array();
    for (const PortReport& p : x.run.ports) {
      j.begin_object().key("port").str(p.port);
      j.key("queue_max_kib").num(p.queue_max_kib).key("ecn_marks").num(double(p.ecn_marks));
      j.key("mtu_drops").num(double(p.mtu_drops));
      for (const char* what : {"tx_pause", "rx_pause", "pause_us", "drops"}) {
        j.key(what).begin_array();
        for (const auto& c : p.prio) {
          const std::string_view w = what;
          j.num(w == "tx_pause"   ? double(c.tx_pause)
                : w == "rx_pause" ? double(c.rx_pause)
                : w == "pause_us" ? c.pause_us
                                  : double(c.drops));
        }
        j.end_array();
      }
      j.end_object();
    }
    j.end_array();
    flows_json(j, x.run);
    j.end_object();
  }
  j.end_object();
  return j.str();
}

}  // namespace uroce::sim

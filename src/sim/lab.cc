// The labs themselves (lab.h): each lab's two runs on the simulator's scenarios (scenario.h)
// and its plot, and the list of labs. How their numbers are shown: lab_report.cc.
#include "sim/lab.h"

#include <fnmatch.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <sstream>
#include <stdexcept>

#include "sim/plot.h"

namespace uroce::sim {
namespace {

constexpr uint32_t kRoceDscp = 26;  // RoCE's usual DSCP: class selector 3, priority 3

transport::cc::CcConfig cc(const std::string& algorithm) {
  std::string err;
  const auto c = fabric_cc(algorithm, "paper", "", &err);
  if (!c) throw std::logic_error("lab: " + err);
  return *c;
}

// What every lab starts from: the simulator's defaults (docs/simulator.md, "The fabric
// flags"): 40 Gb/s links of 1 µs, path MTU 1024, DCQCN with the paper's parameters, RED marking
// at dequeue (Kmin 5 KiB, Kmax 200 KiB, Pmax 0.01), no PFC, an unlimited buffer, seed 1.
FabricOptions base() {
  FabricOptions o;
  o.cc = cc("dcqcn");
  o.red.at_dequeue = true;  // the CLI's default (--mark dequeue)
  return o;
}

// Lossless class 3 with thresholds that fit a finite shared buffer: XOFF per ingress port plus
// the headroom a 1 µs, 40 Gb/s link needs after it (about 13 KiB: the round trip's bytes and a
// frame each way), times the ports that can fill at once, must stay below the buffer.
void lossless(FabricOptions& o, uint64_t xoff_kib, uint64_t xon_kib) {
  o.pfc.enabled = true;
  o.pfc.xoff = xoff_kib * 1024;
  o.pfc.xon = xon_kib * 1024;
}

// The flow completion times of the flows with a message count that completed them all.
void add_fct(LabRun& r) {
  double max = 0, sum = 0;
  int n = 0;
  for (const FlowResult& f : r.run.flows) {
    if (f.wanted == 0 || f.messages != f.wanted) continue;
    max = std::max(max, f.fct_us);
    sum += f.fct_us;
    ++n;
  }
  r.extra.emplace_back("fct_max_us", max);
  r.extra.emplace_back("fct_mean_us", n ? sum / n : 0.0);
}

const FlowResult* flow(const RunResult& r, const std::string& name) {
  for (const FlowResult& f : r.flows)
    if (f.name == name) return &f;
  return nullptr;
}

const PortReport* port(const RunResult& r, const std::string& name) {
  for (const PortReport& p : r.ports)
    if (p.port == name) return &p;
  return nullptr;
}

double paused_us(const RunResult& r, const std::string& name) {
  const PortReport* p = port(r, name);
  double us = 0;
  if (p != nullptr)
    for (const auto& c : p->prio) us += c.pause_us;
  return us;
}

// The time series of both runs as one CSV — t_us, before, after — each the sum of the columns
// `patterns` match (fnmatch) in that run's series; the shorter run (an incast that finished
// earlier) reads 0 after its end.
std::string merge_series(const std::string& a, const std::string& b,
                         const std::vector<std::string>& patterns) {
  auto parse = [&](const std::string& csv) {
    std::istringstream in(csv);
    std::string line;
    std::getline(in, line);
    std::vector<std::string> head;
    {
      std::istringstream h(line);
      for (std::string c; std::getline(h, c, ',');) head.push_back(c);
    }
    std::vector<bool> pick(head.size());
    for (size_t i = 1; i < head.size(); ++i)
      for (const std::string& p : patterns)
        pick[i] = pick[i] || !fnmatch(p.c_str(), head[i].c_str(), 0);
    std::vector<std::pair<double, double>> rows;
    while (std::getline(in, line)) {
      std::istringstream r(line);
      std::string c;
      double t = 0, sum = 0;
      for (size_t i = 0; std::getline(r, c, ','); ++i) {
        const double v = std::strtod(c.c_str(), nullptr);
        if (i == 0)
          t = v;
        else if (i < pick.size() && pick[i])
          sum += v;
      }
      rows.emplace_back(t, sum);
    }
    return rows;
  };
  const auto x = parse(a), y = parse(b);
  std::string out = "t_us,before,after\n";
  char buf[96];
  for (size_t i = 0; i < std::max(x.size(), y.size()); ++i) {
    const double t = i < x.size() ? x[i].first : y[i].first;
    std::snprintf(buf, sizeof buf, "%.3f,%.6g,%.6g\n", t, i < x.size() ? x[i].second : 0.0,
                  i < y.size() ? y[i].second : 0.0);
    out += buf;
  }
  return out;
}

std::string plot(const std::string& csv, PlotSpec spec) {
  std::string err;
  std::string svg = plot_csv(csv, spec, &err);
  if (svg.empty()) throw std::logic_error("lab plot: " + err);
  return svg;
}

// A lab's plot as a time series of each run: the columns `patterns` match (fnmatch), summed,
// against time in ms.
struct Series {
  std::vector<std::string> patterns;
  std::string title, ylabel;
};

std::string plot_series(const LabResult& r, const Series& series) {
  PlotSpec s;
  s.title = series.title;
  s.x = "t_us";
  s.y = {"before", "after"};
  s.x_scale = 0.001;
  s.xlabel = "time [ms]";
  s.ylabel = series.ylabel;
  return plot(merge_series(r.before.run.series, r.after.run.series, series.patterns), s);
}

// A lab's two set-up lines, as the report prints them: the failure's, then the fix's.
struct Setups {
  std::string before, after;
};

// Both runs of a lab, timed together: run_one(fixed, x) sets up and runs the failure (fixed
// false), then the fix, into x (its run and extras; x.setup is already the set-up's line).
template <typename F>
LabResult both(const Setups& setup, F run_one) {
  LabResult r;
  const double t0 = now_s();
  r.before.setup = setup.before;
  run_one(false, r.before);
  r.after.setup = setup.after;
  run_one(true, r.after);
  r.wall_s = now_s() - t0;
  return r;
}

// Both runs, plotted as `plot` says.
template <typename F>
LabResult both(const Setups& setup, const Series& plot, F run_one) {
  LabResult r = both(setup, run_one);
  r.svg = plot_series(r, plot);
  return r;
}

// The victim's goodput and the time its host's NIC (h1, on leaf 0) was paused: what the
// leaf-spine labs' victim suffers.
void add_victim(LabRun& x, const FlowResult& victim) {
  x.extra.emplace_back("victim_gbps", victim.goodput_gbps);
  x.extra.emplace_back("victim_host_paused_us", paused_us(x.run, "h1->leaf0"));
}

// --- the labs ---------------------------------------------------------------------------------

// pfc-storm: experiment 3's pfc-spread scenario (docs/congestion-control.md), PFC alone.
LabResult pfc_storm(bool quick) {
  const Setups setup = {
      "4 leaves x 4 spines x 4 hosts, PFC on priority 3, no ECN, no DCQCN; "
      "three elephants from leaves 0, 2, 3 to leaf 1 hash onto spine0",
      "the same, the elephants' UDP source ports spread over the spines (entropy)"};
  const Series plot = {{"victim_gbps"},
                       "pfc-storm: the victim's goodput (it never crosses the congested port)",
                       "Gb/s"};
  return both(setup, plot, [&](bool fixed, LabRun& x) {
    LeafSpineOptions o;
    o.fabric = base();
    o.fabric.cc = cc("none");
    o.fabric.red.enabled = false;
    o.fabric.pfc.enabled = true;
    o.leaves = o.spines = o.hosts_per_leaf = 4;
    o.scenario = "pfc-spread";
    o.entropy = fixed;
    o.duration = quick ? 4 * kMs : 10 * kMs;
    o.window_begin = 0;
    const LeafSpineResult res = run_leafspine(o);
    x.run = res.run;
    add_victim(x, x.run.flows[size_t(res.victim)]);
  });
}

// ecn-off: a congestion tree. Five elephants from leaves 0, 2 and 3 stream to one host of leaf 1;
// the victim streams from leaf 0 to leaf 3 and shares only leaf 0's uplink with one elephant.
// DCQCN runs on every NIC, but the switches do not mark.
LabResult ecn_off(bool quick) {
  const Setups setup = {
      "4 leaves x 1 spine, PFC on priority 3, DCQCN on every NIC, ECN marking off; "
      "5 elephants -> h4, victim h1 -> h14",
      "the same with ECN marking on every switch port (RED at dequeue: Kmin 5 KiB, "
      "Kmax 200 KiB, Pmax 1%)"};
  const Series plot = {{"victim_gbps"}, "ecn-off: the victim's goodput (h1 -> h14)", "Gb/s"};
  return both(setup, plot, [&](bool fixed, LabRun& x) {
    LeafSpineOptions o;
    o.fabric = base();
    o.fabric.red.enabled = fixed;
    o.fabric.pfc.enabled = true;
    o.leaves = 4;
    o.spines = 1;
    o.hosts_per_leaf = 4;
    o.duration = quick ? 10 * kMs : 20 * kMs;  // measured over the second half
    const std::pair<uint32_t, uint32_t> elephants[] = {{0, 4}, {8, 4}, {9, 4}, {12, 4}, {13, 4}};
    for (size_t i = 0; i < std::size(elephants); ++i) {
      FlowSpec f;
      f.name = "elephant" + std::to_string(i);
      f.src = elephants[i].first;
      f.dst = elephants[i].second;
      o.flows.push_back(f);
    }
    FlowSpec v;
    v.name = "victim";
    v.src = 1;
    v.dst = 14;
    o.flows.push_back(v);
    x.run = run_leafspine(o).run;
    add_victim(x, *flow(x.run, "victim"));
  });
}

// no-lossless: eight long flows through one bottleneck of a routed fabric with a 256 KiB buffer,
// neither PFC nor ECN.
LabResult no_lossless(bool quick) {
  const Setups setup = {
      "8 senders -> s0 -> s1 -> rx, 256 KiB switch buffer, no PFC, no ECN "
      "(DCQCN on the NICs, but nothing marks)",
      "the same with PFC on priority 3 (XOFF 20 KiB, XON 10 KiB per ingress port) "
      "and ECN marking (DCQCN acts)"};
  const Series plot = {{"f?_gbps"}, "no-lossless: goodput of the 8 flows together", "Gb/s"};
  return both(setup, plot, [&](bool fixed, LabRun& x) {
    DumbbellOptions o;
    o.fabric = base();
    o.fabric.buffer_bytes = 256 * 1024;
    o.fabric.red.enabled = fixed;
    if (fixed) lossless(o.fabric, 20, 10);  // 8 ports x (20 + 13) KiB < 256 KiB
    o.flows = 8;
    o.duration = quick ? 10 * kMs : 20 * kMs;  // measured over the second half
    const DumbbellResult res = run_dumbbell(o);
    x.run = res.run;
    x.extra.emplace_back("jain", res.jain);
    x.extra.emplace_back("min_flow_gbps",
                         *std::min_element(res.flow_gbps.begin(), res.flow_gbps.end()));
  });
}

// incast: 16 senders write 256 KiB each to one receiver at once, through a 512 KiB buffer, with
// ECN and DCQCN but no PFC.
LabResult incast(bool quick) {
  const uint32_t senders = quick ? 8 : 16;
  const Setups setup = {
      std::to_string(senders) +
          " senders x 256 KiB -> one receiver, 512 KiB switch buffer, ECN + DCQCN, no PFC",
      "the same with PFC on priority 3 (XOFF 16 KiB, XON 8 KiB per ingress port)"};
  const Series plot = {{"f?_gbps", "f??_gbps"}, "incast: goodput into the receiver", "Gb/s"};
  return both(setup, plot, [&](bool fixed, LabRun& x) {
    IncastOptions o;
    o.fabric = base();
    o.fabric.buffer_bytes = 512 * 1024;
    if (fixed) lossless(o.fabric, 16, 8);  // 16 ports x (16 + 13) KiB < 512 KiB
    o.senders = senders;
    o.msg_bytes = 256 * 1024;
    o.limit = 1000 * kMs;
    o.fabric.sample = 20 * kUs;  // the plot's resolution (the default follows the ideal time)
    const IncastResult res = run_incast(o);
    x.run = res.run;
    add_fct(x);
    x.extra.emplace_back("ideal_us", res.ideal_us);
    x.extra.emplace_back("fct_max_over_ideal",
                         res.ideal_us > 0 ? res.fct_max_us / res.ideal_us : 0);
    x.extra.emplace_back("completed", res.completed ? 1 : 0);
  });
}

// mtu-mismatch: a leaf-spine at jumbo MTU, but one link left at 1500; QPs at path MTU 4096.
LabResult mtu_mismatch(bool) {
  const uint32_t L = 2, S = 2, H = 4;
  const Setups setup = {
      "2 leaves x 2 spines x 4 hosts, IP MTU 9216 everywhere but leaf0-spine1 (1500); "
      "QPs at path MTU 4096 (4156-byte IP packets)",
      "the same with leaf0-spine1 at MTU 9216 like every other link"};
  LabResult r = both(setup, [&](bool fixed, LabRun& x) {
    LeafSpineOptions o;
    o.fabric = base();
    o.fabric.mtu = IBV_MTU_4096;
    for (uint32_t l = 0; l < L; ++l)
      for (uint32_t s = 0; s < S; ++s)
        o.fabric.link_mtu.emplace_back("leaf" + std::to_string(l) + "-spine" + std::to_string(s),
                                       9216);
    for (uint32_t h = 0; h < L * H; ++h)
      o.fabric.link_mtu.emplace_back("h" + std::to_string(h) + "-leaf" + std::to_string(h / H),
                                     9216);
    if (!fixed) o.fabric.link_mtu.emplace_back("leaf0-spine1", 1500);
    o.leaves = L;
    o.spines = S;
    o.hosts_per_leaf = H;
    // The default QP timeout (14: 67 ms) and retry count (7): a QP whose full-size packets never
    // arrive is in ERROR after 8 timeouts, about 0.54 s.
    o.duration = 600 * kMs;
    o.window_begin = 0;
    for (uint32_t i = 0; i < H; ++i) {
      FlowSpec bulk;  // 16 WRITEs of 64 KiB: full-size 4096-byte packets
      bulk.name = "bulk" + std::to_string(i);
      bulk.src = i;
      bulk.dst = H + i;
      bulk.msg_bytes = 64 * 1024;
      bulk.messages = 16;
      bulk.depth = 1;
      o.flows.push_back(bulk);
    }
    for (uint32_t i = 0; i < H; ++i) {
      FlowSpec ping;  // 100 WRITEs of 64 bytes, one packet each, like ibv_rc_pingpong's
      ping.name = "ping" + std::to_string(H + i);
      ping.src = H + i;
      ping.dst = i;
      ping.msg_bytes = 64;
      ping.messages = 100;
      ping.depth = 1;
      o.flows.push_back(ping);
    }
    x.run = run_leafspine(o).run;
    uint64_t failed = 0, msgs = 0;
    for (const FlowResult& f : x.run.flows) {
      failed += f.errors != 0;
      msgs += f.messages;
    }
    x.extra.emplace_back("flows_failed", double(failed));
    x.extra.emplace_back("messages", double(msgs));
    add_fct(x);
  });
  std::string csv = "flow,before,after\n";
  for (size_t i = 0; i < r.before.run.flows.size(); ++i) {
    const FlowResult& b = r.before.run.flows[i];
    const FlowResult& a = r.after.run.flows[i];
    csv += b.name + "," + std::to_string(b.messages) + "," + std::to_string(a.messages) + "\n";
  }
  r.svg = plot(csv, {.title = "mtu-mismatch: messages completed per flow (bulk: 16 x 64 KiB; "
                              "ping: 100 x 64 B)",
                     .xlabel = "flow",
                     .ylabel = "messages",
                     .x = "flow",
                     .y = {"before", "after"},
                     .bars = true});
  return r;
}

// pfc-wrong-priority: PFC is on for priority 3, but the hosts send RoCE with DSCP 0 (the
// traffic class was never set), which the switches map to priority 0: lossy.
LabResult pfc_wrong_priority(bool quick) {
  const uint64_t msg_bytes = quick ? 256 * 1024 : 1024 * 1024;
  const Setups setup = {
      "8 senders x " + std::to_string(msg_bytes / 1024) +
          " KiB -> one receiver, 512 KiB buffer, PFC on priority 3, ECN + DCQCN; RoCE sent with "
          "DSCP 0 (priority 0)",
      "the same with RoCE marked DSCP 26, which the switches map to priority 3"};
  LabResult r = both(setup, [&](bool fixed, LabRun& x) {
    IncastOptions o;
    o.fabric = base();
    o.fabric.buffer_bytes = 512 * 1024;
    lossless(o.fabric, 16, 8);
    o.fabric.dscp = uint8_t(fixed ? kRoceDscp : 0);
    o.senders = 8;
    o.msg_bytes = msg_bytes;
    o.limit = 1000 * kMs;
    const IncastResult res = run_incast(o);
    x.run = res.run;
    add_fct(x);
    x.extra.emplace_back("ideal_us", res.ideal_us);
  });
  std::string csv = "priority,drops before,drops after,PAUSEs before,PAUSEs after\n";
  for (int k : {0, 3}) {
    uint64_t v[4] = {};
    for (int side = 0; side < 2; ++side)
      for (const PortReport& p : (side ? r.after : r.before).run.ports) {
        v[side] += p.prio[k].drops;
        v[2 + side] += p.prio[k].tx_pause;
      }
    // Appended piecewise, not `a + b`: GCC 12's -Wrestrict false positive at -O3.
    csv += "priority ";
    csv += std::to_string(k);
    for (uint64_t x : v) {
      csv += ',';
      csv += std::to_string(x);
    }
    csv += "\n";
  }
  r.svg = plot(csv, {.title = "pfc-wrong-priority: drops and PAUSE frames sent, by priority",
                     .xlabel = "priority (traffic class)",
                     .ylabel = "frames",
                     .x = "priority",
                     .y = {"drops before", "drops after", "PAUSEs before", "PAUSEs after"},
                     .bars = true});
  return r;
}

}  // namespace

const std::vector<Lab>& labs() {
  static const std::vector<Lab> all = {
      {"pfc-storm",
       "PFC storm: an ECMP collision of elephants on a leaf-spine pauses a victim",
       "the PAUSE counters from spine0 down to the hosts, the victim host's paused time, the "
       "flows' paths",
       "give ECMP entropy to use: spread the QPs' UDP source ports (or turn ECN/DCQCN on: see "
       "ecn-off)",
       {"victim_gbps", "pause_frames", "pause_us", "victim_host_paused_us"},
       pfc_storm},
      {"no-lossless",
       "RoCE on a fabric with neither PFC nor ECN: drops and go-back-N",
       "drops against retransmitted packets (go-back-N resends the whole window), fairness, "
       "flows that starve",
       "make the fabric lossless for RoCE: PFC on priority 3 with ECN marking for DCQCN",
       {"drops", "retransmitted_packets", "jain", "min_flow_gbps", "goodput_gbps"},
       no_lossless},
      {"ecn-off",
       "ECN marking off: DCQCN never acts, PFC pauses spread to a victim",
       "CNPs (0 without marks), the PAUSE counters up the tree, the victim's goodput",
       "turn ECN marking on in the switches (RED/WRED on the RoCE queue) so DCQCN gets CNPs",
       {"victim_gbps", "pause_frames", "pause_us", "ecn_marks", "cnps"},
       ecn_off},
      {"incast",
       "incast on a lossy fabric: ECN is too slow for the first round trip",
       "drops in the first round trip although ECN and DCQCN are on, retransmissions, the "
       "completion time against the ideal",
       "PFC on priority 3 as the backstop under DCQCN",
       {"fct_max_us", "fct_mean_us", "ideal_us", "drops", "retransmitted_packets", "pause_frames"},
       incast},
      {"mtu-mismatch",
       "one link's MTU below the QPs' path MTU: full-size packets vanish",
       "MTU drops on one port, the flows through it failing with retry exceeded while small "
       "messages (a ping-pong) pass",
       "one MTU on every port of the path, >= 4200 bytes for path MTU 4096 (jumbo: 9216)",
       {"flows_failed", "messages", "mtu_drops", "timeouts", "completion_errors"},
       mtu_mismatch},
      {"pfc-wrong-priority",
       "PFC enabled, but RoCE on a priority that is not lossless",
       "drops on priority 0 and no PAUSE on priority 3, per port and priority",
       "mark RoCE with the DSCP the switches map to the lossless priority (26 -> priority 3)",
       {"drops_p0", "pause_frames_p3", "fct_max_us", "retransmitted_packets"},
       pfc_wrong_priority},
  };
  return all;
}

const Lab* find_lab(std::string_view name) {
  for (const Lab& l : labs())
    if (name == l.name) return &l;
  return nullptr;
}

std::string lab_list() {
  std::string out;
  for (const Lab& l : labs()) {
    out += l.name;
    out.append(std::max<size_t>(2, 20 - std::string_view(l.name).size()), ' ');
    out += l.title;
    out += "\n";
  }
  return out;
}

}  // namespace uroce::sim

// A run's results (scenario_internal.h): the fabric's counters at the window's edges, the CSV
// time series, the paths flows take, and RunResult from them.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>

#include "sim/scenario_internal.h"

namespace uroce::sim::scenario_detail {
namespace {

double gbps(uint64_t bytes, Time ns) {
  return ns == 0 ? 0.0 : double(bytes) * 8.0 / double(ns);
}

// Every port's counters at this instant, in the order of RunResult::links (every link, each
// direction); queue_max_kib is left to collect() (QueueStats keeps the window's maximum).
std::vector<PortReport> port_reports(const Fabric& f) {
  std::vector<PortReport> out;
  for (const FabricLink& l : f.links()) {
    for (int dir = 0; dir < 2; ++dir) {
      const EgressPort& e = dir == 0 ? *l.a_tx : *l.b_tx;
      const NodeRef from = dir == 0 ? l.a : l.b;
      PortReport p;
      p.port = f.node_name(from) + "->" + f.node_name(dir == 0 ? l.b : l.a);
      p.host = from.kind == NK::kHost;
      const SwitchPort* sp = from.kind == NK::kSwitch
                                 ? &f.sw(from.index).port(dir == 0 ? l.a_port : l.b_port)
                                 : nullptr;
      for (int k = 0; k < kPriorities; ++k) {
        const PfcClassCounters& c = e.counters().pfc[k];
        p.prio[k] = {c.tx_pause,
                     c.rx_pause,
                     c.tx_resume,
                     c.rx_resume,
                     double(c.pause_ns) / 1000.0,
                     sp ? sp->c.drops[k] : 0};
      }
      p.mtu_drops = sp ? sp->c.mtu_drops : 0;
      p.ecn_marks = e.counters().marked;
      p.tx_frames = e.counters().frames;
      out.push_back(p);
    }
  }
  return out;
}

// The egress ports a flow's packets take (switch:port → peer), following routes and ECMP.
std::vector<std::string> path_of(const Fabric& f, const Flow& fl) {
  std::vector<std::string> out;
  const FiveTuple t{fl.src_host().ip(), fl.dst_host().ip(), fl.src_port(), 4791, 17};
  // Start at the sender's switch; hop while the next node is a switch.
  const std::string first = fl.src_host().peer();
  const Switch* s = nullptr;
  for (uint32_t i = 0; i < f.switch_count(); ++i)
    if (f.sw(i).name() == first) s = &f.sw(i);
  for (int hop = 0; s != nullptr && hop < 16; ++hop) {
    const int64_t e = s->egress_for(t);
    if (e < 0) break;
    const std::string& peer = s->port(uint32_t(e)).peer;
    out.push_back(s->name() + "->" + peer);
    const Switch* next = nullptr;
    for (uint32_t i = 0; i < f.switch_count(); ++i)
      if (f.sw(i).name() == peer) next = &f.sw(i);
    s = next;
  }
  return out;
}

}  // namespace

Snapshot snapshot(const Fabric& f) {
  Snapshot s;
  s.ports = port_reports(f);
  for (const auto& fl : f.flows()) s.goodput.push_back(fl->goodput_bytes());
  for (uint32_t i = 0; i < f.switch_count(); ++i) {
    const Switch& sw = f.sw(i);
    for (uint32_t p = 0; p < sw.port_count(); ++p) {
      const SwitchPort& sp = sw.port(p);
      for (int c = 0; c < kPriorities; ++c) {
        s.drops += sp.c.drops[c];
        s.pause += sp.egress->counters().pfc[c].tx_pause;
        s.resume += sp.egress->counters().pfc[c].tx_resume;
        s.pause_ns += sp.egress->counters().pfc[c].pause_ns;
      }
      s.marks += sp.egress->counters().marked;
      s.mtu_drops += sp.c.mtu_drops;
    }
  }
  for (const FabricLink& l : f.links()) s.lost += l.ab->counters().lost + l.ba->counters().lost;
  for (uint32_t i = 0; i < f.host_count(); ++i) {
    const Host& h = f.host(i);
    const transport::QpCounters q = h.qp_totals();
    s.cnps += q.np_cnp_sent;
    s.retransmitted += q.retransmitted_pkts;
    s.timeouts += q.local_ack_timeout_err;
    s.probes += q.early_retransmits;
    s.sr_ooo += q.sr_ooo_accepted;
    s.sr_sacks += q.sr_sack_sent;
    s.sr_resends += q.sr_selective_resends;
    s.mp_sprayed += q.mp_sprayed_pkts;
    s.mp_rotations += q.mp_path_rotations;
    s.mp_ecn_rotations += q.mp_ecn_rotations;
    for (int c = 0; c < kPriorities; ++c) s.pause_ns += h.nic().counters().pfc[c].pause_ns;
  }
  return s;
}

SnapshotAt::SnapshotAt(Fabric& f, Time at) : f_(f) {
  if (at == 0) {
    taken_ = true;  // everything starts at zero
    snap_.goodput.assign(f.flows().size(), 0);
  } else {
    f.queue().schedule(at, EventClass::kSample, this);
  }
}

void SnapshotAt::on_event(Time, uint64_t) {
  snap_ = snapshot(f_);
  taken_ = true;
}

void Sampler::add(std::string name, std::function<double(Time)> get) {
  names_.push_back(std::move(name));
  get_.push_back(std::move(get));
}

void Sampler::add_flows() {
  for (const auto& fl : f_.flows()) {
    Flow* p = fl.get();
    auto last = std::make_shared<uint64_t>(0);
    auto last_t = std::make_shared<Time>(0);
    add(fl->name() + "_gbps", [p, last, last_t](Time now) {
      const uint64_t b = p->goodput_bytes();
      const double r = gbps(b - *last, now - *last_t);
      *last = b;
      *last_t = now;
      return r;
    });
    add(fl->name() + "_rc_gbps", [p](Time) { return double(p->sender().cc_rate_bps()) / 1e9; });
    add(fl->name() + "_alpha", [p](Time now) { return p->sender().cc_alpha(now); });
  }
  add("pause_frames", [this](Time) { return double(snapshot_pauses()); });
}

void Sampler::start() {
  if (interval_ != 0) f_.queue().schedule(interval_, EventClass::kSample, this);
}

void Sampler::on_event(Time now, uint64_t) {
  rows_.emplace_back();
  rows_.back().push_back(double(now) / 1000.0);
  for (auto& g : get_) rows_.back().push_back(g(now));
  if (now + interval_ <= end_) f_.queue().schedule(now + interval_, EventClass::kSample, this);
}

std::string Sampler::csv() const {
  std::string out = "t_us";
  for (const std::string& n : names_) out += "," + n;
  out += "\n";
  char buf[32];
  for (const auto& r : rows_) {
    for (size_t i = 0; i < r.size(); ++i) {
      std::snprintf(buf, sizeof buf, i == 0 ? "%.3f" : ",%.6g", r[i]);
      out += buf;
    }
    out += "\n";
  }
  return out;
}

uint64_t Sampler::snapshot_pauses() const {
  uint64_t n = 0;
  for (uint32_t i = 0; i < f_.switch_count(); ++i)
    for (uint32_t p = 0; p < f_.sw(i).port_count(); ++p)
      for (int c = 0; c < kPriorities; ++c)
        n += f_.sw(i).port(p).egress->counters().pfc[c].tx_pause;
  return n;
}

// Everything a run reports, from the fabric's counters and the window's snapshots.
RunResult collect(Fabric& f, const Snapshot& begin, double wall_s) {
  const Snapshot end = snapshot(f);
  const Window& w = f.window();
  RunResult r;
  r.duration_us = double(f.queue().now()) / 1000.0;
  r.window_begin_us = double(w.begin) / 1000.0;
  r.window_end_us = double(std::min(w.end, f.queue().now())) / 1000.0;
  r.events = f.queue().events_run();
  r.wall_s = wall_s;
  r.events_per_s = wall_s > 0 ? double(r.events) / wall_s : 0.0;
  r.mtu_drops = end.mtu_drops - begin.mtu_drops;
  r.drops = end.drops - begin.drops + r.mtu_drops;
  r.marks = end.marks - begin.marks;
  r.cnps = end.cnps - begin.cnps;
  r.pfc_pause_frames = end.pause - begin.pause;
  r.pfc_resume_frames = end.resume - begin.resume;
  r.pfc_pause_time_us = double(end.pause_ns - begin.pause_ns) / 1000.0;
  r.retransmitted_packets = end.retransmitted - begin.retransmitted;
  r.timeouts = end.timeouts - begin.timeouts;
  r.probe_timeouts = end.probes - begin.probes;
  r.lost_frames = end.lost - begin.lost;
  r.sr_ooo_accepted = end.sr_ooo - begin.sr_ooo;
  r.sr_sacks_sent = end.sr_sacks - begin.sr_sacks;
  r.sr_selective_resends = end.sr_resends - begin.sr_resends;
  r.mp_sprayed = end.mp_sprayed - begin.mp_sprayed;
  r.mp_rotations = end.mp_rotations - begin.mp_rotations;
  r.mp_ecn_rotations = end.mp_ecn_rotations - begin.mp_ecn_rotations;
  const Time wlen = std::min(w.end, f.queue().now()) - std::min(w.begin, f.queue().now());
  for (const auto& fl : f.flows()) {
    FlowResult x;
    x.name = fl->name();
    x.src = fl->src_host().name();
    x.dst = fl->dst_host().name();
    x.src_port = fl->src_port();
    x.bytes = fl->goodput_bytes() - begin.goodput[fl->index()];
    x.goodput_gbps = gbps(x.bytes, wlen);
    x.messages = fl->completed();
    x.wanted = fl->spec().messages;
    if (!fl->messages().empty()) {
      const auto& m = fl->messages().back();
      x.fct_us = double(m.second - fl->spec().start) / 1000.0;
    }
    const transport::QpCounters& q = fl->sender().counters();
    x.retransmitted = q.retransmitted_pkts;
    x.timeouts = q.local_ack_timeout_err;
    x.cnps_handled = q.rp_cnp_handled;
    x.path = path_of(f, *fl);
    x.errors = fl->errors();
    r.errors += fl->errors();
    r.flows.push_back(std::move(x));
  }
  std::vector<double> fcts;
  const Time wend = std::min(w.end, f.queue().now());
  for (const auto& fl : f.flows())
    for (auto [posted, done] : fl->messages())
      if (done >= w.begin && done <= wend) fcts.push_back(double(done - posted) / 1000.0);
  if (!fcts.empty()) {
    std::sort(fcts.begin(), fcts.end());
    double sum = 0;
    for (double x : fcts) sum += x;
    // The nearest-rank percentiles: the smallest value with at least p of the messages at or
    // below it.
    auto pct = [&](double p) {
      const size_t rank = size_t(std::ceil(p * double(fcts.size())));
      return fcts[std::min(fcts.size(), std::max<size_t>(rank, 1)) - 1];
    };
    r.messages = fcts.size();
    r.message_fct_mean_us = sum / double(fcts.size());
    r.message_fct_p50_us = pct(0.50);
    r.message_fct_p99_us = pct(0.99);
    r.message_fct_max_us = fcts.back();
  }
  auto pause_of = [](const std::string& name, const EgressCounters& c,
                     std::vector<PortPause>& out) {
    PortPause p;
    p.port = name;
    for (int k = 0; k < kPriorities; ++k) {
      p.tx_pause += c.pfc[k].tx_pause;
      p.rx_pause += c.pfc[k].rx_pause;
      p.tx_resume += c.pfc[k].tx_resume;
      p.rx_resume += c.pfc[k].rx_resume;
      p.pause_us += double(c.pfc[k].pause_ns) / 1000.0;
    }
    if (p.tx_pause + p.rx_pause + p.tx_resume + p.rx_resume > 0) out.push_back(p);
  };
  for (const FabricLink& l : f.links()) {
    const std::string a = f.node_name(l.a), b = f.node_name(l.b);
    for (int dir = 0; dir < 2; ++dir) {
      const EgressPort& e = dir == 0 ? *l.a_tx : *l.b_tx;
      const std::string name = dir == 0 ? a + "->" + b : b + "->" + a;
      LinkUse u;
      u.from_to = name;
      u.util_pct = wlen ? 100.0 * double(e.counters().window_busy_ns) / double(wlen) : 0.0;
      u.queue_max_kib = double(e.queue_stats().max_bytes()) / 1024.0;
      r.links.push_back(u);
      pause_of(name, e.counters(), r.pauses);
    }
  }
  // The ports' counters over the window: the end's less the start's (none before time 0).
  r.ports = end.ports;
  for (size_t i = 0; i < r.ports.size(); ++i) {
    PortReport& p = r.ports[i];
    p.queue_max_kib = r.links[i].queue_max_kib;
    if (i >= begin.ports.size()) continue;
    const PortReport& b = begin.ports[i];
    for (int k = 0; k < kPriorities; ++k) {
      p.prio[k].tx_pause -= b.prio[k].tx_pause;
      p.prio[k].rx_pause -= b.prio[k].rx_pause;
      p.prio[k].tx_resume -= b.prio[k].tx_resume;
      p.prio[k].rx_resume -= b.prio[k].rx_resume;
      p.prio[k].pause_us -= b.prio[k].pause_us;
      p.prio[k].drops -= b.prio[k].drops;
    }
    p.mtu_drops -= b.mtu_drops;
    p.ecn_marks -= b.ecn_marks;
    p.tx_frames -= b.tx_frames;
  }
  return r;
}

}  // namespace uroce::sim::scenario_detail

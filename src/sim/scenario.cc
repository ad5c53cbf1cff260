#include "sim/scenario.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <functional>
#include <memory>
#include <sstream>
#include <stdexcept>

#include "sim/capture.h"
#include "sim/json.h"
#include "transport/cc/parse.h"
#include "transport/context.h"

namespace uroce::sim {
namespace {

using NK = NodeRef::Kind;

HostConfig host_config(const FabricOptions& o) {
  HostConfig h;
  h.rate_bps = o.link_bps;
  h.ring = o.ring;
  h.cc = o.cc;
  h.qp.mtu = o.mtu;
  h.qp.timeout = o.qp_timeout;
  h.data_dscp = o.dscp;
  return h;
}

// The link MTUs the options ask for, by link name.
void apply_link_mtus(Fabric& f, const FabricOptions& o) {
  for (const auto& [name, mtu] : o.link_mtu) {
    const FabricLink* l = f.find_link(name);
    if (l == nullptr) {
      std::string all;
      for (const FabricLink& x : f.links()) all += (all.empty() ? "" : ", ") + x.name;
      throw std::invalid_argument("--link-mtu: no link '" + name + "' (links: " + all + ")");
    }
    f.set_link_mtu(uint32_t(l - f.links().data()), mtu);
  }
}

SwitchConfig switch_config(const FabricOptions& o) {
  SwitchConfig s;
  s.buffer_bytes = o.buffer_bytes;
  s.buffer_mode = o.buffer_mode;
  s.red = o.red;
  s.pfc = o.pfc;
  s.hash = o.hash;
  return s;
}

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

// Counters summed over the fabric at one instant (the window's edges).
struct Snapshot {
  std::vector<uint64_t> goodput;  // per flow
  uint64_t drops = 0, mtu_drops = 0, marks = 0, cnps = 0, pause = 0, resume = 0;
  Time pause_ns = 0;
  uint64_t retransmitted = 0, timeouts = 0, probes = 0;
  std::vector<PortReport> ports;
};

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
  for (uint32_t i = 0; i < f.host_count(); ++i) {
    const Host& h = f.host(i);
    const transport::QpCounters q = h.qp_totals();
    s.cnps += q.np_cnp_sent;
    s.retransmitted += q.retransmitted_pkts;
    s.timeouts += q.local_ack_timeout_err;
    s.probes += q.early_retransmits;
    for (int c = 0; c < kPriorities; ++c) s.pause_ns += h.nic().counters().pfc[c].pause_ns;
  }
  return s;
}

// Takes a snapshot at a given time (the window's start), as an observer.
class SnapshotAt final : public EventHandler {
 public:
  SnapshotAt(Fabric& f, Time at) : f_(f) {
    if (at == 0) {
      taken_ = true;  // everything starts at zero
      snap_.goodput.assign(f.flows().size(), 0);
    } else {
      f.queue().schedule(at, EventClass::kSample, this);
    }
  }
  void on_event(Time, uint64_t) override {
    snap_ = snapshot(f_);
    taken_ = true;
  }
  const Snapshot& get() const { return snap_; }
  bool taken() const { return taken_; }

 private:
  Fabric& f_;
  Snapshot snap_;
  bool taken_ = false;
};

// The CSV time series: one row per sampling interval, one column per series.
class Sampler final : public EventHandler {
 public:
  Sampler(Fabric& f, Time interval, Time end) : f_(f), interval_(interval), end_(end) {}
  void add(std::string name, std::function<double(Time)> get) {
    names_.push_back(std::move(name));
    get_.push_back(std::move(get));
  }
  // Per-flow series: goodput over the last interval, DCQCN's rate and alpha.
  void add_flows() {
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
  void start() {
    if (interval_ != 0) f_.queue().schedule(interval_, EventClass::kSample, this);
  }
  void on_event(Time now, uint64_t) override {
    rows_.emplace_back();
    rows_.back().push_back(double(now) / 1000.0);
    for (auto& g : get_) rows_.back().push_back(g(now));
    if (now + interval_ <= end_) f_.queue().schedule(now + interval_, EventClass::kSample, this);
  }
  std::string csv() const {
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

 private:
  uint64_t snapshot_pauses() const {
    uint64_t n = 0;
    for (uint32_t i = 0; i < f_.switch_count(); ++i)
      for (uint32_t p = 0; p < f_.sw(i).port_count(); ++p)
        for (int c = 0; c < kPriorities; ++c)
          n += f_.sw(i).port(p).egress->counters().pfc[c].tx_pause;
    return n;
  }

  Fabric& f_;
  Time interval_, end_;
  std::vector<std::string> names_;
  std::vector<std::function<double(Time)>> get_;
  std::vector<std::vector<double>> rows_;
};

void write_file(const std::string& path, const std::string& text) {
  if (path.empty()) return;
  if (path == "-") {
    std::fwrite(text.data(), 1, text.size(), stdout);
    return;
  }
  std::ofstream out(path, std::ios::binary);
  out << text;
  if (!out) throw std::runtime_error("cannot write " + path);
}

// The captured link, if asked for: by name, or `fallback` when the name is empty.
std::unique_ptr<LinkCapture> open_capture(Fabric& f, const FabricOptions& o,
                                          const std::string& fallback) {
  if (o.pcap.empty()) return nullptr;
  const std::string name = o.pcap_link.empty() ? fallback : o.pcap_link;
  const FabricLink* l = f.find_link(name);
  if (l == nullptr) {
    std::string all;
    for (const FabricLink& x : f.links()) all += (all.empty() ? "" : ", ") + x.name;
    throw std::invalid_argument("--pcap-link: no link '" + name + "' (links: " + all + ")");
  }
  auto node_no = [&](NodeRef n) {
    return n.kind == NK::kHost ? n.index : uint32_t(f.host_count()) + n.index;
  };
  std::string err;
  auto c = LinkCapture::open(o.pcap, *l->ab, *l->ba, node_no(l->a), node_no(l->b), &err);
  if (!c) throw std::runtime_error(err);
  return c;
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

void set_window(Fabric& f, Time duration, Time begin, Time end) {
  Window& w = f.window();
  w.begin = begin == kNever ? duration / 2 : begin;
  w.end = end == kNever ? duration : end;
  if (w.begin >= w.end || w.end > duration)
    throw std::invalid_argument("the window must lie inside the run and not be empty");
}

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

Time sample_interval(const FabricOptions& o, Time duration) {
  return o.sample != 0 ? o.sample : std::max<Time>(duration / 1000, 1);
}

// Common JSON for a run's totals.
void run_json(JsonWriter& j, const RunResult& r) {
  j.key("duration_us").num(r.duration_us);
  j.key("window_us").begin_array().num(r.window_begin_us).num(r.window_end_us).end_array();
  j.key("events").num(double(r.events));
  j.key("wall_s").num(r.wall_s);
  j.key("events_per_s").num(r.events_per_s);
  j.key("drops").num(double(r.drops));
  j.key("mtu_drops").num(double(r.mtu_drops));
  j.key("ecn_marks").num(double(r.marks));
  j.key("cnps").num(double(r.cnps));
  j.key("pfc_pause_frames").num(double(r.pfc_pause_frames));
  j.key("pfc_resume_frames").num(double(r.pfc_resume_frames));
  j.key("pfc_pause_time_us").num(r.pfc_pause_time_us);
  j.key("retransmitted_packets").num(double(r.retransmitted_packets));
  j.key("timeouts").num(double(r.timeouts));
  j.key("probe_timeouts").num(double(r.probe_timeouts));
  j.key("completion_errors").num(double(r.errors));
}

}  // namespace

void flows_json(JsonWriter& j, const RunResult& r) {
  j.key("flows").begin_array();
  for (const FlowResult& x : r.flows) {
    j.begin_object();
    j.key("name").str(x.name).key("src").str(x.src).key("dst").str(x.dst);
    j.key("udp_src_port").num(x.src_port);
    j.key("goodput_gbps").num(x.goodput_gbps);
    j.key("messages").num(double(x.messages));
    if (x.fct_us > 0) j.key("fct_us").num(x.fct_us);
    j.key("retransmitted_packets").num(double(x.retransmitted));
    j.key("timeouts").num(double(x.timeouts));
    j.key("cnps_handled").num(double(x.cnps_handled));
    j.key("errors").num(double(x.errors));
    j.key("wanted").num(double(x.wanted));
    j.key("path").begin_array();
    for (const std::string& p : x.path) j.str(p);
    j.end_array();
    j.end_object();
  }
  j.end_array();
}

namespace {

void pauses_json(JsonWriter& j, const RunResult& r) {
  j.key("pfc_ports").begin_array();
  for (const PortPause& p : r.pauses) {
    j.begin_object();
    j.key("port").str(p.port);
    j.key("tx_pause").num(double(p.tx_pause)).key("tx_resume").num(double(p.tx_resume));
    j.key("rx_pause").num(double(p.rx_pause)).key("rx_resume").num(double(p.rx_resume));
    j.key("pause_us").num(p.pause_us);
    j.end_object();
  }
  j.end_array();
}

}  // namespace

std::optional<transport::cc::CcConfig> fabric_cc(const std::string& algorithm,
                                                 const std::string& preset, const std::string& set,
                                                 std::string* err) {
  std::string spec = algorithm + ",preset=" + preset;
  if (algorithm != "none" && set.find("pacer_burst") == std::string::npos) spec += ",pacer_burst=0";
  if (!set.empty()) spec += "," + set;
  return transport::cc::parse_cc(spec, err);
}

double jain_index(const std::vector<double>& x) {
  double s = 0, s2 = 0;
  for (double v : x) {
    s += v;
    s2 += v * v;
  }
  return s2 == 0 ? 0.0 : s * s / (double(x.size()) * s2);
}

DumbbellResult run_dumbbell(const DumbbellOptions& o) {
  if (o.flows == 0) throw std::invalid_argument("--flows must be at least 1");
  Fabric f(o.fabric.seed);
  const HostConfig hc = host_config(o.fabric);
  const SwitchConfig sc = switch_config(o.fabric);
  for (uint32_t i = 0; i < o.flows; ++i) f.add_host("h" + std::to_string(i), hc);
  f.add_host("rx", hc);
  f.add_switch("s0", sc);
  f.add_switch("s1", sc);
  const LinkSpec l{o.fabric.link_bps, o.fabric.delay};
  for (uint32_t i = 0; i < o.flows; ++i) f.connect({NK::kHost, i}, {NK::kSwitch, 0}, l);
  f.connect({NK::kHost, o.flows}, {NK::kSwitch, 1}, l);
  const uint32_t bottleneck = f.connect({NK::kSwitch, 0}, {NK::kSwitch, 1}, l);
  f.compute_routes();
  apply_link_mtus(f, o.fabric);
  set_window(f, o.duration, o.window_begin, o.window_end);
  const Time gap = o.stagger ? (o.stagger_gap ? o.stagger_gap : o.duration / (2 * o.flows)) : 0;
  for (uint32_t i = 0; i < o.flows; ++i) {
    FlowSpec s;
    s.src = i;
    s.dst = o.flows;
    s.msg_bytes = o.msg_bytes;
    s.depth = 2;
    s.start = Time(i) * gap;
    s.stop = o.duration;
    f.add_flow(s);
  }
  EgressPort& q = *f.links()[bottleneck].a_tx;
  Sampler sampler(f, sample_interval(o.fabric, o.duration), o.duration);
  sampler.add("queue_kib", [&q](Time) { return double(q.queued_bytes()) / 1024.0; });
  sampler.add_flows();
  sampler.start();
  auto cap = open_capture(f, o.fabric, f.links()[bottleneck].name);
  SnapshotAt begin(f, f.window().begin);
  const double t0 = now_s();
  f.run(o.duration);
  const double wall = now_s() - t0;
  f.finish();
  DumbbellResult r;
  r.run = collect(f, begin.get(), wall);
  const Time wlen = f.window().length();
  r.util_pct = 100.0 * double(q.counters().window_busy_ns) / double(wlen);
  for (const FlowResult& x : r.run.flows) r.flow_gbps.push_back(x.goodput_gbps);
  r.jain = jain_index(r.flow_gbps);
  r.queue_mean_kib = q.queue_stats().mean_bytes() / 1024.0;
  r.queue_p99_kib = double(q.queue_stats().percentile_bytes(0.99)) / 1024.0;
  r.queue_max_kib = double(q.queue_stats().max_bytes()) / 1024.0;
  r.cnp_per_s = double(r.run.cnps) / (double(wlen) / 1e9);
  r.run.series = sampler.csv();
  write_file(o.fabric.csv, r.run.series);
  if (!o.fabric.json.empty()) write_file(o.fabric.json, to_json(o, r));
  return r;
}

IncastResult run_incast(const IncastOptions& o) {
  if (o.senders == 0) throw std::invalid_argument("--senders must be at least 1");
  Fabric f(o.fabric.seed);
  const HostConfig hc = host_config(o.fabric);
  for (uint32_t i = 0; i < o.senders; ++i) f.add_host("h" + std::to_string(i), hc);
  f.add_host("rx", hc);
  f.add_switch("s0", switch_config(o.fabric));
  const LinkSpec l{o.fabric.link_bps, o.fabric.delay};
  for (uint32_t i = 0; i < o.senders; ++i) f.connect({NK::kHost, i}, {NK::kSwitch, 0}, l);
  const uint32_t down = f.connect({NK::kHost, o.senders}, {NK::kSwitch, 0}, l);
  f.compute_routes();
  apply_link_mtus(f, o.fabric);
  f.window().begin = 0;
  f.window().end = o.limit;
  for (uint32_t i = 0; i < o.senders; ++i) {
    FlowSpec s;
    s.src = i;
    s.dst = o.senders;
    s.msg_bytes = o.msg_bytes;
    s.messages = 1;
    s.depth = 1;
    f.add_flow(s);
  }
  EgressPort& q = *f.links()[down].b_tx;  // the switch's port towards the receiver
  const Time ideal =
      Time(double(o.senders) * double(o.msg_bytes) * 8e9 / double(o.fabric.link_bps));
  Sampler sampler(f, o.fabric.sample != 0 ? o.fabric.sample : std::max<Time>(ideal / 500, 100),
                  o.limit);
  sampler.add("queue_kib", [&q](Time) { return double(q.queued_bytes()) / 1024.0; });
  sampler.add_flows();
  sampler.start();
  auto cap = open_capture(f, o.fabric, f.links()[down].name);
  SnapshotAt begin(f, 0);
  const double t0 = now_s();
  f.run(o.limit, /*stop_when_done=*/true);
  const double wall = now_s() - t0;
  f.window().end = f.queue().now();
  f.finish();
  IncastResult r;
  r.run = collect(f, begin.get(), wall);
  r.ideal_us = double(ideal) / 1000.0;
  r.completed = true;
  double sum = 0;
  for (const auto& fl : f.flows()) {
    if (!fl->done()) {
      r.completed = false;
      continue;
    }
    const double fct = double(fl->messages().back().second - fl->spec().start) / 1000.0;
    r.fct_max_us = std::max(r.fct_max_us, fct);
    sum += fct;
  }
  r.fct_mean_us = sum / double(o.senders);
  r.queue_max_kib = double(q.queue_stats().max_bytes()) / 1024.0;
  r.run.series = sampler.csv();
  write_file(o.fabric.csv, r.run.series);
  if (!o.fabric.json.empty()) write_file(o.fabric.json, to_json(o, r));
  return r;
}

bool check_leafspine_scenario(const std::string& name, uint32_t leaves, uint32_t spines,
                              uint32_t hosts_per_leaf, std::string* err) {
  if (name == "pfc-spread") {
    if (leaves >= 3 && spines >= 2 && hosts_per_leaf >= 2) return true;
    *err = "scenario pfc-spread needs --leaves >= 3, --spines >= 2, --hosts-per-leaf >= 2";
    return false;
  }
  if (name == "mixed") {
    if (leaves >= 2) return true;
    *err = "scenario mixed needs --leaves >= 2";
    return false;
  }
  *err = "unknown scenario '" + name + "' (pfc-spread, mixed)";
  return false;
}

bool parse_workload(const std::string& text, uint32_t hosts, std::vector<FlowSpec>* flows,
                    std::string* err) {
  std::istringstream in(text);
  std::string line;
  for (int n = 1; std::getline(in, line); ++n) {
    const size_t hash = line.find('#');
    if (hash != std::string::npos) line.resize(hash);
    std::istringstream f(line);
    std::vector<std::string> w;
    for (std::string x; f >> x;) w.push_back(x);
    if (w.empty()) continue;
    auto bad = [&](const std::string& why) {
      *err = "workload line " + std::to_string(n) + ": " + why;
      return false;
    };
    if (w.size() != 7 && w.size() != 8)
      return bad("want 'name src dst msg_bytes messages depth start_us [mean_gap_us]'");
    FlowSpec s;
    s.name = w[0];
    try {
      size_t used = 0;
      auto u64 = [&](const std::string& v) {
        const unsigned long long x = std::stoull(v, &used);
        if (used != v.size() || v[0] == '-') throw std::invalid_argument(v);
        return uint64_t(x);
      };
      auto dbl = [&](const std::string& v) {
        const double x = std::stod(v, &used);
        if (used != v.size() || !std::isfinite(x) || x < 0) throw std::invalid_argument(v);
        return x;
      };
      const uint64_t src = u64(w[1]), dst = u64(w[2]);
      if (src >= hosts || dst >= hosts || src == dst)
        return bad("src and dst must be two different hosts in [0, " + std::to_string(hosts) + ")");
      s.src = uint32_t(src);
      s.dst = uint32_t(dst);
      s.msg_bytes = u64(w[3]);
      if (s.msg_bytes == 0 || s.msg_bytes > (uint64_t{1} << 31))
        return bad("msg_bytes must be in [1, 2^31]");
      s.messages = u64(w[4]);
      const uint64_t depth = u64(w[5]);
      if (depth == 0 || depth > 1024) return bad("depth must be in [1, 1024]");
      s.depth = uint32_t(depth);
      s.start = Time(std::llround(dbl(w[6]) * 1000));
      if (w.size() == 8) s.mean_gap = Time(std::llround(dbl(w[7]) * 1000));
    } catch (const std::exception&) {
      return bad("not a number where one belongs");
    }
    s.seed = uint64_t(n);
    flows->push_back(s);
  }
  return true;
}

namespace {

// The first QPN from `from` whose UDP source port makes switch `sw` send (src → dst) out of
// `port`.
uint32_t qpn_for_port(const Switch& sw, uint32_t src_ip, uint32_t dst_ip, uint32_t port,
                      uint32_t from) {
  for (uint32_t q = from; q < from + 1'000'000; ++q) {
    const FiveTuple t{src_ip, dst_ip, transport::src_port_for_qpn(q), 4791, 17};
    if (sw.egress_for(t) == int64_t(port)) return q;
  }
  throw std::runtime_error("no QPN maps to the wanted port (cannot happen with a working hash)");
}

}  // namespace

LeafSpineResult run_leafspine(const LeafSpineOptions& o) {
  const uint32_t L = o.leaves, S = o.spines, H = o.hosts_per_leaf;
  if (L == 0 || S == 0 || H == 0)
    throw std::invalid_argument("leaves, spines and hosts per leaf must be >= 1");
  Fabric f(o.fabric.seed);
  const HostConfig hc = host_config(o.fabric);
  const SwitchConfig sc = switch_config(o.fabric);
  for (uint32_t i = 0; i < L * H; ++i) f.add_host("h" + std::to_string(i), hc);
  for (uint32_t l = 0; l < L; ++l) f.add_switch("leaf" + std::to_string(l), sc);
  for (uint32_t s = 0; s < S; ++s) f.add_switch("spine" + std::to_string(s), sc);
  const LinkSpec hl{o.fabric.link_bps, o.fabric.delay};
  const LinkSpec fl{o.fabric.fabric_bps ? o.fabric.fabric_bps : o.fabric.link_bps, o.fabric.delay};
  for (uint32_t i = 0; i < L * H; ++i) f.connect({NK::kHost, i}, {NK::kSwitch, i / H}, hl);
  // uplink[l][s]: leaf l's port towards spine s.
  std::vector<std::vector<uint32_t>> uplink(L, std::vector<uint32_t>(S));
  for (uint32_t l = 0; l < L; ++l)
    for (uint32_t s = 0; s < S; ++s)
      uplink[l][s] = f.links()[f.connect({NK::kSwitch, l}, {NK::kSwitch, L + s}, fl)].a_port;
  f.compute_routes();
  apply_link_mtus(f, o.fabric);
  set_window(f, o.duration, o.window_begin, o.window_end);

  std::vector<FlowSpec> flows = o.flows;
  LeafSpineResult r;
  std::vector<uint32_t> short_flows;
  if (o.scenario == "pfc-spread") {
    std::string err;
    if (!check_leafspine_scenario(o.scenario, L, S, H, &err)) throw std::invalid_argument(err);
    uint32_t qpn = 0x1000, k = 0;
    for (uint32_t l = 0; l < L; ++l) {
      if (l == 1) continue;
      FlowSpec e;
      e.name = "elephant" + std::to_string(k);
      e.src = l * H;
      e.dst = H + k % H;
      e.stop = o.duration;
      const uint32_t spine = o.entropy ? k % S : 0;
      e.src_qpn = qpn = qpn_for_port(f.sw(l), Fabric::host_ip(e.src), Fabric::host_ip(e.dst),
                                     uplink[l][spine], qpn + 1);
      flows.push_back(e);
      ++k;
    }
    FlowSpec v;
    v.name = "victim";
    v.src = 1;
    v.dst = 2 * H + 1;
    v.stop = o.duration;
    // The victim shares leaf 0's uplink with elephant 0 — the uplink spine 0 pauses — unless
    // the source ports are spread, when it takes a spine of its own too.
    v.src_qpn = qpn_for_port(f.sw(0), Fabric::host_ip(v.src), Fabric::host_ip(v.dst),
                             uplink[0][o.entropy ? k % S : 0], qpn + 1);
    r.victim = int64_t(flows.size());
    flows.push_back(v);
  } else if (o.scenario == "mixed") {
    std::string err;
    if (!check_leafspine_scenario(o.scenario, L, S, H, &err)) throw std::invalid_argument(err);
    const uint32_t N = L * H;
    Rng rng(Rng::stream(o.fabric.seed, 0x3333));
    for (uint32_t i = 0; i < N; ++i) {
      FlowSpec s;
      s.src = i;
      s.stop = o.duration;
      if (i % 2 == 0) {
        s.name = "stream" + std::to_string(i);
        s.dst = (i + H) % N;
        s.msg_bytes = 256 * 1024;
      } else {
        s.name = "short" + std::to_string(i);
        do {
          s.dst = uint32_t(rng.next() % N);
        } while (s.dst == i);
        s.msg_bytes = 16 * 1024;
        s.depth = 8;
        // 20 % of the link on average.
        s.mean_gap = Time(double(s.msg_bytes) * 8e9 / (0.2 * double(o.fabric.link_bps)));
        s.seed = Rng::stream(o.fabric.seed, 0x5000 + i);
        short_flows.push_back(uint32_t(flows.size()));
      }
      flows.push_back(s);
    }
    for (uint32_t i = 0; i < H; ++i) {
      FlowSpec s;
      s.name = "incast" + std::to_string(i);
      s.src = i;
      s.dst = N - 1;
      s.msg_bytes = 64 * 1024;
      s.messages = 1;
      s.start = o.duration / 4;
      flows.push_back(s);
    }
  } else if (!o.scenario.empty()) {
    throw std::invalid_argument("unknown scenario '" + o.scenario + "'");
  }
  for (const FlowSpec& s : flows) {
    FlowSpec x = s;
    if (x.stop == kNever && x.messages == 0) x.stop = o.duration;
    f.add_flow(x);
  }

  Sampler sampler(f, sample_interval(o.fabric, o.duration), o.duration);
  for (uint32_t l = 0; l < L; ++l)
    for (uint32_t s = 0; s < S; ++s) {
      const EgressPort* up = f.sw(l).port(uplink[l][s]).egress.get();
      sampler.add("leaf" + std::to_string(l) + "_spine" + std::to_string(s) + "_kib",
                  [up](Time) { return double(up->queued_bytes()) / 1024.0; });
    }
  for (uint32_t s = 0; s < S; ++s) {
    const Switch& sp = f.sw(L + s);
    for (uint32_t p = 0; p < sp.port_count(); ++p) {
      const EgressPort* down = sp.port(p).egress.get();
      sampler.add("spine" + std::to_string(s) + "_" + sp.port(p).peer + "_kib",
                  [down](Time) { return double(down->queued_bytes()) / 1024.0; });
    }
  }
  sampler.add_flows();
  sampler.start();
  auto cap = open_capture(f, o.fabric, f.links().back().name);
  SnapshotAt begin(f, f.window().begin);
  const double t0 = now_s();
  f.run(o.duration);
  const double wall = now_s() - t0;
  f.finish();
  r.run = collect(f, begin.get(), wall);
  std::vector<double> fcts;
  for (uint32_t i : short_flows)
    for (auto [a, b] : f.flows()[i]->messages()) fcts.push_back(double(b - a) / 1000.0);
  if (!fcts.empty()) {
    std::sort(fcts.begin(), fcts.end());
    double sum = 0;
    for (double x : fcts) sum += x;
    r.short_messages = fcts.size();
    r.short_fct_mean_us = sum / double(fcts.size());
    r.short_fct_p99_us = fcts[std::min(fcts.size() - 1, size_t(double(fcts.size()) * 0.99))];
  }
  r.run.series = sampler.csv();
  write_file(o.fabric.csv, r.run.series);
  if (!o.fabric.json.empty()) write_file(o.fabric.json, to_json(o, r));
  return r;
}

std::string to_json(const LeafSpineOptions& o, const LeafSpineResult& r) {
  JsonWriter j;
  j.begin_object();
  j.key("topology").str("leafspine");
  j.key("leaves")
      .num(o.leaves)
      .key("spines")
      .num(o.spines)
      .key("hosts_per_leaf")
      .num(o.hosts_per_leaf);
  j.key("hosts").num(double(o.leaves) * o.hosts_per_leaf);
  if (!o.scenario.empty()) j.key("scenario").str(o.scenario);
  if (o.scenario == "pfc-spread") j.key("entropy").boolean(o.entropy);
  if (r.victim >= 0) {
    const FlowResult& v = r.run.flows[size_t(r.victim)];
    j.key("victim_gbps").num(v.goodput_gbps);
    double e = 0;
    int n = 0;
    for (const FlowResult& x : r.run.flows)
      if (x.name.rfind("elephant", 0) == 0) {
        e += x.goodput_gbps;
        ++n;
      }
    j.key("elephant_gbps_mean").num(n ? e / n : 0.0);
  }
  if (r.short_messages != 0) {
    j.key("short_messages").num(double(r.short_messages));
    j.key("short_fct_mean_us").num(r.short_fct_mean_us);
    j.key("short_fct_p99_us").num(r.short_fct_p99_us);
  }
  double total = 0;
  for (const FlowResult& x : r.run.flows) total += x.goodput_gbps;
  j.key("goodput_gbps_total").num(total);
  run_json(j, r.run);
  j.key("links").begin_array();
  for (const LinkUse& u : r.run.links) {
    j.begin_object();
    j.key("link")
        .str(u.from_to)
        .key("util_pct")
        .num(u.util_pct)
        .key("queue_max_kib")
        .num(u.queue_max_kib);
    j.end_object();
  }
  j.end_array();
  pauses_json(j, r.run);
  flows_json(j, r.run);
  j.end_object();
  return j.str();
}

std::string to_json(const DumbbellOptions& o, const DumbbellResult& r) {
  JsonWriter j;
  j.begin_object();
  j.key("topology").str("dumbbell");
  j.key("flows_n").num(o.flows);
  j.key("util_pct").num(r.util_pct);
  j.key("jain").num(r.jain);
  j.key("queue_mean_kib").num(r.queue_mean_kib);
  j.key("queue_p99_kib").num(r.queue_p99_kib);
  j.key("queue_max_kib").num(r.queue_max_kib);
  j.key("cnp_per_s").num(r.cnp_per_s);
  j.key("flow_gbps").begin_array();
  for (double g : r.flow_gbps) j.num(g);
  j.end_array();
  run_json(j, r.run);
  flows_json(j, r.run);
  pauses_json(j, r.run);
  j.end_object();
  return j.str();
}

std::string to_json(const IncastOptions& o, const IncastResult& r) {
  JsonWriter j;
  j.begin_object();
  j.key("topology").str("incast");
  j.key("senders").num(o.senders);
  j.key("msg_bytes").num(double(o.msg_bytes));
  j.key("completed").boolean(r.completed);
  j.key("fct_max_us").num(r.fct_max_us);
  j.key("fct_mean_us").num(r.fct_mean_us);
  j.key("ideal_us").num(r.ideal_us);
  j.key("queue_max_kib").num(r.queue_max_kib);
  run_json(j, r.run);
  flows_json(j, r.run);
  pauses_json(j, r.run);
  j.end_object();
  return j.str();
}

}  // namespace uroce::sim

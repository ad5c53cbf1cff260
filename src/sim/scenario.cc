// The scenarios' common set-up (scenario_internal.h) and the two small topologies (scenario.h):
// the dumbbell and the N:1 incast. The leaf-spine: scenario_leafspine.cc.
#include "sim/scenario.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <memory>
#include <stdexcept>

#include "sim/capture.h"
#include "sim/scenario_internal.h"
#include "transport/cc/parse.h"

namespace uroce::sim {
namespace scenario_detail {
namespace {

// The link called `name`; an error naming every link if there is none (`flag` is the option
// that named it).
const FabricLink& link_named(const Fabric& f, const std::string& name, const char* flag) {
  const FabricLink* l = f.find_link(name);
  if (l == nullptr) {
    std::string all;
    for (const FabricLink& x : f.links()) all += (all.empty() ? "" : ", ") + x.name;
    throw std::invalid_argument(std::string(flag) + ": no link '" + name + "' (links: " + all +
                                ")");
  }
  return *l;
}

// The captured link, if asked for: by name, or `fallback` when the name is empty.
std::unique_ptr<LinkCapture> open_capture(Fabric& f, const FabricOptions& o,
                                          const std::string& fallback) {
  if (o.pcap.empty()) return nullptr;
  const FabricLink& l = link_named(f, o.pcap_link.empty() ? fallback : o.pcap_link, "--pcap-link");
  auto node_no = [&](NodeRef n) {
    return n.kind == NK::kHost ? n.index : uint32_t(f.host_count()) + n.index;
  };
  std::string err;
  auto c = LinkCapture::open(o.pcap, *l.ab, *l.ba, node_no(l.a), node_no(l.b), &err);
  if (!c) throw std::runtime_error(err);
  return c;
}

}  // namespace

HostConfig host_config(const FabricOptions& o) {
  HostConfig h;
  h.rate_bps = o.link_bps;
  h.ring = o.ring;
  h.cc = o.cc;
  h.qp.mtu = o.mtu;
  h.qp.timeout = o.qp_timeout;
  h.qp.selective_repeat = o.selective_repeat;
  h.qp.paths = o.paths;
  h.data_dscp = o.dscp;
  return h;
}

SwitchConfig switch_config(const FabricOptions& o) {
  return SwitchConfig{.buffer_bytes = o.buffer_bytes,
                      .buffer_mode = o.buffer_mode,
                      .red = o.red,
                      .pfc = o.pfc,
                      .hash = o.hash};
}

void apply_link_mtus(Fabric& f, const FabricOptions& o) {
  for (const auto& [name, mtu] : o.link_mtu) {
    const FabricLink& l = link_named(f, name, "--link-mtu");
    f.set_link_mtu(uint32_t(&l - f.links().data()), mtu);
  }
}

void set_window(Fabric& f, Time duration, Time begin, Time end) {
  Window& w = f.window();
  w.begin = begin == kNever ? duration / 2 : begin;
  w.end = end == kNever ? duration : end;
  if (w.begin >= w.end || w.end > duration)
    throw std::invalid_argument("the window must lie inside the run and not be empty");
}

Time sample_interval(const FabricOptions& o, Time duration) {
  return o.sample != 0 ? o.sample : std::max<Time>(duration / 1000, 1);
}

std::string numbered(const char* prefix, uint64_t i) {
  std::string s = prefix;
  s += std::to_string(i);
  return s;
}

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

RunResult run_fabric(Fabric& f, Sampler& sampler, const FabricOptions& o,
                     const std::string& capture_link, Time until, bool stop_when_done) {
  sampler.add_flows();
  sampler.start();
  auto cap = open_capture(f, o, capture_link);
  SnapshotAt begin(f, f.window().begin);
  const double t0 = now_s();
  f.run(until, stop_when_done);
  const double wall = now_s() - t0;
  if (stop_when_done) f.window().end = f.queue().now();
  f.finish();
  RunResult r = collect(f, begin.get(), wall);
  r.series = sampler.csv();
  return r;
}

}  // namespace scenario_detail

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

using namespace scenario_detail;

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
  for (uint32_t i = 0; i < o.flows; ++i) f.add_host(numbered("h", i), hc);
  f.add_host("rx", hc);
  f.add_switch("s0", sc);
  f.add_switch("s1", sc);
  const LinkSpec l{o.fabric.link_bps, o.fabric.delay};
  const LinkSpec hl{o.fabric.link_bps, o.fabric.delay, o.fabric.loss};
  for (uint32_t i = 0; i < o.flows; ++i) f.connect({NK::kHost, i}, {NK::kSwitch, 0}, hl);
  f.connect({NK::kHost, o.flows}, {NK::kSwitch, 1}, hl);
  const uint32_t bottleneck = f.connect({NK::kSwitch, 0}, {NK::kSwitch, 1}, l);
  f.compute_routes();
  apply_link_mtus(f, o.fabric);
  set_window(f, o.duration, o.window_begin, o.window_end);
  const Time gap = o.stagger ? (o.stagger_gap ? o.stagger_gap : o.duration / (2 * o.flows)) : 0;
  for (uint32_t i = 0; i < o.flows; ++i) {
    f.add_flow({.src = i,
                .dst = o.flows,
                .msg_bytes = o.msg_bytes,
                .depth = 2,
                .start = Time(i) * gap + (o.fabric.warmup ? kWarmupLead : 0),
                .stop = o.duration,
                .warmup = o.fabric.warmup});
  }
  EgressPort& q = *f.links()[bottleneck].a_tx;
  Sampler sampler(f, sample_interval(o.fabric, o.duration), o.duration);
  sampler.add("queue_kib", [&q](Time) { return double(q.queued_bytes()) / 1024.0; });
  DumbbellResult r;
  r.run = run_fabric(f, sampler, o.fabric, f.links()[bottleneck].name, o.duration);
  const Time wlen = f.window().length();
  r.util_pct = 100.0 * double(q.counters().window_busy_ns) / double(wlen);
  for (const FlowResult& x : r.run.flows) r.flow_gbps.push_back(x.goodput_gbps);
  r.jain = jain_index(r.flow_gbps);
  r.queue_mean_kib = q.queue_stats().mean_bytes() / 1024.0;
  r.queue_p99_kib = double(q.queue_stats().percentile_bytes(0.99)) / 1024.0;
  r.queue_max_kib = double(q.queue_stats().max_bytes()) / 1024.0;
  r.cnp_per_s = double(r.run.cnps) / (double(wlen) / 1e9);
  write_outputs(o, r);
  return r;
}

IncastResult run_incast(const IncastOptions& o) {
  if (o.senders == 0) throw std::invalid_argument("--senders must be at least 1");
  Fabric f(o.fabric.seed);
  const HostConfig hc = host_config(o.fabric);
  for (uint32_t i = 0; i < o.senders; ++i) f.add_host(numbered("h", i), hc);
  f.add_host("rx", hc);
  f.add_switch("s0", switch_config(o.fabric));
  const LinkSpec l{o.fabric.link_bps, o.fabric.delay, o.fabric.loss};
  for (uint32_t i = 0; i < o.senders; ++i) f.connect({NK::kHost, i}, {NK::kSwitch, 0}, l);
  const uint32_t down = f.connect({NK::kHost, o.senders}, {NK::kSwitch, 0}, l);
  f.compute_routes();
  apply_link_mtus(f, o.fabric);
  f.window().begin = 0;
  f.window().end = o.limit;
  for (uint32_t i = 0; i < o.senders; ++i)
    f.add_flow({.src = i,
                .dst = o.senders,
                .msg_bytes = o.msg_bytes,
                .messages = 1,
                .depth = 1,
                .start = o.fabric.warmup ? kWarmupLead : 0,
                .warmup = o.fabric.warmup});
  EgressPort& q = *f.links()[down].b_tx;  // the switch's port towards the receiver
  const Time ideal =
      Time(double(o.senders) * double(o.msg_bytes) * 8e9 / double(o.fabric.link_bps));
  Sampler sampler(f, o.fabric.sample != 0 ? o.fabric.sample : std::max<Time>(ideal / 500, 100),
                  o.limit);
  sampler.add("queue_kib", [&q](Time) { return double(q.queued_bytes()) / 1024.0; });
  IncastResult r;
  r.run = run_fabric(f, sampler, o.fabric, f.links()[down].name, o.limit, /*stop_when_done=*/true);
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
  write_outputs(o, r);
  return r;
}

}  // namespace uroce::sim

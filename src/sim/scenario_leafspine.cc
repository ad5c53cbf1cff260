// The leaf-spine fabric (scenario.h): its topology, the built-in scenarios (pfc-spread, mixed)
// and the workload files that give it flows.
#include <algorithm>
#include <cmath>
#include <sstream>
#include <stdexcept>

#include "sim/scenario_internal.h"
#include "transport/context.h"

namespace uroce::sim {

using namespace scenario_detail;

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
  for (uint32_t i = 0; i < L * H; ++i) f.add_host(numbered("h", i), hc);
  for (uint32_t l = 0; l < L; ++l) f.add_switch(numbered("leaf", l), sc);
  for (uint32_t s = 0; s < S; ++s) f.add_switch(numbered("spine", s), sc);
  const LinkSpec hl{o.fabric.link_bps, o.fabric.delay, o.fabric.loss};
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
      e.name = numbered("elephant", k);
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
        s.name = numbered("stream", i);
        s.dst = (i + H) % N;
        s.msg_bytes = 256 * 1024;
      } else {
        s.name = numbered("short", i);
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
      s.name = numbered("incast", i);
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
    if (o.fabric.warmup) {
      x.start += kWarmupLead;
      x.warmup = true;
    }
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
  r.run = run_fabric(f, sampler, o.fabric, f.links().back().name, o.duration);
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
  write_outputs(o, r);
  return r;
}

}  // namespace uroce::sim

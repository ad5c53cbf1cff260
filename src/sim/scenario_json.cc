// The summaries `uroce-sim … --json` writes (scenario.h): a run's totals, its flows and the
// ports that paused, around each topology's own keys.
#include <cstdio>

#include "sim/json.h"
#include "sim/scenario.h"

namespace uroce::sim {
namespace {

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
  j.key("lost_frames").num(double(r.lost_frames));
  j.key("sr_ooo_accepted").num(double(r.sr_ooo_accepted));
  j.key("sr_sacks_sent").num(double(r.sr_sacks_sent));
  j.key("sr_selective_resends").num(double(r.sr_selective_resends));
  j.key("mp_sprayed_pkts").num(double(r.mp_sprayed));
  j.key("mp_path_rotations").num(double(r.mp_rotations));
  j.key("mp_ecn_rotations").num(double(r.mp_ecn_rotations));
  j.key("messages_completed").num(double(r.messages));
  j.key("message_fct_mean_us").num(r.message_fct_mean_us);
  j.key("message_fct_p50_us").num(r.message_fct_p50_us);
  j.key("message_fct_p99_us").num(r.message_fct_p99_us);
  j.key("message_fct_max_us").num(r.message_fct_max_us);
}

// The transport options every QP ran with.
void qp_json(JsonWriter& j, const FabricOptions& o) {
  j.key("selective_repeat").boolean(o.selective_repeat);
  j.key("paths").num(o.paths);
  j.key("warmup").boolean(o.warmup);
  j.key("loss").num(o.loss);
}

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
  // Per port and priority, over the window: the ones with any PAUSE sent, received or obeyed.
  j.key("pfc_counters").begin_array();
  for (const PortReport& p : r.ports) {
    for (int k = 0; k < kPriorities; ++k) {
      const PortReport::Class& c = p.prio[k];
      if (c.tx_pause + c.rx_pause + c.tx_resume + c.rx_resume == 0 && c.pause_us == 0) continue;
      j.begin_object();
      j.key("port").str(p.port).key("host").boolean(p.host).key("prio").num(k);
      j.key("rx_pause").num(double(c.rx_pause)).key("tx_pause").num(double(c.tx_pause));
      j.key("rx_resume").num(double(c.rx_resume)).key("tx_resume").num(double(c.tx_resume));
      j.key("pause_us").num(c.pause_us);
      j.end_object();
    }
  }
  j.end_array();
}

// A summary's opening: {"topology": …, then the topology's own keys.
JsonWriter open_summary(const char* topology) {
  JsonWriter j;
  j.begin_object();
  j.key("topology").str(topology);
  return j;
}

// The end of the dumbbell's and the incast's summaries: the run's totals, flows and PAUSEs.
std::string close_summary(JsonWriter& j, const RunResult& r) {
  run_json(j, r);
  flows_json(j, r);
  pauses_json(j, r);
  j.end_object();
  return j.str();
}

}  // namespace

std::string pfc_report(const FabricOptions& o, const RunResult& r) {
  char buf[160];
  std::string out;
  std::snprintf(buf, sizeof buf,
                "# PFC counters per port and priority, %.3f-%.3f µs (PFC %s, lossless "
                "priorities",
                r.window_begin_us, r.window_end_us, o.pfc.enabled ? "on" : "off");
  out += buf;
  for (int k = 0; k < kPriorities; ++k)
    if (o.pfc.classes & (1u << k)) out.append(" ").append(std::to_string(k));
  out += ")\n";
  std::snprintf(buf, sizeof buf, "%-24s %4s %10s %10s %10s %10s %14s\n", "Port", "Prio", "RxPause",
                "TxPause", "RxResume", "TxResume", "PauseTime(us)");
  out += buf;
  for (const PortReport& p : r.ports) {
    for (int k = 0; k < kPriorities; ++k) {
      const PortReport::Class& c = p.prio[k];
      const bool any = c.tx_pause + c.rx_pause + c.tx_resume + c.rx_resume != 0 || c.pause_us != 0;
      if (!any && !(o.pfc.enabled && (o.pfc.classes & (1u << k)))) continue;
      std::snprintf(buf, sizeof buf, "%-24s %4d %10llu %10llu %10llu %10llu %14.3f\n",
                    p.port.c_str(), k, (unsigned long long)c.rx_pause,
                    (unsigned long long)c.tx_pause, (unsigned long long)c.rx_resume,
                    (unsigned long long)c.tx_resume, c.pause_us);
      out += buf;
    }
  }
  return out;
}

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

std::string to_json(const DumbbellOptions& o, const DumbbellResult& r) {
  JsonWriter j = open_summary("dumbbell");
  qp_json(j, o.fabric);
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
  return close_summary(j, r.run);
}

std::string to_json(const IncastOptions& o, const IncastResult& r) {
  JsonWriter j = open_summary("incast");
  qp_json(j, o.fabric);
  j.key("senders").num(o.senders);
  j.key("msg_bytes").num(double(o.msg_bytes));
  j.key("completed").boolean(r.completed);
  j.key("fct_max_us").num(r.fct_max_us);
  j.key("fct_mean_us").num(r.fct_mean_us);
  j.key("ideal_us").num(r.ideal_us);
  j.key("queue_max_kib").num(r.queue_max_kib);
  return close_summary(j, r.run);
}

std::string to_json(const LeafSpineOptions& o, const LeafSpineResult& r) {
  JsonWriter j = open_summary("leafspine");
  qp_json(j, o.fabric);
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

}  // namespace uroce::sim

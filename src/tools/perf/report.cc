#include "tools/perf/report.h"

#include <cinttypes>
#include <cstdio>
#include <map>

#include "tools/json.h"

namespace uroce::perf {

using tools::json_number;
using tools::json_string;

namespace {

constexpr const char* kRule =
    "---------------------------------------------------------------------------------------\n";

// perftest's units: MB is 2^20 bytes, Gb 10^9 bits.
double to_units(const Options& o, double bytes_per_s) {
  return o.report_gbits ? bytes_per_s * 8 / 1e9 : bytes_per_s / 1048576.0;
}
const char* unit_name(const Options& o) {
  return o.report_gbits ? "Gb/sec" : "MB/sec";
}

int mtu_bytes(ibv_mtu m) {
  return 128 << static_cast<int>(m);
}

const char* transport_name(ibv_transport_type t) {
  switch (t) {
    case IBV_TRANSPORT_IB:
      return "IB";
    case IBV_TRANSPORT_IWARP:
      return "IW";
    default:
      return "Unknown";
  }
}

bool is_lat_duration(const Options& o) {
  return o.latency() && o.duration > 0;
}

}  // namespace

double lat_divisor(const Options& o) {
  return o.verb == Verb::kRead || o.verb == Verb::kAtomic ? 1 : 2;
}

void print_rule() {
  std::fputs(kRule, stdout);
}

void print_waiting_banner() {
  std::printf("\n************************************\n");
  std::printf("* Waiting for client to connect... *\n");
  std::printf("************************************\n");
  std::fflush(stdout);
}

void print_test_info(const ReportContext& c) {
  const Options& o = *c.o;
  print_rule();
  std::string title = std::string("                    ") + verb_title(o.verb) + " ";
  if (o.verb == Verb::kAtomic) title += std::string(atomic_name(o.atomic_op)) + " ";
  if (o.latency()) {
    title += "Latency ";
  } else {
    if (o.bidirectional) title += "Bidirectional ";
    if (o.post_list > 1) title += "Post List ";
    title += "BW ";
  }
  std::printf("%sTest\n", title.c_str());
  if (o.events) std::printf(" Test with events.\n");
  std::printf(" Dual-port       : OFF\t\tDevice         : %s\n", c.dev->name.c_str());
  std::printf(" Number of qps   : %d\t\tTransport type : %s\n", o.qps,
              transport_name(c.dev->transport));
  std::printf(" Connection type : %s\t\tUsing SRQ      : OFF\n", conn_name(o.conn));
  std::printf(" PCIe relax order: OFF\n");
  std::printf(" ibv_wr* API     : %s\n", c.new_api ? "ON" : "OFF");
  if (c.client || o.bidirectional) std::printf(" TX depth        : %d\n", o.tx_depth);
  if (o.post_list > 1) std::printf(" Post List       : %d\n", o.post_list);
  if (o.verb == Verb::kSend && (!c.client || o.bidirectional))
    std::printf(" RX depth        : %d\n", o.rx_depth);
  if (!o.latency()) std::printf(" CQ Moderation   : %d\n", o.cq_mod);
  std::printf(" Mtu             : %d[B]\n", mtu_bytes(c.mtu));
  std::printf(" Link type       : %s\n", c.dev->ethernet ? "Ethernet" : "IB");
  if (c.dev->gid_index >= 0) std::printf(" GID index       : %d\n", c.dev->gid_index);
  if (o.verb != Verb::kRead && o.verb != Verb::kAtomic)
    std::printf(" Max inline data : %d[B]\n", o.inline_size);
  else
    std::printf(" Outstand reads  : %d\n", c.out_reads);
  std::printf(" rdma_cm QPs\t : OFF\n");
  std::printf(" Data ex. method : Ethernet\n");
  if (o.threads > 1) std::printf(" Threads         : %d\n", o.threads);
  print_rule();
}

void print_dest(const ReportContext& c, const Dest& d, bool local) {
  const Options& o = *c.o;
  std::printf(" %s address: LID %#04x QPN %#06x PSN %#06x", local ? "local" : "remote", d.lid,
              d.qpn, d.psn);
  // perftest's fields per test: READ shows the outstanding reads, READ and WRITE the window.
  if (o.verb == Verb::kRead) std::printf(" OUT %#04x", d.out_reads);
  if (o.verb == Verb::kRead || o.verb == Verb::kWrite)
    std::printf(" RKey %#08x VAddr %#016" PRIx64, d.rkey, d.vaddr);
  std::printf("\n");
  if (c.dev->gid_index >= 0) {
    std::printf(" GID: ");
    for (int i = 0; i < 16; ++i) std::printf("%02d%s", d.gid.raw[i], i < 15 ? ":" : "\n");
  }
}

void print_table_header(const ReportContext& c) {
  const Options& o = *c.o;
  print_rule();
  if (is_lat_duration(o))
    std::printf(" #bytes        #iterations       t_avg[usec]    tps average\n");
  else if (o.latency())
    std::printf(
        " #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    "
        "t_stdev[usec]   99%% percentile[usec]   99.9%% percentile[usec] \n");
  else
    std::printf(" #bytes     #iterations    BW peak[%s]    BW average[%s]   MsgRate[Mpps]\n",
                unit_name(o), unit_name(o));
  std::fflush(stdout);
}

BwReport bw_report(const ReportContext& c, uint64_t size, const BwSummary& s) {
  BwReport r;
  r.size = size;
  r.iters = s.msgs;
  r.bw_peak = c.o->no_peak ? 0 : to_units(*c.o, s.peak);
  r.bw_avg = to_units(*c.o, s.avg);
  r.msg_rate = s.msg_rate() / 1e6;
  return r;
}

void print_bw_row(const ReportContext& c, const BwReport& r) {
  // perftest prints more digits when a Gb/s figure would round to 0.00.
  if (c.o->report_gbits && r.bw_avg < 0.1)
    std::printf(" %-7" PRIu64 "    %" PRIu64
                "           %-7.6lf            %-7.6lf            %-7.6lf\n",
                r.size, r.iters, r.bw_peak, r.bw_avg, r.msg_rate);
  else
    std::printf(" %-7" PRIu64 "    %-10" PRIu64 "       %-7.2lf            %-7.2lf\t\t   %-7.6lf\n",
                r.size, r.iters, r.bw_peak, r.bw_avg, r.msg_rate);
  std::fflush(stdout);
}

void print_lat_row(const ReportContext& c, uint64_t size, uint64_t iters, const LatSummary& s) {
  const double k = lat_divisor(*c.o) * 1000;  // ns of round trip -> reported usec
  if (is_lat_duration(*c.o)) {
    std::printf(" %-7" PRIu64 "       %" PRIu64 "            %-7.2f        %-7.2f\n", size, iters,
                s.mean / k, s.rate());
  } else {
    std::printf(
        " %-7" PRIu64 " %" PRIu64
        "          %-7.2f        %-7.2f      %-7.2f  \t       %-7.2f     \t%-7.2f\t\t%-7.2f "
        "\t\t%-7.2f\n",
        size, iters, s.min / k, s.max / k, s.p50 / k, s.mean / k, s.stdev / k, s.p99 / k,
        s.p999 / k);
  }
  std::fflush(stdout);
}

namespace {

void print_lat_extras(const ReportContext& c, const std::vector<SizeResult>& results) {
  const Options& o = *c.o;
  const double k = lat_divisor(o) * 1000;
  bool any = false;
  for (const SizeResult& r : results) any |= r.lat.count || (r.have_remote && r.remote_lat.count);
  if (!any) return;
  std::printf(" uroce-perf latency [usec]%s, from a CLOCK_MONOTONIC histogram\n",
              lat_divisor(o) == 2 ? " (half the round trip, as above)" : "");
  std::printf(" %-9s %-7s %-10s %-10s %-10s %-10s %-10s %-10s %s\n", "#bytes", "side", "p50", "p90",
              "p99", "p99.9", "max", "samples", "round trips/s");
  auto row = [&](uint64_t size, const char* side, const LatSummary& s) {
    std::printf(" %-9" PRIu64 " %-7s %-10.2f %-10.2f %-10.2f %-10.2f %-10.2f %-10" PRIu64 " %.0f\n",
                size, side, s.p50 / k, s.p90 / k, s.p99 / k, s.p999 / k, s.max / k, s.count,
                s.rate());
  };
  for (const SizeResult& r : results) {
    if (r.lat.count) row(r.size, "local", r.lat);
    if (r.have_remote && r.remote_lat.count) row(r.size, "remote", r.remote_lat);
  }
  if (o.print_histogram) {
    for (const SizeResult& r : results) {
      if (!r.hist.count()) continue;
      std::printf(" histogram of %" PRIu64
                  "-byte round trips [usec, not halved]: lower upper count\n",
                  r.size);
      for (const Histogram::Bucket& b : r.hist.buckets())
        std::printf("   %.3f %.3f %" PRIu64 "\n", static_cast<double>(b.lower) / 1000,
                    static_cast<double>(b.upper) / 1000, b.count);
    }
  }
}

void print_bw_extras(const ReportContext& c, const std::vector<SizeResult>& results) {
  const Options& o = *c.o;
  bool any = false;
  for (const SizeResult& r : results)
    any |= r.tx.msgs || r.rx.msgs || (r.have_remote && (r.remote_tx.msgs || r.remote_rx.msgs));
  if (!any) return;  // a passive side facing perftest: the row above is all there is
  std::printf(" uroce-perf bandwidth per side (%s; peak: best tenth of the run)\n", unit_name(o));
  std::printf(" %-9s %-10s %-12s %-10s %-12s %-12s %-14s %s\n", "#bytes", "side", "messages",
              "seconds", "average", "peak", "MsgRate[Mpps]", "lost");
  auto row = [&](uint64_t size, const char* side, const BwSummary& s, bool show_lost,
                 uint64_t lost) {
    if (!s.msgs) return;
    std::printf(" %-9" PRIu64 " %-10s %-12" PRIu64 " %-10.4f %-12.2f %-12.2f %-14.6f %s\n", size,
                side, s.msgs, s.seconds, to_units(o, s.avg), o.no_peak ? 0 : to_units(o, s.peak),
                s.msg_rate() / 1e6, show_lost ? std::to_string(lost).c_str() : "-");
  };
  const bool unreliable_send = o.verb == Verb::kSend && o.conn != Conn::kRC;
  for (const SizeResult& r : results) {
    row(r.size, "local tx", r.tx, false, 0);
    row(r.size, "local rx", r.rx, unreliable_send, r.lost);
    if (r.have_remote) {
      row(r.size, "remote tx", r.remote_tx, false, 0);
      row(r.size, "remote rx", r.remote_rx, unreliable_send, r.remote_lost);
    }
  }
}

std::string cpu_text(const CpuTime& t) {
  if (!t.known) return "not known";
  char buf[160];
  std::snprintf(buf, sizeof buf, "%.3f s user + %.3f s sys in %.3f s (%.0f%% of one core)", t.user,
                t.sys, t.wall, t.wall > 0 ? 100 * t.total() / t.wall : 0);
  return buf;
}

}  // namespace

void print_extras(const ReportContext& c, const std::vector<SizeResult>& results,
                  const RunTotals& totals) {
  const Options& o = *c.o;
  if (o.latency())
    print_lat_extras(c, results);
  else
    print_bw_extras(c, results);

  std::printf(" CPU time    local:  %s\n", cpu_text(totals.cpu).c_str());
  if (totals.remote_known)
    std::printf("             remote: %s\n", cpu_text(totals.remote_cpu).c_str());
  if (!o.latency()) {
    // Each direction once: what this side sent, and what the peer sent (or, not knowing the
    // peer's figures, what arrived here).
    uint64_t bytes = 0;
    for (const SizeResult& r : results)
      bytes += r.tx.bytes + (r.have_remote ? r.remote_tx.bytes : r.rx.bytes);
    double cpu = totals.cpu.total() + (totals.remote_known ? totals.remote_cpu.total() : 0);
    if (cpu > 0 && bytes > 0)
      std::printf(" Efficiency  %.1f MB moved per CPU-second of %s\n",
                  static_cast<double>(bytes) / 1048576.0 / cpu,
                  totals.remote_known ? "both processes" : "this process");
  }

  // uroce's counters: every one that moved on either side.
  const CounterDelta& l = totals.counters;
  const CounterDelta& r = totals.remote_counters;
  if (!l.known && !(totals.remote_known && r.known)) {
    std::printf(" uroce counters: %s\n", l.why_not.c_str());
  } else {
    std::map<std::string, std::pair<uint64_t, uint64_t>> moved;
    std::vector<std::string> order;
    auto add = [&](const CounterDelta& d, bool remote) {
      if (!d.known) return;
      for (const auto& [name, v] : d.values) {
        if (!v) continue;
        if (!moved.count(name)) order.push_back(name);
        (remote ? moved[name].second : moved[name].first) = v;
      }
    };
    add(l, false);
    if (totals.remote_known) add(r, true);
    std::printf(" uroce counters during the run   %14s %14s\n", "local",
                totals.remote_known ? "remote" : "");
    auto side = [&](const CounterDelta& d, bool has, uint64_t v) {
      if (!has) return std::string("");
      if (!d.known) return std::string("n/a");
      return std::to_string(v);
    };
    for (const std::string& name : order)
      std::printf("   %-30s %14s %14s\n", name.c_str(), side(l, true, moved[name].first).c_str(),
                  side(r, totals.remote_known, moved[name].second).c_str());
    if (order.empty()) std::printf("   (none moved)\n");
    if (!l.known)
      std::printf("   local: %s\n", l.why_not.c_str());
    else if (!l.why_not.empty())
      std::printf("   local: %s\n", l.why_not.c_str());
    if (totals.remote_known && !r.known) std::printf("   remote: %s\n", r.why_not.c_str());
  }

  if (o.check) {
    uint64_t mine = 0, theirs = 0, fails = 0;
    std::string first;
    for (const SizeResult& s : results) {
      mine += s.check.bytes;
      theirs += s.remote_check.bytes;
      fails += s.check.failures + s.remote_check.failures;
      if (first.empty() && !s.check.ok()) first = "here: " + s.check.first;
      if (first.empty() && !s.remote_check.ok()) first = "at the peer: " + s.remote_check.first;
    }
    if (fails)
      std::printf(" check: FAILED, %" PRIu64 " mismatches; the first %s\n", fails, first.c_str());
    else
      std::printf(" check: passed, %" PRIu64 " bytes verified here and %" PRIu64 " by the peer\n",
                  mine, theirs);
  }
  std::fflush(stdout);
}

namespace {

std::string lat_json(const Options& o, const LatSummary& s) {
  const double k = lat_divisor(o) * 1000;
  std::string j = "{\"samples\":" + std::to_string(s.count) +
                  ",\"seconds\":" + json_number(s.seconds) +
                  ",\"round_trips_per_second\":" + json_number(s.rate()) + ",\"usec\":{";
  j += "\"min\":" + json_number(s.min / k) + ",\"max\":" + json_number(s.max / k) +
       ",\"typical\":" + json_number(s.p50 / k) + ",\"avg\":" + json_number(s.mean / k) +
       ",\"stdev\":" + json_number(s.stdev / k) + ",\"p50\":" + json_number(s.p50 / k) +
       ",\"p90\":" + json_number(s.p90 / k) + ",\"p99\":" + json_number(s.p99 / k) +
       ",\"p99_9\":" + json_number(s.p999 / k) + "}}";
  return j;
}

std::string bw_json(const BwSummary& s) {
  return "{\"messages\":" + std::to_string(s.msgs) + ",\"bytes\":" + std::to_string(s.bytes) +
         ",\"seconds\":" + json_number(s.seconds) + ",\"bytes_per_second\":" + json_number(s.avg) +
         ",\"peak_bytes_per_second\":" + json_number(s.peak) +
         ",\"messages_per_second\":" + json_number(s.msg_rate()) + "}";
}

std::string check_json(const CheckSummary& c) {
  return "{\"verified\":" + std::string(c.done ? "true" : "false") +
         ",\"bytes\":" + std::to_string(c.bytes) + ",\"failures\":" + std::to_string(c.failures) +
         ",\"first_failure\":" + json_string(c.first) + "}";
}

std::string cpu_json(const CpuTime& t) {
  if (!t.known) return "null";
  return "{\"user_seconds\":" + json_number(t.user) + ",\"sys_seconds\":" + json_number(t.sys) +
         ",\"wall_seconds\":" + json_number(t.wall) + "}";
}

std::string counters_json(const CounterDelta& d) {
  if (!d.known) return "{\"known\":false,\"why\":" + json_string(d.why_not) + "}";
  std::string j = "{\"known\":true";
  if (!d.why_not.empty()) j += ",\"note\":" + json_string(d.why_not);
  j += ",\"values\":{";
  bool first = true;
  for (const auto& [name, v] : d.values) {
    // Appended piece by piece: `(first ? "" : ",") + json_string(name)` draws a bogus
    // -Wrestrict from gcc 12 at -O3 (GCC bug 105329).
    if (!first) j += ',';
    j += json_string(name);
    j += ':';
    j += std::to_string(v);
    first = false;
  }
  return j + "}}";
}

}  // namespace

std::string json_report(const ReportContext& c, const std::vector<SizeResult>& results,
                        const RunTotals& totals, const std::string& status) {
  const Options& o = *c.o;
  std::string j = "{\"tool\":\"uroce-perf\",\"version\":" + json_string(UROCE_PERF_VERSION);
  j += ",\"test\":" + json_string(o.test) +
       ",\"role\":" + json_string(c.client ? "client" : "server");
  j += ",\"status\":" + json_string(status);
  j += ",\"peer\":{\"version\":" + json_string(c.peer ? c.peer->version : "") +
       ",\"uroce_perf\":" + (c.peer && c.peer->uroce_perf ? "true" : "false") + "}";
  j += ",\"device\":{\"name\":" + json_string(c.dev->name) +
       ",\"link_layer\":" + json_string(c.dev->ethernet ? "Ethernet" : "IB") +
       ",\"gid_index\":" + std::to_string(c.dev->gid_index) +
       ",\"mtu\":" + std::to_string(mtu_bytes(c.mtu)) + "}";
  j += ",\"options\":{\"connection\":" + json_string(conn_name(o.conn)) +
       ",\"size\":" + std::to_string(o.size) +
       ",\"all_sizes\":" + (o.all_sizes ? "true" : "false") +
       ",\"iterations\":" + std::to_string(o.iters) +
       ",\"duration\":" + std::to_string(o.duration) + ",\"qps\":" + std::to_string(o.qps) +
       ",\"threads\":" + std::to_string(o.threads) + ",\"tx_depth\":" + std::to_string(o.tx_depth) +
       ",\"rx_depth\":" + std::to_string(o.rx_depth) + ",\"cq_mod\":" + std::to_string(o.cq_mod) +
       ",\"post_list\":" + std::to_string(o.post_list) +
       ",\"inline_size\":" + std::to_string(o.inline_size) +
       ",\"bidirectional\":" + (o.bidirectional ? "true" : "false") +
       ",\"events\":" + (o.events ? "true" : "false") +
       ",\"post_api\":" + json_string(c.new_api ? "ibv_wr" : "ibv_post_send") +
       ",\"out_reads\":" + std::to_string(c.out_reads) +
       ",\"check\":" + (o.check ? "true" : "false") + "}";
  if (o.latency())
    j += ",\"latency_unit\":" +
         json_string(lat_divisor(o) == 2 ? "usec, half the round trip" : "usec, round trip");
  else
    j += ",\"bandwidth_unit\":" + json_string(unit_name(o));
  j += ",\"results\":[";
  for (size_t i = 0; i < results.size(); ++i) {
    const SizeResult& r = results[i];
    j += i ? ",{" : "{";
    j += "\"size\":" + std::to_string(r.size) + ",\"iterations\":" + std::to_string(r.iters);
    if (o.latency()) {
      j += ",\"local\":" + (r.lat.count ? lat_json(o, r.lat) : std::string("null"));
      if (r.have_remote)
        j +=
            ",\"remote\":" + (r.remote_lat.count ? lat_json(o, r.remote_lat) : std::string("null"));
      if (r.hist.count()) {
        j += ",\"histogram_round_trip_ns\":[";
        bool first = true;
        for (const Histogram::Bucket& b : r.hist.buckets()) {
          j += (first ? "[" : ",[") + std::to_string(b.lower) + "," + std::to_string(b.upper) +
               "," + std::to_string(b.count) + "]";
          first = false;
        }
        j += "]";
      }
    } else {
      j += ",\"local\":{\"tx\":" + bw_json(r.tx) + ",\"rx\":" + bw_json(r.rx) +
           ",\"lost\":" + std::to_string(r.lost) + "}";
      if (r.have_remote)
        j += ",\"remote\":{\"tx\":" + bw_json(r.remote_tx) + ",\"rx\":" + bw_json(r.remote_rx) +
             ",\"lost\":" + std::to_string(r.remote_lost) + "}";
      if (r.perftest_report)
        j += ",\"perftest_peer_report\":{\"bw_peak\":" + json_number(r.perftest_report->bw_peak) +
             ",\"bw_average\":" + json_number(r.perftest_report->bw_avg) +
             ",\"msg_rate_mpps\":" + json_number(r.perftest_report->msg_rate) + "}";
    }
    if (o.check) {
      j += ",\"check\":{\"local\":" + check_json(r.check);
      if (r.have_remote) j += ",\"remote\":" + check_json(r.remote_check);
      j += "}";
    }
    j += "}";
  }
  j += "],\"cpu\":{\"local\":" + cpu_json(totals.cpu) +
       ",\"remote\":" + (totals.remote_known ? cpu_json(totals.remote_cpu) : std::string("null")) +
       "}";
  j += ",\"uroce_counters\":{\"local\":" + counters_json(totals.counters) + ",\"remote\":" +
       (totals.remote_known ? counters_json(totals.remote_counters) : std::string("null")) + "}";
  j += "}\n";
  return j;
}

}  // namespace uroce::perf

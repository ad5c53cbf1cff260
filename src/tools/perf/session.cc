// The order of everything on the TCP connection, test by test. perftest's sequences (from its
// ib_*.c mains, perftest 4.5 / 6.06), with K = one key handshake per QP, K0 = one handshake, R =
// the bandwidth-report exchange and CLOSE = K0 + "done":
//
//   all tests   versions, system data, MTU
//   write/read/atomic_bw   K [connect] K K0; passive server (no -b): K0 R CLOSE;
//               client (or -b): per size { [-b: K0] run [-b, -a: K0] [-b: R] }, [client: K0 R]
//               CLOSE
//   send_bw     K [connect] K0 K; per size { K0 run [-b: R] [-a: K0] } CLOSE
//   send_lat    K [connect] K0 K; per size { K0 run } CLOSE
//   write_lat   K0 K [connect] K K0; per size { run }             (no CLOSE)
//   read/atomic_lat   K0 K [connect] K K0; server: CLOSE; client: per size { run } CLOSE
//
// Handshakes carry the same message whatever their place, so only their number between
// "connect" points matters; perftest's order is kept anyway. Between two uroce-perf processes
// the same sequence runs with extension messages at fixed places (both sides know the peer is
// uroce-perf from the version exchange):
//   P  after the MTU: the test's parameters; both stop with an error if they disagree;
//   S  at the end of each size's run: "sent" (how many each side's initiators posted, so a
//      receiver knows when it has everything and what was lost) and then "result" (each side's
//      figures and --check verdict for that size);
//   T  before CLOSE (at the very end for write_lat): CPU time and uroce counters of the run.
// A passive side takes part in every S, so both sides run the same number of them.
//
// The set-up, the sequences and the totals are here; a run of one message size (the threads,
// the sent/result exchange, the verification) is session_run.cc; session_impl.h is the class.
#include "tools/perf/session.h"

#include <unistd.h>

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <thread>

#include "tools/perf/plot.h"
#include "tools/perf/session_impl.h"

namespace uroce::perf {
namespace session_detail {

Family family_of(const Options& o) {
  if (o.latency()) {
    if (o.verb == Verb::kSend) return Family::kSendLat;
    if (o.verb == Verb::kWrite) return Family::kWriteLat;
    return Family::kRdmaLat;
  }
  return o.verb == Verb::kSend ? Family::kSendBw : Family::kRdmaBw;
}

std::string num(double v) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}
double to_double(const Fields& f, const std::string& k) {
  auto it = f.find(k);
  return it == f.end() ? 0 : std::strtod(it->second.c_str(), nullptr);
}
uint64_t to_u64(const Fields& f, const std::string& k) {
  auto it = f.find(k);
  return it == f.end() ? 0 : std::strtoull(it->second.c_str(), nullptr, 10);
}
std::string to_str(const Fields& f, const std::string& k) {
  auto it = f.find(k);
  return it == f.end() ? "" : it->second;
}
// Values in Fields hold no newline.
std::string one_line(std::string s) {
  std::replace(s.begin(), s.end(), '\n', ' ');
  return s;
}

// ---- the run ----------------------------------------------------------------------------

int Session::run() {
  if (!o_.json && !client_) print_waiting_banner();
  ch_ = std::make_unique<Channel>(o_.server, o_.tcp_port);
  ch_->exchange_versions(o_.dont_xchg_versions);
  ext_ = ch_->peer().uroce_perf;
  refuse_what_perftest_cannot_do();
  cycle_ = static_cast<uint32_t>(std::max(4096L, sysconf(_SC_PAGESIZE)));
  long line = sysconf(_SC_LEVEL1_DCACHE_LINESIZE);
  line_ = line > 0 ? static_cast<uint32_t>(line) : 64;
  ch_->exchange_sys_data(&cycle_, &line_);
  mtu_ = res_.local_mtu();
  ch_->exchange_mtu(&mtu_);
  if (ext_) exchange_parameters();
  choose_sizes();
  res_.create(sizes_.back(), cycle_, line_);
  prepare_buffers();

  ctx_.o = &o_;
  ctx_.dev = &res_.info();
  ctx_.mtu = mtu_;
  ctx_.out_reads = res_.out_reads();
  ctx_.new_api = res_.new_post_api();
  ctx_.client = client_;
  ctx_.peer = &ch_->peer();
  if (!o_.json) print_test_info(ctx_);

  connect_qps();
  if (!o_.json) print_table_header(ctx_);

  cpu0_ = cpu_now();
  ctr0_ = read_own_counters(res_.info().name);
  switch (fam_) {
    case Family::kRdmaBw:
      rdma_bw();
      break;
    case Family::kSendBw:
      send_bw();
      break;
    case Family::kSendLat:
      send_lat();
      break;
    case Family::kWriteLat:
      write_lat();
      break;
    case Family::kRdmaLat:
      rdma_lat();
      break;
  }
  return finish();
}

// ---- set-up -----------------------------------------------------------------------------

void Session::refuse_what_perftest_cannot_do() {
  if (ext_) return;
  const std::string who = o_.dont_xchg_versions
                              ? std::string("an unknown peer (--dont_xchg_versions)")
                              : "perftest " + ch_->peer().version;
  if (o_.check) fatal("--check needs uroce-perf on both sides; the peer is %s", who.c_str());
  // A duration run needs the two sides to stop together; only a passive target need not.
  const bool passive_server = fam_ == Family::kRdmaBw && !o_.bidirectional;
  if (o_.duration && !passive_server)
    fatal("-D with %s works for write_bw, read_bw and atomic_bw (without -b) only", who.c_str());
  if (o_.latency() && o_.qps > 1) fatal("%s runs latency tests on one QP; drop -q", who.c_str());
}

void Session::exchange_parameters() {
  Fields mine{{"test", o_.test},
              {"connection", conn_name(o_.conn)},
              {"size", o_.all_sizes ? "all" : std::to_string(o_.size)},
              {"iterations", std::to_string(o_.iters)},
              {"duration", std::to_string(o_.duration)},
              {"qps", std::to_string(o_.qps)},
              {"bidirectional", o_.bidirectional ? "yes" : "no"},
              {"check", o_.check ? "yes" : "no"},
              {"atomic_type", atomic_name(o_.atomic_op)}};
  Fields theirs = ch_->exchange_fields(mine);
  std::string diff;
  for (const auto& [k, v] : mine) {
    const std::string t = to_str(theirs, k);
    if (t != v)
      diff += "\n  " + k + ": " + (client_ ? "client " : "server ") + v + ", " +
              (client_ ? "server " : "client ") + (t.empty() ? "(none)" : t);
  }
  if (!diff.empty())
    fatal("the server and the client were started for different runs:%s", diff.c_str());
}

void Session::choose_sizes() {
  const uint64_t mtu_bytes = 128ull << static_cast<int>(mtu_);
  if (o_.verb == Verb::kAtomic) {
    sizes_ = {8};
    return;
  }
  if (!o_.all_sizes) {
    if (o_.conn == Conn::kUD && o_.size > mtu_bytes)
      fatal("UD messages are at most one MTU: -s %" PRIu64 " is above %" PRIu64, o_.size,
            mtu_bytes);
    sizes_ = {o_.size};
    return;
  }
  const uint64_t top = o_.conn == Conn::kUD ? mtu_bytes : kMaxAllSize;
  for (uint64_t s = 2; s <= top; s *= 2) sizes_.push_back(s);
}

void Session::prepare_buffers() {
  const uint64_t max = sizes_.back();
  for (int i = 0; i < res_.num_qps(); ++i) {
    QpCtx& q = res_.qp(i);
    if (o_.check) {
      // This side's data: what it SENDs or WRITEs from, or what a peer READs.
      if (o_.verb == Verb::kSend || o_.verb == Verb::kWrite) fill_pattern(q.src, max, client_, i);
      if (o_.verb == Verb::kRead) fill_pattern(q.target, max, client_, i);
    }
    if (o_.verb == Verb::kSend)
      for (int j = 0; j < q.rq_depth; ++j)
        if (int rc = res_.post_recv(q, j % q.recv_slots))
          fatal("QP %d: posting receive %d failed: %s", i, j, std::strerror(rc));
  }
}

void Session::connect_qps() {
  const int q = res_.num_qps();
  const bool gid = res_.uses_gid();
  std::vector<Dest> remote(static_cast<size_t>(q));
  const bool lead_k0 = fam_ == Family::kWriteLat || fam_ == Family::kRdmaLat;
  if (lead_k0) k0();
  for (int i = 0; i < q; ++i)
    remote[static_cast<size_t>(i)] = ch_->handshake(res_.qp(i).local, gid);
  if (gid) {
    auto v4 = [](const ibv_gid& g) {
      static const uint8_t prefix[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
      return std::memcmp(g.raw, prefix, 12) == 0;
    };
    if (v4(res_.qp(0).local.gid) != v4(remote[0].gid))
      fatal(
          "the two GIDs are of different IP versions (IPv4-mapped and not): pick another "
          "GID with -x");
  }
  res_.connect(remote, mtu_);
  if (!o_.json)
    for (int i = 0; i < q; ++i) print_dest(ctx_, res_.qp(i).local, true);
  // After RTR: the handshakes that tell both sides the other is ready.
  const bool send_order = fam_ == Family::kSendBw || fam_ == Family::kSendLat;
  if (send_order) k0();
  for (int i = 0; i < q; ++i) {
    ch_->handshake(res_.qp(i).local, gid);
    if (!o_.json) print_dest(ctx_, res_.qp(i).remote, false);
  }
  if (!send_order) k0();
}

// ---- the tests' sequences ---------------------------------------------------------------

void Session::print_size(const SizeResult& r, const BwSummary& local) {
  if (o_.json) return;
  BwReport mine = bw_report(ctx_, r.size, local);
  mine.iters = o_.iters ? o_.iters * static_cast<uint64_t>(o_.qps) : local.msgs;
  print_bw_row(ctx_, mine);
}

void Session::print_bidir(SizeResult& r, const BwSummary& local) {
  BwReport mine = bw_report(ctx_, r.size, local);
  mine.iters = o_.iters ? o_.iters * static_cast<uint64_t>(o_.qps) : local.msgs;
  BwReport theirs = ch_->exchange_bw_report(mine);
  r.perftest_report = theirs;
  if (o_.json) return;
  BwReport sum = mine;
  sum.bw_peak += theirs.bw_peak;
  sum.bw_avg += theirs.bw_avg;
  sum.msg_rate += theirs.msg_rate;
  print_bw_row(ctx_, sum);
  if (o_.report_both) {
    std::printf(" local:\n");
    print_bw_row(ctx_, mine);
    std::printf(" remote:\n");
    print_bw_row(ctx_, theirs);
  }
}

void Session::rdma_bw() {
  if (!client_ && !o_.bidirectional) {
    // The passive target: the client's figures arrive at the end (and per size from a
    // uroce-perf client).
    if (ext_)
      for (uint64_t size : sizes_) {
        SizeResult r = run_size(size);
        print_size(r, r.remote_tx);
        results_.push_back(std::move(r));
      }
    k0();
    BwReport theirs = ch_->exchange_bw_report(BwReport{});
    end_run();  // the client is done: this side's CPU and counters cover its whole run
    if (!ext_) {
      SizeResult r;
      r.size = theirs.size;
      r.iters = theirs.iters;
      r.perftest_report = theirs;
      if (!o_.json) print_bw_row(ctx_, theirs);
      results_.push_back(std::move(r));
    }
    exchange_totals();
    ch_->close_connection(res_.qp(0).local, res_.uses_gid());
    return;
  }
  BwReport last;
  for (uint64_t size : sizes_) {
    if (o_.bidirectional) k0();
    SizeResult r = run_size(size);
    if (o_.bidirectional && o_.all_sizes) k0();
    if (o_.bidirectional)
      print_bidir(r, r.tx);
    else
      print_size(r, r.tx);
    last = bw_report(ctx_, size, r.tx);
    last.iters = o_.iters ? o_.iters * static_cast<uint64_t>(o_.qps) : r.tx.msgs;
    results_.push_back(std::move(r));
  }
  end_run();
  if (client_ && !o_.bidirectional) {
    k0();
    ch_->exchange_bw_report(last);
  }
  exchange_totals();
  ch_->close_connection(res_.qp(0).local, res_.uses_gid());
}

void Session::send_bw() {
  for (uint64_t size : sizes_) {
    k0();
    SizeResult r = run_size(size);
    const BwSummary& mine = client_ || o_.bidirectional ? r.tx : r.rx;
    if (o_.bidirectional)
      print_bidir(r, mine);
    else
      print_size(r, mine);
    if (o_.all_sizes) k0();
    results_.push_back(std::move(r));
  }
  end_run();
  exchange_totals();
  ch_->close_connection(res_.qp(0).local, res_.uses_gid());
}

void Session::print_lat(const SizeResult& r, const LatSummary& s) {
  if (!o_.json && s.count) print_lat_row(ctx_, r.size, r.iters, s);
}

void Session::send_lat() {
  for (uint64_t size : sizes_) {
    k0();
    SizeResult r = run_size(size);
    print_lat(r, r.lat);
    results_.push_back(std::move(r));
  }
  end_run();
  exchange_totals();
  ch_->close_connection(res_.qp(0).local, res_.uses_gid());
}

void Session::write_lat() {
  for (uint64_t size : sizes_) {
    SizeResult r = run_size(size);
    print_lat(r, r.lat);
    results_.push_back(std::move(r));
  }
  end_run();
  exchange_totals();  // perftest's write_lat ends without a closing handshake
}

void Session::rdma_lat() {
  for (uint64_t size : sizes_) {
    if (!client_ && !ext_) break;  // a passive server of a perftest client just waits
    SizeResult r = run_size(size);
    print_lat(r, client_ ? r.lat : r.remote_lat);
    results_.push_back(std::move(r));
  }
  end_run();
  exchange_totals();
  ch_->close_connection(res_.qp(0).local, res_.uses_gid());
}

// ---- totals -----------------------------------------------------------------------------

std::string Session::counters_hint() {
  if (!ctr0_.ok) return "";
  CounterDelta d = counter_delta(ctr0_, read_own_counters(res_.info().name));
  std::string moved;
  for (const auto& [name, v] : d.values) {
    const bool telling =
        name.find("drop") != std::string::npos || name.find("err") != std::string::npos ||
        name.find("retrans") != std::string::npos || name.find("out_of") != std::string::npos ||
        name.find("rnr") != std::string::npos;
    if (v && telling) moved += (moved.empty() ? "" : ", ") + name + " " + std::to_string(v);
  }
  return moved.empty() ? "" : "\nuroce counters of this side so far: " + moved;
}

void Session::end_run() {
  CpuSample cpu1 = cpu_now();
  totals_.cpu = cpu_between(cpu0_, cpu1);
  CounterSnapshot after = ctr0_.ok ? read_own_counters(res_.info().name, cpu1.wall_ns, 0.25)
                                   : CounterSnapshot{false, ctr0_.why_not, 0, {}};
  totals_.counters = counter_delta(ctr0_, after);
  totals_.peer_version = ch_->peer().version;
}

void Session::exchange_totals() {
  if (!ext_) return;
  Fields f;
  f["cpu.user"] = num(totals_.cpu.user);
  f["cpu.sys"] = num(totals_.cpu.sys);
  f["cpu.wall"] = num(totals_.cpu.wall);
  f["counters.known"] = totals_.counters.known ? "1" : "0";
  f["counters.why"] = one_line(totals_.counters.why_not);
  std::string list;
  for (const auto& [name, v] : totals_.counters.values)
    list += (list.empty() ? "" : ",") + name + ":" + std::to_string(v);
  f["counters"] = list;
  Fields t = ch_->exchange_fields(f);
  totals_.remote_known = true;
  totals_.remote_cpu.known = true;
  totals_.remote_cpu.user = to_double(t, "cpu.user");
  totals_.remote_cpu.sys = to_double(t, "cpu.sys");
  totals_.remote_cpu.wall = to_double(t, "cpu.wall");
  totals_.remote_counters.known = to_str(t, "counters.known") == "1";
  totals_.remote_counters.why_not = to_str(t, "counters.why");
  const std::string l = to_str(t, "counters");
  size_t start = 0;
  while (start < l.size()) {
    size_t comma = l.find(',', start);
    std::string item =
        l.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    size_t colon = item.rfind(':');
    if (colon != std::string::npos)
      totals_.remote_counters.values.emplace_back(
          item.substr(0, colon), std::strtoull(item.c_str() + colon + 1, nullptr, 10));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
}

int Session::finish() {
  bool check_failed = false;
  for (const SizeResult& r : results_)
    if (!r.check.ok() || !r.remote_check.ok()) check_failed = true;
  // perftest's -w/-y verifier: the average of the last row (what perftest checks).
  bool below = false;
  if ((o_.limit_bw > 0 || o_.limit_msgrate > 0) && !results_.empty() && !o_.latency()) {
    const SizeResult& r = results_.back();
    BwReport rep = r.perftest_report && !r.tx.msgs ? *r.perftest_report
                                                   : bw_report(ctx_, r.size,
                                                               r.tx.msgs   ? r.tx
                                                               : r.rx.msgs ? r.rx
                                                                           : r.remote_tx);
    if (o_.limit_bw > 0 && rep.bw_avg < o_.limit_bw) below = true;
    if (o_.limit_msgrate > 0 && rep.msg_rate < o_.limit_msgrate) below = true;
  }
  const std::string status = check_failed ? "check failed" : below ? "below limit" : "ok";
  if (!o_.json) {
    print_rule();
    print_extras(ctx_, results_, totals_);
    if (below) std::printf(" limits: the average is below -w/-y\n");
  }
  const std::string doc = json_report(ctx_, results_, totals_, status);
  if (o_.json) std::fputs(doc.c_str(), stdout);
  if (!o_.json_file.empty()) {
    std::ofstream f(o_.json_file, std::ios::trunc);
    f << doc;
    if (!f) std::fprintf(stderr, "uroce-perf: cannot write %s\n", o_.json_file.c_str());
  }
  if (!o_.plot_file.empty()) {
    std::string err;
    const std::string title = "uroce-perf " + o_.test + " " + conn_name(o_.conn) + " on " +
                              res_.info().name + (client_ ? " (client)" : " (server)");
    if (!write_plot(o_, results_, title, &err))
      std::fprintf(stderr, "uroce-perf: %s\n", err.c_str());
  }
  std::fflush(stdout);
  return check_failed || below ? 1 : 0;
}

}  // namespace session_detail

int run_session(const Options& o) {
  return session_detail::Session(o).run();
}

}  // namespace uroce::perf

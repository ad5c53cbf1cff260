#include "tools/qp_view.h"

#include <infiniband/verbs.h>
#include <poll.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <termios.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <map>
#include <thread>
#include <tuple>

#include "engine/config.h"
#include "tools/json.h"

namespace uroce::tools {
namespace {

namespace shm = stats_shm;
using transport::QpCounterKind;
using transport::QpCounters;

const char* qp_type_name(uint32_t t) {
  switch (t) {
    case IBV_QPT_RC:
      return "RC";
    case IBV_QPT_UC:
      return "UC";
    case IBV_QPT_UD:
      return "UD";
    default:
      return "?";
  }
}

const char* qp_state_name(uint32_t s) {
  static constexpr const char* kNames[] = {"RESET", "INIT", "RTR", "RTS", "SQD", "SQE", "ERR"};
  return s < std::size(kNames) ? kNames[s] : "?";
}

// "0x000022 @ 10.0.0.2", or "-" for a QP without a peer (UD, before RTR).
std::string peer_of(const shm::QpRow& q) {
  if (q.peer_qpn == 0 && q.peer_ip == wire::IpAddr{}) return "-";
  char b[24];
  std::snprintf(b, sizeof b, "0x%06x", q.peer_qpn);
  return std::string(b) + " @ " + q.peer_ip.to_string();
}

// One QP of one process, as two refreshes tell it apart: a file (pid and device) and a QPN, in
// the same process incarnation.
struct QpKey {
  std::string path;
  uint64_t start_time;
  uint32_t qpn;
  auto operator<=>(const QpKey&) const = default;
};
using PrevQps = std::map<QpKey, QpCounters>;

PrevQps remember(const Published& devs) {
  PrevQps out;
  for (const auto& [path, s] : devs)
    for (const shm::QpRow& q : s.qps) out[{path, s.id.start_time, q.qpn}] = q.counters;
  return out;
}

const QpCounters* prev_of(const PrevQps& prev, const std::string& path, const shm::Snapshot& s,
                          const shm::QpRow& q) {
  auto it = prev.find({path, s.id.start_time, q.qpn});
  return it == prev.end() ? nullptr : &it->second;
}

// Counter values of `c` in the list's order (transport/qp_counters.h).
std::vector<uint64_t> values_of(const QpCounters& c) {
  std::vector<uint64_t> v;
  v.reserve(transport::kQpCounterCount);
  transport::for_each_qp_counter(c, [&v](const char*, uint64_t x) { v.push_back(x); });
  return v;
}

// Per-second rate of counter k since the previous refresh; nullopt without one (or when the
// counter went back: another QP now has the QPN).
std::optional<double> rate(const std::vector<uint64_t>& now, const std::vector<uint64_t>* before,
                           size_t k, double elapsed) {
  if (before == nullptr || elapsed <= 0 || now[k] < (*before)[k]) return std::nullopt;
  return double(now[k] - (*before)[k]) / elapsed;
}

// The table-level notes a device's QP table may need: none published (an older uroce), a
// publisher that stopped half-way, more QPs than rows.
void note_table(const shm::Snapshot& s, FILE* out) {
  if (!s.has_qp_table)
    std::fprintf(out, "  (this process publishes no per-QP counters: an older uroce)\n");
  else if (s.qp_table_busy)
    std::fprintf(out, "  (its QP table was being rewritten and never settled)\n");
  else if (s.qp_live > s.qps.size())
    std::fprintf(out, "  (%zu of its %u QPs shown: the table holds the lowest QPNs)\n",
                 s.qps.size(), s.qp_live);
}

void print_qps_human(const Published& devs, const PrevQps& prev, double elapsed,
                     const QpStatsOptions& o) {
  if (devs.empty()) {
    std::printf("no running uroce processes\n");
    return;
  }
  size_t w = 8;
  for (const transport::QpCounterInfo& c : transport::kQpCounterInfo)
    w = std::max(w, std::string(c.name).size());
  const bool rates = elapsed > 0;
  for (const auto& [path, s] : devs) {
    std::printf("%s  pid %d (%s)  %s  %zu QP%s\n", s.id.device.c_str(), static_cast<int>(s.id.pid),
                s.id.comm.c_str(), s.id.ip.to_string().c_str(), s.qps.size(),
                s.qps.size() == 1 ? "" : "s");
    note_table(s, stdout);
    for (const shm::QpRow& q : s.qps) {
      std::printf("  QP 0x%06x  %s  %s  peer %s\n", q.qpn, qp_type_name(q.type),
                  qp_state_name(q.state), peer_of(q).c_str());
      const QpCounters* p = prev_of(prev, path, s, q);
      const std::vector<uint64_t> now = values_of(q.counters);
      const std::vector<uint64_t> before = p ? values_of(*p) : std::vector<uint64_t>{};
      bool any = false;
      for (size_t k = 0; k < now.size(); ++k) {
        if (!o.all && now[k] == 0) continue;
        any = true;
        std::printf("    %-*s %20" PRIu64, int(w), transport::kQpCounterInfo[k].name, now[k]);
        if (rates) {
          if (auto r = rate(now, p ? &before : nullptr, k, elapsed))
            std::printf(" %14.1f/s", *r);
          else
            std::printf(" %16s", "-");
        }
        std::printf("\n");
      }
      if (!any) std::printf("    (all counters zero)\n");
    }
    std::printf("\n");
  }
}

void print_qps_json(const Published& devs, const PrevQps& prev, double elapsed) {
  std::string out = "{\"devices\":[";
  std::string qps;
  bool first_dev = true;
  for (const auto& [path, s] : devs) {
    out += std::string(first_dev ? "" : ",") + "{\"pid\":" + std::to_string(s.id.pid) +
           ",\"comm\":" + json_string(s.id.comm) + ",\"device\":" + json_string(s.id.device) +
           ",\"address\":" + json_string(s.id.ip.to_string()) +
           ",\"qp_table\":" + (s.has_qp_table ? "true" : "false") +
           ",\"qp_table_busy\":" + (s.qp_table_busy ? "true" : "false") +
           ",\"qps_live\":" + std::to_string(s.qp_live) +
           ",\"qps_shown\":" + std::to_string(s.qps.size()) + "}";
    first_dev = false;
    for (const shm::QpRow& q : s.qps) {
      const QpCounters* p = prev_of(prev, path, s, q);
      const std::vector<uint64_t> now = values_of(q.counters);
      const std::vector<uint64_t> before = p ? values_of(*p) : std::vector<uint64_t>{};
      qps += std::string(qps.empty() ? "" : ",") + "{\"pid\":" + std::to_string(s.id.pid) +
             ",\"comm\":" + json_string(s.id.comm) + ",\"device\":" + json_string(s.id.device) +
             ",\"address\":" + json_string(s.id.ip.to_string()) +
             ",\"qpn\":" + std::to_string(q.qpn) +
             ",\"type\":" + json_string(qp_type_name(q.type)) +
             ",\"state\":" + json_string(qp_state_name(q.state)) +
             ",\"peer_qpn\":" + std::to_string(q.peer_qpn) + ",\"peer_address\":" +
             (q.peer_ip != wire::IpAddr{} ? json_string(q.peer_ip.to_string()) : "null") +
             ",\"counters\":{";
      // Every counter, zero or not: a script finds each key in every row.
      std::string rates;
      for (size_t k = 0; k < now.size(); ++k) {
        qps += std::string(k ? "," : "") + json_string(transport::kQpCounterInfo[k].name) + ":" +
               std::to_string(now[k]);
        if (auto r = rate(now, p ? &before : nullptr, k, elapsed))
          rates += std::string(rates.empty() ? "" : ",") +
                   json_string(transport::kQpCounterInfo[k].name) + ":" + json_number(*r);
      }
      qps += "}";
      if (p) qps += ",\"interval_seconds\":" + json_number(elapsed) + ",\"rates\":{" + rates + "}";
      qps += "}";
    }
  }
  out += "],\"qps\":[" + qps + "]}\n";
  std::fputs(out.c_str(), stdout);
}

// ---- uroce top ---------------------------------------------------------------------------

struct TopLine {
  const shm::Snapshot* s = nullptr;
  const shm::QpRow* q = nullptr;
  std::optional<double> tx_pps, rx_pps, tx_bps, rx_bps;  // nullopt on the first frame
  uint64_t errors = 0;                                   // since the QP was created
  std::optional<double> errors_ps;
};

std::optional<double> field_rate(uint64_t now, const QpCounters* p, uint64_t QpCounters::*f,
                                 double elapsed) {
  if (p == nullptr || elapsed <= 0 || now < p->*f) return std::nullopt;
  return double(now - p->*f) / elapsed;
}

std::string fmt_rate(std::optional<double> v, double scale, const char* fmt) {
  if (!v) return "-";
  char b[32];
  std::snprintf(b, sizeof b, fmt, *v / scale);
  return b;
}

// One frame: a title, a header, a line per QP (as many as `rows` allows; 0: all).
std::string render_top(const Published& devs, const PrevQps& prev, double elapsed, TopSort sort,
                       size_t rows, bool interactive) {
  std::vector<TopLine> lines;
  size_t procs = 0, hidden = 0;
  for (const auto& [path, s] : devs) {
    ++procs;
    if (s.qp_live > s.qps.size()) hidden += s.qp_live - s.qps.size();
    for (const shm::QpRow& q : s.qps) {
      const QpCounters* p = prev_of(prev, path, s, q);
      TopLine l;
      l.s = &s;
      l.q = &q;
      l.tx_pps = field_rate(q.counters.sent_pkts, p, &QpCounters::sent_pkts, elapsed);
      l.rx_pps = field_rate(q.counters.rcvd_pkts, p, &QpCounters::rcvd_pkts, elapsed);
      l.tx_bps = field_rate(q.counters.sent_bytes, p, &QpCounters::sent_bytes, elapsed);
      l.rx_bps = field_rate(q.counters.rcvd_bytes, p, &QpCounters::rcvd_bytes, elapsed);
      l.errors = qp_errors(q.counters);
      if (p && elapsed > 0 && l.errors >= qp_errors(*p))
        l.errors_ps = double(l.errors - qp_errors(*p)) / elapsed;
      lines.push_back(l);
    }
  }
  // Traffic: bytes per second both ways (before the first rate: bytes so far). Errors: error
  // events per second, then errors so far. Ties by pid and QPN, so the order is stable.
  auto traffic = [](const TopLine& l) {
    return l.tx_bps ? *l.tx_bps + *l.rx_bps : double(qp_traffic_bytes(l.q->counters));
  };
  std::sort(lines.begin(), lines.end(), [&](const TopLine& a, const TopLine& b) {
    const auto ka = sort == TopSort::kTraffic
                        ? std::make_tuple(traffic(a), double(a.errors))
                        : std::make_tuple(a.errors_ps.value_or(0), double(a.errors));
    const auto kb = sort == TopSort::kTraffic
                        ? std::make_tuple(traffic(b), double(b.errors))
                        : std::make_tuple(b.errors_ps.value_or(0), double(b.errors));
    if (ka != kb) return ka > kb;
    return std::tie(a.s->id.pid, a.q->qpn) < std::tie(b.s->id.pid, b.q->qpn);
  });
  std::string out;
  char b[512];
  std::snprintf(b, sizeof b, "uroce top - %zu QP%s in %zu device%s, sorted by %s%s\n",
                lines.size() + hidden, lines.size() + hidden == 1 ? "" : "s", procs,
                procs == 1 ? "" : "s", sort == TopSort::kTraffic ? "traffic" : "errors",
                interactive ? "   (t: traffic, e: errors, q: quit)" : "");
  out += b;
  if (elapsed <= 0) out += "rates from the next frame\n";
  if (hidden != 0) {
    std::snprintf(b, sizeof b, "%zu QPs not shown: their devices' tables are full\n", hidden);
    out += b;
  }
  std::snprintf(b, sizeof b,
                "%-8s %-15s %-8s %-8s %-4s %-5s %-28s %10s %10s %9s %9s %8s %6s %6s %6s %6s %8s\n",
                "PID", "COMMAND", "DEVICE", "QPN", "TYPE", "STATE", "PEER", "TX PKT/s", "RX PKT/s",
                "TX MB/s", "RX MB/s", "RETX", "TMO", "SEQERR", "RNR", "CNP", "ERRORS");
  out += b;
  size_t n = 0;
  for (const TopLine& l : lines) {
    if (rows != 0 && n++ >= rows) break;
    const QpCounters& c = l.q->counters;
    char qpn[16];
    std::snprintf(qpn, sizeof qpn, "0x%06x", l.q->qpn);
    std::snprintf(b, sizeof b,
                  "%-8d %-15.15s %-8.8s %-8s %-4s %-5s %-28.28s %10s %10s %9s %9s %8" PRIu64
                  " %6" PRIu64 " %6" PRIu64 " %6" PRIu64 " %6" PRIu64 " %8" PRIu64 "\n",
                  static_cast<int>(l.s->id.pid), l.s->id.comm.c_str(), l.s->id.device.c_str(), qpn,
                  qp_type_name(l.q->type), qp_state_name(l.q->state), peer_of(*l.q).c_str(),
                  fmt_rate(l.tx_pps, 1, "%.0f").c_str(), fmt_rate(l.rx_pps, 1, "%.0f").c_str(),
                  fmt_rate(l.tx_bps, 1e6, "%.2f").c_str(), fmt_rate(l.rx_bps, 1e6, "%.2f").c_str(),
                  c.retransmitted_pkts, c.local_ack_timeout_err,
                  c.rcvd_seq_err + c.out_of_seq_request + c.implied_nak_seq_err,
                  c.rcvd_rnr_err + c.send_rnr_err, c.np_cnp_sent + c.rp_cnp_handled, l.errors);
    out += b;
  }
  if (lines.empty()) out += devs.empty() ? "no running uroce processes\n" : "no QPs\n";
  return out;
}

// The terminal in non-canonical mode without echo while `uroce top` runs, so that a key acts
// at once; restored on every way out.
class RawTerminal {
 public:
  RawTerminal() {
    if (!isatty(STDIN_FILENO) || tcgetattr(STDIN_FILENO, &saved_) != 0) return;
    termios raw = saved_;
    raw.c_lflag &= ~tcflag_t(ICANON | ECHO);
    raw.c_cc[VMIN] = 0;
    raw.c_cc[VTIME] = 0;
    active_ = tcsetattr(STDIN_FILENO, TCSANOW, &raw) == 0;
  }
  ~RawTerminal() {
    if (active_) tcsetattr(STDIN_FILENO, TCSANOW, &saved_);
  }
  RawTerminal(const RawTerminal&) = delete;
  RawTerminal& operator=(const RawTerminal&) = delete;
  bool active() const { return active_; }

 private:
  termios saved_{};
  bool active_ = false;
};

volatile sig_atomic_t g_stop = 0;
void on_stop_signal(int) {
  g_stop = 1;
}

// Rows the terminal has room for below the title and header (0: unknown, print all).
size_t terminal_rows() {
  winsize ws{};
  if (ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) != 0 || ws.ws_row < 6) return 0;
  return ws.ws_row - 5;
}

}  // namespace

uint64_t qp_errors(const QpCounters& c) {
  uint64_t sum = 0;
  size_t k = 0;
  transport::for_each_qp_counter(c, [&](const char*, uint64_t v) {
    if (transport::kQpCounterInfo[k++].kind == QpCounterKind::kError) sum += v;
  });
  return sum;
}

uint64_t qp_traffic_bytes(const QpCounters& c) {
  return c.sent_bytes + c.rcvd_bytes;
}

int cmd_stats_qp(const QpStatsOptions& o, const Collect& collect) {
  PrevQps prev;
  auto last = std::chrono::steady_clock::now();
  const bool tty = isatty(STDOUT_FILENO) && !o.json;
  for (int n = 0;; ++n) {
    Published devs = collect();
    auto now = std::chrono::steady_clock::now();
    const double elapsed = n == 0 ? 0 : std::chrono::duration<double>(now - last).count();
    last = now;
    if (o.watch > 0 && tty) std::printf("\x1b[H\x1b[2J");
    if (o.watch > 0 && !o.json)
      std::printf("every %gs%s\n\n", o.watch, n == 0 ? " (rates from the next refresh)" : "");
    if (o.json)
      print_qps_json(devs, prev, elapsed);
    else
      print_qps_human(devs, prev, elapsed, o);
    std::fflush(stdout);
    if (o.watch <= 0 || (o.count > 0 && n + 1 >= o.count)) return 0;
    prev = remember(devs);
    std::this_thread::sleep_for(std::chrono::duration<double>(o.watch));
  }
}

int cmd_top(const TopOptions& o, const Collect& collect) {
  if (o.once) {
    std::fputs(render_top(collect(), {}, 0, o.sort, 0, false).c_str(), stdout);
    return 0;
  }
  RawTerminal term;
  const bool tty = isatty(STDOUT_FILENO);
  struct sigaction sa {};
  sa.sa_handler = on_stop_signal;
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  if (tty) std::printf("\x1b[?25l");  // no cursor blinking over the table
  TopSort sort = o.sort;
  PrevQps prev;
  Published devs;
  auto last = std::chrono::steady_clock::now();
  double elapsed = 0;
  bool redraw_only = false;  // a key changed the order: the same samples, drawn again
  for (int n = 0; !g_stop && (o.count == 0 || n < o.count);) {
    if (!redraw_only) {
      PrevQps before = remember(devs);
      devs = collect();
      auto now = std::chrono::steady_clock::now();
      elapsed = n == 0 ? 0 : std::chrono::duration<double>(now - last).count();
      last = now;
      prev = std::move(before);
      ++n;
    }
    redraw_only = false;
    const std::string frame =
        render_top(devs, prev, elapsed, sort, tty ? terminal_rows() : 0, term.active());
    if (tty) std::fputs("\x1b[H\x1b[2J", stdout);
    std::fputs(frame.c_str(), stdout);
    std::fflush(stdout);
    if (o.count != 0 && n >= o.count) break;
    // Wait for the next frame, or a key.
    const auto deadline = last + std::chrono::duration<double>(o.interval);
    while (!g_stop) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) break;
      pollfd pfd{STDIN_FILENO, POLLIN, 0};
      const int r = term.active() ? poll(&pfd, 1, static_cast<int>(left.count()))
                                  : (std::this_thread::sleep_for(left), 0);
      if (r <= 0 || !(pfd.revents & POLLIN)) continue;
      char key = 0;
      if (read(STDIN_FILENO, &key, 1) != 1) continue;
      if (key == 'q' || key == 'Q') g_stop = 1;
      if (key == 't' || key == 'e' || key == 's') {
        sort = key == 't'   ? TopSort::kTraffic
               : key == 'e' ? TopSort::kErrors
                            : (sort == TopSort::kTraffic ? TopSort::kErrors : TopSort::kTraffic);
        redraw_only = true;
        break;
      }
    }
  }
  if (tty) std::printf("\x1b[?25h");
  std::fflush(stdout);
  return 0;
}

}  // namespace uroce::tools

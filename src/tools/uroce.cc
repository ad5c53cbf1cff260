// uroce: the operator's command. What `ibv_devinfo`, `rdma statistic show` and `ethtool -S` give
// on an RNIC, for uroce devices:
//   uroce devices              the devices UROCE_DEVICES configures here, with their port state
//   uroce stats [-w N] …       the live counters of every running process that has a device open
//   uroce stats --qp …         the same per QP (tools/qp_view.h)
//   uroce top                  a live per-QP view, sorted by traffic or by errors (qp_view.h)
//   uroce dev-nodes [--remove] real /dev/infiniband nodes for UCX, for programs that run without
//                              uroce-run's answers to that look-up (docs/middleware.md)
//   uroce config               the configuration the environment gives, each key with its doc
//   uroce doctor [PEER]        the RoCE checklist: devices, the path to PEER, the counters'
//                              verdicts, each with its evidence and fix (tools/doctor/doctor.h)
// The counters come from the shared-memory files devices publish (engine/stats_shm.h); this
// command only reads them (and removes the files of processes that died without closing).
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <CLI/CLI.hpp>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <map>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "engine/config.h"
#include "transport/cc/parse.h"
#include "ports/link_watch.h"
#include "engine/stats_shm.h"
#include "tools/doctor/doctor.h"
#include "tools/json.h"
#include "tools/netdev.h"
#include "tools/qp_view.h"

namespace uroce {
namespace {

namespace shm = stats_shm;

using tools::ib_mtu_for;
using tools::json_string;
using tools::netdev_mtu;

const char* port_state_name(uint32_t s) {
  switch (s) {
    case shm::kPortActive:
      return "ACTIVE";
    case shm::kPortDown:
      return "DOWN";
    default:
      return "UNKNOWN";
  }
}

// ---- uroce devices -------------------------------------------------------------------------

int cmd_devices(bool json) {
  std::string err;
  auto cfgs = load_device_config(&err);
  if (!cfgs) {
    std::fprintf(stderr, "uroce: %s\n", err.c_str());
    return 1;
  }
  // Which running processes have each device open (by name and address).
  std::map<std::pair<std::string, wire::IpAddr>, std::vector<pid_t>> users;
  for (const std::string& path : shm::list_files()) {
    auto s = shm::read_file(path, nullptr);
    if (s && shm::publisher_alive(s->id)) users[{s->id.device, s->id.ip}].push_back(s->id.pid);
  }
  struct Row {
    std::string name, addr, gid, netdev, state, users;
    uint32_t if_mtu, mtu;
  };
  std::vector<Row> rows;
  for (const DeviceConfig& c : *cfgs) {
    Row r;
    r.name = c.name;
    r.addr = format_device_addr(c);
    // GID index 0 (Device::gid): ::ffff:a.b.c.d, or an IPv6 device's address itself.
    r.gid = c.is_ipv6() ? c.ipv6.to_string() : "::ffff:" + r.addr;
    r.netdev = c.netdev;
    r.if_mtu = netdev_mtu(c.netdev);
    // As the device computes it (Device::open): an IPv6 header is 20 bytes longer.
    r.mtu = ib_mtu_for(c.is_ipv6() && r.if_mtu > 20 ? r.if_mtu - 20 : r.if_mtu);
    // The port state a device opened now would report (Device::port_active): the netdev's link,
    // or ACTIVE when it cannot be watched.
    std::string why;
    auto link = c.netdev.empty() ? nullptr : LinkWatch::open(c.netdev, &why);
    r.state = !link || link->up() ? "ACTIVE" : "DOWN";
    for (pid_t p : users[{c.name, c.addr()}])
      r.users += (r.users.empty() ? "" : ",") + std::to_string(p);
    rows.push_back(std::move(r));
  }
  if (json) {
    std::printf("{\"devices\":[");
    for (size_t i = 0; i < rows.size(); ++i) {
      const Row& r = rows[i];
      std::printf(
          "%s{\"name\":%s,\"address\":%s,\"gid\":%s,\"netdev\":%s,\"netdev_mtu\":%u,"
          "\"active_mtu\":%u,\"port_state\":%s,\"pids\":[%s]}",
          i ? "," : "", json_string(r.name).c_str(), json_string(r.addr).c_str(),
          json_string(r.gid).c_str(), json_string(r.netdev).c_str(), r.if_mtu, r.mtu,
          json_string(r.state).c_str(), r.users.c_str());
    }
    std::printf("]}\n");
    return 0;
  }
  std::printf("%-12s %-15s %-22s %-10s %7s %6s %-7s %s\n", "DEVICE", "ADDRESS", "GID (index 0)",
              "NETDEV", "IF_MTU", "MTU", "PORT", "IN USE BY PID");
  for (const Row& r : rows)
    std::printf("%-12s %-15s %-22s %-10s %7u %6u %-7s %s\n", r.name.c_str(), r.addr.c_str(),
                r.gid.c_str(), r.netdev.empty() ? "-" : r.netdev.c_str(), r.if_mtu, r.mtu,
                r.state.c_str(), r.users.empty() ? "-" : r.users.c_str());
  return 0;
}

// ---- uroce config --------------------------------------------------------------------------
// The effective configuration of a process started in this environment: every UROCE_* variable
// with its value and doc, then what they make of each device — its port's keys, the faults,
// the congestion control — each key with its value and doc. The tables are the parsers' own
// (engine/config.h, dpdk_port/options.h, transport/cc/parse.h), so nothing here can drift.

int cmd_config() {
  Environment env;
  std::string err;
  const bool env_ok = read_environment(&env, &err);
  std::printf("# The UROCE_* variables (docs/configuration.md): value, what it does\n%s",
              spec::describe(environment_schema(), env, spec::kAllScopes, "").c_str());
  // A UROCE_ variable uroce does not read is most likely a misspelt one: said as any unknown key.
  for (char** e = ::environ; *e; ++e) {  // <unistd.h> declares it (_GNU_SOURCE)
    const std::string_view var(*e);
    const std::string_view name = var.substr(0, var.find('='));
    if (!name.starts_with("UROCE_")) continue;
    bool known = false;
    for (const auto& k : environment_schema().keys) known |= name == k.name;
    std::string msg;
    Environment scratch;
    if (!known && !spec::apply(environment_schema(), {spec::Entry{.key = name, .has_value = true}},
                               scratch, &msg))
      std::printf("# warning: %s\n", msg.c_str());
  }
  auto cfgs = env_ok ? load_device_config(&err) : std::nullopt;
  if (!cfgs) {
    std::fprintf(stderr, "uroce: %s\n", err.c_str());
    return 1;
  }
  std::printf("\n# The devices\n");
  for (const DeviceConfig& c : *cfgs) {
    if (c.port == PortKind::kDpdk) {
      std::printf("%s: %s on DPDK device %s, its keys (dpdk(…)):\n%s", c.name.c_str(),
                  format_ipv4(c.ipv4).c_str(), c.dpdk.dev.c_str(),
                  spec::describe(dpdk::options_schema(), c.dpdk, spec::kAllScopes, "  ").c_str());
    } else {
      std::printf("%s: %s on %s, kernel UDP port\n", c.name.c_str(), format_device_addr(c).c_str(),
                  c.netdev.empty() ? "an unknown interface" : c.netdev.c_str());
    }
  }
  // The faults are the process's: every device injects the same.
  const FaultConfig& f = cfgs->front().faults;
  std::printf("\n# Fault injection (UROCE_FAULTS), every device%s\n",
              f.enabled() ? "" : ": none configured");
  std::printf("%s", spec::describe(fault_schema(), f, kFaultSeed, "").c_str());
  const spec::Scopes all_kinds = ~spec::Scopes{0};
  const spec::Scopes tx_kinds = all_kinds & ~spec::Scopes{(1 << 6) | (1 << 7)};  // no queue, ce
  std::printf("%s  parameters of rx kinds:\n%s",
              spec::describe(fault_schema(), f, kFaultRx, "").c_str(),
              spec::describe(fault_param_schema(), f.rx, all_kinds, "    ").c_str());
  std::printf("%s  parameters of tx kinds:\n%s",
              spec::describe(fault_schema(), f, kFaultTx, "").c_str(),
              spec::describe(fault_param_schema(), f.tx, tx_kinds, "    ").c_str());
  std::printf("\n# Congestion control (UROCE_CC, docs/congestion-control.md)\n");
  for (const DeviceConfig& c : *cfgs) {
    namespace cc = transport::cc;
    std::printf("%s: %s\n%s", c.name.c_str(), cc::to_string(c.cc.algorithm),
                spec::describe(cc::schema(), c.cc, cc::scope(c.cc.algorithm), "  ").c_str());
  }
  return 0;
}

// ---- uroce dev-nodes -----------------------------------------------------------------------
// UCX (uct_ib_device_is_accessible, 1.13 to this day) lists an IB device only when
// /dev/infiniband/<ibv_device.dev_name> is a character device it may read and write: its check
// that a kernel driver backs the device. A uroce device has no kernel device, and UCX never opens
// the node (the context comes from ibv_open_device, which is uroce's). So the node uroce offers
// is honestly nothing but a marker: a character device with /dev/null's numbers, so that anything
// that does open it reads nothing and writes nowhere. Making one needs CAP_MKNOD (root), once per
// boot (/dev is a tmpfs); it then serves every user (mode 0666, like rdma-core's udev rules give
// /dev/infiniband/uverbs*).

constexpr const char* kDevDir = "/dev/infiniband";

// The device number of /dev/null: the only kind of node this command makes or removes.
bool null_rdev(dev_t* out) {
  struct stat st {};
  if (stat("/dev/null", &st) != 0 || !S_ISCHR(st.st_mode)) return false;
  *out = st.st_rdev;
  return true;
}

int cmd_dev_nodes(bool remove, const std::string& dir) {
  std::string err;
  auto cfgs = load_device_config(&err);
  if (!cfgs) {
    std::fprintf(stderr, "uroce: %s\n", err.c_str());
    return 1;
  }
  dev_t null_dev = 0;
  if (!null_rdev(&null_dev)) {
    std::fprintf(stderr, "uroce: /dev/null is not a character device\n");
    return 1;
  }
  if (!remove && mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST) {
    std::fprintf(stderr, "uroce: mkdir %s: %s\n", dir.c_str(), std::strerror(errno));
    return 1;
  }
  int rc = 0;
  for (const DeviceConfig& c : *cfgs) {
    // ibv_device.dev_name is the device's name (src/verbs/registry.cc); "." and ".." would name
    // directories.
    if (c.name == "." || c.name == "..") {
      std::fprintf(stderr, "uroce: %s: not a usable node name\n", c.name.c_str());
      rc = 1;
      continue;
    }
    const std::string path = dir + "/" + c.name;
    struct stat st {};
    const bool exists = lstat(path.c_str(), &st) == 0;
    const bool ours = exists && S_ISCHR(st.st_mode) && st.st_rdev == null_dev;
    if (exists && !ours) {
      // A kernel device (or anything else) of that name is never replaced or removed.
      std::fprintf(stderr, "uroce: %s exists and is not a uroce node: left alone\n", path.c_str());
      rc = 1;
      continue;
    }
    if (remove) {
      if (!exists) continue;
      if (unlink(path.c_str()) != 0) {
        std::fprintf(stderr, "uroce: unlink %s: %s\n", path.c_str(), std::strerror(errno));
        rc = 1;
        continue;
      }
      std::printf("removed %s\n", path.c_str());
      continue;
    }
    if (!exists && mknod(path.c_str(), S_IFCHR | 0666, null_dev) != 0) {
      std::fprintf(stderr, "uroce: mknod %s: %s%s\n", path.c_str(), std::strerror(errno),
                   errno == EPERM ? " (making a device node needs root)" : "");
      rc = 1;
      continue;
    }
    // The umask may have narrowed the mode: UCX needs read and write access for every user.
    if (chmod(path.c_str(), 0666) != 0) {
      std::fprintf(stderr, "uroce: chmod %s: %s\n", path.c_str(), std::strerror(errno));
      rc = 1;
      continue;
    }
    std::printf("%s %s (char %u:%u, /dev/null's numbers: a marker for UCX)\n",
                exists ? "kept" : "created", path.c_str(), major(null_dev), minor(null_dev));
  }
  return rc;
}

// ---- uroce stats ---------------------------------------------------------------------------

struct StatsOptions {
  std::optional<pid_t> pid;
  std::string device;
  bool all = false;
  bool json = false;
  double watch = 0;  // seconds between refreshes; 0: print once
  int count = 0;     // refreshes with -w; 0: until interrupted
  bool qp = false;   // per QP (tools/qp_view.h)
};

// The live published devices that match the filters; stale files are reported and removed.
std::vector<std::pair<std::string, shm::Snapshot>> collect(const StatsOptions& o) {
  std::vector<std::pair<std::string, shm::Snapshot>> out;
  for (const std::string& path : shm::list_files()) {
    std::string why;
    auto s = shm::read_file(path, &why);
    if (!s) {
      // A file still being created has no magic yet; anything else is worth a note.
      if (why != "not a uroce statistics file" && why != "truncated header")
        std::fprintf(stderr, "uroce: skipping %s: %s\n", path.c_str(), why.c_str());
      continue;
    }
    if (!shm::publisher_alive(s->id)) {
      if (unlink(path.c_str()) == 0)
        std::fprintf(stderr, "uroce: removed %s: process %d no longer runs\n", path.c_str(),
                     static_cast<int>(s->id.pid));
      else if (errno != ENOENT)
        std::fprintf(stderr, "uroce: %s: process %d no longer runs; cannot remove it: %s\n",
                     path.c_str(), static_cast<int>(s->id.pid), std::strerror(errno));
      continue;
    }
    if (o.pid && s->id.pid != *o.pid) continue;
    if (!o.device.empty() && s->id.device != o.device) continue;
    out.emplace_back(path, std::move(*s));
  }
  return out;
}

struct Prev {
  uint64_t start_time = 0;
  std::map<std::string, uint64_t> values;
};

// Per-second rate of a counter since the previous refresh; nullopt on the first one (or when the
// file now belongs to another process).
std::optional<double> rate_of(const Prev* prev, const std::string& name, uint64_t v,
                              double elapsed) {
  if (!prev || elapsed <= 0) return std::nullopt;
  auto it = prev->values.find(name);
  if (it == prev->values.end() || v < it->second) return std::nullopt;
  return double(v - it->second) / elapsed;
}

// The per-QP congestion-control slots of a snapshot (stats_shm.h: ccqpNN_*), the used ones, in
// slot order (lowest QPN first).
struct CcQp {
  uint32_t qpn = 0;
  uint64_t rate_kbps = 0, alpha_ppm = 0, sent_pkts = 0;
};
std::vector<CcQp> cc_qps(const shm::Snapshot& s) {
  std::vector<CcQp> slots(shm::kCcQpSlots);
  for (const auto& [name, v] : s.counters) {
    size_t slot, field;
    if (!shm::parse_cc_slot_name(name, &slot, &field)) continue;
    if (field == 0) slots[slot].qpn = static_cast<uint32_t>(v);
    if (field == 1) slots[slot].rate_kbps = v;
    if (field == 2) slots[slot].alpha_ppm = v;
    if (field == 3) slots[slot].sent_pkts = v;
  }
  std::vector<CcQp> used;
  for (const CcQp& q : slots)
    if (q.qpn != 0) used.push_back(q);
  return used;
}

bool is_cc_slot(const std::string& name) {
  size_t slot, field;
  return shm::parse_cc_slot_name(name, &slot, &field);
}

// A device several processes share (docs/architecture.md, "One device, many processes") is one
// address published by each of them: its totals are their counters summed (the congestion-control
// slots, per QP, are not counters; the NIC's nic_* are the device's, not summed).
struct DeviceTotal {
  std::vector<pid_t> pids;
  std::map<std::string, uint64_t> counters;
};
std::map<wire::IpAddr, DeviceTotal> shared_totals(
    const std::vector<std::pair<std::string, shm::Snapshot>>& devs) {
  std::map<wire::IpAddr, DeviceTotal> by_ip;
  for (const auto& [path, s] : devs) {
    DeviceTotal& t = by_ip[s.id.ip];
    t.pids.push_back(s.id.pid);
    for (const auto& [name, v] : s.counters) {
      if (is_cc_slot(name)) continue;
      // nic_*: the NIC's own view (a shared DPDK device's host publishes it to every client),
      // the same in each process, not a share of it.
      if (name.starts_with("nic_"))
        t.counters[name] = std::max(t.counters[name], v);
      else
        t.counters[name] += v;
    }
  }
  std::erase_if(by_ip, [](const auto& e) { return e.second.pids.size() < 2; });
  return by_ip;
}

std::string pid_list(const std::vector<pid_t>& pids) {
  std::string out;
  for (pid_t p : pids) out += (out.empty() ? "" : ",") + std::to_string(p);
  return out;
}

void print_human(const std::vector<std::pair<std::string, shm::Snapshot>>& devs,
                 const std::map<std::string, Prev>& prev, double elapsed, const StatsOptions& o) {
  if (devs.empty()) {
    std::printf("no running uroce processes%s\n",
                o.pid || !o.device.empty() ? " match the filter" : "");
    return;
  }
  // One width for every device, so the columns line up down the whole screen.
  size_t w = 8;
  for (const auto& [path, s] : devs)
    for (const auto& [name, v] : s.counters)
      if ((o.all || v != 0) && !is_cc_slot(name)) w = std::max(w, name.size());
  bool rates = !prev.empty() || elapsed > 0;
  for (const auto& [path, s] : devs) {
    std::printf("%s  pid %d (%s)  %s  netdev %s  mtu %u  port %s\n", s.id.device.c_str(),
                static_cast<int>(s.id.pid), s.id.comm.c_str(), s.id.ip.to_string().c_str(),
                s.id.netdev.empty() ? "-" : s.id.netdev.c_str(), s.id.mtu,
                port_state_name(s.port_state));
    auto pit = prev.find(path);
    const Prev* p =
        pit != prev.end() && pit->second.start_time == s.id.start_time ? &pit->second : nullptr;
    if (rates) std::printf("  %-*s %20s %14s\n", int(w), "COUNTER", "VALUE", "PER SECOND");
    bool any = false;
    for (const auto& [name, v] : s.counters) {
      if ((!o.all && v == 0) || is_cc_slot(name)) continue;
      any = true;
      std::printf("  %-*s %20" PRIu64, int(w), name.c_str(), v);
      if (rates) {
        auto r = rate_of(p, name, v, elapsed);
        if (r)
          std::printf(" %14.1f", *r);
        else
          std::printf(" %14s", "-");
      }
      std::printf("\n");
    }
    if (!any) std::printf("  (all counters zero)\n");
    // The reaction point of each RC QP (congestion control on; the first 64 QPs by QPN).
    const std::vector<CcQp> qps = cc_qps(s);
    if (!qps.empty()) {
      std::printf("  %-10s %14s %10s %14s\n", "QP", "RATE (Gb/s)", "ALPHA", "SENT PKTS");
      for (const CcQp& q : qps)
        std::printf("  0x%06x   %14.3f %10.4f %14" PRIu64 "\n", q.qpn, double(q.rate_kbps) / 1e6,
                    double(q.alpha_ppm) / 1e6, q.sent_pkts);
    }
    std::printf("\n");
  }
  for (const auto& [ip, t] : shared_totals(devs)) {
    std::printf("%s  total of %zu processes sharing it (pids %s)\n", ip.to_string().c_str(),
                t.pids.size(), pid_list(t.pids).c_str());
    for (const auto& [name, v] : t.counters)
      if (o.all || v != 0) std::printf("  %-*s %20" PRIu64 "\n", int(w), name.c_str(), v);
    std::printf("\n");
  }
}

void print_json(const std::vector<std::pair<std::string, shm::Snapshot>>& devs,
                const std::map<std::string, Prev>& prev, double elapsed, const StatsOptions& o) {
  std::string out = "{\"devices\":[";
  bool first_dev = true;
  for (const auto& [path, s] : devs) {
    auto pit = prev.find(path);
    const Prev* p =
        pit != prev.end() && pit->second.start_time == s.id.start_time ? &pit->second : nullptr;
    out += first_dev ? "{" : ",{";
    first_dev = false;
    out += "\"pid\":" + std::to_string(s.id.pid) + ",\"comm\":" + json_string(s.id.comm) +
           ",\"device\":" + json_string(s.id.device) +
           ",\"address\":" + json_string(s.id.ip.to_string()) +
           ",\"netdev\":" + json_string(s.id.netdev) + ",\"mtu\":" + std::to_string(s.id.mtu) +
           ",\"port_state\":" + json_string(port_state_name(s.port_state)) +
           ",\"file\":" + json_string(path) + ",\"counters\":{";
    std::string rates;
    bool first = true;
    for (const auto& [name, v] : s.counters) {
      if ((!o.all && v == 0) || is_cc_slot(name)) continue;
      out += (first ? "" : ",") + json_string(name) + ":" + std::to_string(v);
      if (auto r = rate_of(p, name, v, elapsed)) {
        char buf[64];
        std::snprintf(buf, sizeof buf, "%.3f", *r);
        rates += (rates.empty() ? "" : ",") + json_string(name) + ":" + buf;
      }
      first = false;
    }
    out += "},\"cc_qps\":[";
    bool first_qp = true;
    for (const CcQp& q : cc_qps(s)) {
      char buf[160];
      std::snprintf(
          buf, sizeof buf,
          "%s{\"qpn\":%u,\"rate_kbps\":%" PRIu64 ",\"alpha\":%.6f,\"sent_pkts\":%" PRIu64 "}",
          first_qp ? "" : ",", q.qpn, q.rate_kbps, double(q.alpha_ppm) / 1e6, q.sent_pkts);
      out += buf;
      first_qp = false;
    }
    out += "]";
    if (p) out += ",\"interval_seconds\":" + std::to_string(elapsed) + ",\"rates\":{" + rates + "}";
    out += "}";
  }
  out += "],\"shared\":[";
  bool first_total = true;
  for (const auto& [ip, t] : shared_totals(devs)) {
    out += std::string(first_total ? "" : ",") + "{\"address\":" + json_string(ip.to_string()) +
           ",\"pids\":[" + pid_list(t.pids) + "],\"counters\":{";
    first_total = false;
    bool first = true;
    for (const auto& [name, v] : t.counters) {
      if (!o.all && v == 0) continue;
      out += (first ? "" : ",") + json_string(name) + ":" + std::to_string(v);
      first = false;
    }
    out += "}}";
  }
  out += "]}\n";
  std::fputs(out.c_str(), stdout);
}

int cmd_stats(const StatsOptions& o) {
  if (o.qp)
    return tools::cmd_stats_qp({.all = o.all, .json = o.json, .watch = o.watch, .count = o.count},
                               [&o] { return collect(o); });
  std::map<std::string, Prev> prev;
  auto last = std::chrono::steady_clock::now();
  bool tty = isatty(STDOUT_FILENO) && !o.json;
  for (int n = 0;; ++n) {
    auto devs = collect(o);
    auto now = std::chrono::steady_clock::now();
    double elapsed = n == 0 ? 0 : std::chrono::duration<double>(now - last).count();
    last = now;
    if (o.watch > 0 && tty) std::printf("\x1b[H\x1b[2J");  // like watch(1): redraw in place
    if (o.watch > 0 && !o.json)
      std::printf("every %gs%s\n\n", o.watch, n == 0 ? " (rates from the next refresh)" : "");
    if (o.json)
      print_json(devs, prev, elapsed, o);
    else
      print_human(devs, prev, elapsed, o);
    std::fflush(stdout);
    if (o.watch <= 0 || (o.count > 0 && n + 1 >= o.count)) return 0;
    prev.clear();
    for (const auto& [path, s] : devs) {
      Prev& p = prev[path];
      p.start_time = s.id.start_time;
      for (const auto& [name, v] : s.counters) p.values[name] = v;
    }
    std::this_thread::sleep_for(std::chrono::duration<double>(o.watch));
  }
}

int cmd_top(const tools::TopOptions& o, const StatsOptions& filter) {
  return tools::cmd_top(o, [&filter] { return collect(filter); });
}

}  // namespace
}  // namespace uroce

int main(int argc, char** argv) {
  CLI::App app{
      "uroce: look at uroce devices and the live counters of the processes using them.\n"
      "Counters are published by every running process (disable with UROCE_PUBLISH=0)."};
  app.require_subcommand(1, 1);

  bool devices_json = false;
  CLI::App* devices = app.add_subcommand(
      "devices",
      "List the devices UROCE_DEVICES configures here, with address, MTU and port state");
  devices->add_flag("--json", devices_json, "Machine-readable output");

  uroce::StatsOptions so;
  int pid = 0;
  CLI::App* stats = app.add_subcommand(
      "stats", "Show the live counters of every running process with a uroce device open");
  CLI::Option* pid_opt =
      stats->add_option("-p,--pid", pid, "Only this process")->check(CLI::PositiveNumber);
  stats->add_option("-d,--device", so.device, "Only devices of this name");
  stats->add_flag("-a,--all", so.all, "Every counter, also those that are zero");
  stats->add_option("-w,--watch", so.watch, "Refresh every SECONDS, with per-second rates")
      ->check(CLI::Range(0.1, 3600.0));
  stats->add_option("-n,--count", so.count, "With -w: stop after N refreshes")
      ->check(CLI::PositiveNumber);
  stats->add_flag("--json", so.json, "Machine-readable output (one JSON document per refresh)");
  stats->add_flag("--qp", so.qp,
                  "Per QP: each QP of each process with its type, state, peer and counters");

  uroce::StatsOptions top_filter;
  uroce::tools::TopOptions to;
  int top_pid = 0;
  std::string top_sort = "traffic";
  CLI::App* top = app.add_subcommand(
      "top",
      "A live view of every QP of every process, one line each, refreshed every second and "
      "sorted by traffic or by errors (keys: t traffic, e errors, s toggle, q quit)");
  CLI::Option* top_pid_opt =
      top->add_option("-p,--pid", top_pid, "Only this process")->check(CLI::PositiveNumber);
  top->add_option("-d,--device", top_filter.device, "Only devices of this name");
  top->add_option("-i,--interval", to.interval, "Seconds between frames (default 1)")
      ->check(CLI::Range(0.1, 3600.0));
  top->add_option("-n,--count", to.count, "Stop after N frames")->check(CLI::PositiveNumber);
  top->add_option("-s,--sort", top_sort, "traffic (bytes per second) or errors")
      ->check(CLI::IsMember({"traffic", "errors"}));
  top->add_flag("--once", to.once, "Print one frame (totals; no rates) and exit: for scripts");

  bool nodes_remove = false;
  std::string nodes_dir = uroce::kDevDir;
  CLI::App* nodes = app.add_subcommand(
      "dev-nodes",
      "Create (as root) /dev/infiniband/NAME for each device UROCE_DEVICES configures: the node "
      "UCX requires before it uses a device (a marker with /dev/null's numbers, never opened by "
      "uroce)");
  nodes->add_flag("--remove", nodes_remove, "Remove those nodes instead (only uroce's markers)");
  nodes->add_option("--dir", nodes_dir, "Directory of the nodes (default /dev/infiniband)");

  CLI::App* config = app.add_subcommand(
      "config",
      "Print the configuration a uroce process would take from this environment: every UROCE_* "
      "variable, every device with its port's, fault-injection and congestion-control keys, each "
      "with its value and what it does");

  uroce::doctor::DoctorOptions dopt;
  CLI::App* doctor = uroce::doctor::add_command(app, &dopt);

  CLI11_PARSE(app, argc, argv);
  if (*pid_opt) so.pid = pid;
  if (*top_pid_opt) top_filter.pid = top_pid;
  to.sort = top_sort == "errors" ? uroce::tools::TopSort::kErrors : uroce::tools::TopSort::kTraffic;
  if (*devices) return uroce::cmd_devices(devices_json);
  if (*nodes) return uroce::cmd_dev_nodes(nodes_remove, nodes_dir);
  if (*config) return uroce::cmd_config();
  // The reader may be piped into head(1): a closed pipe ends it quietly.
  signal(SIGPIPE, SIG_DFL);
  if (*top) return uroce::cmd_top(to, top_filter);
  if (*doctor) {
    const uroce::StatsOptions all;
    return uroce::doctor::cmd_doctor(dopt, [&all] { return uroce::collect(all); });
  }
  return uroce::cmd_stats(so);
}

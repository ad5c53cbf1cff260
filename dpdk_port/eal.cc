#include "dpdk_port/eal.h"

#include <dirent.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <rte_eal.h>
#include <rte_errno.h>
#include <rte_lcore.h>
#include <rte_log.h>
#include <rte_mempool.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <string>
#include <string_view>

#include "util/log.h"

namespace uroce::dpdk {
namespace {

std::mutex g_mu;
bool g_up = false;
std::vector<std::string> g_extra;

constexpr const char* kRuntimeBase = "/var/run/dpdk";
constexpr const char* kPrefix = "uroce";

// Runtime directories of uroce processes that are gone (crashed, killed) hold nothing anyone
// needs: remove them, so /var/run/dpdk does not fill up in CI.
void remove_stale_runtime_dirs() {
  DIR* d = opendir(kRuntimeBase);
  if (!d) return;
  while (dirent* e = readdir(d)) {
    std::string name = e->d_name;
    if (name.rfind(kPrefix, 0) != 0) continue;
    std::string pid = name.substr(std::strlen(kPrefix));
    if (pid.empty() || pid.find_first_not_of("0123456789") != std::string::npos) continue;
    if (kill(std::stoi(pid), 0) == 0 || errno == EPERM) continue;  // alive
    std::string path = std::string(kRuntimeBase) + "/" + name;
    // With --no-shconf the directory is empty; anything else in it is not ours to delete.
    rmdir(path.c_str());
  }
  closedir(d);
}

// DPDK logs through a stdio stream; uroce gives it one that writes into uroce's own log, each
// line at the level DPDK gave it, so UROCE_LOG filters DPDK's messages as it does uroce's and
// none lands in the program's output unasked.
ssize_t dpdk_log_write(void* /*cookie*/, const char* buf, size_t size) {
  thread_local std::string pending;  // DPDK writes from its own threads too (memif's control)
  pending.append(buf, size);
  for (size_t nl; (nl = pending.find('\n')) != std::string::npos; pending.erase(0, nl + 1)) {
    log_dpdk_line(std::string_view(pending).substr(0, nl), rte_log_cur_msg_loglevel());
  }
  return static_cast<ssize_t>(size);
}

std::mutex g_pools_mu;
std::vector<rte_mempool*> g_pools;  // g_pools_mu
std::atomic<int> g_registered{0};

// A thread's registration: decided once, on its first eal_thread_enter(); undone when it exits.
// The decision is a plain byte in the initial-exec TLS model, because eal_thread_enter() runs on
// every receive and transmit (eight times a round trip): a thread_local with a destructor is
// reached through a wrapper and __tls_get_addr from a shared library. The destructor lives in
// `t_registration`, which only a registered thread ever touches.
enum class ThreadState : uint8_t { kUndecided, kRegistered, kNone };
__attribute__((tls_model("initial-exec"))) thread_local ThreadState t_state =
    ThreadState::kUndecided;

struct Registration {
  bool armed = false;
  ~Registration() {
    if (!armed) return;
    {
      // The mbufs this thread's caches keep go back to their pools, or nobody could use them
      // until another thread happened to get the same lcore id. A port that closes meanwhile
      // untracks its pools under the same lock before it frees them.
      std::lock_guard<std::mutex> g(g_pools_mu);
      const unsigned id = rte_lcore_id();
      for (rte_mempool* mp : g_pools)
        if (rte_mempool_cache* c = rte_mempool_default_cache(mp, id))
          rte_mempool_cache_flush(c, mp);
    }
    rte_thread_unregister();
    g_registered.fetch_sub(1, std::memory_order_relaxed);
  }
};
thread_local Registration t_registration;

}  // namespace

void eal_thread_enter() {
  if (t_state != ThreadState::kUndecided) return;
  t_state = ThreadState::kNone;
  if (rte_lcore_id() != LCORE_ID_ANY) return;  // the thread that initialised the EAL: lcore 0
  if (g_registered.fetch_add(1, std::memory_order_relaxed) >= kMaxThreadCaches) {
    g_registered.fetch_sub(1, std::memory_order_relaxed);
    return;
  }
  if (rte_thread_register() != 0) {
    g_registered.fetch_sub(1, std::memory_order_relaxed);
    log().debug("dpdk: no lcore id for this thread ({}): its mbufs go through the pools' rings",
                rte_strerror(rte_errno));
    return;
  }
  t_registration.armed = true;
  t_state = ThreadState::kRegistered;
}

void eal_track_pool(rte_mempool* mp) {
  std::lock_guard<std::mutex> g(g_pools_mu);
  g_pools.push_back(mp);
}

void eal_untrack_pool(rte_mempool* mp) {
  std::lock_guard<std::mutex> g(g_pools_mu);
  std::erase(g_pools, mp);
}

int eal_registered_threads() {
  return g_registered.load(std::memory_order_relaxed);
}

std::vector<std::string> eal_arguments(const std::vector<std::string>& extra, bool needs_pci) {
  std::vector<std::string> a = {"uroce",
                                "--no-huge",
                                "-m",
                                "256",
                                "--no-telemetry",
                                "-l",
                                "0",
                                "--no-shconf",
                                "--file-prefix=" + std::string(kPrefix) + std::to_string(getpid()),
                                "--log-level=lib.eal:error"};
  if (!needs_pci) a.insert(a.begin() + 4, "--no-pci");
  a.insert(a.end(), extra.begin(), extra.end());
  return a;
}

bool eal_ensure(const std::vector<std::string>& extra, bool needs_pci, std::string* err) {
  std::lock_guard<std::mutex> g(g_mu);
  if (g_up) {
    if (extra != g_extra)
      log().warn(
          "dpdk: the EAL is already initialised; eal= arguments of a later device are ignored");
    return true;
  }
  remove_stale_runtime_dirs();
  static FILE* const stream =
      fopencookie(nullptr, "w", {nullptr, dpdk_log_write, nullptr, nullptr});
  if (stream) rte_openlog_stream(stream);
  std::vector<std::string> args = eal_arguments(extra, needs_pci);
  std::vector<char*> argv;
  for (std::string& s : args) argv.push_back(s.data());
  argv.push_back(nullptr);

  cpu_set_t affinity;
  const bool have_affinity = sched_getaffinity(0, sizeof affinity, &affinity) == 0;
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_BLOCK, &all, &old);
  int r = rte_eal_init(static_cast<int>(argv.size() - 1), argv.data());
  const int e = rte_errno;
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
  if (have_affinity) sched_setaffinity(0, sizeof affinity, &affinity);
  if (r < 0) {
    if (err) {
      *err = std::string("DPDK EAL initialisation failed: ") + rte_strerror(e);
      if (e == EALREADY) *err += " (another part of this program initialised DPDK already)";
    }
    return false;
  }
  // Empty with --no-shconf; nothing in it is needed after init.
  rmdir(rte_eal_get_runtime_dir());
  g_up = true;
  g_extra = extra;
  std::string line;
  for (const std::string& s : args) line += " " + s;
  log().info("dpdk: EAL up:{}", line);
  return true;
}

void log_dpdk_line(std::string_view line, uint32_t level) {
  if (line.empty()) return;
  // memif's probe asks for multi-process support, which the EAL runs without (--no-shconf):
  // its refusal is expected and harmless (docs/troubleshooting.md).
  if (line.find("Failed to register mp action callback") != std::string_view::npos) {
    log().debug("dpdk: {}", line);
    return;
  }
  if (level <= RTE_LOG_ERR)
    log().error("dpdk: {}", line);
  else if (level == RTE_LOG_WARNING)
    log().warn("dpdk: {}", line);
  else if (level <= RTE_LOG_INFO)
    log().info("dpdk: {}", line);
  else
    log().debug("dpdk: {}", line);
}

}  // namespace uroce::dpdk

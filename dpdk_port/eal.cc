#include "dpdk_port/eal.h"

#include <dirent.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <rte_eal.h>
#include <rte_errno.h>

#include <cerrno>
#include <cstring>
#include <mutex>

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

}  // namespace

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

}  // namespace uroce::dpdk

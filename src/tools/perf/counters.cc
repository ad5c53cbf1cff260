#include "tools/perf/counters.h"

#include <sys/resource.h>
#include <unistd.h>

#include <map>
#include <thread>

#include "engine/stats_shm.h"
#include "tools/perf/datapath.h"

namespace uroce::perf {

namespace shm = stats_shm;

CounterSnapshot read_own_counters(const std::string& device, uint64_t since_ns, double idle_s) {
  const std::string path = std::string(shm::kShmDir) + shm::shm_name(getpid(), device);
  const uint64_t give_up = since_ns + static_cast<uint64_t>(idle_s * 1e9);
  CounterSnapshot out;
  for (;;) {
    std::string why;
    auto s = shm::read_file(path, &why);
    if (!s) {
      out.why_not =
          access(path.c_str(), F_OK) == 0
              ? path + ": " + why
              : "no uroce statistics for " + device + " (not a uroce device, or UROCE_PUBLISH=0)";
      out.ok = false;
      return out;
    }
    out.ok = true;
    out.snapshot_ns = s->snapshot_ns;
    out.values = std::move(s->counters);
    if (since_ns == 0 || out.snapshot_ns >= since_ns || now_ns() >= give_up) return out;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

CounterDelta counter_delta(const CounterSnapshot& before, const CounterSnapshot& after) {
  CounterDelta d;
  if (!before.ok || !after.ok) {
    d.why_not = !before.ok ? before.why_not : after.why_not;
    return d;
  }
  d.known = true;
  if (!after.why_not.empty()) d.why_not = after.why_not;  // known, but the QP totals may lag
  std::map<std::string, uint64_t> was(before.values.begin(), before.values.end());
  for (const auto& [name, v] : after.values) {
    auto it = was.find(name);
    const uint64_t b = it == was.end() ? 0 : it->second;
    d.values.emplace_back(name, v >= b ? v - b : 0);
  }
  return d;
}

CpuSample cpu_now() {
  CpuSample s;
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  s.user = static_cast<double>(ru.ru_utime.tv_sec) + static_cast<double>(ru.ru_utime.tv_usec) / 1e6;
  s.sys = static_cast<double>(ru.ru_stime.tv_sec) + static_cast<double>(ru.ru_stime.tv_usec) / 1e6;
  s.wall_ns = now_ns();
  return s;
}

CpuTime cpu_between(const CpuSample& a, const CpuSample& b) {
  CpuTime t;
  t.known = true;
  t.user = b.user - a.user;
  t.sys = b.sys - a.sys;
  t.wall = static_cast<double>(b.wall_ns - a.wall_ns) / 1e9;
  return t;
}

}  // namespace uroce::perf

#include "util/log.h"

#include <spdlog/sinks/stdout_sinks.h>

#include <cstdlib>
#include <memory>
#include <mutex>
#include <set>

namespace uroce {

spdlog::logger& log() {
  // Not registered with spdlog's registry: the program may use spdlog itself, under any names.
  // Never destroyed: threads uroce does not control (DPDK's interrupt thread logs through it)
  // may still write while the program's static objects are being destroyed at exit.
  static spdlog::logger* const logger = [] {
    auto* l = new spdlog::logger("uroce", std::make_shared<spdlog::sinks::stderr_sink_mt>());
    l->set_pattern("uroce: %v");
    spdlog::level::level_enum level = spdlog::level::warn;
    if (const char* v = std::getenv("UROCE_LOG")) {
      level = spdlog::level::from_str(v);
      // from_str answers "off" for a name it does not know; only "off" itself should silence.
      if (level == spdlog::level::off && std::string_view(v) != "off") level = spdlog::level::warn;
    }
    l->set_level(level);
    l->flush_on(spdlog::level::trace);  // stderr is unbuffered in spirit: lines appear at once
    return l;
  }();
  return *logger;
}

void warn_once(const std::string& line) {
  static std::mutex mu;
  static auto* said = new std::set<std::string>();  // never destroyed, as the logger
  {
    std::lock_guard<std::mutex> g(mu);
    if (!said->insert(line).second) return;
  }
  log().warn("{}", line);
}

}  // namespace uroce

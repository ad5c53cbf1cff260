// uroce's log: an spdlog logger on stderr (never stdout, which belongs to the program uroce runs
// inside), each line prefixed "uroce: ". UROCE_LOG sets the level: trace, debug, info, warn
// (the default), error, critical or off.
#pragma once

#include <spdlog/spdlog.h>

#include <string>

namespace uroce {

spdlog::logger& log();

// Logs `line` at warn level (the default: users see it) the first time this process says it, and
// never again: a refusal a program meets in a loop, or on every one of its QPs, is said once per
// cause, not once per call. Thread-safe.
void warn_once(const std::string& line);

}  // namespace uroce

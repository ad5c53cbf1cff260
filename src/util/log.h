// uroce's log: an spdlog logger on stderr (never stdout, which belongs to the program uroce runs
// inside), each line prefixed "uroce: ". UROCE_LOG sets the level: trace, debug, info, warn
// (the default), error, critical or off.
#pragma once

#include <spdlog/spdlog.h>

namespace uroce {

spdlog::logger& log();

}  // namespace uroce

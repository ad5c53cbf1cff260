// JSON text for the tools' --json output (uroce, uroce-perf): strings escaped per RFC 8259 and
// numbers that are always valid JSON (no NaN or infinity, which JSON cannot express).
#pragma once

#include <cmath>
#include <cstdio>
#include <string>

namespace uroce::tools {

inline std::string json_string(const std::string& s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", c);
      out += buf;
    } else {
      out += static_cast<char>(c);
    }
  }
  return out + "\"";
}

// A finite double with up to `digits` significant digits; NaN and infinities become null.
inline std::string json_number(double v, int digits = 9) {
  if (!std::isfinite(v)) return "null";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*g", digits, v);
  return buf;
}

}  // namespace uroce::tools

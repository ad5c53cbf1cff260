#include "tools/doctor/report.h"

#include "tools/json.h"

namespace uroce::doctor {

const char* status_name(Status s) {
  switch (s) {
    case Status::kPass:
      return "pass";
    case Status::kWarn:
      return "warn";
    case Status::kFail:
      return "fail";
    case Status::kSkip:
      return "skip";
  }
  return "?";
}

const char* status_mark(Status s) {
  switch (s) {
    case Status::kPass:
      return "✓";
    case Status::kWarn:
      return "!";
    case Status::kFail:
      return "✗";
    case Status::kSkip:
      return "–";
  }
  return "?";
}

bool Report::any(Status s) const {
  for (const Section& sec : sections)
    for (const Check& c : sec.checks)
      if (c.status == s) return true;
  return false;
}

std::string render_text(const Report& r) {
  std::string out;
  for (const Section& sec : r.sections) {
    out += sec.name + "\n";
    if (sec.checks.empty()) out += "  (nothing to check)\n";
    for (const Check& c : sec.checks) {
      out += std::string("  ") + status_mark(c.status) + " " + c.title;
      if (!c.evidence.empty()) out += ": " + c.evidence;
      out += "\n";
      if (!c.fix.empty() && (c.status == Status::kFail || c.status == Status::kWarn))
        out += "      fix: " + c.fix + "\n";
    }
    out += "\n";
  }
  const bool failed = r.any(Status::kFail);
  const bool warned = r.any(Status::kWarn);
  out += failed   ? "Something is wrong: see the ✗ lines above.\n"
         : warned ? "Nothing is conclusively wrong; the ! lines are worth a look.\n"
                  : "Everything checked is as it should be.\n";
  return out;
}

std::string render_json(const Report& r) {
  using tools::json_string;
  std::string out = std::string("{\"ok\":") + (r.any(Status::kFail) ? "false" : "true");
  out += ",\"sections\":[";
  for (size_t i = 0; i < r.sections.size(); ++i) {
    const Section& sec = r.sections[i];
    out += std::string(i ? "," : "") + "{\"name\":" + json_string(sec.name) + ",\"checks\":[";
    for (size_t j = 0; j < sec.checks.size(); ++j) {
      const Check& c = sec.checks[j];
      out += std::string(j ? "," : "") + "{\"id\":" + json_string(c.id) +
             ",\"title\":" + json_string(c.title) +
             ",\"status\":" + json_string(status_name(c.status)) +
             ",\"evidence\":" + json_string(c.evidence) + ",\"fix\":" + json_string(c.fix) + "}";
    }
    out += "]}";
  }
  return out + "]}\n";
}

int exit_code(const Report& r) {
  return r.any(Status::kFail) ? 1 : 0;
}

}  // namespace uroce::doctor

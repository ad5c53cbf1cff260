// What `uroce doctor` found: checks grouped in sections, each with a verdict, the evidence it
// rests on (a counter's value, a probe's answer) and, when something is wrong, the fix in one
// line; printed for people (✓ ✗ ! –) or as JSON for scripts. Pure: no I/O but the rendering to
// a string, so the tests assert on exactly what is printed.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace uroce::doctor {

// A check's verdict. kWarn is a result that is not conclusively wrong (silence from a probe
// that a filter and an absent listener would both explain; an interface MTU that limits RoCE
// to 1024-byte packets); kSkip is a check that could not be run, with the reason as evidence.
enum class Status { kPass, kWarn, kFail, kSkip };
const char* status_name(Status s);  // "pass", "warn", "fail", "skip" (the JSON's words)
const char* status_mark(Status s);  // ✓ ! ✗ –

struct Check {
  Check() = default;
  Check(std::string id_, std::string title_, Status status_ = Status::kPass,
        std::string evidence_ = {}, std::string fix_ = {})
      : id(std::move(id_)),
        title(std::move(title_)),
        status(status_),
        evidence(std::move(evidence_)),
        fix(std::move(fix_)) {}

  std::string id;     // stable, for scripts: "device.mtu", "path.udp4791", "counters.loss"
  std::string title;  // a few words: "path MTU"
  Status status = Status::kPass;
  std::string evidence;  // what was seen, with the counter or probe that shows it
  std::string fix;       // one line; empty when there is nothing to do
};

struct Section {
  std::string name;  // "device uroce0 (10.0.0.1)", "path to 10.0.0.2", "running processes"
  std::vector<Check> checks;
};

struct Report {
  std::vector<Section> sections;
  bool any(Status s) const;
};

// One line per check: mark, title, evidence; then "    fix: …" for a check that failed or
// warns. A section with no checks says so.
std::string render_text(const Report& r);
// {"ok":bool,"sections":[{"name":…,"checks":[{"id","title","status","evidence","fix"}]}]};
// "ok" is false when a check failed.
std::string render_json(const Report& r);
// 0 when nothing failed, 1 when a check failed (warnings and skipped checks do not fail).
int exit_code(const Report& r);

}  // namespace uroce::doctor

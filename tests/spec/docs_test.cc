// The key tables against the docs that list their keys, both ways where the docs have a table to
// read: every UROCE_* variable, UROCE_FAULTS kind and parameter, dpdk(…) key and UROCE_CC key in
// docs/configuration.md; every uroce-sim flag in docs/simulator.md. And each documented default
// in a table is the value a fresh configuration has.
#include <gtest/gtest.h>

#include <fstream>
#include <regex>
#include <set>
#include <sstream>

#include "dpdk_port/options.h"
#include "engine/config.h"
#include "sim/cli.h"
#include "transport/cc/parse.h"
#include "transport/qp_counters.h"

namespace uroce {
namespace {

std::string read_doc(const std::string& name) {
  std::ifstream in(std::string(UROCE_SOURCE_DIR) + "/docs/" + name);
  std::stringstream s;
  s << in.rdbuf();
  EXPECT_FALSE(s.str().empty()) << name;
  return s.str();
}

// The text of a doc from the heading line `title` to the next heading of its level or above
// (headings outside fenced code: a shell comment in a code block is no heading).
std::string section(const std::string& doc, const std::string& title) {
  const size_t level = title.find(' ');  // its '#'s
  std::istringstream in(doc);
  std::string out;
  bool inside = false, code = false;
  for (std::string line; std::getline(in, line);) {
    if (line.starts_with("```")) code = !code;
    if (!code && line.starts_with("#")) {
      const size_t hashes = line.find_first_not_of('#');
      if (inside && hashes <= level) break;
      if (line == title) inside = true;
    }
    if (inside) out += line + "\n";
  }
  EXPECT_FALSE(out.empty()) << title;
  return out;
}

// The rows of the Markdown tables in `text`: the cells of each line that starts with '|',
// without the header's separator line.
std::vector<std::vector<std::string>> rows(const std::string& text) {
  std::vector<std::vector<std::string>> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (!line.starts_with("|") || line.starts_with("|---") || line.starts_with("| ---")) continue;
    std::vector<std::string> cells;
    size_t start = 1;
    for (size_t i = 1; i < line.size(); ++i) {
      // "\|" is a '|' inside a cell.
      if (line[i] == '|' && line[i - 1] != '\\') {
        cells.push_back(line.substr(start, i - start));
        start = i + 1;
      }
    }
    out.push_back(cells);
  }
  return out;
}

// Every match of `re`'s first group in `text`.
std::set<std::string> matches(const std::string& text, const std::string& re) {
  std::set<std::string> out;
  const std::regex r(re);
  for (auto it = std::sregex_iterator(text.begin(), text.end(), r); it != std::sregex_iterator();
       ++it)
    out.insert((*it)[1]);
  return out;
}

template <typename C>
std::set<std::string> names(const spec::Schema<C>& s) {
  std::set<std::string> out;
  for (const auto& k : s.keys) out.insert(k.name);
  return out;
}

TEST(Docs, EveryUroceVariableHasItsSection) {
  const std::string doc = read_doc("configuration.md");
  const std::set<std::string> table = names(environment_schema());
  for (const std::string& n : table)
    EXPECT_NE(doc.find("\n## `" + n + "`\n"), std::string::npos) << n << " has no section";
  for (const std::string& n : matches(doc, "\n## `(UROCE_[A-Z_]+)`"))
    EXPECT_TRUE(table.count(n)) << n << " is documented but not in environment_schema()";
}

// Every per-QP counter has its row in the table that maps it to the mlx5 and rxe counters users
// know (docs/troubleshooting.md), and the table's uroce column names no counter that is not one.
TEST(Docs, EveryQpCounterIsMappedToMlx5AndRxe) {
  const std::string doc = section(read_doc("troubleshooting.md"),
                                  "### Per QP: `uroce stats --qp` and `uroce top` (what `rdma "
                                  "statistic qp` shows an RNIC's users)");
  std::set<std::string> counters, documented;
  for (const transport::QpCounterInfo& c : transport::kQpCounterInfo) counters.insert(c.name);
  for (const auto& r : rows(doc)) {
    if (r.size() < 4) continue;
    for (const std::string& n : matches(r[1], "`([a-z0-9_]+)`")) documented.insert(n);
  }
  for (const std::string& n : counters) EXPECT_TRUE(documented.count(n)) << n << " has no row";
  for (const std::string& n : documented)
    EXPECT_TRUE(counters.count(n)) << n << " is in the table but is no per-QP counter";
}

TEST(Docs, EveryFaultKindAndParameter) {
  const std::string doc = section(read_doc("configuration.md"), "## `UROCE_FAULTS`");
  const std::set<std::string> kinds = names(fault_schema());
  const std::set<std::string> params = names(fault_param_schema());
  std::set<std::string> documented_kinds, documented_params;
  for (const auto& r : rows(doc)) {
    if (r.size() < 3 || r[0].find("kind") != std::string::npos) continue;
    for (const std::string& k : matches(r[0], "`([a-z]+)`")) documented_kinds.insert(k);
    for (const std::string& p : matches(r[2], "`([a-z]+)=")) documented_params.insert(p);
  }
  EXPECT_EQ(documented_kinds, kinds);
  EXPECT_EQ(documented_params, params);
}

TEST(Docs, EveryDpdkKey) {
  const std::string doc =
      section(read_doc("configuration.md"), "### DPDK devices: `name=dpdk(key=value;…)`");
  std::set<std::string> documented;
  for (const auto& r : rows(doc)) {
    for (const std::string& k : matches(r.empty() ? "" : r[0], "`([a-z_0-9]+)="))
      documented.insert(k);
  }
  EXPECT_EQ(documented, names(dpdk::options_schema()));
}

TEST(Docs, EveryCcKey) {
  const std::string doc = section(read_doc("configuration.md"), "## `UROCE_CC`");
  std::set<std::string> documented;
  for (const auto& r : rows(doc)) {
    if (r.size() < 2 || r[0].find("keys") != std::string::npos) continue;
    for (const std::string& k : matches(r[0], "`([a-z_0-9]+)`")) documented.insert(k);
  }
  std::set<std::string> table = names(transport::cc::schema());
  // The table lists the options' values with their names ("`per_cnp`"); the keys must all be
  // there, and every name there must be a key or one of those values.
  for (const std::string& k : table) {
    if (k == "preset") continue;  // described in the text above the table (below)
    EXPECT_TRUE(documented.count(k)) << k << " is not documented";
  }
  for (const std::string& d : documented) {
    if (table.count(d)) continue;
    std::string err;
    bool is_value = false;
    for (const char* key : {"alpha_update", "alpha_order", "fr_boundary", "hyper_step", "tie"})
      is_value |= transport::cc::parse_cc(std::string("dcqcn,") + key + "=" + d, &err).has_value();
    EXPECT_TRUE(is_value) << d << " is documented but is neither a key nor an option's value";
  }
  // `preset` is described in the text above the table.
  EXPECT_NE(doc.find("`preset`"), std::string::npos);
}

TEST(Docs, EverySimulatorFlag) {
  const std::string doc = read_doc("simulator.md");
  const std::set<std::string> table = names(sim::cli::schema());
  for (const std::string& f : table) {
    EXPECT_TRUE(std::regex_search(doc, std::regex("`--" + f + "[ `]")))
        << "--" << f << " is not documented (as `--" << f << "…`)";
  }
  // Every flag in the docs' flag tables is one uroce-sim takes.
  for (const auto& r : rows(doc)) {
    for (const std::string& f : matches(r.empty() ? "" : r[0], "`--([a-z][a-z-]*)"))
      EXPECT_TRUE(table.count(f)) << "--" << f << " is documented but not a flag";
  }
}

// Where a key documents its default and can show its value, a fresh configuration has it.
template <typename C>
void expect_defaults(const spec::Schema<C>& s, const C& fresh, spec::Scopes scope,
                     const char* what) {
  for (const auto& k : s.keys) {
    if (!*k.def || !k.get || !(k.scopes & scope)) continue;
    EXPECT_EQ(k.get(fresh), k.def) << what << " " << (k.label ? k.label : k.name);
  }
}

TEST(Docs, DocumentedDefaultsAreTheDefaults) {
  expect_defaults(fault_schema(), FaultConfig{}, spec::kAllScopes, "UROCE_FAULTS");
  expect_defaults(fault_param_schema(), FaultSpec{}, spec::kAllScopes, "UROCE_FAULTS");
  expect_defaults(dpdk::options_schema(), dpdk::DpdkPortOptions{}, spec::kAllScopes, "dpdk");
  namespace cc = transport::cc;
  for (cc::Algorithm a : {cc::Algorithm::kNone, cc::Algorithm::kDcqcn, cc::Algorithm::kTimely})
    expect_defaults(cc::schema(), cc::make_config(a), cc::scope(a), "UROCE_CC");
  // The single-value variables, unset: what they show is their documented default.
  const std::vector<std::string> unset_here = {"UROCE_STATS", "UROCE_EARLY_RETRANSMIT", "UROCE_GSO",
                                               "UROCE_ICRC"};
  for (const auto& k : environment_schema().keys) {
    if (std::find(unset_here.begin(), unset_here.end(), k.name) == unset_here.end()) continue;
    EXPECT_EQ(k.get(Environment{}), k.def) << k.name;
  }
}

}  // namespace
}  // namespace uroce

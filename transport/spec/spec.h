// Key tables for the text specs uroce reads: UROCE_FAULTS, UROCE_CC, a DPDK device's dpdk(…)
// body, the UROCE_* variables themselves and uroce-sim's flags. Each spec declares its keys once,
// as rows of a table — name, scope, setter, default, one-line doc — and this parser does the rest
// the same way for every spec:
//   - entries are `key=value` separated by one character (',' or ';'), blanks around either
//     trimmed, or command-line arguments `--key value`, `--key=value`, `--switch`;
//   - an unknown key, a key of another scope, a key given twice (unless repeatable), an entry that
//     is not key=value and a required key left out are refused with one wording everywhere:
//       unknown key 'jump' (known: loss, burst, …)
//       key 'rpg_ai_rate' applies to dcqcn, not timely
//       key 'loss' given twice
//       'loss' is not key=value
//       missing key '--flows' (senders, one flow each)
//   - a value its setter refuses is reported as `key 'value' <what the setter says>`
//     ("vlan '4095' is not a VLAN id 1..4094");
//   - describe() prints each key's effective value with its doc (`uroce config`), usage() a
//     command's flags with their docs and defaults (`uroce-sim … --help`).
// A spec's own grammar around its entries (UROCE_CC's leading algorithm, UROCE_FAULTS' rx./tx.
// prefixes and `:param=value` tails, UROCE_DEVICES' device list) stays with that spec.
//
// It lives under transport/ because everything links it — the pure transport's congestion
// control (transport/cc) as well as src/ and dpdk_port/ — and it is pure like the transport: text
// in, a configuration and a message out, no clock, socket or thread.
#pragma once

#include <algorithm>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace uroce::spec {

// The scopes a key belongs to, one bit each: an algorithm (UROCE_CC), a direction or fault kind
// (UROCE_FAULTS), a subcommand (uroce-sim). An entry is parsed in one scope; a key that exists
// only in others is refused by name.
using Scopes = uint32_t;
inline constexpr Scopes kAllScopes = ~Scopes{0};

template <typename C>
struct Key {
  // Every member has a default, so tables can name only what they set ({.name = …, .set = …}).
  const char* name = "";
  Scopes scopes = kAllScopes;
  // Reads `value` into the configuration. On a malformed value: false, and *why says what is
  // wrong with it ("is not an unsigned integer"); the parser adds the key and the value.
  std::function<bool(C&, std::string_view value, std::string* why)> set = {};
  // The effective value, as text that set() reads back; empty where the key has none to show.
  std::function<std::string(const C&)> get = {};
  const char* def = "";  // the default as documented ("" = none)
  const char* doc = "";  // one line
  // Shown instead of `name` by describe() (UROCE_FAULTS' "tx.loss" for the tx row of `loss`).
  const char* label = nullptr;
  bool repeatable = false;  // may be given more than once, each adding (neigh=, --cnp-us)
  bool is_switch = false;   // a command-line switch: takes no value; set() gets ""
  bool required = false;    // must be given (in its scopes)
  bool first = false;       // applied before the other keys wherever it stands (a preset)
};

template <typename C>
struct Schema {
  std::vector<Key<C>> keys = {};
  std::vector<const char*> scope_names = {};  // bit i's name, for messages ("dcqcn", "tx")
};

// One entry of a spec, as written.
struct Entry {
  std::string_view key = {};    // as written, trimmed ("tx.loss", "flows")
  std::string_view value = {};  // trimmed
  bool has_value = false;       // the entry had '=' (or a command-line value)
  // Set by a spec whose keys carry their scope in their spelling (UROCE_FAULTS: "tx.loss" is
  // `loss` in scope tx): the name to look up (default: key) and the scope (default: the one
  // apply() is given).
  std::string_view name = {};
  Scopes scope = 0;
};

struct Options {
  Scopes scope = kAllScopes;  // the scope of entries that do not carry one
  // Put before every key name in messages: "--" for command lines, "queue:" for a fault kind's
  // parameters.
  std::string_view prefix = {};
  bool skip_empty = false;  // empty entries are ignored (a dpdk(…) body's ";;") rather than refused
  // Every key of the scope that is not given and has a default is set from its default first, so
  // the documented default is the value (uroce-sim's flags).
  bool set_defaults = false;
};

std::string_view trim(std::string_view s);

// Values several tables read, strictly (no blanks, signs, octal or hex where a decimal is meant).
// A decimal integer in [lo, hi].
bool read_uint(std::string_view s, uint64_t lo, uint64_t hi, uint64_t* out);
// A dotted-quad IPv4 address ("1.2.3" and "010.0.0.1" are refused), host byte order.
bool read_ipv4(std::string_view s, uint32_t* out);
std::string ipv4_text(uint32_t ip);
// "aa:bb:cc:dd:ee:ff", hex digits of either case.
bool read_mac(std::string_view s, uint8_t out[6]);
std::string mac_text(const uint8_t mac[6]);
// Splits on `sep` outside parentheses (a dpdk(…) device keeps its commas), keeping empty pieces.
std::vector<std::string_view> split(std::string_view text, char sep);
// split(), each piece cut at its first '=' into an Entry.
std::vector<Entry> entries(std::string_view text, char sep);

namespace detail {

// The scope-independent checks, written once for every configuration type.
struct KeyView {
  const char* name;
  Scopes scopes;
  bool repeatable, is_switch, required, first;
  const char* doc;
};
// Checks `in` against the keys: fills `which` (the key index of each entry, -1 for a skipped
// empty one) or returns false and the message.
bool resolve(const std::vector<KeyView>& keys, const std::vector<const char*>& scope_names,
             const std::vector<Entry>& in, const Options& o, std::vector<int>* which,
             std::string* err);
// `key 'value' why`, with the prefix.
std::string value_error(const Options& o, const Entry& e, const std::string& why);
// The first required key of `scope` that `which` lacks; -1 if none.
int missing_required(const std::vector<KeyView>& keys, Scopes scope, const std::vector<int>& which);
std::string missing_error(const Options& o, const KeyView& k);

template <typename C>
std::vector<KeyView> views(const Schema<C>& s) {
  std::vector<KeyView> v;
  v.reserve(s.keys.size());
  for (const Key<C>& k : s.keys)
    v.push_back({k.name, k.scopes, k.repeatable, k.is_switch, k.required, k.first, k.doc});
  return v;
}

}  // namespace detail

// Applies `in` to `c`: checks every entry (unknown, scope, duplicate, key=value), then sets the
// `first` keys, then the others in order, then checks that the required keys were given. False
// and *err (no variable name: the caller adds it) on the first problem; `c` may then be partly
// set.
template <typename C>
bool apply(const Schema<C>& s, const std::vector<Entry>& in, C& c, std::string* err,
           const Options& o = {}) {
  const std::vector<detail::KeyView> keys = detail::views(s);
  std::vector<int> which;
  if (!detail::resolve(keys, s.scope_names, in, o, &which, err)) return false;
  for (size_t k = 0; o.set_defaults && k < s.keys.size(); ++k) {
    const Key<C>& key = s.keys[k];
    if (!(key.scopes & o.scope) || !*key.def ||
        std::find(which.begin(), which.end(), int(k)) != which.end())
      continue;
    std::string why;
    if (!key.set(c, key.def, &why)) {
      if (err)
        *err = detail::value_error(o, Entry{.key = key.name, .value = key.def}, why) +
               " (the default)";
      return false;
    }
  }
  for (const bool first : {true, false}) {
    for (size_t i = 0; i < in.size(); ++i) {
      if (which[i] < 0 || s.keys[size_t(which[i])].first != first) continue;
      std::string why;
      if (!s.keys[size_t(which[i])].set(c, in[i].value, &why)) {
        if (err) *err = detail::value_error(o, in[i], why);
        return false;
      }
    }
  }
  if (const int m = detail::missing_required(keys, o.scope, which); m >= 0) {
    if (err) *err = detail::missing_error(o, keys[size_t(m)]);
    return false;
  }
  return true;
}

// A key whose value is one of two words (`off`, `on`: "0" and "1" unless named), kept as the bool
// `F` maps the configuration to.
template <typename C, typename F>
Key<C> bool_key(const char* name, Scopes scopes, F field, const char* doc, const char* off = "0",
                const char* on = "1", const char* def = "") {
  return Key<C>{.name = name,
                .scopes = scopes,
                .set =
                    [=](C& c, std::string_view v, std::string* why) {
                      if (v != off && v != on) {
                        (*why = "is not ").append(off).append(" or ").append(on);
                        return false;
                      }
                      field(c) = v == on;
                      return true;
                    },
                .get = [=](const C& c) { return std::string(field(c) ? on : off); },
                .def = def,
                .doc = doc};
}

// Command-line arguments to entries: `--key value`, `--key=value`, and `--key` alone for a
// switch. An argument that is not a key where one is due is an error ("unexpected argument
// 'x'"). The entries point into `args`.
template <typename C>
bool entries_from_args(const Schema<C>& s, const std::vector<std::string_view>& args,
                       std::vector<Entry>* out, std::string* err) {
  for (size_t i = 0; i < args.size(); ++i) {
    std::string_view a = args[i];
    if (a.size() < 3 || !a.starts_with("--")) {
      if (err) (*err = "unexpected argument '").append(a).append("'");
      return false;
    }
    a.remove_prefix(2);
    Entry e;
    const size_t eq = a.find('=');
    e.key = a.substr(0, eq);
    if (eq != std::string_view::npos) {
      e.value = a.substr(eq + 1);
      e.has_value = true;
    } else {
      bool is_switch = false, known = false;
      for (const Key<C>& k : s.keys) {
        if (e.key != k.name) continue;
        known = true;
        is_switch = is_switch || k.is_switch;
      }
      // A value follows a key that takes one, and an unknown key's next argument is taken as its
      // value when it does not look like a key (so the message names the key, not its value).
      if (!is_switch && i + 1 < args.size() && (known || !args[i + 1].starts_with("--"))) {
        e.value = args[++i];
        e.has_value = true;
      }
    }
    out->push_back(e);
  }
  return true;
}

// One line per key of `scope` that has a value to show: `<indent>label=value` padded, then the
// doc, then "(default D)" where the value differs from a documented default.
template <typename C>
std::string describe(const Schema<C>& s, const C& c, Scopes scope, std::string_view indent) {
  std::vector<std::pair<std::string, const Key<C>*>> rows;
  size_t width = 0;
  for (const Key<C>& k : s.keys) {
    if (!(k.scopes & scope) || !k.get) continue;
    rows.emplace_back(std::string(k.label ? k.label : k.name).append("=").append(k.get(c)), &k);
    width = std::max(width, rows.back().first.size());
  }
  std::string out;
  for (const auto& [text, k] : rows) {
    out += indent;
    out += text;
    out.append(width + 2 - text.size(), ' ');
    out += k->doc;
    const std::string_view value = std::string_view(text).substr(text.find('=') + 1);
    if (*k->def && value != k->def) {
      out += " (default ";
      out += k->def;
      out += ")";
    }
    out += "\n";
  }
  return out;
}

// A command's flags, one line each: `  --name VALUE  doc [default: D]` (required ones say so).
template <typename C>
std::string usage(const Schema<C>& s, Scopes scope) {
  std::vector<std::pair<std::string, const Key<C>*>> rows;
  size_t width = 0;
  for (const Key<C>& k : s.keys) {
    if (!(k.scopes & scope)) continue;
    rows.emplace_back(std::string("--").append(k.name).append(k.is_switch ? "" : " VALUE"), &k);
    width = std::max(width, rows.back().first.size());
  }
  std::string out;
  for (const auto& [text, k] : rows) {
    out += "  ";
    out += text;
    out.append(width + 2 - text.size(), ' ');
    out += k->doc;
    if (k->required) {
      out += " [required]";
    } else if (*k->def) {
      out += " [default: ";
      out += k->def;
      out += "]";
    }
    out += "\n";
  }
  return out;
}

}  // namespace uroce::spec

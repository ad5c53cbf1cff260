// UROCE_FAULTS (config.h, docs/configuration.md): the table of its keys — per direction, one row
// per fault kind, then each kind's parameters — and the grammar around them
// ("[rx.|tx.]kind=value{:param=value}", "seed=N"), read by the parser every spec shares
// (transport/spec/spec.h). Its own file: the fault injector's vocabulary is a concern of its own,
// apart from the device list and the other variables.
#include <bit>
#include <iterator>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "engine/config.h"
#include "engine/config_values.h"

namespace uroce {

using config_values::duration_text;
using config_values::kFaultsVar;
using config_values::number_text;
using config_values::rate_text;
using config_values::read_count;
using config_values::read_duration;
using config_values::read_probability;
using config_values::read_rate;
using config_values::read_seed;
using config_values::read_size;
using config_values::set_err;
using config_values::size_text;
using config_values::uint_text;

namespace {

using FaultKey = spec::Key<FaultConfig>;
using ParamKey = spec::Key<FaultSpec>;

// A key of configuration `C` whose value `read` parses into the field `F` maps to and `show`
// writes back.
template <typename C, typename F, typename Read, typename Show>
spec::Key<C> value_key(const char* name, spec::Scopes scopes, F field, Read read, Show show,
                       const char* def, const char* label, const char* doc) {
  return spec::Key<C>{
      .name = name,
      .scopes = scopes,
      .set = [=](C& c, std::string_view v, std::string* why) { return read(v, &field(c), why); },
      .get = [=](const C& c) { return show(field(c)); },
      .def = def,
      .doc = doc,
      .label = label};
}

// The fault kinds, in the order docs/configuration.md lists them; a kind's bit is its
// parameters' scope.
constexpr const char* kKinds[] = {"loss",    "burst", "corrupt", "dup",
                                  "reorder", "delay", "queue",   "ce"};
spec::Scopes kind_scope(std::string_view kind) {
  for (size_t i = 0; i < std::size(kKinds); ++i) {
    if (kind == kKinds[i]) return spec::Scopes{1} << i;
  }
  return 0;
}

// describe()'s names of the kinds' rows, by direction and kind.
constexpr const char* kLabels[2][std::size(kKinds)] = {
    {"rx.loss", "rx.burst", "rx.corrupt", "rx.dup", "rx.reorder", "rx.delay", "rx.queue", "rx.ce"},
    {"tx.loss", "tx.burst", "tx.corrupt", "tx.dup", "tx.reorder", "tx.delay", "tx.queue", "tx.ce"}};

spec::Schema<FaultConfig> make_fault_schema() {
  spec::Schema<FaultConfig> s;
  s.scope_names = {"rx", "tx", "seed"};
  s.keys.push_back(value_key<FaultConfig>(
      "seed", kFaultSeed, [](auto& f) -> auto& { return f.seed; }, read_seed, uint_text, "1",
      nullptr, "seed of the fault PRNG: the same seed makes the same decisions"));
  // One row per direction of each kind: `rx.` (or no prefix) and `tx.`.
  for (const spec::Scopes dir : {kFaultRx, kFaultTx}) {
    const bool tx = dir == kFaultTx;
    const auto side = [tx](auto& f) -> auto& {
      return tx ? f.tx : f.rx;
    };
    const auto add = [&](const char* kind, auto field, auto read, auto show, const char* def,
                         const char* doc) {
      s.keys.push_back(value_key<FaultConfig>(
          kind, dir, field, read, show, def, kLabels[tx][std::countr_zero(kind_scope(kind))], doc));
    };
    const auto prob = [&](const char* kind, auto field, const char* doc) {
      add(kind, field, read_probability, number_text, "0", doc);
    };
    // Receive loss is FaultConfig::rx_loss (it predates the split: config.h).
    prob(
        "loss", [tx](auto& f) -> auto& { return tx ? f.tx.loss : f.rx_loss; },
        "drop with probability p");
    prob(
        "burst", [=](auto& f) -> auto& { return side(f).burst; },
        "with probability p, drop the datagram and the next len - 1");
    prob(
        "corrupt", [=](auto& f) -> auto& { return side(f).corrupt; },
        "with probability p, flip `bits` random bits the ICRC covers");
    prob(
        "dup", [=](auto& f) -> auto& { return side(f).dup; },
        "with probability p, a second copy follows at once");
    prob(
        "reorder", [=](auto& f) -> auto& { return side(f).reorder; },
        "with probability p, hold back until 1..depth later datagrams have passed");
    add(
        "delay", [=](auto& f) -> auto& { return side(f).delay_ns; }, read_duration, duration_text,
        "0ns", "hold every datagram this long (plus jitter), order kept");
    if (tx) continue;  // the switch queue and CE marking act on receive only
    add(
        "queue", [](auto& f) -> auto& { return f.rx.queue_bps; }, read_rate, rate_text, "off",
        "a switch's egress queue in front of the device, drained at this rate (RED, ECN)");
    prob(
        "ce", [](auto& f) -> auto& { return f.rx.ce; },
        "with probability p, mark CE whatever the ECN field (a remarking middlebox)");
  }
  return s;
}

spec::Schema<FaultSpec> make_fault_param_schema() {
  spec::Schema<FaultSpec> s;
  s.scope_names.assign(std::begin(kKinds), std::end(kKinds));
  const auto add = [&](const char* name, const char* kind, auto field, auto read, auto show,
                       const char* def, const char* label, const char* doc) {
    s.keys.push_back(
        value_key<FaultSpec>(name, kind_scope(kind), field, read, show, def, label, doc));
  };
  const auto count = [](uint32_t max) {
    return [max](std::string_view v, uint32_t* out, std::string* why) {
      return read_count(v, max, out, why);
    };
  };
  add(
      "len", "burst", [](auto& f) -> auto& { return f.burst_len; }, count(1000), uint_text, "4",
      "burst:len", "datagrams a burst drops, 1..1000");
  add(
      "bits", "corrupt", [](auto& f) -> auto& { return f.corrupt_bits; }, count(64), uint_text, "1",
      "corrupt:bits", "bits flipped in a corrupted datagram, 1..64");
  add(
      "depth", "reorder", [](auto& f) -> auto& { return f.reorder_depth; }, count(1000), uint_text,
      "3", "reorder:depth", "a reordered datagram lets 1..depth later ones pass (at most 1 ms)");
  add(
      "jitter", "delay", [](auto& f) -> auto& { return f.jitter_ns; }, read_duration, duration_text,
      "0ns", "delay:jitter", "plus a uniform [0, jitter) on each datagram's delay");
  add(
      "buffer", "queue", [](auto& f) -> auto& { return f.queue_buffer; }, read_size, size_text,
      "1m", "queue:buffer",
      "the queue's buffer, bytes of frames: a datagram that does not fit is dropped");
  add(
      "kmin", "queue", [](auto& f) -> auto& { return f.queue_kmin; }, read_size, size_text, "5k",
      "queue:kmin", "RED: no marks up to this backlog");
  add(
      "kmax", "queue", [](auto& f) -> auto& { return f.queue_kmax; }, read_size, size_text, "200k",
      "queue:kmax", "RED: marks with probability pmax here, always above");
  add(
      "pmax", "queue", [](auto& f) -> auto& { return f.queue_pmax; }, read_probability, number_text,
      "0.01", "queue:pmax", "RED: the marking probability at kmax");
  ParamKey mark = spec::bool_key<FaultSpec>(
      "mark", kind_scope("queue"), [](auto& f) -> auto& { return f.queue_mark_dequeue; },
      "judge the backlog a datagram finds (enqueue) or leaves behind (dequeue)", "enqueue",
      "dequeue", "enqueue");
  mark.label = "queue:mark";
  s.keys.push_back(mark);
  return s;
}

}  // namespace

const spec::Schema<FaultConfig>& fault_schema() {
  static const spec::Schema<FaultConfig> s = make_fault_schema();
  return s;
}

const spec::Schema<FaultSpec>& fault_param_schema() {
  static const spec::Schema<FaultSpec> s = make_fault_param_schema();
  return s;
}

std::optional<FaultConfig> parse_faults(const std::string& text, std::string* err) {
  FaultConfig f;
  if (spec::trim(text).empty()) return f;
  // entry = [ "rx." | "tx." ] kind "=" value { ":" param "=" value }  |  "seed=" N
  std::vector<spec::Entry> entries = spec::entries(text, ',');
  std::vector<std::optional<std::string_view>> params(entries.size());
  for (size_t i = 0; i < entries.size(); ++i) {
    spec::Entry& e = entries[i];
    // Plain keys apply to receive, as UROCE_FAULTS always did; `seed` has no direction.
    e.name = e.key;
    e.scope = kFaultRx | kFaultSeed;
    if (e.key.starts_with("rx.") || e.key.starts_with("tx.")) {
      e.scope = e.key[0] == 't' ? kFaultTx : kFaultRx;
      if (e.key.substr(3) != "seed") e.name = e.key.substr(3);
    }
    const size_t colon = e.value.find(':');
    if (colon != std::string_view::npos) {
      params[i] = e.value.substr(colon + 1);
      e.value = spec::trim(e.value.substr(0, colon));
    }
  }
  std::string msg;
  if (!spec::apply(fault_schema(), entries, f, &msg)) {
    set_err(err, kFaultsVar, msg);
    return std::nullopt;
  }
  for (size_t i = 0; i < entries.size(); ++i) {
    const spec::Entry& e = entries[i];
    if (e.name == "seed") continue;
    FaultSpec& side = e.scope == kFaultTx ? f.tx : f.rx;
    const std::string prefix = std::string(e.key).append(":");
    if (params[i] && !spec::apply(fault_param_schema(), spec::entries(*params[i], ':'), side, &msg,
                                  {.scope = kind_scope(e.name), .prefix = prefix})) {
      set_err(err, kFaultsVar, msg);
      return std::nullopt;
    }
    if (e.name == "queue" && side.queue_kmin > side.queue_kmax) {
      set_err(err, kFaultsVar, std::string(e.key) + ": kmin must not exceed kmax");
      return std::nullopt;
    }
  }
  return f;
}

}  // namespace uroce

// A small streaming JSON writer for the simulator's summaries: objects, arrays and keys around
// the tools' JSON scalars (tools/json.h: strings escaped per RFC 8259, numbers that are always
// valid JSON). Two-space indentation, one member per line.
#pragma once

#include <string>
#include <vector>

#include "tools/json.h"

namespace uroce::sim {

class JsonWriter {
 public:
  JsonWriter& begin_object() { return open('{'); }
  JsonWriter& end_object() { return close('}'); }
  JsonWriter& begin_array() { return open('['); }
  JsonWriter& end_array() { return close(']'); }
  JsonWriter& key(const std::string& k) {
    item();
    out_ += tools::json_string(k);
    out_ += ": ";
    after_key_ = true;
    return *this;
  }
  JsonWriter& str(const std::string& v) { return value(tools::json_string(v)); }
  JsonWriter& num(double v) { return value(tools::json_number(v, 10)); }
  JsonWriter& boolean(bool v) { return value(v ? "true" : "false"); }
  std::string str() const { return out_ + "\n"; }

 private:
  // Before a value or key: the separator and the indentation (nothing right after a key).
  void item() {
    if (after_key_) {
      after_key_ = false;
      return;
    }
    if (!first_.empty()) {
      if (!first_.back()) out_ += ",";
      first_.back() = false;
      newline();
    }
  }
  // Appended, never built as `a + b`: GCC 12 at -O3 sees a false overlap in the concatenation's
  // inlined copy (-Wrestrict, an error with -Werror).
  void newline() {
    out_ += '\n';
    out_.append(2 * first_.size(), ' ');
  }
  JsonWriter& value(const std::string& v) {
    item();
    out_ += v;
    return *this;
  }
  JsonWriter& open(char c) {
    item();
    out_ += c;
    first_.push_back(true);
    return *this;
  }
  JsonWriter& close(char c) {
    const bool empty = first_.back();
    first_.pop_back();
    if (!empty) newline();
    out_ += c;
    return *this;
  }

  std::string out_;
  std::vector<bool> first_;  // per open container: nothing written in it yet
  bool after_key_ = false;
};

}  // namespace uroce::sim

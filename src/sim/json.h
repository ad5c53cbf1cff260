// A small streaming JSON writer for the simulator's summaries: objects, arrays, keys, strings
// escaped per RFC 8259 and numbers that are always valid JSON (NaN and infinities, which JSON
// cannot express, become null). Two-space indentation, one member per line.
#pragma once

#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

namespace uroce::sim {

class JsonWriter {
 public:
  JsonWriter& begin_object() { return open('{'); }
  JsonWriter& end_object() { return close('}'); }
  JsonWriter& begin_array() { return open('['); }
  JsonWriter& end_array() { return close(']'); }
  JsonWriter& key(const std::string& k) {
    item();
    out_ += quoted(k) + ": ";
    after_key_ = true;
    return *this;
  }
  JsonWriter& str(const std::string& v) { return value(quoted(v)); }
  JsonWriter& num(double v) {
    if (!std::isfinite(v)) return value("null");
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.10g", v);
    return value(buf);
  }
  JsonWriter& boolean(bool v) { return value(v ? "true" : "false"); }
  std::string str() const { return out_ + "\n"; }

  static std::string quoted(const std::string& s) {
    std::string o = "\"";
    for (unsigned char c : s) {
      if (c == '"' || c == '\\') {
        o += '\\';
        o += char(c);
      } else if (c < 0x20) {
        char buf[8];
        std::snprintf(buf, sizeof buf, "\\u%04x", c);
        o += buf;
      } else {
        o += char(c);
      }
    }
    return o + "\"";
  }

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
      out_ += "\n" + std::string(2 * first_.size(), ' ');
    }
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
    if (!empty) out_ += "\n" + std::string(2 * first_.size(), ' ');
    out_ += c;
    return *this;
  }

  std::string out_;
  std::vector<bool> first_;  // per open container: nothing written in it yet
  bool after_key_ = false;
};

}  // namespace uroce::sim

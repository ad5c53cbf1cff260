// The parts of the key-table parser (spec.h) that do not depend on the configuration's type.
#include "transport/spec/spec.h"

namespace uroce::spec {

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

bool read_uint(std::string_view s, uint64_t lo, uint64_t hi, uint64_t* out) {
  if (s.empty() || s.size() > 19 || s.find_first_not_of("0123456789") != std::string_view::npos)
    return false;
  uint64_t v = 0;
  for (char c : s) v = v * 10 + uint64_t(c - '0');
  if (v < lo || v > hi) return false;
  *out = v;
  return true;
}

bool read_ipv4(std::string_view s, uint32_t* out) {
  uint32_t ip = 0;
  for (int i = 0; i < 4; ++i) {
    const size_t dot = i < 3 ? s.find('.') : s.size();
    if (dot == std::string_view::npos) return false;
    const std::string_view octet = s.substr(0, dot);
    uint64_t v = 0;
    // inet_pton's rules: 1-3 digits, at most 255, no leading zero.
    if (octet.size() > 3 || (octet.size() > 1 && octet[0] == '0') || !read_uint(octet, 0, 255, &v))
      return false;
    ip = ip << 8 | uint32_t(v);
    s.remove_prefix(i < 3 ? dot + 1 : dot);
  }
  *out = ip;
  return true;
}

std::string ipv4_text(uint32_t ip) {
  std::string s = std::to_string(ip >> 24);
  for (int shift = 16; shift >= 0; shift -= 8) {
    s += '.';
    s += std::to_string((ip >> shift) & 0xff);
  }
  return s;
}

bool read_mac(std::string_view s, uint8_t out[6]) {
  if (s.size() != 17) return false;
  for (int i = 0; i < 6; ++i) {
    uint8_t v = 0;
    for (int k = 0; k < 2; ++k) {
      const char c = s[size_t(i * 3 + k)];
      v = static_cast<uint8_t>(v << 4);
      if (c >= '0' && c <= '9')
        v |= static_cast<uint8_t>(c - '0');
      else if (c >= 'a' && c <= 'f')
        v |= static_cast<uint8_t>(c - 'a' + 10);
      else if (c >= 'A' && c <= 'F')
        v |= static_cast<uint8_t>(c - 'A' + 10);
      else
        return false;
    }
    if (i < 5 && s[size_t(i * 3 + 2)] != ':') return false;
    out[i] = v;
  }
  return true;
}

std::string mac_text(const uint8_t mac[6]) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string s;
  for (int i = 0; i < 6; ++i) {
    if (i) s += ':';
    s += kHex[mac[i] >> 4];
    s += kHex[mac[i] & 15];
  }
  return s;
}

std::vector<std::string_view> split(std::string_view text, char sep) {
  std::vector<std::string_view> out;
  int depth = 0;
  size_t start = 0;
  for (size_t i = 0; i <= text.size(); ++i) {
    if (i < text.size() && text[i] == '(') ++depth;
    if (i < text.size() && text[i] == ')' && depth > 0) --depth;
    if (i == text.size() || (text[i] == sep && depth == 0)) {
      out.push_back(trim(text.substr(start, i - start)));
      start = i + 1;
    }
  }
  return out;
}

std::vector<Entry> entries(std::string_view text, char sep) {
  std::vector<Entry> out;
  for (std::string_view piece : split(text, sep)) {
    Entry e;
    const size_t eq = piece.find('=');
    e.key = trim(piece.substr(0, eq));
    if (eq != std::string_view::npos) {
      e.value = trim(piece.substr(eq + 1));
      e.has_value = true;
    }
    out.push_back(e);
  }
  return out;
}

namespace detail {
namespace {

// Messages are built by appending to a named string: `"lit" + std::string(…)` draws a bogus
// -Wrestrict from gcc 12 at -O3 (GCC bug 105329).
std::string quoted(const Options& o, std::string_view key) {
  std::string s = "'";
  s += o.prefix;
  s += key;
  s += "'";
  return s;
}

std::string scope_text(const std::vector<const char*>& names, Scopes scopes) {
  std::string s;
  for (size_t i = 0; i < names.size() && i < 32; ++i) {
    if (!(scopes & (Scopes{1} << i))) continue;
    if (!s.empty()) s += " or ";
    s += names[i];
  }
  return s.empty() ? "another scope" : s;
}

}  // namespace

bool resolve(const std::vector<KeyView>& keys, const std::vector<const char*>& scope_names,
             const std::vector<Entry>& in, const Options& o, std::vector<int>* which,
             std::string* err) {
  std::string msg;
  const auto fail = [&] {
    if (err) *err = msg;
    return false;
  };
  which->assign(in.size(), -1);
  for (size_t i = 0; i < in.size(); ++i) {
    const Entry& e = in[i];
    if (e.key.empty() && !e.has_value) {
      if (o.skip_empty) continue;
      msg = "empty entry";
      return fail();
    }
    const std::string_view name = e.name.empty() ? e.key : e.name;
    const Scopes scope = e.scope ? e.scope : o.scope;
    int found = -1;
    Scopes elsewhere = 0;
    for (size_t k = 0; k < keys.size(); ++k) {
      if (name != keys[k].name) continue;
      if (keys[k].scopes & scope) {
        found = int(k);
        break;
      }
      elsewhere |= keys[k].scopes;
    }
    if (found < 0 && elsewhere == 0) {
      msg = "unknown key ";
      msg += quoted(o, e.key);
      std::string known;
      for (size_t k = 0; k < keys.size(); ++k) {
        if (!(keys[k].scopes & scope)) continue;
        bool listed = false;  // a name with a row per scope is listed once
        for (size_t j = 0; j < k; ++j)
          listed |= (keys[j].scopes & scope) && std::string_view(keys[j].name) == keys[k].name;
        if (listed) continue;
        known += known.empty() ? "" : ", ";
        known += o.prefix;
        known += keys[k].name;
      }
      msg += known.empty() ? " (it takes none)" : " (known: ";
      if (!known.empty()) {
        msg += known;
        msg += ")";
      }
      return fail();
    }
    if (found < 0) {
      msg = "key ";
      msg += quoted(o, e.key);
      msg += " applies to ";
      msg += scope_text(scope_names, elsewhere);
      msg += ", not ";
      msg += scope_text(scope_names, scope);
      return fail();
    }
    const KeyView& k = keys[size_t(found)];
    if (k.is_switch && e.has_value && !e.value.empty()) {
      msg = "key ";
      msg += quoted(o, e.key);
      msg += " takes no value";
      return fail();
    }
    if (!k.is_switch && !e.has_value) {
      msg = quoted(o, e.key);
      msg += " is not key=value";
      return fail();
    }
    if (!k.repeatable) {
      for (size_t j = 0; j < i; ++j) {
        if ((*which)[j] != found) continue;
        msg = "key ";
        msg += quoted(o, e.key);
        msg += " given twice";
        if (in[j].key != e.key) {
          msg += " (first as ";
          msg += quoted(o, in[j].key);
          msg += ")";
        }
        return fail();
      }
    }
    (*which)[i] = found;
  }
  return true;
}

std::string value_error(const Options& o, const Entry& e, const std::string& why) {
  std::string s(o.prefix);
  s += e.key;
  s += " '";
  s += e.value;
  s += "' ";
  s += why;
  return s;
}

int missing_required(const std::vector<KeyView>& keys, Scopes scope,
                     const std::vector<int>& which) {
  for (size_t k = 0; k < keys.size(); ++k) {
    if (!keys[k].required || !(keys[k].scopes & scope)) continue;
    bool given = false;
    for (int w : which) given |= w == int(k);
    if (!given) return int(k);
  }
  return -1;
}

std::string missing_error(const Options& o, const KeyView& k) {
  std::string s = "missing key ";
  s += quoted(o, k.name);
  if (*k.doc) {
    s += " (";
    s += k.doc;
    s += ")";
  }
  return s;
}

}  // namespace detail
}  // namespace uroce::spec

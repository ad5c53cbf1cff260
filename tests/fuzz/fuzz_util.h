// Shared by the libFuzzer harnesses (docs/hardening.md): a forward reader of the fuzzer's bytes,
// the writer that builds seed inputs in the same format, and the seed-writing hook.
//
// Every harness reads its input as a sequence of small records through Reader, which never reads
// past the input (a short read yields zeros), so any byte string is a valid input. Seeds are made
// by the harness itself, from the code's own packets and values: run a fuzzer binary with
// UROCE_FUZZ_WRITE_SEEDS=DIR and it writes its seeds to DIR and exits (scripts/fuzz.sh --seeds
// regenerates tests/fuzz/corpus/ that way).
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <span>
#include <string>
#include <vector>

namespace uroce::fuzz {

class Reader {
 public:
  Reader(const uint8_t* data, size_t size) : p_(data), n_(size) {}
  bool empty() const { return n_ == 0; }
  size_t left() const { return n_; }
  uint8_t u8() {
    if (!n_) return 0;
    --n_;
    return *p_++;
  }
  uint16_t u16() { return uint16_t(u8() | u8() << 8); }
  uint32_t u32() { return uint32_t(u16()) | uint32_t(u16()) << 16; }
  uint64_t u64() { return uint64_t(u32()) | uint64_t(u32()) << 32; }
  // Up to `k` bytes (fewer at the end of the input).
  std::span<const uint8_t> bytes(size_t k) {
    k = std::min(k, n_);
    std::span<const uint8_t> s(p_, k);
    p_ += k;
    n_ -= k;
    return s;
  }
  // Copies up to sizeof(T) bytes into *t (the rest keeps its value).
  template <typename T>
  void raw(T* t) {
    auto b = bytes(sizeof(T));
    std::memcpy(static_cast<void*>(t), b.data(), b.size());
  }

 private:
  const uint8_t* p_;
  size_t n_;
};

// Builds an input in Reader's format.
class Writer {
 public:
  Writer& u8(uint8_t v) {
    out.push_back(v);
    return *this;
  }
  Writer& u16(uint16_t v) { return u8(uint8_t(v)).u8(uint8_t(v >> 8)); }
  Writer& u32(uint32_t v) { return u16(uint16_t(v)).u16(uint16_t(v >> 16)); }
  Writer& u64(uint64_t v) { return u32(uint32_t(v)).u32(uint32_t(v >> 32)); }
  Writer& bytes(std::span<const uint8_t> b) {
    out.insert(out.end(), b.begin(), b.end());
    return *this;
  }
  template <typename T>
  Writer& raw(const T& t) {
    const auto* b = reinterpret_cast<const uint8_t*>(&t);
    return bytes({b, sizeof(T)});
  }
  std::vector<uint8_t> out;
};

// The directory UROCE_FUZZ_WRITE_SEEDS names, or "" when seeds are not wanted.
inline std::string seed_dir() {
  const char* d = std::getenv("UROCE_FUZZ_WRITE_SEEDS");
  return d ? d : "";
}

// Writes one seed file DIR/NAME.
inline void write_seed(const std::string& dir, const std::string& name,
                       std::span<const uint8_t> bytes) {
  const std::string path = dir + "/" + name;
  FILE* f = std::fopen(path.c_str(), "wb");
  if (!f || std::fwrite(bytes.data(), 1, bytes.size(), f) != bytes.size()) {
    std::fprintf(stderr, "cannot write seed %s\n", path.c_str());
    std::exit(1);
  }
  std::fclose(f);
}

// A harness's own invariant broke: report and abort, so libFuzzer records the input.
[[noreturn]] inline void fail(const char* what) {
  std::fprintf(stderr, "fuzz invariant violated: %s\n", what);
  std::abort();
}

}  // namespace uroce::fuzz

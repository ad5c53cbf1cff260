// What uroce writes to stderr (its log) while a test runs, for tests that check what a user
// reads: fd 2 goes to a temporary file, and text() gives it back (echoed to the real stderr, so
// that a sanitizer's report never vanishes).
#pragma once

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <string>

namespace uroce::test {

// What uroce writes to stderr while it lives: fd 2 goes to a temporary file.
class StderrCapture {
 public:
  StderrCapture() {
    std::fflush(stderr);
    saved_ = dup(2);
    std::snprintf(path_, sizeof path_, "/tmp/uroce-stderr-test.XXXXXX");
    int fd = mkstemp(path_);
    dup2(fd, 2);
    close(fd);
  }
  ~StderrCapture() {
    restore();
    unlink(path_);
  }
  // What was written, also echoed to the real stderr (a sanitizer's report must not vanish).
  std::string text() {
    restore();
    std::ifstream in(path_);
    std::string t(std::istreambuf_iterator<char>(in), {});
    std::fputs(t.c_str(), stderr);
    return t;
  }

 private:
  void restore() {
    if (saved_ < 0) return;
    std::fflush(stderr);
    dup2(saved_, 2);
    close(saved_);
    saved_ = -1;
  }
  int saved_ = -1;
  char path_[64];
};

}  // namespace uroce::test

// Helpers shared by the verbs tests, which link liburoce directly and drive the public verbs API:
// the device configuration each test executable uses, opening a device by name, and polling a CQ
// with a bound.
#pragma once

#include <gtest/gtest.h>
#include <infiniband/verbs.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <vector>

namespace uroce::test {

// Sets UROCE_DEVICES before the first ibv_get_device_list, which reads the configuration once.
// Each executable names addresses of its own, so the suites can run in parallel.
class DevicesEnv : public ::testing::Environment {
 public:
  explicit DevicesEnv(const char* spec) : spec_(spec) {}
  void SetUp() override { setenv("UROCE_DEVICES", spec_, 1); }

 private:
  const char* spec_;
};

inline ibv_context* open_named(const char* name) {
  int n = 0;
  ibv_device** list = ibv_get_device_list(&n);
  ibv_context* ctx = nullptr;
  for (int i = 0; list && i < n; ++i)
    if (std::strcmp(ibv_get_device_name(list[i]), name) == 0) ctx = ibv_open_device(list[i]);
  ibv_free_device_list(list);
  return ctx;
}

// Polls until `want` completions arrived or `ms` milliseconds passed.
inline std::vector<ibv_wc> poll_n(ibv_cq* cq, size_t want, int ms = 2000) {
  std::vector<ibv_wc> out;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
  while (out.size() < want && std::chrono::steady_clock::now() < deadline) {
    ibv_wc wc[8];
    int n = ibv_poll_cq(cq, 8, wc);
    EXPECT_GE(n, 0);
    for (int i = 0; i < n; ++i) out.push_back(wc[i]);
    if (n == 0) usleep(100);
  }
  return out;
}

}  // namespace uroce::test

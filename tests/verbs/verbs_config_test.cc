// A malformed UROCE_DEVICES must cost the uroce devices, with a clear message, and nothing else:
// no crash, and the device list still works. A separate binary, because the configuration is
// read once per process.
#include <infiniband/verbs.h>

#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

namespace {

TEST(BadConfig, NoUroceDevicesAndAClearMessage) {
  setenv("UROCE_DEVICES", "uroce0=not-an-address-or-netdev!", 1);
  testing::internal::CaptureStderr();
  int n = -1;
  ibv_device** list = ibv_get_device_list(&n);
  std::string err = testing::internal::GetCapturedStderr();
  // No libibverbs behind a directly linked liburoce and no uroce devices: an empty list.
  if (list) {
    EXPECT_EQ(n, 0);
    ibv_free_device_list(list);
  }
  EXPECT_NE(err.find("UROCE_DEVICES"), std::string::npos) << err;
  EXPECT_NE(err.find("uroce"), std::string::npos) << err;

  // Asking again neither crashes nor repeats the message.
  testing::internal::CaptureStderr();
  list = ibv_get_device_list(&n);
  EXPECT_EQ(testing::internal::GetCapturedStderr(), "");
  if (list) ibv_free_device_list(list);
}

}  // namespace

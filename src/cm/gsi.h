// The General Services Interface QP of one uroce device (IBTA 3.5.6.2, 13.5): QP1, a UD QP with
// the well-known Q_Key 0x80010000, on which the CM's MADs travel — in RoCEv2 like any UD
// datagram, so Wireshark decodes them as IB CM and Linux rxe's kernel CM answers them.
//
// Gsi sits on the engine Device directly (not on the verbs ABI): its own PD, an MR over its
// receive buffers, two engine CQs, MADs sent inline. Receive completions are signalled on a
// completion channel whose fd the CM thread waits on (fd(), then poll() and rearm()).
// Not thread-safe: the CM service serialises every call (service.h).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "cm/mad.h"
#include "engine/cq.h"
#include "engine/device.h"

namespace uroce::cm {

inline constexpr uint32_t kGsiQpn = 1;
inline constexpr uint32_t kGsiQkey = 0x80010000;  // IBTA 13.5.1 (the GSI's well-known Q_Key)

struct GsiCounters {
  uint64_t sent = 0, received = 0;
  uint64_t send_errors = 0;   // post failures and failed send completions
  uint64_t bad_receives = 0;  // failed receive completions, or shorter than a MAD
};

class Gsi {
 public:
  // Creates QP1 on `dev` and moves it to RTS. nullptr and *err (EBUSY: QP1 exists already, e.g.
  // another CM in this process; ENOMEM; EINVAL) on failure.
  static std::unique_ptr<Gsi> open(std::shared_ptr<Device> dev, int* err);
  ~Gsi();
  Gsi(const Gsi&) = delete;
  Gsi& operator=(const Gsi&) = delete;

  // Sends one MAD to QP1 of `dst_ip` (of the device's family). 0 or the errno of the post.
  int send(const wire::IpAddr& dst_ip, const Mad& mad);
  // Hands every MAD received since the last call to `fn(src_ip, mad)`, reposts the buffers and
  // reaps send completions. Returns how many MADs were delivered.
  size_t poll(const std::function<void(const wire::IpAddr&, std::span<const uint8_t>)>& fn);
  // Readable when a receive completed after the last rearm(); rearm after draining with poll().
  int fd() const { return channel_.fd(); }
  void rearm();
  const GsiCounters& counters() const { return counters_; }

 private:
  explicit Gsi(std::shared_ptr<Device> dev);
  int post_recv(size_t slot);

  static constexpr size_t kRecvSlots = 128;  // receive WQEs kept posted
  static constexpr size_t kGrhBytes = 40;
  static constexpr size_t kSlotBytes = kGrhBytes + kMadBytes;

  std::shared_ptr<Device> dev_;
  CompChannel channel_;
  Cq send_cq_;
  Cq recv_cq_;
  uint32_t pd_ = 0;
  uint32_t lkey_ = 0;
  bool have_mr_ = false;
  transport::Qp* qp_ = nullptr;
  std::vector<uint8_t> bufs_;
  GsiCounters counters_;
};

}  // namespace uroce::cm

// A simulated host: a uroce device's pure parts — the receive pipeline and transmit queue
// (Datapath) over a SimPort, the QP table and its timers (Dispatch), memory (SyntheticMemory),
// completion recording — and a NIC that sends at the link's rate, obeying PFC PAUSE. Its QPs are
// the transport's own (requester, responder, completer, congestion control): nothing is
// modelled twice.
//
// The host runs a pass whenever something happened — frames arrived, the NIC freed a transmit
// slot the transport was waiting for, a QP deadline fell due, a workload posted work — in the
// engine's order (engine/engine.cc, Engine::pass): receive, due timers and pumping, flush; then
// it hands the completions the pass produced to the QPs' users (the workload), whose posts run
// through Dispatch::after_call, and arms its wake-up for the dispatch's next deadline.
// A host's receive side is infinitely fast: it never sends PAUSE.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "engine/counters.h"
#include "engine/datapath.h"
#include "engine/dispatch.h"
#include "sim/channel.h"
#include "sim/egress.h"
#include "sim/memory.h"
#include "sim/sim_port.h"
#include "transport/cc/params.h"
#include "transport/qp.h"

namespace uroce::sim {

// The attributes every RC QP of the fabric is connected with.
struct QpParams {
  ibv_mtu mtu = IBV_MTU_1024;
  uint8_t timeout = 14;  // local ACK timeout, 4.096 µs · 2^timeout (14: 67 ms, perftest's)
  uint8_t retry_cnt = 7;
  uint8_t rnr_retry = 7;
  // Resend from the oldest unacknowledged PSN after a probe timeout derived from the measured
  // round trip (QpInit::early_retransmit): a device's default.
  bool early_retransmit = true;
  // Selective repeat (QpInit::selective_repeat, docs/selective-repeat.md), off by default: the
  // simulator's experiments and labs show RoCE as RNICs run it, go-back-N, and keep their
  // numbers; --sr turns it on for every QP (both ends of every flow, so they use it).
  bool selective_repeat = false;
  // With selective repeat: the UDP source ports (paths) a QP sprays its split WRITE packets over
  // (QpInit::paths), 1..64; 1: one, the QPN's.
  uint8_t paths = 1;
};

struct HostConfig {
  uint64_t rate_bps = 40'000'000'000ull;  // the NIC's link
  // Frames the NIC holds at most (the transmit descriptor ring): backpressure beyond.
  uint32_t ring = 16;
  uint8_t data_dscp = 26;  // data and ACKs: traffic class 3 (dscp_class)
  transport::cc::CcConfig cc;
  QpParams qp;
};

// Whoever drives a QP (a flow of the workload): its completions, after each pass.
class QpUser {
 public:
  virtual ~QpUser() = default;
  virtual void on_completion(const ibv_wc& wc, Time now) = 0;
};

// Counts the application bytes a receiving QP accepts: the payload of request packets that
// arrive with the PSN the responder expects (IBTA 9.7.5: in order, once) — what goes into
// memory. Duplicates and packets a go-back-N gap discards do not count.
//
// Under selective repeat the responder also places WRITE packets that arrive ahead of the
// expected PSN (up to transport::kSrWindowPkts ahead); the tap remembers their payload and counts
// it when the PSNs before it have arrived — the bytes count once the application could read
// them in order, as under go-back-N. A packet ahead that the responder did not place (a WRITE of
// the connection's first round trip, still go-back-N's) is counted a little early, at the
// arrival that fills the gap, instead of at its resend: the total is the same.
struct GoodputTap {
  uint32_t expected_psn = 0;
  uint64_t bytes = 0;
  bool selective_repeat = false;
  std::map<uint32_t, uint32_t> ahead;  // selective repeat: PSN (24 bits) → payload bytes
};

class Host final : public FrameSink, public EgressOwner, public EventHandler, public NicQueue {
 public:
  Host(EventQueue& q, FramePool& pool, std::string name, uint32_t id, uint32_t ip,
       const HostConfig& c, const Window* window);
  ~Host() override;
  Host(const Host&) = delete;
  Host& operator=(const Host&) = delete;

  // The NIC's link towards its switch.
  void attach(std::unique_ptr<Channel> out, const std::string& peer);
  FrameSink* sink() { return this; }

  // An RC QP with number `qpn` (0: the next free one), in RESET, whose completions go to `user`.
  transport::Qp* create_qp(uint32_t qpn, QpUser* user);
  // RESET → INIT → RTR → RTS towards (remote_ip, remote_qpn). False if the transport refused.
  bool connect(transport::Qp* qp, uint32_t remote_ip, uint32_t remote_qpn, uint32_t sq_psn,
               uint32_t rq_psn);
  // Posts `wqe` on `qp` now (inside or outside a pass) and lets the dispatch send what it can.
  int post(transport::Qp* qp, const transport::SendWqe& wqe);
  // Counts what `qpn` accepts (a receiving QP), starting at PSN `rq_psn` (with the host's
  // selective repeat setting).
  GoodputTap& tap(uint32_t qpn, uint32_t rq_psn);
  // A synthetic region of `len` bytes at `base`; returns its key.
  uint32_t reg(uint64_t base, uint64_t len) {
    return mem_.reg(kPd, base, len,
                    IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ);
  }

  const std::string& name() const { return name_; }
  uint32_t id() const { return id_; }
  uint32_t ip() const { return ip_; }
  const HostConfig& config() const { return c_; }
  EgressPort& nic() { return *nic_; }
  const EgressPort& nic() const { return *nic_; }
  const std::string& peer() const { return peer_; }
  const DeviceCounters& counters() const { return counters_; }
  Dispatch& dispatch() { return *dispatch_; }
  transport::QpCounters qp_totals() const { return dispatch_->counter_totals(); }
  uint64_t passes() const { return passes_; }
  // Passes after which a QP deadline was still due (should stay 0).
  uint64_t overdue_passes() const { return overdue_passes_; }

  // FrameSink: a frame from the switch (a PAUSE stops the NIC, anything else is received).
  void on_frame(Frame* f, Time now) override;
  // EgressOwner: a frame left the NIC's queue; the transport may have waited for the slot.
  void on_dequeue(uint32_t port, const Frame& f, Time now) override;
  // NicQueue (for the SimPort).
  void transmit(Frame* f) override { nic_->enqueue(f); }
  size_t held() const override { return nic_->queued_frames() + (nic_->busy() ? 1 : 0); }
  // The wake-up: one pass.
  void on_event(Time now, uint64_t arg) override;

  static constexpr uint32_t kPd = 1;

 private:
  struct Cq final : transport::CompletionSink {
    std::vector<ibv_wc> wcs;
    void push(const ibv_wc& wc) override { wcs.push_back(wc); }
  };
  void pass(Time now);
  void count_goodput(std::span<const RxPacket> rx);
  void rearm(Time now, Time next, bool again);

  EventQueue& q_;
  FramePool& pool_;
  std::string name_;
  uint32_t id_, ip_;
  HostConfig c_;
  const Window* window_;
  std::string peer_;
  DeviceCounters counters_;
  SyntheticMemory mem_;
  std::unique_ptr<Channel> out_;
  std::unique_ptr<EgressPort> nic_;
  SimPort* port_ = nullptr;  // owned by dp_
  std::unique_ptr<Datapath> dp_;
  std::unique_ptr<Dispatch> dispatch_;
  // Two wake-ups: `now_` for a pass at once (frames arrived, a transmit slot freed, work
  // posted), `wake_` for the dispatch's next deadline. Kept apart so that the deadline, which
  // mostly moves later (ACK timers restart), is postponed rather than re-queued (Timer).
  Timer now_;
  Timer wake_;
  Cq cq_;
  std::vector<ibv_wc> completions_;                // taken from cq_ after a pass
  std::unordered_map<uint32_t, QpUser*> users_;    // by QPN
  std::unordered_map<uint32_t, GoodputTap> taps_;  // by QPN
  bool in_pass_ = false;
  bool waiting_for_ring_ = false;  // a pass found the transmit ring full
  uint64_t passes_ = 0;
  uint64_t overdue_passes_ = 0;
};

}  // namespace uroce::sim

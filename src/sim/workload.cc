#include "sim/workload.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "transport/context.h"

namespace uroce::sim {
namespace {

// Where each flow's buffers sit in its hosts' (synthetic) address spaces.
constexpr uint64_t kBase = 0x10'0000'0000ull;
// The warm-up WRITE's work request id and event argument.
constexpr uint64_t kWarmup = ~uint64_t{0};

}  // namespace

Flow::Flow(EventQueue& q, const FlowSpec& spec, uint32_t index, Host& src, Host& dst,
           size_t* finished)
    : q_(q),
      s_(spec),
      // Appended: `"f" + std::to_string(index)` draws a bogus -Wrestrict from gcc 12 at -O3
      // (GCC bug 105329).
      name_(spec.name.empty() ? std::string("f").append(std::to_string(index)) : spec.name),
      index_(index),
      src_(src),
      dst_(dst),
      finished_(finished),
      rng_(s_.seed) {
  if (s_.msg_bytes == 0 || s_.msg_bytes > (uint64_t{1} << 31))
    throw std::runtime_error("flow " + name_ + ": message size must be in [1, 2^31] bytes");
  if (s_.depth == 0) s_.depth = 1;
  sq_ = src.create_qp(s_.src_qpn, this);
  rq_ = dst.create_qp(s_.dst_qpn, nullptr);
  if (sq_ == nullptr || rq_ == nullptr)
    throw std::runtime_error("flow " + name_ + ": cannot create its QPs (QPN taken?)");
  constexpr uint32_t kPsn = 0;
  if (!src.connect(sq_, dst.ip(), rq_->qpn(), kPsn, kPsn) ||
      !dst.connect(rq_, src.ip(), sq_->qpn(), kPsn, kPsn))
    throw std::runtime_error("flow " + name_ + ": the transport refused to connect its QPs");
  lkey_ = src.reg(kBase, s_.msg_bytes);
  rkey_ = dst.reg(kBase, s_.msg_bytes);
  tap_ = &dst.tap(rq_->qpn(), kPsn);
  if (s_.warmup) {
    if (s_.start == 0)
      throw std::runtime_error("flow " + name_ + ": a warm-up needs a later start");
    q.schedule(0, EventClass::kTimer, this, kWarmup);
  }
  q.schedule(s_.start, EventClass::kTimer, this);
}

uint16_t Flow::src_port() const {
  return transport::src_port_for_qpn(sq_->qpn());
}

bool Flow::may_start_more(Time now) const {
  return s_.messages == 0 ? now < s_.stop : posted_ < s_.messages;
}

void Flow::post_more(Time now) {
  while (posted_ - completed_ - errors_ < s_.depth) {
    Time born = now;
    if (s_.mean_gap != 0) {
      if (arrivals_.empty()) return;
      born = arrivals_.front();
      arrivals_.pop_front();
    } else if (!may_start_more(now)) {
      return;
    }
    transport::SendWqe w;
    w.wr_id = posted_;
    w.opcode = IBV_WR_RDMA_WRITE;
    w.send_flags = IBV_SEND_SIGNALED;
    w.num_sge = 1;
    w.sge[0] = transport::Sge{kBase, uint32_t(s_.msg_bytes), lkey_};
    w.remote_addr = kBase;
    w.rkey = rkey_;
    if (src_.post(sq_, w) != 0) return;  // the send queue is full or the QP failed
    post_times_.push_back(born);
    ++posted_;
  }
}

void Flow::on_event(Time now, uint64_t arg) {
  if (arg == kWarmup) {
    transport::SendWqe w;
    w.wr_id = kWarmup;
    w.opcode = IBV_WR_RDMA_WRITE;
    w.send_flags = IBV_SEND_SIGNALED;
    w.num_sge = 1;
    w.sge[0] =
        transport::Sge{kBase, uint32_t(std::min<uint64_t>(kWarmupBytes, s_.msg_bytes)), lkey_};
    w.remote_addr = kBase;
    w.rkey = rkey_;
    src_.post(sq_, w);
    return;
  }
  if (s_.mean_gap != 0) {
    // An arrival; the next one after an exponential gap (inverse transform of a uniform).
    if (s_.messages == 0 ? now < s_.stop : arrived_ < s_.messages) {
      arrivals_.push_back(now);
      ++arrived_;
      const double gap = -std::log(1.0 - rng_.uniform()) * double(s_.mean_gap);
      if (s_.messages == 0 ? now + Time(gap) < s_.stop : arrived_ < s_.messages)
        q_.schedule(now + Time(gap), EventClass::kTimer, this);
    }
  }
  post_more(now);
}

void Flow::on_completion(const ibv_wc& wc, Time now) {
  if (wc.wr_id == kWarmup && wc.status == IBV_WC_SUCCESS) return;  // not one of the messages
  if (wc.status != IBV_WC_SUCCESS) {
    ++errors_;
  } else {
    ++completed_;
    const Time posted = post_head_ < post_times_.size() ? post_times_[post_head_++] : now;
    msgs_.emplace_back(posted, now);
    post_more(now);
  }
  if (!counted_ && finished_ != nullptr && (done() || errors_ != 0)) {
    counted_ = true;
    ++*finished_;
  }
}

}  // namespace uroce::sim

// Micro-benchmarks of the whole per-packet path above the port: two devices' stacks — receive
// pipeline (Datapath: length, ICRC, parse), dispatch, transport (requester, responder,
// completer), key table and CQs — joined by an in-memory port that copies each frame to the
// other side, as a NIC's DMA or memif would. No thread, no lock, no system call and no clock
// read: what remains is the CPU cost uroce's own code adds to each packet, which bounds the
// latency and message rate of every datapath (docs/performance.md).
//
//   BM_RcSendRoundTrip/N  an ibv_rc_pingpong iteration: SEND of N bytes each way, both ACKs, all
//                         four completions polled, both receive WQEs reposted
//   BM_RcWriteStream/N    RDMA WRITEs of N bytes from A to B, unsignaled but every 16th, ACKs
//                         coalesced by the responder: messages per second of the stack
//   BM_PostSend           the requester alone: post a 64-byte SEND, build and ICRC its packet
//   BM_AckHandling        the requester's receive pass for one ACK, to the send completion
//   BM_PollCq             ibv_poll_cq on a CQ holding one completion
#include <benchmark/benchmark.h>

#include <arpa/inet.h>

#include <array>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "engine/counters.h"
#include "engine/cq.h"
#include "engine/datapath.h"
#include "engine/dispatch.h"
#include "engine/key_table.h"
#include "ports/port.h"
#include "transport/qp.h"

namespace {

using namespace uroce;
using transport::Time;

// A port whose transmit copies each frame into the peer's receive ring (fixed slots: the port
// itself allocates nothing while the benchmark runs).
class LoopPort final : public Port {
 public:
  explicit LoopPort(uint32_t ip) : ip_(ip), slots_(kSlots) {
    caps_.ip_mtu = 9000;
    caps_.exact_icrc = true;
    for (auto& b : bufs_) b = std::make_unique<transport::TxBuf>();
    for (auto& b : bufs_) pool_.push_back(b.get());
  }
  void connect(LoopPort* peer) { peer_ = peer; }

  const PortCaps& caps() const override { return caps_; }
  wire::IpAddr ip() const override { return wire::IpAddr(ip_); }
  std::string describe() const override { return "loop"; }

  std::span<const RxFrame> rx_burst() override {
    head_ = taken_;  // the frames handed out last time are free again
    out_.clear();
    for (uint64_t i = taken_; i < tail_ && out_.size() < 32; ++i) {
      const Slot& sl = slots_[i % kSlots];
      RxFrame f;
      f.data = sl.bytes.data();
      f.len = sl.len;
      f.src_ip = wire::IpAddr(sl.src_ip);
      f.dst_ip = wire::IpAddr(ip_);
      f.src_port = sl.src_port;
      f.dst_port = 4791;
      f.ip_id_known = true;
      out_.push_back(f);
    }
    taken_ += out_.size();
    return out_;
  }
  transport::TxBuf* tx_alloc() override {
    if (pool_.empty()) return nullptr;
    transport::TxBuf* b = pool_.back();
    pool_.pop_back();
    return b;
  }
  void tx_free(transport::TxBuf* b) override { pool_.push_back(b); }
  size_t tx_burst(std::span<transport::TxBuf* const> bufs) override {
    size_t sent = 0;
    for (transport::TxBuf* b : bufs) {
      if (peer_->tail_ - peer_->head_ < kSlots) {  // else dropped, as by a full NIC ring
        Slot& sl = peer_->slots_[peer_->tail_++ % kSlots];
        sl.len = b->len + 4;  // the packet and its ICRC
        std::memcpy(sl.bytes.data(), b->data, sl.len);
        sl.src_ip = ip_;
        sl.src_port = b->src_port;
        ++sent;
      }
      tx_free(b);
    }
    return sent;
  }

 private:
  static constexpr size_t kSlots = 256;
  struct Slot {
    std::array<uint8_t, transport::kMaxIbPacket + 4> bytes;
    uint32_t len = 0;
    uint32_t src_ip = 0;
    uint16_t src_port = 0;
  };
  uint32_t ip_;
  PortCaps caps_;
  LoopPort* peer_ = nullptr;
  std::vector<Slot> slots_;
  uint64_t head_ = 0, taken_ = 0, tail_ = 0;  // [head_, taken_) handed out, [taken_, tail_) waiting
  std::vector<RxFrame> out_;
  std::array<std::unique_ptr<transport::TxBuf>, 64> bufs_;
  std::vector<transport::TxBuf*> pool_;
};

ibv_ah_attr ah_for(uint32_t ip) {
  ibv_ah_attr ah{};
  ah.is_global = 1;
  ah.port_num = 1;
  ah.grh.dgid.raw[10] = 0xff;
  ah.grh.dgid.raw[11] = 0xff;
  const uint32_t be = htonl(ip);
  std::memcpy(&ah.grh.dgid.raw[12], &be, 4);
  return ah;
}

// One device's stack over a LoopPort, with one RC QP and its buffer.
struct Host {
  explicit Host(uint32_t ip_)
      : ip(ip_), keys(1), send_cq(4096, nullptr, nullptr), recv_cq(4096, nullptr, nullptr) {
    auto p = std::make_unique<LoopPort>(ip);
    port = p.get();
    std::string err;
    dp = Datapath::open(std::move(p), DatapathOptions{}, counters, &err);
    dispatch = std::make_unique<Dispatch>(*dp, keys, counters, Dispatch::Limits{});
    pd = keys.alloc_pd();
    keys.pd_ref(pd);
    buf.assign(1 << 16, 0x5a);
    keys.reg_mr(pd, buf.data(), buf.size(), reinterpret_cast<uintptr_t>(buf.data()),
                IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ, &lkey,
                &rkey);
    transport::QpInit init;
    init.type = IBV_QPT_RC;
    init.pd = pd;
    init.local_ip = wire::IpAddr(ip);
    init.max_send_wr = 1024;
    init.max_recv_wr = 1024;
    init.max_send_sge = 1;
    init.max_recv_sge = 1;
    init.send_cq = &send_cq;
    init.recv_cq = &recv_cq;
    // As the device makes an RC QP by default (UROCE_SR, UROCE_ACK_RIDERS): the two hosts are
    // uroce peers, so a round trip's ACKs ride on the replies.
    init.selective_repeat = true;
    init.ack_riders = true;
    int e = 0;
    qp = dispatch->create_qp(init, &e);
  }
  void connect(const Host& peer) {
    ibv_qp_attr a{};
    a.qp_state = IBV_QPS_INIT;
    a.port_num = 1;
    a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
    qp->modify(a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS, now);
    a = {};
    a.qp_state = IBV_QPS_RTR;
    a.path_mtu = IBV_MTU_4096;
    a.dest_qp_num = peer.qp->qpn();
    a.rq_psn = 0;
    a.max_dest_rd_atomic = 1;
    a.min_rnr_timer = 1;
    a.ah_attr = ah_for(peer.ip);
    qp->modify(a,
               IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                   IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER,
               now);
    a = {};
    a.qp_state = IBV_QPS_RTS;
    a.timeout = 14;
    a.retry_cnt = 7;
    a.rnr_retry = 7;
    a.max_rd_atomic = 1;
    qp->modify(a,
               IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                   IBV_QP_MAX_QP_RD_ATOMIC,
               now);
  }
  // What Device::post_send / post_recv do around the transport call, minus lock and clock.
  void post_send(const transport::SendWqe& w) {
    qp->post_send(w, now);
    bool more = false;
    dispatch->after_call(qp, now, &more);
  }
  void post_recv(uint32_t len) {
    transport::RecvWqe r;
    r.wr_id = 1;
    r.num_sge = 1;
    r.sge[0] = {reinterpret_cast<uintptr_t>(buf.data()), len, lkey};
    // Device::post_recv touches neither the device lock nor the datapath (recv_queue.h).
    qp->post_recv(r);
  }
  // What an engine pass does: receive a burst, dispatch it, run timers and pumps, flush. `app`:
  // the pass of an application thread polling its CQ (Engine::poll_from_app), whose ACKs wait
  // for its next call (Datapath::Hold::kUntilNextCall) — its reply, which they then ride on.
  void pass(bool app = false) {
    auto rx = dp->rx_burst(now);
    if (!rx.empty()) dispatch->receive(rx, now);
    bool again = false;
    dispatch->progress(now, &again);
    if (app) dp->set_hold(Datapath::Hold::kUntilNextCall);
    dp->tx_flush(now);
    dp->set_hold(Datapath::Hold::kOff);
  }
  transport::SendWqe send_wqe(uint32_t len, ibv_wr_opcode op, unsigned flags) const {
    transport::SendWqe w;
    w.wr_id = 2;
    w.opcode = op;
    w.send_flags = flags;
    w.num_sge = 1;
    w.sge[0] = {reinterpret_cast<uintptr_t>(buf.data()), len, lkey};
    return w;
  }

  uint32_t ip;
  DeviceCounters counters;
  KeyTable keys;
  Cq send_cq, recv_cq;
  LoopPort* port = nullptr;
  std::unique_ptr<Datapath> dp;
  std::unique_ptr<Dispatch> dispatch;
  uint32_t pd = 0, lkey = 0, rkey = 0;
  std::vector<uint8_t> buf;
  transport::Qp* qp = nullptr;
  Time now = 1'000'000;
};

struct Pair {
  Pair() : a(0x0a000001), b(0x0a000002) {
    a.port->connect(b.port);
    b.port->connect(a.port);
    a.connect(b);
    b.connect(a);
  }
  Host a, b;
};

void BM_RcSendRoundTrip(benchmark::State& state) {
  const auto len = static_cast<uint32_t>(state.range(0));
  Pair p;
  ibv_wc wc[4];
  const transport::SendWqe sa = p.a.send_wqe(len, IBV_WR_SEND, IBV_SEND_SIGNALED);
  const transport::SendWqe sb = p.b.send_wqe(len, IBV_WR_SEND, IBV_SEND_SIGNALED);
  int64_t lost = 0;
  // As ibv_rc_pingpong runs it, both sides busy-polling: each side's poll pass holds the ACK of
  // what it received for its next call, the reply, which it rides on (transport/ack_rider.h).
  p.b.post_recv(len);
  p.a.post_recv(len);
  int64_t b_sends = 0;
  for (auto _ : state) {
    p.a.post_send(sa);  // the ping, with the ACK of the last pong riding on it
    p.b.pass(true);     // ping (and ACK) arrive: receive completion, the ACK held
    lost += 1 - p.b.recv_cq.poll(4, wc);
    b_sends += p.b.send_cq.poll(4, wc);
    p.b.post_recv(len);
    p.b.post_send(sb);  // the pong, the ping's ACK on it
    p.a.pass(true);     // both completions; the pong's ACK held
    lost += 2 - p.a.send_cq.poll(4, wc) - p.a.recv_cq.poll(4, wc);
    p.a.post_recv(len);
    p.a.now += 1000;
    p.b.now += 1000;
  }
  // The last pong's ACK, which no ping takes along.
  p.a.dp->send_held(p.a.now);
  p.b.pass();
  b_sends += p.b.send_cq.poll(4, wc);
  lost += int64_t(state.iterations()) - b_sends;
  if (lost != 0) state.SkipWithError("a completion was missing");
  state.counters["ns_per_rt"] = benchmark::Counter(
      double(state.iterations()), benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
}
BENCHMARK(BM_RcSendRoundTrip)->Arg(2)->Arg(4096);

void BM_RcWriteStream(benchmark::State& state) {
  const auto len = static_cast<uint32_t>(state.range(0));
  Pair p;
  ibv_wc wc[16];
  int64_t n = 0;
  for (auto _ : state) {
    transport::SendWqe w =
        p.a.send_wqe(len, IBV_WR_RDMA_WRITE, (n % 16 == 15) ? IBV_SEND_SIGNALED : 0);
    w.remote_addr = reinterpret_cast<uintptr_t>(p.b.buf.data());
    w.rkey = p.b.rkey;
    p.a.post_send(w);
    if (++n % 16 == 0) {
      p.b.pass();
      p.a.pass();
      p.a.send_cq.poll(16, wc);
      p.a.now += 1000;
      p.b.now += 1000;
    }
  }
  state.SetItemsProcessed(state.iterations());
  state.SetBytesProcessed(int64_t(state.iterations()) * len);
}
BENCHMARK(BM_RcWriteStream)->Arg(64)->Arg(4096);

void BM_PostSend(benchmark::State& state) {
  Pair p;
  const transport::SendWqe s = p.a.send_wqe(64, IBV_WR_SEND, 0);
  ibv_wc wc[64];
  int64_t n = 0;
  for (auto _ : state) {
    p.a.post_send(s);
    if (++n % 32 == 0) {
      state.PauseTiming();
      for (int i = 0; i < 32; ++i) p.b.post_recv(64);
      p.b.pass();
      p.a.pass();
      while (p.b.recv_cq.poll(64, wc) > 0) {
      }
      p.a.now += 1000;
      p.b.now += 1000;
      state.ResumeTiming();
    }
  }
}
BENCHMARK(BM_PostSend);

// The requester taking an ACK: A's receive pass for the ACK of one 64-byte SEND (parse, ICRC,
// dispatch, completer, the send completion into the CQ), the rest of the exchange untimed.
void BM_AckHandling(benchmark::State& state) {
  Pair p;
  const transport::SendWqe s = p.a.send_wqe(64, IBV_WR_SEND, IBV_SEND_SIGNALED);
  ibv_wc wc[4];
  int64_t lost = 0;
  for (auto _ : state) {
    state.PauseTiming();
    p.b.post_recv(64);
    p.a.post_send(s);
    p.b.pass();  // the SEND arrives; the ACK leaves
    p.b.recv_cq.poll(4, wc);
    state.ResumeTiming();
    p.a.pass();  // the ACK arrives: the SEND completes
    lost += 1 - p.a.send_cq.poll(4, wc);
    p.a.now += 1000;
    p.b.now += 1000;
  }
  if (lost != 0) state.SkipWithError("a completion was missing");
}
BENCHMARK(BM_AckHandling);

void BM_PollCq(benchmark::State& state) {
  Cq cq(64, nullptr, nullptr);
  ibv_wc in{};
  in.status = IBV_WC_SUCCESS;
  ibv_wc out[1];
  for (auto _ : state) {
    cq.push(in);
    benchmark::DoNotOptimize(cq.poll(1, out));
  }
}
BENCHMARK(BM_PollCq);

}  // namespace

// PATH_BENCH_FIXED=N: the same benchmarks again with exactly N iterations each (names "fixed/…"),
// for instruction counts under callgrind, which a timed run cannot give (its iteration count
// adapts): `valgrind --tool=callgrind --toggle-collect='*BM_*' path_bench
// --benchmark_filter=fixed/RcSendRoundTrip/2` then divide by N. Instructions are repeatable where
// wall time on a shared 2-core machine is not.
namespace {
const bool kFixedRegistered = [] {
  const char* n = std::getenv("PATH_BENCH_FIXED");
  if (!n) return false;
  const auto iters = static_cast<benchmark::IterationCount>(std::strtoll(n, nullptr, 10));
  benchmark::RegisterBenchmark("fixed/RcSendRoundTrip/2", BM_RcSendRoundTrip)
      ->Arg(2)
      ->Iterations(iters);
  benchmark::RegisterBenchmark("fixed/RcWriteStream/64", BM_RcWriteStream)
      ->Arg(64)
      ->Iterations(iters);
  benchmark::RegisterBenchmark("fixed/RcWriteStream/4096", BM_RcWriteStream)
      ->Arg(4096)
      ->Iterations(iters);
  benchmark::RegisterBenchmark("fixed/PostSend", BM_PostSend)->Iterations(iters);
  return true;
}();
}  // namespace

// atomics: the client updates a 64-bit counter in the server's memory with N FETCH_AND_ADDs and
// then a COMPARE_AND_SWAP, each executed by the server's NIC as one indivisible read-modify-write
// that returns the value it found. The client checks every returned value; once it is done the
// server checks the counter's final value: the swap only happens if all N adds landed exactly.
//
//   server: atomics -d uroce0 [-p PORT]
//   client: atomics -d uroce0 [-p PORT] [-n ADDS] SERVER_IP
#include "common.h"

using namespace example;

namespace {

// Known to both sides, so each can tell the right values without trusting the other.
constexpr uint64_t kInitial = 1'000'000'000'000;
constexpr uint64_t kSwapped = 0x5eed'cafe'f00d'0001;

// The counter after the n fetch-adds: the i-th adds i.
uint64_t after_adds(int n) {
  return kInitial + static_cast<uint64_t>(n) * (n + 1) / 2;
}

int run_server(const Options& o) {
  // Atomic targets must be 8-byte aligned; Rdma's buffer is page aligned.
  Rdma r(o, sizeof(uint64_t), IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_ATOMIC);
  auto* counter = reinterpret_cast<volatile uint64_t*>(r.buf);
  *counter = kInitial;
  Peer peer = handshake(o, r);

  // The client's atomics complete only once the server's NIC has executed them, so once the
  // client reports in, the counter must hold the final value (the swapped-in one).
  uint8_t client_verdict;
  tcp_read(peer.fd, &client_verdict, 1);
  const uint64_t got = *counter;
  const bool ok = got == kSwapped;
  if (!ok)
    std::fprintf(stderr, "counter holds 0x%016" PRIx64 ", expected 0x%016" PRIx64 "\n", got,
                 kSwapped);
  if (client_verdict != 0) std::fprintf(stderr, "the client saw wrong returned values\n");
  const uint8_t verdict = ok ? 0 : 1;
  tcp_write(peer.fd, &verdict, 1);
  close(peer.fd);
  std::printf("%s: final counter 0x%016" PRIx64 "\n", ok && client_verdict == 0 ? "OK" : "FAILED",
              got);
  return ok && client_verdict == 0 ? 0 : 1;
}

int run_client(const Options& o) {
  Rdma r(o, sizeof(uint64_t), IBV_ACCESS_LOCAL_WRITE);  // the returned value lands here
  ibv_device_attr attr{};
  if (ibv_query_device(r.ctx, &attr) || attr.atomic_cap == IBV_ATOMIC_NONE)
    die("device %s does not support atomic operations", ibv_get_device_name(r.ctx->device));
  Peer peer = handshake(o, r);
  auto* result = reinterpret_cast<volatile uint64_t*>(r.buf);

  // Posts one atomic WR, waits for it, and returns the value the server's NIC found in memory.
  auto atomic = [&](ibv_wr_opcode op, uint64_t compare_add, uint64_t swap) {
    ibv_sge sge{.addr = r.local.addr, .length = sizeof(uint64_t), .lkey = r.mr->lkey};
    ibv_send_wr wr{}, *bad = nullptr;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.opcode = op;
    wr.wr.atomic.remote_addr = peer.remote.addr;
    wr.wr.atomic.rkey = peer.remote.rkey;
    wr.wr.atomic.compare_add = compare_add;
    wr.wr.atomic.swap = swap;
    if (int rc = ibv_post_send(r.qp, &wr, &bad)) die("ibv_post_send: %s", std::strerror(rc));
    r.poll(op == IBV_WR_ATOMIC_FETCH_AND_ADD ? "FETCH_AND_ADD" : "CMP_AND_SWP");
    return static_cast<uint64_t>(*result);
  };
  bool ok = true;
  auto expect = [&](const char* what, uint64_t got, uint64_t want) {
    if (got == want) return;
    std::fprintf(stderr, "%s returned 0x%016" PRIx64 ", expected 0x%016" PRIx64 "\n", what, got,
                 want);
    ok = false;
  };

  // Each fetch-add returns the counter as it was before the add.
  for (int i = 1; i <= o.iters; ++i)
    expect("FETCH_AND_ADD", atomic(IBV_WR_ATOMIC_FETCH_AND_ADD, i, 0), after_adds(i - 1));
  // Compare-and-swap stores `swap` only if memory equals `compare`, and returns what it found
  // either way: the first one must succeed, the repeat (now stale) must leave memory alone.
  const uint64_t sum = after_adds(o.iters);
  expect("CMP_AND_SWP", atomic(IBV_WR_ATOMIC_CMP_AND_SWP, sum, kSwapped), sum);
  expect("stale CMP_AND_SWP", atomic(IBV_WR_ATOMIC_CMP_AND_SWP, sum, 0), kSwapped);

  const uint8_t server_verdict = tcp_exchange_byte(peer.fd, ok ? 0 : 1);
  close(peer.fd);
  if (server_verdict != 0) std::fprintf(stderr, "the server found the wrong final counter\n");
  ok = ok && server_verdict == 0;
  std::printf("%s: %d fetch-adds and 2 compare-and-swaps\n", ok ? "OK" : "FAILED", o.iters);
  return ok ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Atomics example: fetch-and-add and compare-and-swap on the server's counter"};
  Options o;
  o.iters = 100;
  add_common_options(app, o);
  app.add_option("-n,--adds", o.iters, "number of FETCH_AND_ADDs (the i-th adds i)")
      ->check(CLI::Range(0, 1'000'000))
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  return o.is_server() ? run_server(o) : run_client(o);
}

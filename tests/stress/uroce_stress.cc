// uroce_stress: many RC QPs between two processes running a deterministic mix of SEND, RDMA WRITE,
// WRITE_WITH_IMM, RDMA READ, FETCH_AND_ADD and CMP_AND_SWP, with every payload byte, every
// completion and every atomic result checked. Plain libibverbs: it runs over uroce through
// uroce-run like any unmodified program, and unchanged on a real RoCE NIC.
//
//   server: uroce_stress -d uroce0 -p PORT [--qps N --ops N --seed S …]
//   client: uroce_stress -d uroce0 -p PORT [the same options] SERVER_IP
//
// Both sides derive the same schedule from (seed, qp, seq), so each knows what the other must do
// without trusting it: the client is the requester on every QP, the server checks what arrives
// (receives in order, their bytes and immediates, the written memory and the atomic counters), the
// client checks its completions (wr_id sequence, status, opcode) and the bytes READs and atomics
// return. The server's memory for QP q holds, in one MR:
//   [0, 16)              FETCH_AND_ADD counter, CMP_AND_SWP word
//   [64, 64 + max_size)  a read-only region with a known pattern, for READs
//   [arena, arena + Σ)   one slot per WRITE / WRITE_WITH_IMM, never reused, checked at the end
// Exit status: 0 all checks passed; 1 a discrepancy; 2 a setup or usage error; 3 the peer became
// unreachable (QPs ended with IBV_WC_RETRY_EXC_ERR, the rest flushed as the verbs require);
// 4 no progress for --stall-timeout seconds.
#include <arpa/inet.h>
#include <infiniband/verbs.h>
#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cinttypes>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "tcp_setup.h"

namespace {

constexpr int kExitOk = 0, kExitMismatch = 1, kExitSetup = 2, kExitPeerLost = 3, kExitStall = 4;
// Sent by the client over TCP instead of its verdict (0 or 1) when a QP failed on its side.
constexpr uint8_t kClientAborted = 2;

[[noreturn]] void fail_setup(const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  std::fputs("uroce_stress: error: ", stderr);
  std::vfprintf(stderr, fmt, ap);
  std::fputc('\n', stderr);
  va_end(ap);
  std::exit(kExitSetup);
}

struct Options {
  std::string device, server;
  uint16_t tcp_port = 19300;
  int gid_index = 0;
  uint32_t qps = 8, ops = 2000, window = 16, max_size = 16384;
  uint64_t seed = 1;
  int timeout = 14, retry_cnt = 7;  // IBTA: local ACK timeout 4.096 us * 2^timeout
  int mtu = 0;                      // 0: the port's active MTU
  double stall_timeout = 30;
  uint32_t rd_atomic = 0;  // max_rd_atomic / max_dest_rd_atomic; 0: what the device offers
  // Client: after a round, run the schedule again over the same connected QPs, with fresh data,
  // until this many seconds have passed (0: one round). The soak (scripts/soak.sh) runs on this.
  double duration = 0;
  // Client only: flips one byte of the first non-empty WRITE of QP 0 after filling it, so a test
  // can show that the server's checks catch corrupted data.
  bool inject_corruption = false;
  bool is_server() const { return server.empty(); }
};

// ---- The schedule: what operation seq of QP q is, derived from (seed, q, seq) alone ------------

uint64_t mix(uint64_t x) {  // splitmix64's finaliser
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}
uint64_t key(uint64_t seed, uint32_t qp, uint64_t seq) {
  return mix(seed ^ mix((static_cast<uint64_t>(qp) << 40) ^ seq));
}

// Byte i of the payload identified by `k`: differs between (qp, seq) pairs and along the buffer
// (no period of a power of two), so misplaced, stale, foreign or truncated data all show.
inline uint8_t pattern(uint64_t k, size_t i) {
  return static_cast<uint8_t>((k >> ((i & 7) * 8)) ^ (i * 0x9d) ^ (i >> 8) ^ (i >> 16));
}
void fill(uint8_t* p, uint64_t k, size_t n) {
  for (size_t i = 0; i < n; ++i) p[i] = pattern(k, i);
}
// Index of the first byte that differs, or n.
size_t check(const uint8_t* p, uint64_t k, size_t n) {
  for (size_t i = 0; i < n; ++i)
    if (p[i] != pattern(k, i)) return i;
  return n;
}

enum class Kind : uint8_t { Send, Write, WriteImm, Read, FetchAdd, CmpSwap };
const char* name(Kind k) {
  static const char* const names[] = {"SEND", "WRITE",         "WRITE_WITH_IMM",
                                      "READ", "FETCH_AND_ADD", "CMP_AND_SWP"};
  return names[static_cast<int>(k)];
}

constexpr uint64_t kCounterOff = 0, kSwapOff = 8, kReadOff = 64;

struct Op {
  Kind kind;
  uint32_t size = 0;     // payload bytes (8 for atomics)
  uint64_t off = 0;      // offset in the server's MR
  uint64_t data = 0;     // pattern key of the payload (READ: of the bytes expected back)
  uint64_t add_cmp = 0;  // FETCH_AND_ADD: the addend; CMP_AND_SWP: the compare value
  uint64_t swap = 0;
  uint64_t expect = 0;  // atomics: the value the responder must return
  uint32_t imm = 0;
};

struct Schedule {
  std::vector<Op> ops;
  std::vector<uint32_t> recv_seqs;  // seqs that consume a receive WQE, in order
  uint64_t arena_off = 0, mr_len = 0;
  uint64_t counter_init = 0, counter_final = 0, swap_init = 0, swap_final = 0;
};

// Round r > 0 of a --duration run repeats round 0's operations (kinds, sizes, offsets: the same
// memory layout) with other data: payload patterns and atomic values are salted with the round.
Schedule make_schedule(const Options& o, uint32_t qp, uint32_t round = 0) {
  Schedule s;
  const uint64_t salt = round ? mix(0x726f'756e'6400'0000ull ^ round) : 0;
  s.arena_off = (kReadOff + o.max_size + 63) / 64 * 64;
  uint64_t arena = s.arena_off;
  s.counter_init = s.counter_final = key(o.seed, qp, ~0ull - 1) ^ salt;
  s.swap_init = s.swap_final = key(o.seed, qp, ~0ull - 2) ^ salt;
  const uint64_t read_region_key = key(o.seed, qp, ~0ull);
  bool have_write = false;
  Op last_write{};
  s.ops.reserve(o.ops);
  for (uint32_t seq = 0; seq < o.ops; ++seq) {
    const uint64_t h = key(o.seed, qp, seq), h2 = mix(h);
    Op op{};
    op.data = h ^ salt;
    // Sizes: a quarter tiny (0–64 B, zero included), half up to 4 KiB, a quarter up to max_size.
    const uint32_t r = static_cast<uint32_t>(h2 >> 32);
    switch (h2 & 3) {
      case 0:
        op.size = r % 65;
        break;
      case 3:
        op.size = r % o.max_size + 1;
        break;
      default:
        op.size = r % std::min<uint32_t>(4096, o.max_size) + 1;
    }
    const unsigned pick = static_cast<unsigned>(h % 100);
    op.kind = pick < 20   ? Kind::Send
              : pick < 40 ? Kind::Write
              : pick < 55 ? Kind::WriteImm
              : pick < 75 ? Kind::Read
              : pick < 87 ? Kind::FetchAdd
                          : Kind::CmpSwap;
    switch (op.kind) {
      case Kind::Send:
        s.recv_seqs.push_back(seq);
        break;
      case Kind::WriteImm:
        s.recv_seqs.push_back(seq);
        op.imm = static_cast<uint32_t>(h2 >> 8);
        [[fallthrough]];
      case Kind::Write:
        op.off = arena;
        arena += op.size;
        if (op.size > 0) {
          have_write = true;
          last_write = op;
        }
        break;
      case Kind::Read:
        // Half the READs read back the latest WRITE (the responder must execute them in order,
        // IBTA C9-? ordering of RDMA READ after WRITE), half a piece of the read-only region.
        if (have_write && (h2 & 4)) {
          op.off = last_write.off;
          op.size = last_write.size;
          op.data = last_write.data;
        } else {
          op.size = std::max<uint32_t>(op.size, 1);
          op.off = kReadOff + (h >> 20) % (o.max_size - op.size + 1);
          op.data = read_region_key;  // the expected bytes start at pattern index off - kReadOff
        }
        break;
      case Kind::FetchAdd:
        op.size = 8;
        op.off = kCounterOff;
        op.add_cmp = h2 | 1;
        op.expect = s.counter_final;
        s.counter_final += op.add_cmp;
        break;
      case Kind::CmpSwap:
        op.size = 8;
        op.off = kSwapOff;
        op.expect = s.swap_final;
        op.swap = h2;
        // One in four compares against a wrong value: no swap, but the current value returns.
        if ((h2 & 0x30) == 0) {
          op.add_cmp = s.swap_final ^ 0x8000000000000001ull;
        } else {
          op.add_cmp = s.swap_final;
          s.swap_final = op.swap;
        }
        break;
    }
    s.ops.push_back(op);
  }
  s.mr_len = std::max<uint64_t>(arena, 4096);
  return s;
}

// Bytes the READ of `op` must return: a written slot, or a piece of the read-only region.
size_t check_read(const Op& op, const uint8_t* p, uint64_t read_region_key) {
  if (op.data != read_region_key) return check(p, op.data, op.size);
  for (size_t i = 0; i < op.size; ++i)
    if (p[i] != pattern(read_region_key, op.off - kReadOff + i)) return i;
  return op.size;
}

// ---- TCP, for the set-up and the final verdicts only ------------------------------------------

// The connection set-up is the examples' (examples/tcp_setup.h), which ends the process through
// example::die(); main() makes that a set-up failure (kExitSetup).
int tcp_connect(const Options& o) {
  return example::tcp_connect(o.server, o.tcp_port);
}
using example::Endpoint;
using example::tcp_read;
using example::tcp_write;
Endpoint exchange(int fd, const Endpoint& local) {
  return example::tcp_exchange(fd, local);
}

// ---- Verbs resources -------------------------------------------------------------------------

struct Device {
  ibv_context* ctx = nullptr;
  ibv_pd* pd = nullptr;
  ibv_port_attr port{};
  ibv_device_attr attr{};
  explicit Device(const Options& o) {
    int n = 0;
    ibv_device** list = ibv_get_device_list(&n);
    if (!list || n == 0) fail_setup("no RDMA devices (with uroce: run under uroce-run)");
    for (int i = 0; i < n && !ctx; ++i)
      if (o.device.empty() || o.device == ibv_get_device_name(list[i]))
        ctx = ibv_open_device(list[i]);
    ibv_free_device_list(list);
    if (!ctx) fail_setup("device '%s' not found or cannot be opened", o.device.c_str());
    if (ibv_query_port(ctx, 1, &port) || ibv_query_device(ctx, &attr))
      fail_setup("cannot query the device");
    if (attr.atomic_cap == IBV_ATOMIC_NONE) fail_setup("the device does not support atomics");
    pd = ibv_alloc_pd(ctx);
    if (!pd) fail_setup("ibv_alloc_pd failed");
  }
  ~Device() {
    ibv_dealloc_pd(pd);
    ibv_close_device(ctx);
  }
};

struct Buffer {
  uint8_t* p = nullptr;
  size_t len = 0;
  explicit Buffer(size_t n) : len((n + 4095) / 4096 * 4096) {
    // Page aligned: atomics need 8-byte aligned targets and results.
    p = static_cast<uint8_t*>(std::aligned_alloc(4096, len));
    if (!p) fail_setup("out of memory (%zu bytes)", len);
    std::memset(p, 0, len);
  }
  ~Buffer() { std::free(p); }
};

// One RC QP with its own CQ (so its completions can be checked in order) and one MR.
struct Conn {
  uint32_t index;
  Schedule sched;
  std::unique_ptr<Buffer> buf;
  ibv_mr* mr = nullptr;
  ibv_cq* cq = nullptr;
  ibv_qp* qp = nullptr;
  Endpoint local, remote;
  // Progress. Client: posted/completed send WRs; server: receives completed.
  uint32_t posted = 0, completed = 0;
  uint32_t recv_posted = 0, recv_done = 0;
  bool dead = false;  // an error completion arrived: the rest must be flushed
  ibv_wc_status first_error = IBV_WC_SUCCESS;
  uint32_t flushed = 0;
  bool injected = false;  // --inject-corruption has been applied

  Conn() = default;
  Conn(const Conn&) = delete;
  Conn& operator=(const Conn&) = delete;
  // On every exit path, the QP and MR go before the memory under them: a peer's retransmitted
  // request must never reach freed memory.
  ~Conn() {
    if (qp) ibv_destroy_qp(qp);
    if (cq) ibv_destroy_cq(cq);
    if (mr) ibv_dereg_mr(mr);
  }
};

void create_qp(const Options& o, Device& d, Conn& c, size_t buf_len, int access, uint32_t depth) {
  c.buf = std::make_unique<Buffer>(buf_len);
  c.mr = ibv_reg_mr(d.pd, c.buf->p, c.buf->len, access);
  if (!c.mr) fail_setup("ibv_reg_mr(%zu bytes): %s", c.buf->len, std::strerror(errno));
  c.cq = ibv_create_cq(d.ctx, static_cast<int>(2 * depth + 8), nullptr, nullptr, 0);
  if (!c.cq) fail_setup("ibv_create_cq: %s", std::strerror(errno));
  ibv_qp_init_attr init{};
  init.send_cq = init.recv_cq = c.cq;
  init.qp_type = IBV_QPT_RC;
  init.sq_sig_all = 1;  // every WR completes, so every one can be checked
  init.cap = {.max_send_wr = depth,
              .max_recv_wr = depth,
              .max_send_sge = 1,
              .max_recv_sge = 1,
              .max_inline_data = 0};
  c.qp = ibv_create_qp(d.pd, &init);
  if (!c.qp) fail_setup("ibv_create_qp: %s", std::strerror(errno));
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_INIT;
  a.port_num = 1;
  a.qp_access_flags = access & ~IBV_ACCESS_LOCAL_WRITE;
  if (ibv_modify_qp(c.qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS))
    fail_setup("QP RESET->INIT failed");
  c.local.qpn = c.qp->qp_num;
  c.local.psn = static_cast<uint32_t>(key(o.seed, c.index, 0x5053'4e00) & 0xffffff);
  c.local.rkey = c.mr->rkey;
  c.local.addr = reinterpret_cast<uintptr_t>(c.buf->p);
  c.local.len = c.buf->len;
  if (ibv_query_gid(d.ctx, 1, o.gid_index, &c.local.gid))
    fail_setup("no GID at index %d", o.gid_index);
}

void connect_qp(const Options& o, Device& d, Conn& c) {
  // As many outstanding READs/atomics as both devices offer (--rd-atomic caps it; uroce and rxe
  // offer 128, the window bounds what is outstanding anyway).
  const int offered = std::min(d.attr.max_qp_rd_atom, d.attr.max_qp_init_rd_atom);
  const uint8_t rd_atomic = static_cast<uint8_t>(
      std::clamp(o.rd_atomic ? std::min<int>(o.rd_atomic, offered) : offered, 1, 255));
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_RTR;
  a.path_mtu = o.mtu == 1024   ? IBV_MTU_1024
               : o.mtu == 2048 ? IBV_MTU_2048
               : o.mtu == 4096 ? IBV_MTU_4096
               : o.mtu == 512  ? IBV_MTU_512
               : o.mtu == 256  ? IBV_MTU_256
                               : d.port.active_mtu;
  a.dest_qp_num = c.remote.qpn;
  a.rq_psn = c.remote.psn;
  a.max_dest_rd_atomic = rd_atomic;
  a.min_rnr_timer = 1;  // 0.01 ms: the server reposts receives quickly
  a.ah_attr.is_global = 1;
  a.ah_attr.port_num = 1;
  a.ah_attr.grh.dgid = c.remote.gid;
  a.ah_attr.grh.sgid_index = static_cast<uint8_t>(o.gid_index);
  a.ah_attr.grh.hop_limit = 64;
  if (ibv_modify_qp(c.qp, &a,
                    IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                        IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER))
    fail_setup("QP INIT->RTR failed");
  a.qp_state = IBV_QPS_RTS;
  a.sq_psn = c.local.psn;
  a.timeout = static_cast<uint8_t>(o.timeout);
  a.retry_cnt = static_cast<uint8_t>(o.retry_cnt);
  a.rnr_retry = 7;  // infinite: a missing receive is flow control here, not an error
  a.max_rd_atomic = rd_atomic;
  if (ibv_modify_qp(c.qp, &a,
                    IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
                        IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC))
    fail_setup("QP RTR->RTS failed");
}

// Creating the QPs (each with its MR and CQ, to INIT) took since `t0`.
void print_created(std::chrono::steady_clock::time_point t0, uint32_t qps) {
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("setup: created %u QPs (MR, CQ, QP, RESET->INIT each) in %.3f s, %.0f QPs/s\n", qps,
              s, s > 0 ? qps / s : 0.0);
}

// Exchanges the options both sides must agree on, then every QP's endpoint, then brings the QPs
// to RTS and waits until the peer's are too.
int handshake(const Options& o, Device& d, std::vector<Conn>& conns) {
  int fd = tcp_connect(o);
  char cfg[96] = {}, peer[96] = {};
  std::snprintf(cfg, sizeof cfg, "qps=%u ops=%u max=%u seed=%" PRIu64, o.qps, o.ops, o.max_size,
                o.seed);
  tcp_write(fd, cfg, sizeof cfg);
  tcp_read(fd, peer, sizeof peer);
  peer[sizeof peer - 1] = '\0';
  if (std::strcmp(cfg, peer) != 0) fail_setup("options differ: here '%s', peer '%s'", cfg, peer);
  const auto t0 = std::chrono::steady_clock::now();
  for (Conn& c : conns) c.remote = exchange(fd, c.local);
  const auto t1 = std::chrono::steady_clock::now();
  for (Conn& c : conns) connect_qp(o, d, c);
  const auto t2 = std::chrono::steady_clock::now();
  uint8_t ready = 0;
  tcp_write(fd, &ready, 1);
  tcp_read(fd, &ready, 1);
  const double xchg = std::chrono::duration<double>(t1 - t0).count();
  const double conn = std::chrono::duration<double>(t2 - t1).count();
  std::printf(
      "setup: exchanged %zu endpoints in %.3f s; connected (INIT->RTR->RTS) in %.3f s, "
      "%.0f QPs/s\n",
      conns.size(), xchg, conn, conn > 0 ? conns.size() / conn : 0.0);
  return fd;
}

// Resident memory of this process from /proc/self/status (`field`: VmRSS, VmHWM), KiB; 0 if
// unknown. For the scale and soak runs (docs/hardening.md).
long status_kib(const char* field) {
  FILE* f = std::fopen("/proc/self/status", "r");
  if (!f) return 0;
  char line[256];
  long kib = 0;
  const size_t n = std::strlen(field);
  while (std::fgets(line, sizeof line, f))
    if (std::strncmp(line, field, n) == 0 && line[n] == ':')
      kib = std::strtol(line + n + 1, nullptr, 10);
  std::fclose(f);
  return kib;
}
void print_memory(const char* when) {
  std::printf("memory %s: rss %ld KiB, peak %ld KiB\n", when, status_kib("VmRSS"),
              status_kib("VmHWM"));
}

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

// Counts what went wrong; every kind is also reported once per QP with the details.
struct Tally {
  uint64_t ops = 0, bytes = 0, lost = 0, duplicated = 0, corrupted = 0, bad_status = 0, other = 0;
  uint64_t errors() const { return lost + duplicated + corrupted + bad_status + other; }
};

void report(const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  std::vfprintf(stderr, fmt, ap);
  std::fputc('\n', stderr);
  va_end(ap);
}

// Checks a completion's wr_id against the next expected one: behind it is a duplicate, ahead of
// it means completions were lost.
bool check_sequence(Tally& t, uint32_t qp, const char* queue, uint64_t got, uint32_t want) {
  if (got == want) return true;
  if (got < want) {
    ++t.duplicated;
    report("QP %u %s: wr_id %" PRIu64 " completed again (expected %u)", qp, queue, got, want);
  } else {
    t.lost += got - want;
    report("QP %u %s: wr_id %" PRIu64 " completed, %u expected first", qp, queue, got, want);
  }
  return false;
}

// ---- Server: the responder side; checks receives as they come, memory and counters at the end -

void post_recv(Conn& c, uint32_t slots, uint32_t slot_size) {
  const uint32_t slot = c.recv_posted % slots;
  ibv_sge sge{.addr = c.local.addr + c.sched.mr_len + static_cast<uint64_t>(slot) * slot_size,
              .length = slot_size,
              .lkey = c.mr->lkey};
  ibv_recv_wr wr{}, *bad = nullptr;
  wr.wr_id = c.recv_posted;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  if (int rc = ibv_post_recv(c.qp, &wr, &bad)) fail_setup("ibv_post_recv: %s", std::strerror(rc));
  ++c.recv_posted;
}

int run_server(const Options& o) {
  Device d(o);
  const uint32_t slots = o.window, slot_size = o.max_size;
  std::vector<Conn> conns(o.qps);
  const auto created0 = std::chrono::steady_clock::now();
  for (uint32_t q = 0; q < o.qps; ++q) {
    Conn& c = conns[q];
    c.index = q;
    c.sched = make_schedule(o, q);
    create_qp(o, d, c, c.sched.mr_len + static_cast<size_t>(slots) * slot_size,
              IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
                  IBV_ACCESS_REMOTE_ATOMIC,
              slots + 1);
    uint8_t* m = c.buf->p;
    std::memcpy(m + kCounterOff, &c.sched.counter_init, 8);
    std::memcpy(m + kSwapOff, &c.sched.swap_init, 8);
    fill(m + kReadOff, key(o.seed, q, ~0ull), o.max_size);
    const uint32_t want = static_cast<uint32_t>(c.sched.recv_seqs.size());
    while (c.recv_posted < std::min(want, slots)) post_recv(c, slots, slot_size);
  }
  print_created(created0, o.qps);
  const int fd = handshake(o, d, conns);
  std::printf("connected: %u QPs, %u operations each\n", o.qps, o.ops);
  print_memory("connected");
  std::fflush(stdout);

  Tally t;
  const auto start = Clock::now();
  uint8_t client_errors = 0;
  for (uint32_t round = 0;; ++round) {
    if (round > 0) {
      // The client asked for another round: every QP's memory and receives as at the start.
      for (Conn& c : conns) {
        c.sched = make_schedule(o, c.index, round);
        uint8_t* m = c.buf->p;
        std::memcpy(m + kCounterOff, &c.sched.counter_init, 8);
        std::memcpy(m + kSwapOff, &c.sched.swap_init, 8);
        std::memset(m + c.sched.arena_off, 0, c.sched.mr_len - c.sched.arena_off);
        c.recv_posted = c.recv_done = 0;
        const uint32_t want = static_cast<uint32_t>(c.sched.recv_seqs.size());
        while (c.recv_posted < std::min(want, slots)) post_recv(c, slots, slot_size);
      }
      const uint8_t go = 1;
      tcp_write(fd, &go, 1);
    }
    auto last_progress = Clock::now();
    double stall_limit = o.stall_timeout;
    bool client_done = false;
    size_t open = 0;
    for (Conn& c : conns) open += c.sched.recv_seqs.empty() ? 0 : 1;
    while (open > 0) {
      bool progress = false;
      for (Conn& c : conns) {
        const uint32_t want = static_cast<uint32_t>(c.sched.recv_seqs.size());
        if (c.recv_done >= want || c.dead) continue;
        ibv_wc wcs[16];
        const int n = ibv_poll_cq(c.cq, 16, wcs);
        if (n < 0) fail_setup("ibv_poll_cq failed");
        for (int i = 0; i < n; ++i) {
          const ibv_wc& wc = wcs[i];
          progress = true;
          if (wc.status != IBV_WC_SUCCESS) {
            ++t.bad_status;
            report("QP %u receive %" PRIu64 ": status %s (%d)", c.index, wc.wr_id,
                   ibv_wc_status_str(wc.status), wc.status);
            c.dead = true;
            --open;
            break;
          }
          if (!check_sequence(t, c.index, "receive", wc.wr_id, c.recv_done)) {
            c.recv_done = static_cast<uint32_t>(std::max<uint64_t>(wc.wr_id + 1, c.recv_done));
          } else {
            const Op& op = c.sched.ops[c.sched.recv_seqs[c.recv_done]];
            const uint32_t seq = c.sched.recv_seqs[c.recv_done];
            const bool imm = op.kind == Kind::WriteImm;
            const uint8_t* data = imm ? c.buf->p + op.off
                                      : c.buf->p + c.sched.mr_len +
                                            static_cast<uint64_t>(wc.wr_id % slots) * slot_size;
            const ibv_wc_opcode opcode = imm ? IBV_WC_RECV_RDMA_WITH_IMM : IBV_WC_RECV;
            if (wc.opcode != opcode || !(wc.wc_flags & IBV_WC_WITH_IMM) != !imm ||
                (imm && ntohl(wc.imm_data) != op.imm) || wc.byte_len != op.size ||
                wc.qp_num != c.local.qpn) {
              ++t.other;
              report(
                  "QP %u seq %u %s: completion opcode %d flags 0x%x imm 0x%08x len %u, expected "
                  "opcode %d imm 0x%08x len %u",
                  c.index, seq, name(op.kind), wc.opcode, wc.wc_flags, ntohl(wc.imm_data),
                  wc.byte_len, opcode, op.imm, op.size);
            }
            if (size_t at = check(data, op.data, op.size); at != op.size) {
              ++t.corrupted;
              report("QP %u seq %u %s (%u B): byte %zu is 0x%02x, expected 0x%02x", c.index, seq,
                     name(op.kind), op.size, at, data[at], pattern(op.data, at));
            }
            ++c.recv_done;
            t.bytes += op.size;
          }
          if (c.recv_posted < want) post_recv(c, slots, slot_size);
          if (c.recv_done >= want) {
            --open;
            break;
          }
        }
      }
      if (progress) {
        last_progress = Clock::now();
        continue;
      }
      // The client tells when it gives up (a QP failed), so the server need not wait for a stall.
      if (uint8_t b; !client_done && recv(fd, &b, 1, MSG_DONTWAIT) == 1) {
        if (b == kClientAborted) {
          report("server: the client gave up (a QP failed on its side); %u QPs unfinished",
                 static_cast<unsigned>(open));
          return kExitMismatch;
        }
        // Its verdict, while receives are still missing: they were lost; give them a moment.
        client_done = true;
        client_errors = b;
        last_progress = Clock::now();
        stall_limit = std::min(stall_limit, 2.0);
      }
      if (seconds_since(last_progress) > stall_limit) {
        report("server: no receive completed for %.0f s", stall_limit);
        for (Conn& c : conns)
          report("  QP %u: %u of %zu receives", c.index, c.recv_done, c.sched.recv_seqs.size());
        return kExitStall;
      }
    }

    // The client reports once all its WRs completed: every WRITE and atomic has been executed by
    // now (an ACK or response means the responder did it), so memory must hold the final state.
    if (!client_done) tcp_read(fd, &client_errors, 1);
    for (Conn& c : conns) {
      const uint8_t* m = c.buf->p;
      uint64_t counter, swap;
      std::memcpy(&counter, m + kCounterOff, 8);
      std::memcpy(&swap, m + kSwapOff, 8);
      if (counter != c.sched.counter_final || swap != c.sched.swap_final) {
        ++t.corrupted;
        report("QP %u: counter 0x%016" PRIx64 " swap word 0x%016" PRIx64 ", expected 0x%016" PRIx64
               " and 0x%016" PRIx64,
               c.index, counter, swap, c.sched.counter_final, c.sched.swap_final);
      }
      if (size_t at = check(m + kReadOff, key(o.seed, c.index, ~0ull), o.max_size);
          at != o.max_size) {
        ++t.corrupted;
        report("QP %u: the read-only region changed at byte %zu", c.index, at);
      }
      for (uint32_t seq = 0; seq < o.ops; ++seq) {
        const Op& op = c.sched.ops[seq];
        if (op.kind != Kind::Write && op.kind != Kind::WriteImm) continue;
        if (size_t at = check(m + op.off, op.data, op.size); at != op.size) {
          ++t.corrupted;
          report("QP %u seq %u %s (%u B at offset %" PRIu64
                 "): byte %zu is 0x%02x, expected 0x%02x",
                 c.index, seq, name(op.kind), op.size, op.off, at, m[op.off + at],
                 pattern(op.data, at));
        }
        t.bytes += op.kind == Kind::Write ? op.size : 0;
      }
    }
    const uint8_t verdict = t.errors() ? 1 : 0;
    tcp_write(fd, &verdict, 1);
    uint8_t more = 0;
    tcp_read(fd, &more, 1);
    if (!more || verdict || client_errors) break;
    if (round % 16 == 15) print_memory(("after round " + std::to_string(round + 1)).c_str());
  }  // rounds
  close(fd);
  const double secs = seconds_since(start);
  std::printf("server: %u QPs, receives checked, memory of %" PRIu64
              " written bytes checked, lost=%" PRIu64 " duplicated=%" PRIu64 " corrupted=%" PRIu64
              " bad_status=%" PRIu64 " other=%" PRIu64 ", %.2f s\n",
              o.qps, t.bytes, t.lost, t.duplicated, t.corrupted, t.bad_status, t.other, secs);
  if (client_errors) report("server: the client reported discrepancies");
  const bool ok = !t.errors() && !client_errors;
  print_memory("at the end");
  std::printf("%s\n", ok ? "OK" : "FAILED");
  return ok ? kExitOk : kExitMismatch;
}

// ---- Client: the requester on every QP ---------------------------------------------------------

ibv_wc_opcode wc_opcode(Kind k) {
  switch (k) {
    case Kind::Send:
      return IBV_WC_SEND;
    case Kind::Write:
    case Kind::WriteImm:
      return IBV_WC_RDMA_WRITE;
    case Kind::Read:
      return IBV_WC_RDMA_READ;
    case Kind::FetchAdd:
      return IBV_WC_FETCH_ADD;
    case Kind::CmpSwap:
      return IBV_WC_COMP_SWAP;
  }
  return IBV_WC_SEND;
}

void post_op(const Options& o, Conn& c) {
  const uint32_t seq = c.posted;
  const Op& op = c.sched.ops[seq];
  uint8_t* slot = c.buf->p + static_cast<uint64_t>(seq % o.window) * o.max_size;
  ibv_sge sge{.addr = reinterpret_cast<uintptr_t>(slot), .length = op.size, .lkey = c.mr->lkey};
  ibv_send_wr wr{}, *bad = nullptr;
  wr.wr_id = seq;
  wr.sg_list = &sge;
  wr.num_sge = op.size > 0 ? 1 : 0;
  const uint64_t raddr = c.remote.addr + op.off;
  switch (op.kind) {
    case Kind::Send:
      fill(slot, op.data, op.size);
      wr.opcode = IBV_WR_SEND;
      break;
    case Kind::Write:
    case Kind::WriteImm:
      fill(slot, op.data, op.size);
      if (o.inject_corruption && c.index == 0 && op.kind == Kind::Write && op.size > 0 &&
          !c.injected) {
        slot[op.size / 2] ^= 0x40;
        c.injected = true;
      }
      wr.opcode = op.kind == Kind::Write ? IBV_WR_RDMA_WRITE : IBV_WR_RDMA_WRITE_WITH_IMM;
      wr.imm_data = htonl(op.imm);
      wr.wr.rdma = {.remote_addr = raddr, .rkey = c.remote.rkey};
      break;
    case Kind::Read:
      std::memset(slot, 0, op.size);  // so bytes the READ fails to place show
      wr.opcode = IBV_WR_RDMA_READ;
      wr.wr.rdma = {.remote_addr = raddr, .rkey = c.remote.rkey};
      break;
    case Kind::FetchAdd:
    case Kind::CmpSwap:
      std::memset(slot, 0, 8);
      wr.opcode =
          op.kind == Kind::FetchAdd ? IBV_WR_ATOMIC_FETCH_AND_ADD : IBV_WR_ATOMIC_CMP_AND_SWP;
      wr.wr.atomic = {
          .remote_addr = raddr, .compare_add = op.add_cmp, .swap = op.swap, .rkey = c.remote.rkey};
      break;
  }
  if (int rc = ibv_post_send(c.qp, &wr, &bad))
    fail_setup("QP %u: ibv_post_send(seq %u): %s", c.index, seq, std::strerror(rc));
  ++c.posted;
}

// Checks one send completion in order; returns false once the QP has failed.
void complete_op(const Options& o, Conn& c, const ibv_wc& wc, Tally& t) {
  if (c.dead) {
    // After the first error every outstanding WR must come back flushed, still in order
    // (IBTA 10.8.3.3 / C10-? : WRs of a QP in the error state complete with a flush error).
    check_sequence(t, c.index, "send (flushing)", wc.wr_id, c.completed);
    if (wc.status != IBV_WC_WR_FLUSH_ERR) {
      ++t.bad_status;
      report("QP %u seq %" PRIu64 ": status %s after the QP failed, expected a flush", c.index,
             wc.wr_id, ibv_wc_status_str(wc.status));
    }
    ++c.flushed;
    c.completed = static_cast<uint32_t>(std::max<uint64_t>(wc.wr_id + 1, c.completed + 1));
    return;
  }
  if (!check_sequence(t, c.index, "send", wc.wr_id, c.completed)) {
    c.completed = static_cast<uint32_t>(std::max<uint64_t>(wc.wr_id + 1, c.completed));
    return;
  }
  const uint32_t seq = c.completed++;
  const Op& op = c.sched.ops[seq];
  if (wc.status != IBV_WC_SUCCESS) {
    c.dead = true;
    c.first_error = wc.status;
    if (wc.status != IBV_WC_RETRY_EXC_ERR) ++t.bad_status;
    report("QP %u seq %u %s: status %s (%d), vendor error 0x%x", c.index, seq, name(op.kind),
           ibv_wc_status_str(wc.status), wc.status, wc.vendor_err);
    return;
  }
  if (wc.opcode != wc_opcode(op.kind) || wc.qp_num != c.local.qpn) {
    ++t.other;
    report("QP %u seq %u %s: completion opcode %d qp 0x%x, expected %d qp 0x%x", c.index, seq,
           name(op.kind), wc.opcode, wc.qp_num, wc_opcode(op.kind), c.local.qpn);
  }
  const uint8_t* slot = c.buf->p + static_cast<uint64_t>(seq % o.window) * o.max_size;
  ++t.ops;
  t.bytes += op.size;
  if (op.kind == Kind::Read) {
    if (wc.byte_len != op.size) {
      ++t.other;
      report("QP %u seq %u READ: byte_len %u, expected %u", c.index, seq, wc.byte_len, op.size);
    }
    if (size_t at = check_read(op, slot, key(o.seed, c.index, ~0ull)); at != op.size) {
      ++t.corrupted;
      report("QP %u seq %u READ (%u B at offset %" PRIu64 "): byte %zu is 0x%02x", c.index, seq,
             op.size, op.off, at, slot[at]);
    }
  } else if (op.kind == Kind::FetchAdd || op.kind == Kind::CmpSwap) {
    uint64_t got;
    std::memcpy(&got, slot, 8);
    if (got != op.expect) {
      ++t.corrupted;
      report("QP %u seq %u %s returned 0x%016" PRIx64 ", expected 0x%016" PRIx64, c.index, seq,
             name(op.kind), got, op.expect);
    }
  }
}

int run_client(const Options& o) {
  Device d(o);
  std::vector<Conn> conns(o.qps);
  const auto created0 = std::chrono::steady_clock::now();
  for (uint32_t q = 0; q < o.qps; ++q) {
    conns[q].index = q;
    conns[q].sched = make_schedule(o, q);
    create_qp(o, d, conns[q], static_cast<size_t>(o.window) * o.max_size, IBV_ACCESS_LOCAL_WRITE,
              o.window);
  }
  print_created(created0, o.qps);
  const int fd = handshake(o, d, conns);
  for (Conn& c : conns)
    if (c.remote.len < c.sched.mr_len)
      fail_setup("QP %u: the server registered %" PRIu64 " bytes, the schedule needs %" PRIu64,
                 c.index, c.remote.len, c.sched.mr_len);
  std::printf("connected: %u QPs, %u operations each\n", o.qps, o.ops);
  print_memory("connected");
  std::fflush(stdout);

  Tally t;
  const auto start = Clock::now();
  uint32_t rounds = 0;
  bool ok = false;
  for (uint32_t round = 0;; ++round) {
    if (round > 0) {
      for (Conn& c : conns) {
        c.sched = make_schedule(o, c.index, round);
        c.posted = c.completed = 0;
      }
      uint8_t go = 0;
      tcp_read(fd, &go, 1);  // the server has reset its memory and posted the receives
    }
    auto last_progress = Clock::now();
    Clock::time_point first_error{}, last_success = Clock::now();
    size_t open = conns.size();
    while (open > 0) {
      bool progress = false;
      for (Conn& c : conns) {
        if (c.completed >= o.ops) continue;
        while (!c.dead && c.posted < o.ops && c.posted - c.completed < o.window) post_op(o, c);
        ibv_wc wcs[16];
        const int n = ibv_poll_cq(c.cq, 16, wcs);
        if (n < 0) fail_setup("ibv_poll_cq failed");
        for (int i = 0; i < n; ++i) {
          const bool was_dead = c.dead;
          complete_op(o, c, wcs[i], t);
          if (!c.dead) last_success = Clock::now();
          if (c.dead && !was_dead && first_error == Clock::time_point{}) first_error = Clock::now();
        }
        progress |= n > 0;
        // A failed QP is finished once everything it had posted has come back.
        if (c.dead && c.completed >= c.posted) c.completed = o.ops;
        if (c.completed >= o.ops) --open;
      }
      if (progress) {
        last_progress = Clock::now();
      } else if (seconds_since(last_progress) > o.stall_timeout) {
        report("client: no completion for %.0f s", o.stall_timeout);
        for (Conn& c : conns)
          report("  QP %u: %u posted, %u completed", c.index, c.posted, c.completed);
        return kExitStall;
      }
    }
    const double secs = seconds_since(start);

    uint32_t retry_exc = 0, other_fail = 0, flushed = 0;
    for (Conn& c : conns) {
      flushed += c.flushed;
      if (c.first_error == IBV_WC_RETRY_EXC_ERR)
        ++retry_exc;
      else if (c.dead)
        ++other_fail;
    }
    std::printf("client: %" PRIu64 " ops, %" PRIu64 " bytes, lost=%" PRIu64 " duplicated=%" PRIu64
                " corrupted=%" PRIu64 " bad_status=%" PRIu64 " other=%" PRIu64
                ", %.2f s, %.1f MB/s, %.0f ops/s\n",
                t.ops, t.bytes, t.lost, t.duplicated, t.corrupted, t.bad_status, t.other, secs,
                t.bytes / secs / 1e6, t.ops / secs);
    if (retry_exc > 0) {
      // The peer stopped answering: each QP's oldest outstanding WR ran out of retries and the
      // rest were flushed. This is the expected outcome when the server is killed.
      std::printf(
          "PEER LOST: %u of %u QPs ended with IBV_WC_RETRY_EXC_ERR, %u WRs flushed with "
          "IBV_WC_WR_FLUSH_ERR; the first error came %.3f s after the last success, the last "
          "QP drained %.3f s after it\n",
          retry_exc, o.qps, flushed,
          std::chrono::duration<double>(first_error - last_success).count(),
          seconds_since(first_error));
      // Best effort: a server still alive (its replies were lost, not it) stops waiting.
      const uint8_t abort = kClientAborted;
      (void)!send(fd, &abort, 1, MSG_NOSIGNAL);
      close(fd);
      const bool clean = t.errors() == 0 && other_fail == 0;
      if (!clean) std::printf("FAILED: discrepancies besides the lost peer\n");
      return clean ? kExitPeerLost : kExitMismatch;
    }
    // Nothing to tell the server if a QP failed some other way: it will stall and say so.
    const uint8_t errors = t.errors() ? 1 : 0;
    tcp_write(fd, &errors, 1);
    uint8_t server_verdict = 1;
    tcp_read(fd, &server_verdict, 1);
    if (server_verdict) report("client: the server found discrepancies");
    ok = !t.errors() && !server_verdict;
    ++rounds;
    const uint8_t more = ok && seconds_since(start) < o.duration;
    tcp_write(fd, &more, 1);
    if (!more) break;
    if (round % 16 == 15) print_memory(("after round " + std::to_string(round + 1)).c_str());
  }  // rounds
  close(fd);
  if (rounds > 1) std::printf("client: %u rounds in %.1f s\n", rounds, seconds_since(start));
  print_memory("at the end");
  std::printf("%s\n", ok ? "OK" : "FAILED");
  return ok ? kExitOk : kExitMismatch;
}

}  // namespace

int main(int argc, char** argv) {
  example::die_style() = {"uroce_stress: error: ", kExitSetup};
  CLI::App app{"uroce_stress: many RC QPs, a mix of all operations, every byte checked"};
  Options o;
  app.add_option("-d,--device", o.device, "RDMA device (default: the first one)");
  app.add_option("-p,--port", o.tcp_port, "TCP port for the set-up")->capture_default_str();
  app.add_option("-g,--gid-index", o.gid_index, "local GID index")->capture_default_str();
  app.add_option("--qps", o.qps, "RC QPs")->check(CLI::Range(1, 16384))->capture_default_str();
  app.add_option("--ops", o.ops, "operations per QP")
      ->check(CLI::Range(1, 10'000'000))
      ->capture_default_str();
  app.add_option("--window", o.window, "outstanding WRs per QP")
      ->check(CLI::Range(1, 1024))
      ->capture_default_str();
  app.add_option("--max-size", o.max_size, "largest message in bytes")
      ->check(CLI::Range(64, 1 << 22))
      ->capture_default_str();
  app.add_option("--rd-atomic", o.rd_atomic,
                 "outstanding READs/atomics per QP (0: what the devices offer)")
      ->check(CLI::Range(0, 255))
      ->capture_default_str();
  app.add_option("--duration", o.duration,
                 "client: repeat the schedule with fresh data until this many seconds passed")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_option("--seed", o.seed, "seed of the schedule")->capture_default_str();
  app.add_option("--mtu", o.mtu, "path MTU (0: the port's active MTU)")
      ->check(CLI::IsMember({0, 256, 512, 1024, 2048, 4096}))
      ->capture_default_str();
  app.add_option("--timeout", o.timeout, "local ACK timeout exponent: 4.096 us * 2^N")
      ->check(CLI::Range(1, 31))
      ->capture_default_str();
  app.add_option("--retry-cnt", o.retry_cnt, "transport retries before RETRY_EXC_ERR")
      ->check(CLI::Range(0, 7))
      ->capture_default_str();
  app.add_option("--stall-timeout", o.stall_timeout, "give up after this many seconds idle")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_flag("--inject-corruption", o.inject_corruption,
               "client: corrupt one WRITE on purpose (shows that the checks can fail)");
  app.add_option("server", o.server, "server address (omit to run as the server)");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);
    return rc == 0 ? 0 : kExitSetup;
  }
  setvbuf(stdout, nullptr, _IOLBF, 0);
  return o.is_server() ? run_server(o) : run_client(o);
}

#include "tools/perf/datapath.h"

#include <poll.h>
#include <time.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

namespace uroce::perf {

uint64_t now_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<uint64_t>(ts.tv_nsec);
}

namespace {

// splitmix64 (Steele, Lea, Flood 2014): a cheap keyed generator with full 64-bit avalanche.
uint64_t mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

uint64_t pattern_word(bool client_data, int qp, uint64_t word) {
  const uint64_t key = (client_data ? 0xc11e47ull : 0x5e77e5ull) << 40 ^ static_cast<uint64_t>(qp)
                                                                             << 20;
  return mix(key ^ mix(word));
}

}  // namespace

uint8_t pattern_byte(bool client_data, int qp, uint64_t i) {
  return static_cast<uint8_t>(pattern_word(client_data, qp, i / 8) >> (8 * (i % 8)));
}

void fill_pattern(uint8_t* p, uint64_t n, bool client_data, int qp) {
  uint64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t w = pattern_word(client_data, qp, i / 8);
    std::memcpy(p + i, &w, 8);  // little-endian: byte i % 8 is bits 8*(i%8)
  }
  for (; i < n; ++i) p[i] = pattern_byte(client_data, qp, i);
}

uint64_t find_mismatch(const uint8_t* p, uint64_t n, bool client_data, int qp) {
  uint64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t w = pattern_word(client_data, qp, i / 8), got;
    std::memcpy(&got, p + i, 8);
    if (got != w) break;
  }
  for (; i < n; ++i)
    if (p[i] != pattern_byte(client_data, qp, i)) return i;
  return n;
}

int poll_or_wait(CqCtx& c, int n, ibv_wc* wc, bool events, int timeout_ms) {
  int got = ibv_poll_cq(c.cq, n, wc);
  if (got != 0 || !events) return got;
  // Arm, then look again: a completion that arrived before the arming raises no event.
  if (ibv_req_notify_cq(c.cq, 0)) return -1;
  got = ibv_poll_cq(c.cq, n, wc);
  if (got != 0) return got;
  pollfd pfd{c.channel->fd, POLLIN, 0};
  if (poll(&pfd, 1, timeout_ms) > 0) {
    ibv_cq* cq = nullptr;
    void* cq_ctx = nullptr;
    if (ibv_get_cq_event(c.channel, &cq, &cq_ctx) == 0 && ++c.unacked_events >= 64) {
      ibv_ack_cq_events(c.cq, c.unacked_events);
      c.unacked_events = 0;
    }
  }
  return ibv_poll_cq(c.cq, n, wc);
}

int post_counted(Resources& r, QpCtx& q, SendWr* wrs, int n, int sig, bool last) {
  if (q.sq_posted + static_cast<uint64_t>(n) - q.sq_done > static_cast<uint64_t>(q.sq_depth))
    return ENOMEM;
  uint32_t unsignaled = q.sq_unsignaled;
  for (int i = 0; i < n; ++i) {
    ++unsignaled;
    const bool signaled = unsignaled >= static_cast<uint32_t>(sig) || (last && i == n - 1);
    wrs[i].signaled = signaled;
    wrs[i].wr_id = make_wr_id(q.index, WrTag::kSend, signaled ? unsignaled : 0);
    if (signaled) unsignaled = 0;
  }
  if (int rc = r.post(q, wrs, n)) return rc;
  q.sq_posted += static_cast<uint64_t>(n);
  q.sq_unsignaled = unsignaled;
  return 0;
}

bool fail_run(const RunSpec& s, WorkerResult* out, std::string why) {
  if (out->error.empty()) out->error = std::move(why);
  s.ctl->abort.store(true);
  return false;
}

void check_failure(WorkerResult* out, std::string why) {
  if (!out->check_failures++) out->check_error = std::move(why);
}

bool take_send(const RunSpec& s, QpCtx& q, const ibv_wc& wc, WorkerResult* out) {
  const int slot = static_cast<int>(wr_value(wc.wr_id));
  if (s.check) {
    const uint64_t grh = s.o->conn == Conn::kUD ? kUdGrh : 0;  // UD: the GRH area comes first
    const uint8_t* data = q.recv + static_cast<size_t>(slot) * q.recv_slot_size + grh;
    const std::string qp = "QP " + std::to_string(q.index) + ": ";
    if (wc.byte_len != s.size + grh) {
      check_failure(out, qp + "received " + std::to_string(wc.byte_len - grh) +
                             " bytes, expected " + std::to_string(s.size));
    } else if (uint64_t bad = find_mismatch(data, s.size, !s.client, q.index); bad < s.size) {
      check_failure(out, qp + "received data differs at byte " + std::to_string(bad));
    } else {
      out->checked_bytes += s.size;
    }
  }
  if (int rc = s.res->post_recv(q, slot))
    return fail_run(
        s, out,
        "QP " + std::to_string(q.index) + ": reposting a receive failed: " + std::strerror(rc));
  return true;
}

std::string describe_wc_error(int qp, const ibv_wc& wc) {
  char buf[256];
  std::snprintf(buf, sizeof buf, "QP %d (0x%x): a %s work request failed: %s (vendor error 0x%x)",
                qp, wc.qp_num, wr_tag(wc.wr_id) == WrTag::kRecv ? "receive" : "send",
                ibv_wc_status_str(wc.status), wc.vendor_err);
  return buf;
}

}  // namespace uroce::perf

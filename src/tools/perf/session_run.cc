// One run of one message size for uroce-perf (session_impl.h): the polling threads that post and
// complete (datapath.h), the sent/result exchange that lets each side know what the other did,
// the figures collected from the workers, and --check's verification of every byte that landed.
// Apart from the set-up and the sequences (session.cc): this is what happens between two
// handshakes.
#include <algorithm>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <thread>

#include "tools/perf/session_impl.h"

namespace uroce::perf::session_detail {
namespace {

void put_bw(Fields& f, const std::string& p, const BwSummary& s) {
  f[p + ".msgs"] = std::to_string(s.msgs);
  f[p + ".bytes"] = std::to_string(s.bytes);
  f[p + ".seconds"] = num(s.seconds);
  f[p + ".avg"] = num(s.avg);
  f[p + ".peak"] = num(s.peak);
}

BwSummary get_bw(const Fields& f, const std::string& p) {
  BwSummary s;
  s.msgs = to_u64(f, p + ".msgs");
  s.bytes = to_u64(f, p + ".bytes");
  s.seconds = to_double(f, p + ".seconds");
  s.avg = to_double(f, p + ".avg");
  s.peak = to_double(f, p + ".peak");
  return s;
}

void put_lat(Fields& f, const LatSummary& s) {
  f["lat.count"] = std::to_string(s.count);
  for (auto [k, v] : {std::pair{"min", s.min},
                      {"max", s.max},
                      {"mean", s.mean},
                      {"stdev", s.stdev},
                      {"p50", s.p50},
                      {"p90", s.p90},
                      {"p99", s.p99},
                      {"p999", s.p999},
                      {"seconds", s.seconds}})
    f[std::string("lat.") + k] = num(v);
}

LatSummary get_lat(const Fields& f) {
  LatSummary s;
  s.count = to_u64(f, "lat.count");
  s.min = to_double(f, "lat.min");
  s.max = to_double(f, "lat.max");
  s.mean = to_double(f, "lat.mean");
  s.stdev = to_double(f, "lat.stdev");
  s.p50 = to_double(f, "lat.p50");
  s.p90 = to_double(f, "lat.p90");
  s.p99 = to_double(f, "lat.p99");
  s.p999 = to_double(f, "lat.p999");
  s.seconds = to_double(f, "lat.seconds");
  return s;
}

}  // namespace

SizeResult Session::run_size(uint64_t size) {
  const int q = res_.num_qps();
  SizeResult r;
  r.size = size;
  RunControl ctl;
  ctl.peer_sent.assign(static_cast<size_t>(q), 0);
  RunSpec s;
  s.o = &o_;
  s.res = &res_;
  s.size = size;
  s.iters = o_.iters;
  s.check = o_.check;
  s.client = client_;
  s.ctl = &ctl;
  switch (fam_) {
    case Family::kRdmaBw:
      s.initiator = client_ || o_.bidirectional;
      break;
    case Family::kSendBw:
      s.initiator = client_ || o_.bidirectional;
      s.responder = !client_ || o_.bidirectional;
      break;
    case Family::kSendLat:
      s.initiator = client_;
      s.responder = !client_;
      break;
    case Family::kWriteLat:
      // perftest's write_lat starts on the server: it writes first, the client answers.
      s.initiator = !client_;
      s.responder = client_;
      break;
    case Family::kRdmaLat:
      s.initiator = client_;
      break;
  }
  // A receiver of unreliable SENDs cannot count on every message: it learns the count (S).
  const bool lossy = fam_ == Family::kSendBw && o_.conn != Conn::kRC;
  s.exact_counts = o_.duration == 0 && !(ext_ && lossy);

  std::vector<WorkerResult> wr(static_cast<size_t>(o_.threads));
  for (WorkerResult& w : wr) {
    w.sent.assign(static_cast<size_t>(q), 0);
    w.received.assign(static_cast<size_t>(q), 0);
  }
  std::vector<std::thread> threads;
  if (s.initiator || s.responder) {
    ctl.initiators_running.store(s.initiator ? o_.threads : 0);
    if (o_.duration) s.deadline = now_ns() + static_cast<uint64_t>(o_.duration) * 1000000000ull;
    for (int t = 0; t < o_.threads; ++t)
      threads.emplace_back([&, t] {
        if (o_.latency())
          run_latency_worker(s, t, &wr[static_cast<size_t>(t)]);
        else
          run_bandwidth_worker(s, t, &wr[static_cast<size_t>(t)]);
      });
  }
  auto wait_initiators = [&] {
    for (int v; (v = ctl.initiators_running.load(std::memory_order_acquire)) != 0;)
      ctl.initiators_running.wait(v, std::memory_order_acquire);
  };
  // What this side's initiators sent; a responder's counts are not final (nor safe to read)
  // before its worker ends, and nobody needs them: it answers what the initiator sent.
  auto sent_fields = [&] {
    Fields f;
    for (int i = 0; i < q; ++i) {
      uint64_t n = 0;
      if (s.initiator)
        for (const WorkerResult& w : wr) n += w.sent[static_cast<size_t>(i)];
      f["sent." + std::to_string(i)] = std::to_string(n);
    }
    return f;
  };
  auto peer_done = [&](const Fields& f) {
    for (int i = 0; i < q; ++i)
      ctl.peer_sent[static_cast<size_t>(i)] = to_u64(f, "sent." + std::to_string(i));
    ctl.peer_done.store(true, std::memory_order_release);
  };
  if (ext_) {
    // S, first half: each side's initiators are done; receivers may stop once they have what
    // the peer sent.
    if (client_) {
      wait_initiators();
      ch_->send_fields(sent_fields());
      peer_done(ch_->receive_fields());
    } else {
      peer_done(ch_->receive_fields());
      wait_initiators();
      ch_->send_fields(sent_fields());
    }
  }
  for (std::thread& t : threads) t.join();
  for (const WorkerResult& w : wr)
    if (!w.error.empty()) fatal("%s%s", w.error.c_str(), counters_hint().c_str());

  collect(r, wr, s);
  if (!r.iters) {  // a side that initiated nothing (-D): the peer's count
    uint64_t n = 0;
    for (uint64_t v : ctl.peer_sent) n += v;
    r.iters = n / static_cast<uint64_t>(q);
  }
  if (o_.check) verify(r, wr, s, ctl.peer_sent);
  if (ext_) {
    // S, second half: the figures and verdicts.
    Fields f;
    put_bw(f, "tx", r.tx);
    put_bw(f, "rx", r.rx);
    put_lat(f, r.lat);
    f["lost"] = std::to_string(r.lost);
    f["check.done"] = r.check.done ? "1" : "0";
    f["check.bytes"] = std::to_string(r.check.bytes);
    f["check.failures"] = std::to_string(r.check.failures);
    f["check.first"] = one_line(r.check.first);
    Fields t = ch_->exchange_fields(f);
    r.have_remote = true;
    r.remote_tx = get_bw(t, "tx");
    r.remote_rx = get_bw(t, "rx");
    r.remote_lat = get_lat(t);
    r.remote_lost = to_u64(t, "lost");
    r.remote_check.done = to_str(t, "check.done") == "1";
    r.remote_check.bytes = to_u64(t, "check.bytes");
    r.remote_check.failures = to_u64(t, "check.failures");
    r.remote_check.first = to_str(t, "check.first");
  }
  return r;
}

void Session::collect(SizeResult& r, const std::vector<WorkerResult>& wr, const RunSpec& s) {
  const uint64_t op = o_.verb == Verb::kAtomic ? 8 : r.size;
  uint64_t tx0 = 0, tx1 = 0, rx0 = 0, rx1 = 0, sent = 0, received = 0;
  std::vector<std::pair<uint64_t, uint32_t>> txm, rxm;
  for (const WorkerResult& w : wr) {
    if (w.tx_first && (!tx0 || w.tx_first < tx0)) tx0 = w.tx_first;
    tx1 = std::max(tx1, w.tx_last);
    if (w.rx_first && (!rx0 || w.rx_first < rx0)) rx0 = w.rx_first;
    rx1 = std::max(rx1, w.rx_last);
    txm.insert(txm.end(), w.tx_marks.begin(), w.tx_marks.end());
    rxm.insert(rxm.end(), w.rx_marks.begin(), w.rx_marks.end());
    for (uint64_t n : w.sent) sent += n;
    for (uint64_t n : w.received) received += n;
    r.hist.merge(w.latency);
  }
  r.iters = o_.iters ? o_.iters : sent / static_cast<uint64_t>(o_.qps);
  if (!o_.latency()) {
    r.tx = summarize_bw(op, tx0, tx1, std::move(txm), !o_.no_peak);
    r.rx = summarize_bw(op, rx0, rx1, std::move(rxm), !o_.no_peak);
  } else {
    const bool initiator = s.initiator;
    const uint64_t a = initiator ? tx0 : rx0, b = initiator ? tx1 : rx1;
    r.lat = summarize_lat(r.hist, b > a ? static_cast<double>(b - a) / 1e9 : 0);
    if (!o_.iters)
      r.iters = initiator ? sent / static_cast<uint64_t>(o_.qps)
                          : received / static_cast<uint64_t>(o_.qps);
  }
  if (fam_ == Family::kSendBw && s.responder && ext_) {
    uint64_t expected = 0;
    for (uint64_t n : s.ctl->peer_sent) expected += n;
    r.lost = expected > received ? expected - received : 0;
  }
  for (const WorkerResult& w : wr) {
    r.check.bytes += w.checked_bytes;
    if (w.check_failures && r.check.failures == 0) r.check.first = w.check_error;
    r.check.failures += w.check_failures;
    if (w.checked_bytes || w.check_failures) r.check.done = true;
  }
}

void Session::check_failure(SizeResult& r, const std::string& why) {
  if (!r.check.failures++) r.check.first = why;
}

void Session::verify(SizeResult& r, const std::vector<WorkerResult>& wr, const RunSpec& spec,
                     const std::vector<uint64_t>& peer_sent) {
  const uint64_t size = r.size;
  const bool peer_data = !client_;  // what the peer sent was written with its own pattern key
  for (int i = 0; i < res_.num_qps(); ++i) {
    QpCtx& q = res_.qp(i);
    const std::string qp = "QP " + std::to_string(i) + ": ";
    uint64_t my_sent = 0, my_received = 0;
    for (const WorkerResult& w : wr) {
      my_sent += w.sent[static_cast<size_t>(i)];
      my_received += w.received[static_cast<size_t>(i)];
    }
    const uint64_t theirs = peer_sent[static_cast<size_t>(i)];
    switch (fam_) {
      case Family::kSendBw:
        if (target_side() && o_.conn == Conn::kRC && my_received != theirs)
          check_failure(r, qp + std::to_string(my_received) + " of " + std::to_string(theirs) +
                               " messages arrived over RC");
        break;
      case Family::kSendLat:
        break;  // every message was verified as it arrived
      case Family::kWriteLat: {
        if (size > 1) verify_region(r, q.target, size - 1, peer_data, i, qp + "written data");
        // Both directions end with the initiator's last round: every ping has its pong.
        const uint8_t want = static_cast<uint8_t>(spec.initiator ? my_sent : theirs);
        if (q.target[size - 1] != want)
          check_failure(r, qp + "the last written byte is " + std::to_string(q.target[size - 1]) +
                               ", expected round " + std::to_string(want));
        else
          r.check.bytes += 1;
        r.check.done = true;
        std::memset(q.target, 0, size);
        q.src[size - 1] = pattern_byte(client_, i, size - 1);
        break;
      }
      case Family::kRdmaBw:
      case Family::kRdmaLat:
        if (o_.verb == Verb::kWrite && target_side()) {
          if (o_.conn != Conn::kRC) await_region(q.target, size, peer_data, i);
          verify_region(r, q.target, size, peer_data, i, qp + "written data");
          std::memset(q.target, 0, size);
        } else if (o_.verb == Verb::kRead && (client_ || o_.bidirectional)) {
          verify_region(r, q.src, size, peer_data, i, qp + "read data");
          std::memset(q.src, 0, size);
        } else if (o_.verb == Verb::kAtomic) {
          uint64_t v;
          if (target_side()) {
            std::memcpy(&v, q.target, 8);
            if (v != theirs)
              check_failure(r, qp + "the target holds " + std::to_string(v) + " after " +
                                   std::to_string(theirs) + " atomic operations");
            else
              r.check.bytes += 8;
            r.check.done = true;
            std::memset(q.target, 0, 8);
          }
          if ((client_ || o_.bidirectional) && !o_.latency() && my_sent) {
            std::memcpy(&v, q.src, 8);
            if (v != my_sent - 1)
              check_failure(r, qp + "the last atomic returned " + std::to_string(v) +
                                   ", expected " + std::to_string(my_sent - 1));
            else
              r.check.bytes += 8;
            r.check.done = true;
          }
        }
        break;
    }
  }
}

void Session::verify_region(SizeResult& r, const uint8_t* p, uint64_t n, bool client_data, int qp,
                            const std::string& what) {
  r.check.done = true;
  const uint64_t bad = find_mismatch(p, n, client_data, qp);
  if (bad < n)
    check_failure(r, what + " differs at byte " + std::to_string(bad) + " of " + std::to_string(n));
  else
    r.check.bytes += n;
}

void Session::await_region(const uint8_t* p, uint64_t n, bool client_data, int qp) {
  const uint64_t give_up = now_ns() + static_cast<uint64_t>(o_.stall_timeout * 1e9);
  while (find_mismatch(p, n, client_data, qp) < n && now_ns() < give_up)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
}

}  // namespace uroce::perf::session_detail

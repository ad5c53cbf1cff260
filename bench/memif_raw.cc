// The raw DPDK baseline for uroce over net_memif (bench/dpdk.sh): two processes joined by one
// memif, one busy-polling thread each, no transport at all.
//   memif_raw pingpong --role server|client --socket PATH [-s SIZE] [-n ITERS] [--bsize B]
//                      [--frames K] [--touch BYTES]
//   memif_raw bulk     --role server|client --socket PATH [-s FRAME] [-n FRAMES] [--bsize B]
//                      [--icrc] [--place]
// pingpong: the client sends a frame, the server echoes it; prints "N iters in S seconds = U
// usec/iter" (ibv_rc_pingpong's format) on the client. With --frames 2 each turn is two frames
// in one burst each way, as a reliable-connected exchange moves them: an RC SEND round trip is
// four frames (each message and its ACK, the ACK leaving in the reply's burst), so this is the
// same PMD work as uroce's ibv_rc_pingpong with no transport at all. --touch BYTES writes one
// byte in each cache line of a buffer that large at every turn on both sides, standing in for
// the memory a transport's own work touches between bursts: the PMD's lines it evicts make the
// next burst's calls dearer (docs/performance.md measures uroce's). bulk: the client sends frames
// as fast as the ring takes them, the server counts; the server prints "N bytes in S seconds = R
// MB/sec". bulk --icrc adds the one per-byte pass RoCEv2 asks of every software implementation:
// the client computes each frame's ICRC (uroce's own routine, wire::icrc, over the frame as a
// RoCEv2 packet after its 42-byte Ethernet/IPv4/UDP headers) and stores it in the last four
// bytes, the server computes it again and counts frames that disagree. --place (server) adds the
// other: the payload is copied into a 64 KiB buffer, as an RDMA WRITE lands in its memory region.
// Together they are the ceiling of a software RoCE stream over memif on this host — raw memif's
// rate less only what the wire format and the verbs semantics demand (docs/performance.md). The
// EAL runs as uroce runs it (no hugepages, one lcore, no PCI scan), and as uroce does
// (dpdk_port/eal.cc) the process gets back the CPU affinity rte_eal_init took: `-l 0` pins the
// main thread to CPU 0, and two busy-polling processes pinned to one CPU make every round trip
// wait for a scheduler time slice (milliseconds: a 20 000-iteration ping-pong then takes minutes).
// Frames above 1514 bytes (jumbo, up to 9014) want --bsize (memif's ring buffer size, 2048 by
// default) at least as large, as uroce's own port does for its jumbo MTU.
#include <rte_eal.h>
#include <rte_ethdev.h>
#include <rte_mbuf.h>

#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <span>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "wire/icrc.h"

namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"raw DPDK memif baseline"};
  std::string mode, role, socket;
  unsigned size = 64, iters = 100000, bsize = 0, frames = 1, touch = 0;
  app.add_option("mode", mode, "pingpong or bulk")
      ->required()
      ->check(CLI::IsMember({"pingpong", "bulk"}));
  app.add_option("--role", role, "server or client")
      ->required()
      ->check(CLI::IsMember({"server", "client"}));
  app.add_option("--socket", socket, "memif socket path")->required();
  app.add_option("-s", size, "frame bytes")->check(CLI::Range(60u, 9014u));
  app.add_option("--bsize", bsize, "memif ring buffer bytes (memif's default: 2048)")
      ->check(CLI::Range(128u, 16384u));
  app.add_option("-n", iters, "round trips (pingpong) or frames (bulk)")
      ->check(CLI::PositiveNumber);
  app.add_option("--frames", frames, "pingpong: frames each way per round trip, in one burst")
      ->check(CLI::Range(1u, 32u));
  app.add_option("--touch", touch, "pingpong: bytes of other memory written at every turn")
      ->check(CLI::Range(0u, 1u << 30));
  bool with_icrc = false, place = false;
  std::string routine = "auto";
  app.add_flag("--icrc", with_icrc, "bulk: compute each frame's ICRC on both sides");
  app.add_option("--icrc-routine", routine, "the CRC-32 routine, as UROCE_ICRC names it")
      ->check(CLI::IsMember({"auto", "pclmul", "isal", "zlib"}));
  app.add_flag("--place", place, "bulk server: copy each frame's payload into a 64 KiB buffer");
  CLI11_PARSE(app, argc, argv);
  if (!uroce::wire::select_icrc_routine(*uroce::wire::parse_icrc_routine(routine))) {
    std::fprintf(stderr, "the ICRC routine '%s' is not available here\n", routine.c_str());
    return 1;
  }

  std::string prefix = "--file-prefix=memifraw" + std::to_string(getpid());
  std::vector<std::string> args = {"memif_raw",
                                   "--no-huge",
                                   "-m",
                                   "256",
                                   "--no-pci",
                                   "--no-telemetry",
                                   "-l",
                                   "0",
                                   "--no-shconf",
                                   prefix,
                                   "--log-level=lib.eal:error"};
  std::vector<char*> av;
  for (auto& a : args) av.push_back(a.data());
  cpu_set_t affinity;
  const bool have_affinity = sched_getaffinity(0, sizeof affinity, &affinity) == 0;
  if (rte_eal_init(static_cast<int>(av.size()), av.data()) < 0) {
    std::fprintf(stderr, "EAL init failed\n");
    return 1;
  }
  if (have_affinity) sched_setaffinity(0, sizeof affinity, &affinity);
  rmdir(rte_eal_get_runtime_dir());
  std::string dev = "net_memif0,role=" + role + ",socket=" + socket + ",socket-abstract=no";
  if (bsize != 0) dev += ",bsize=" + std::to_string(bsize);
  uint16_t port;
  if (rte_dev_probe(dev.c_str()) != 0 || rte_eth_dev_get_port_by_name("net_memif0", &port) != 0) {
    std::fprintf(stderr, "cannot probe %s\n", dev.c_str());
    return 1;
  }
  // A receive mbuf holds a whole ring buffer, so memif copies each frame into one mbuf.
  const unsigned room = std::max({2048u, size, bsize});
  rte_mempool* mp = rte_pktmbuf_pool_create(
      "raw", 8191, 256, 0, static_cast<uint16_t>(room + RTE_PKTMBUF_HEADROOM), SOCKET_ID_ANY);
  rte_eth_conf conf{};
  if (!mp || rte_eth_dev_configure(port, 1, 1, &conf) != 0 ||
      rte_eth_rx_queue_setup(port, 0, 1024, SOCKET_ID_ANY, nullptr, mp) != 0 ||
      rte_eth_tx_queue_setup(port, 0, 1024, SOCKET_ID_ANY, nullptr) != 0) {
    std::fprintf(stderr, "cannot set up the port\n");
    return 1;
  }
  while (rte_eth_dev_start(port) != 0) usleep(100000);  // a client waits for its server
  for (;;) {
    rte_eth_link l{};
    rte_eth_link_get_nowait(port, &l);
    if (l.link_status == RTE_ETH_LINK_UP) break;
    usleep(1000);
  }
  usleep(100000);
  const bool client = role == "client";
  auto frame = [&] {
    rte_mbuf* m = rte_pktmbuf_alloc(mp);
    char* d = rte_pktmbuf_append(m, static_cast<uint16_t>(size));
    std::memset(d, 0x5a, size);
    return m;
  };
  // A frame read as a RoCEv2 packet: Ethernet, IPv4 and UDP headers (42 bytes), the IB packet,
  // the ICRC in the last 4 bytes (frames of 60 bytes and up leave 14 bytes of IB packet at least).
  constexpr unsigned kL2L3L4 = 42, kBthAndReth = 28, kIcrc = 4;
  const uroce::wire::Ipv4UdpFraming framing{0x0a630001, 0x0a630002, 0, true, 49152, 4791};
  auto ib_of = [&](rte_mbuf* m) {
    uint8_t* d = rte_pktmbuf_mtod(m, uint8_t*);
    return std::span<uint8_t>(d + kL2L3L4, rte_pktmbuf_pkt_len(m) - kL2L3L4 - kIcrc);
  };
  // Sends all n, retrying what a full ring did not take yet.
  auto send_all = [&](rte_mbuf** ms, unsigned n) {
    for (unsigned done = 0; done < n;)
      done += rte_eth_tx_burst(port, 0, ms + done, static_cast<uint16_t>(n - done));
  };
  rte_mbuf* burst[32];
  std::vector<uint8_t> other(touch);
  uint64_t bad_icrc = 0;  // bulk server, --icrc
  if (mode == "pingpong") {
    // One warm-up round trip, then the timed ones.
    const auto t0 = std::chrono::steady_clock::now();
    for (unsigned i = 0; i <= iters; ++i) {
      if (client) {
        rte_mbuf* out[32];
        for (unsigned k = 0; k < frames; ++k) out[k] = frame();
        send_all(out, frames);
      }
      // A turn's frames can arrive in more than one burst; wait for all of them. A frame can be
      // lost (memif drops what a full ring cannot take, and nothing resends it), and the peer
      // can be gone: give up after 5 s rather than spin for ever.
      uint16_t got = 0;
      const auto wait_from = std::chrono::steady_clock::now();
      while (got < frames) {
        const uint16_t n =
            rte_eth_rx_burst(port, 0, burst + got, static_cast<uint16_t>(frames - got));
        got = static_cast<uint16_t>(got + n);
        if (n == 0 && seconds_since(wait_from) > 5) {
          std::fprintf(stderr,
                       "memif_raw: no frame for 5 s at round trip %u (lost, or the peer is gone)\n",
                       i);
          rte_eth_dev_stop(port);
          return 1;
        }
      }
      for (size_t k = 0; k < other.size(); k += 64) ++other[k];
      if (!client) {
        send_all(burst, got);  // the turn's frames back, in one burst
      } else {
        for (uint16_t k = 0; k < got; ++k) rte_pktmbuf_free(burst[k]);
      }
    }
    const double s = seconds_since(t0);
    if (client)
      std::printf("%u iters in %.2f seconds = %.2f usec/iter\n", iters, s, s * 1e6 / iters);
  } else if (client) {
    for (unsigned sent = 0; sent < iters;) {
      unsigned k = std::min(32u, iters - sent);
      for (unsigned j = 0; j < k; ++j) {
        burst[j] = frame();
        if (with_icrc) {
          const std::span<uint8_t> ib = ib_of(burst[j]);
          uroce::wire::store_le32(ib.data() + ib.size(), uroce::wire::icrc(framing, ib));
        }
      }
      send_all(burst, k);
      sent += k;
    }
    sleep(1);  // the server drains
  } else {
    uint64_t frames = 0, bytes = 0;
    std::vector<uint8_t> region(place ? 65536 : 0);
    size_t at = 0;
    auto t0 = std::chrono::steady_clock::now();
    auto last = t0;
    for (;;) {
      uint16_t n = rte_eth_rx_burst(port, 0, burst, 32);
      if (n > 0) {
        if (frames == 0) t0 = std::chrono::steady_clock::now();
        for (uint16_t k = 0; k < n; ++k) {
          bytes += rte_pktmbuf_pkt_len(burst[k]);
          if (with_icrc || place) {
            const std::span<uint8_t> ib = ib_of(burst[k]);
            if (with_icrc &&
                uroce::wire::icrc(framing, ib) != uroce::wire::load_le32(ib.data() + ib.size()))
              ++bad_icrc;
            if (place && ib.size() > kBthAndReth) {
              const size_t len = std::min(ib.size() - kBthAndReth, region.size());
              if (at + len > region.size()) at = 0;
              std::memcpy(region.data() + at, ib.data() + kBthAndReth, len);
              at += len;
            }
          }
          rte_pktmbuf_free(burst[k]);
        }
        frames += n;
        last = std::chrono::steady_clock::now();
        if (frames >= iters) break;
      } else if (frames > 0 && seconds_since(last) > 0.5) {
        break;  // the sender is done (a frame lost to a full ring is not waited for)
      }
    }
    const double s = std::chrono::duration<double>(last - t0).count();
    std::printf("%llu bytes in %.3f seconds = %.1f MB/sec (%llu of %u frames)\n",
                static_cast<unsigned long long>(bytes), s, bytes / s / 1e6,
                static_cast<unsigned long long>(frames), iters);
    if (with_icrc)
      std::printf("%llu frames with a bad ICRC\n", static_cast<unsigned long long>(bad_icrc));
  }
  rte_eth_dev_stop(port);
  return bad_icrc != 0 ? 1 : 0;
}

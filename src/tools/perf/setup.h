// The set-up exchange over TCP, in perftest's own format, so that uroce-perf and perftest's
// ib_* programs connect to each other (either may be the server).
//
// What perftest (4.5, "version 6.06", perftest_communication.c) puts on the TCP connection,
// learned from its source and reimplemented here:
//   - Every exchange is symmetric: the client writes its message, then reads the server's; the
//     server reads first, then writes. Messages have fixed sizes and no framing.
//   - versions: 16 bytes, a NUL-padded version string ("6.06"); perftest refuses peers older
//     than 5.70. uroce-perf sends "6.06 uroce-perf": perftest reads it as 6.06 (atof), and a
//     uroce-perf peer recognises the suffix and enables the extensions below.
//   - system data (peers >= 5.32): the page size ("cycle buffer") and the cache line size, each a
//     4-byte big-endian int; both sides use the larger.
//   - MTU (peers >= 5.1; 2 bytes from 5.31): the decimal ibv_mtu number, NUL-terminated; both
//     use the smaller.
//   - keys: one message per QP and "handshake", the QP's LID, outstanding reads, QPN, PSN, rkey,
//     buffer address and (when a GID is used) the 16 GID bytes, as colon-separated hex
//     ("%04x:%04x:%06x:%06x:%08x:%016llx:" + 16 x "%02x:" + "%08x:" and a NUL: 108 bytes; 59
//     without the GID). Handshakes double as barriers: each test runs a fixed number of them
//     at fixed points (see session.cc), and both sides must run the same number.
//   - bandwidth reports: size and iterations (8-byte big-endian; iterations 4 bytes for peers
//     < 5.33), then peak and average bandwidth and message rate as big-endian IEEE doubles, each
//     field its own exchange.
//   - closing: one more handshake, then each side writes "done\0" and closes.
// Between two uroce-perf processes, extension messages (a 4-byte big-endian length and that
// many bytes of "key=value" lines) are exchanged at fixed points on top of the above (see
// session.cc); a perftest peer never sees one.
//
// Errors on the connection end the process with a message (examples/tcp_setup.h's die()).
#pragma once

#include <infiniband/verbs.h>

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace uroce::perf {

// The version string uroce-perf sends, and the perftest version whose protocol it speaks.
inline constexpr size_t kVersionLen = 16;
inline constexpr char kVersionString[] = "6.06 uroce-perf";
static_assert(sizeof(kVersionString) <= kVersionLen);
inline constexpr double kProtocolVersion = 6.06;
inline constexpr double kOldestPeer = 5.70;  // perftest refuses older peers; so does uroce-perf

// One QP's coordinates, as the key messages carry them (perftest's struct pingpong_dest).
struct Dest {
  uint32_t lid = 0;        // 16 bits on the wire
  uint32_t out_reads = 0;  // responder resources for READ/atomics the sender offers
  uint32_t qpn = 0;        // 24 bits
  uint32_t psn = 0;        // 24 bits
  uint32_t rkey = 0;
  uint64_t vaddr = 0;  // where the peer may write/read/atomically update
  ibv_gid gid{};
  uint32_t srqn = 0;  // XRC/DC only; 0 here
};

// The key message for `d` (exactly 108 bytes with a GID, 59 without, NUL included) and back.
std::string format_dest(const Dest& d, bool with_gid);
std::optional<Dest> parse_dest(const std::string& msg, bool with_gid);
inline size_t dest_msg_size(bool with_gid) {
  return with_gid ? 108 : 59;
}

// A bandwidth report as perftest exchanges it (struct bw_report_data, the fields it sends).
struct BwReport {
  uint64_t size = 0;
  uint64_t iters = 0;
  double bw_peak = 0, bw_avg = 0, msg_rate = 0;  // in the sender's report units (MB/s or Gb/s)
};

// key=value lines, the body of uroce-perf's extension messages. Keys and values hold no '\n'
// and keys no '='.
using Fields = std::map<std::string, std::string>;
std::string encode_fields(const Fields& f);
std::optional<Fields> decode_fields(const std::string& s);

struct Peer {
  std::string version;  // what the peer sent, up to its NUL ("" with --dont_xchg_versions)
  double version_number = kProtocolVersion;
  bool uroce_perf = false;  // the peer is uroce-perf: the extension messages are spoken
};

class Channel {
 public:
  // Client (`server` non-empty) connects; server listens on `port` and accepts one client.
  Channel(const std::string& server, uint16_t port);
  ~Channel();
  Channel(const Channel&) = delete;
  Channel& operator=(const Channel&) = delete;

  bool client() const { return client_; }
  const Peer& peer() const { return peer_; }

  // The symmetric exchange every message uses: the client writes first.
  void exchange(const void* mine, void* theirs, size_t n);

  // The opening exchanges (versions, system data, MTU); returns what the peer told. `mtu` is
  // this side's ibv_mtu; on return the MTU both use. cycle_buffer/cache_line likewise.
  void exchange_versions(bool skip);
  void exchange_sys_data(uint32_t* cycle_buffer, uint32_t* cache_line);
  void exchange_mtu(ibv_mtu* mtu);

  // One key handshake; `with_gid` must be the same on both sides (perftest: a GID is used).
  Dest handshake(const Dest& mine, bool with_gid);
  // `n` handshakes of the same message (perftest's barriers); returns the last answer.
  Dest handshakes(const Dest& mine, bool with_gid, int n);
  BwReport exchange_bw_report(const BwReport& mine);
  // perftest's ctx_close_connection: a handshake, "done", close.
  void close_connection(const Dest& mine, bool with_gid);

  // uroce-perf's extension message (only when peer().uroce_perf).
  Fields exchange_fields(const Fields& mine);
  // Half of it, for exchanges where the server must act between reading and writing.
  void send_fields(const Fields& mine);
  Fields receive_fields();

 private:
  void write(const void* p, size_t n);
  void read(void* p, size_t n);

  int fd_ = -1;
  bool client_ = false;
  Peer peer_;
};

}  // namespace uroce::perf

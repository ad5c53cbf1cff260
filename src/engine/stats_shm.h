// Live statistics of a running process, published in shared memory so the `uroce` command
// (src/tools/uroce.cc) can look at a workload from the outside, as `rdma statistic show` and
// `ethtool -S` do for an RNIC.
//
// One file per open device: /dev/shm/uroce.<pid>.<device> (shm_open, mode 0644), created when the
// device opens and unlinked when it closes. A process that dies without closing leaves its file
// behind; readers recognise it (the pid is gone, or it now names another process whose start time
// differs) and may remove it.
//
// Layout (all integers host byte order; readers on the same host only):
//   Header             fixed size, see below; `header_size` tells where the entries start
//   Entry[n_entries]   {char name[32] NUL-terminated; uint64_t value}
// Writers: the publishing process only. Every entry value is 8-byte aligned and written with an
// atomic store (one writer at a time per value), so a reader that maps the file reads a value
// with one atomic load and never sees a torn one. The magic is written last, after everything
// else (release), so a reader that sees it sees a complete layout.
//
// Compatibility: a reader rejects a file whose magic or layout version differ from its own, and
// any file whose sizes do not fit the bytes it holds; entries are found by name, never by index, so
// counters may be added within one layout version without breaking older readers.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "transport/qp_counters.h"

namespace uroce::stats_shm {

inline constexpr char kMagic[8] = {'U', 'R', 'O', 'C', 'E', 'S', 'T', 'A'};
inline constexpr uint32_t kLayoutVersion = 1;
inline constexpr size_t kNameLen = 32;    // Entry::name, device names
inline constexpr size_t kCommLen = 16;    // TASK_COMM_LEN
inline constexpr size_t kNetdevLen = 16;  // IFNAMSIZ
// Publishing is capped: a damaged header cannot make a reader allocate without bound.
inline constexpr uint32_t kMaxEntries = 4096;

// Port state as ibv_port_state numbers it (IBV_PORT_DOWN 1, IBV_PORT_ACTIVE 4).
inline constexpr uint32_t kPortDown = 1;
inline constexpr uint32_t kPortActive = 4;

struct Header {
  uint64_t magic;        // the 8 bytes of kMagic, stored last (release)
  uint32_t version;      // kLayoutVersion
  uint32_t header_size;  // sizeof(Header): entries start here
  uint32_t entry_size;   // sizeof(Entry)
  uint32_t n_entries;
  int32_t pid;
  uint32_t ipv4;        // device address, host byte order
  uint64_t start_time;  // process start, clock ticks after boot (/proc/<pid>/stat field 22)
  char comm[kCommLen];  // process name (/proc/<pid>/comm), NUL-terminated
  char device[kNameLen];
  char netdev[kNetdevLen];  // "" when unknown
  uint32_t mtu;             // active IB MTU in bytes (256..4096)
  uint32_t port_state;      // kPortDown / kPortActive; atomic, updated by the publisher
  // CLOCK_MONOTONIC ns of the last snapshot of the per-QP totals (entries named "qp_*" and the
  // other transport counters); the device counters are always live. Atomic.
  uint64_t snapshot_ns;
};
static_assert(sizeof(Header) == 120);

struct Entry {
  char name[kNameLen];  // NUL-terminated
  uint64_t value;       // atomic
};
static_assert(sizeof(Entry) == 40);
static_assert(sizeof(Header) % alignof(uint64_t) == 0, "entry values stay 8-byte aligned");

// Who publishes: the process and the device.
struct Identity {
  pid_t pid = 0;
  uint64_t start_time = 0;
  std::string comm;
  std::string device;
  uint32_t ipv4 = 0;  // host byte order
  std::string netdev;
  uint32_t mtu = 0;
};

// Bytes a layout with n entries takes.
size_t layout_size(size_t n_entries);
// Writes a complete layout into buf (layout_size(names.size()) bytes, 8-byte aligned), every value
// zero and the port down. Names longer than kNameLen - 1 are cut. Returns false (writing nothing)
// when the names are too many.
bool write_layout(void* buf, const Identity& id, const std::vector<std::string>& names);

// What a reader found in one file.
struct Snapshot {
  Identity id;
  uint32_t port_state = 0;
  uint64_t snapshot_ns = 0;
  std::vector<std::pair<std::string, uint64_t>> counters;  // in file order
};

// Parses a layout of len bytes at data, reading each value with one atomic load when it is
// aligned. nullopt and *err when the magic or version differ or the sizes do not fit len.
std::optional<Snapshot> parse(const void* data, size_t len, std::string* err);
// Maps the file at path read-only and parses it.
std::optional<Snapshot> read_file(const std::string& path, std::string* err);

// The shm_open name of a device's file ("/uroce.<pid>.<device>") and the directory shm_open
// names live in on Linux.
std::string shm_name(pid_t pid, const std::string& device);
inline constexpr const char* kShmDir = "/dev/shm";
// Files in dir whose names look like published devices ("uroce.<digits>.<something>"), as full
// paths, sorted.
std::vector<std::string> list_files(const std::string& dir = kShmDir);

// A process's start time and name from /proc/<pid>/stat; nullopt when there is no such process.
struct ProcInfo {
  uint64_t start_time = 0;
  std::string comm;
};
std::optional<ProcInfo> proc_info(pid_t pid);
// Whether the process that published `id` still runs (the pid exists with the same start time).
bool publisher_alive(const Identity& id);

// Removes the files in dir of this user's processes that no longer run (killed, or exited
// before withdraw): a publisher calls it, so that they do not pile up. Returns how many.
size_t remove_dead_files(const std::string& dir = kShmDir);

// UROCE_PUBLISH: publishing is on unless it is "0". Any other value but "1" and "" is an error
// (*err set, publishing off), so that a typo is noticed.
bool publishing_enabled(std::string* err);

// The writer: one device's file, mapped read-write for the life of the object, unlinked when it
// is destroyed. Not thread-safe except as noted: values are set with atomic stores.
class Publisher {
 public:
  // Creates the file for `id` (pid: the calling process) with one entry per name. A leftover file
  // of a dead process with the same pid and device is replaced; the file of a live device of the
  // same name in this process is not (nullptr). nullptr and *err on failure.
  static std::unique_ptr<Publisher> create(const Identity& id,
                                           const std::vector<std::string>& names, std::string* err);
  ~Publisher();
  Publisher(const Publisher&) = delete;
  Publisher& operator=(const Publisher&) = delete;

  // The value slot of entry i (8-byte aligned, in the mapping): a counter may live there.
  uint64_t* slot(size_t i);
  void set(size_t i, uint64_t v);  // atomic store
  void set_port_active(bool active);
  void set_snapshot_ns(uint64_t ns);
  const std::string& path() const { return path_; }
  // Removes the file's name now (the mapping stays valid until the object goes): a process
  // exiting without closing its device leaves nothing behind in /dev/shm.
  void withdraw();

 private:
  Publisher(std::string name, void* base, size_t len, size_t n);
  bool withdrawn_ = false;
  std::string name_;  // shm_open name
  std::string path_;  // /dev/shm/…
  void* base_;
  size_t len_;
  size_t n_;
};

// Per-QP congestion-control state (docs/congestion-control.md, "Counters"): while a device runs
// congestion control, the first kCcQpSlots of its QPs by QPN (RC, UC, UD), each in four entries
// "ccqpNN_qpn" (0: the slot is unused — QPN 0 is the SMI's, never a uroce QP's), "ccqpNN_rate_kbps"
// (the reaction point's current rate Rc), "ccqpNN_alpha_ppm" (DCQCN's alpha × 10^6) and
// "ccqpNN_sent_pkts" (the QP's packets sent, retransmissions included: how a bottleneck's share
// went to each QP), NN = 00…63. Written with the QP totals (snapshot_ns); the values of a slot
// are stored one after the other, so a reader may see a slot half-way through a change of QP —
// the next snapshot is whole.
inline constexpr size_t kCcQpSlots = 64;
inline constexpr size_t kCcQpFieldCount = 4;
inline constexpr const char* kCcQpFields[kCcQpFieldCount] = {"qpn", "rate_kbps", "alpha_ppm",
                                                             "sent_pkts"};
// "ccqp07_rate_kbps" for slot 7, field 1.
std::string cc_slot_name(size_t slot, size_t field);
// Whether `name` is one of those entries; *slot and *field say which.
bool parse_cc_slot_name(const std::string& name, size_t* slot, size_t* field);

// The per-QP transport counters a device publishes, with their names (print_stats uses the same):
// the rows of transport/qp_counters.h.
using transport::for_each_qp_counter;

}  // namespace uroce::stats_shm

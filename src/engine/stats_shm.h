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
//   the QP table       at Header::qp_table_offset (0: none): one row per live QP, see QpTable
// Writers: the publishing process only. Every entry value is 8-byte aligned and written with an
// atomic store (one writer at a time per value), so a reader that maps the file reads a value
// with one atomic load and never sees a torn one. The magic is written last, after everything
// else (release), so a reader that sees it sees a complete layout.
//
// Compatibility: a reader rejects a file whose magic or layout version differ from its own, and
// any file whose sizes do not fit the bytes it holds; entries are found by name, never by index, so
// counters may be added within one layout version without breaking older readers. The header only
// grows at its end (a reader of a shorter header finds the entries at header_size all the same),
// and the QP table's columns are named too.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "transport/qp_counters.h"
#include "transport/wire/ip.h"

namespace uroce::stats_shm {

inline constexpr char kMagic[8] = {'U', 'R', 'O', 'C', 'E', 'S', 'T', 'A'};
inline constexpr uint32_t kLayoutVersion = 2;  // 2: QP rows carry the peer's IPv6 address
inline constexpr size_t kNameLen = 32;         // Entry::name, device names
inline constexpr size_t kCommLen = 16;         // TASK_COMM_LEN
inline constexpr size_t kNetdevLen = 16;       // IFNAMSIZ
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
  // The QP table (QpTable below); all zero in a file without one. Offsets and sizes are fixed
  // when the file is created; qp_live, qp_used and the rows change under qp_seq.
  uint32_t qp_table_offset;  // bytes from the start of the file
  uint32_t qp_columns;       // counters per row (named in the table's column list)
  uint32_t qp_capacity;      // rows the table holds
  uint32_t qp_row_size;      // bytes per row: kQpRowWords + qp_columns words
  // Seqlock over qp_live, qp_used and every row: odd while the publisher changes them. A reader
  // copies, then checks that it is even and unchanged (QpTable).
  uint64_t qp_seq;
  uint32_t qp_live;  // the device's QPs (more than qp_capacity: only the lowest QPNs have rows)
  uint32_t qp_used;  // rows [0, qp_used) may hold QPs; the rest are empty
  // The device address of either family: 16 bytes in network order, IPv4-mapped for an IPv4
  // device (wire::IpAddr). `ipv4` above still holds an IPv4 device's address (0 for IPv6), for
  // readers of the 152-byte header, which lacks this field.
  uint8_t ip[16];
};
static_assert(sizeof(Header) == 168);

struct Entry {
  char name[kNameLen];  // NUL-terminated
  uint64_t value;       // atomic
};
static_assert(sizeof(Entry) == 40);
static_assert(sizeof(Header) % alignof(uint64_t) == 0, "entry values stay 8-byte aligned");

// The QP table: every live QP of the device, one row each, so that `uroce stats --qp` and
// `uroce top` see per-QP counters (docs/troubleshooting.md, "Per QP") as `rdma statistic qp`
// shows an RNIC's.
//   char column[qp_columns][kNameLen]   the counter names of transport/qp_counters.h, in order
//   row[qp_capacity]                    qp_row_size bytes each, 8-byte words:
//     word 0: QPN (bits 0..23; 0: an empty row) | ibv_qp_type << 32 | ibv_qp_state << 40
//     word 1: the peer's QPN (zero for UD)
//     words 2-3: the peer's address, its 16 bytes in network order (IPv4-mapped for IPv4; zeros
//     for UD)
//     word kQpRowWords + c: the counter of column c
// Consistency: one seqlock (Header::qp_seq) guards the whole table. The publisher makes it odd,
// rewrites the rows (sorted by QPN, the live QPs only), clears the rows it no longer uses and
// makes it even again (release); a reader copies the rows with atomic loads and keeps the copy
// only if qp_seq was even before and unchanged after (acquire), else it copies again. So a reader
// never sees a row half-written, a QP twice or a destroyed QP beside the QP now in its row; the
// file is never shrunk, so it never reads unmapped memory. Publishing happens with the device
// counters' snapshot (at most every 100 ms) and when a QP is destroyed (its row goes at once).
inline constexpr uint32_t kQpRowWords = 4;
// Rows a device's file holds: a table for every QP a device allows (16384) would cost 4.5 MB of
// /dev/shm per device; 1024 rows take ~300 KB, of which only the pages of used rows are touched.
inline constexpr uint32_t kQpTableCapacity = 1024;

// One row as the publisher gives it and a reader gets it back.
struct QpRow {
  uint32_t qpn = 0;
  uint32_t type = 0;   // ibv_qp_type
  uint32_t state = 0;  // ibv_qp_state
  uint32_t peer_qpn = 0;
  wire::IpAddr peer_ip{};  // IPv4-mapped for IPv4; all zeros: none (UD, before RTR)
  transport::QpCounters counters;
};

// Who publishes: the process and the device.
struct Identity {
  pid_t pid = 0;
  uint64_t start_time = 0;
  std::string comm;
  std::string device;
  wire::IpAddr ip{};  // the device address (IPv4-mapped for IPv4)
  std::string netdev;
  uint32_t mtu = 0;
};

// Bytes a layout with n entries and a QP table of qp_capacity rows takes.
size_t layout_size(size_t n_entries, size_t qp_capacity = 0);
// Writes a complete layout into buf (layout_size(names.size(), qp_capacity) bytes, 8-byte
// aligned), every value zero, no QP in the table and the port down. Names longer than
// kNameLen - 1 are cut. Returns false (writing nothing) when the names or rows are too many.
bool write_layout(void* buf, const Identity& id, const std::vector<std::string>& names,
                  size_t qp_capacity = 0);

// The publisher's side of the QP table in a layout (buf: the layout's start). set: the rows of
// every live QP (any order; the lowest QPNs get rows when there are more than the capacity).
// drop: empties the row of one QP, if it has one.
void set_qp_rows(void* buf, std::span<const QpRow> rows);
void drop_qp_row(void* buf, uint32_t qpn);

// What a reader found in one file.
struct Snapshot {
  Identity id;
  uint32_t port_state = 0;
  uint64_t snapshot_ns = 0;
  std::vector<std::pair<std::string, uint64_t>> counters;  // in file order
  // The QP table (none in a file without one), sorted by QPN; counters the reader does not know
  // are left out, those the file lacks are zero.
  bool has_qp_table = false;
  bool qp_table_busy = false;  // the publisher stopped half-way (it died while writing): no rows
  uint32_t qp_live = 0;        // the device's QPs, also those the table had no row for
  std::vector<QpRow> qps;
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
  // Creates the file for `id` (pid: the calling process) with one entry per name and a QP table
  // of kQpTableCapacity rows. A leftover file
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
  // The QP table (set_qp_rows, drop_qp_row).
  void set_qps(std::span<const QpRow> rows);
  void drop_qp(uint32_t qpn);
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

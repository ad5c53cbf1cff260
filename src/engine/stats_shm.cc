#include "engine/stats_shm.h"

#include <dirent.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

namespace uroce::stats_shm {
namespace {

void copy_cstr(char* dst, size_t cap, const std::string& s) {
  size_t n = std::min(s.size(), cap - 1);
  std::memcpy(dst, s.data(), n);
  std::memset(dst + n, 0, cap - n);
}

// A fixed-size field that a writer NUL-terminated; a damaged one is cut at its end, never read
// past it.
std::string read_cstr(const char* src, size_t cap) {
  return std::string(src, strnlen(src, cap));
}

// The shared words are read with acquire and written with release (plain moves on x86): the QP
// table's seqlock rests on them rather than on fences, which ThreadSanitizer cannot model (GCC
// refuses a thread fence under -fsanitize=thread). A reader whose copy took any word a write
// stored then sees that write's odd sequence number when it looks again, and retries.
uint64_t load_u64(const void* p) {
  if (reinterpret_cast<uintptr_t>(p) % alignof(uint64_t) == 0)
    return std::atomic_ref<uint64_t>(*static_cast<uint64_t*>(const_cast<void*>(p)))
        .load(std::memory_order_acquire);
  uint64_t v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

void store_u64(uint64_t* p, uint64_t v) {
  std::atomic_ref<uint64_t>(*p).store(v, std::memory_order_release);
}

void store_u32(uint32_t* p, uint32_t v) {
  std::atomic_ref<uint32_t>(*p).store(v, std::memory_order_release);
}

uint32_t load_u32(const uint32_t* p) {
  return std::atomic_ref<uint32_t>(*const_cast<uint32_t*>(p)).load(std::memory_order_acquire);
}

// The QP table's geometry for a layout of n entries (stats_shm.h, QpTable).
constexpr size_t kQpColumns = transport::kQpCounterCount;
constexpr size_t kQpRowSize = (kQpRowWords + kQpColumns) * sizeof(uint64_t);
// Bounds a reader puts on a table's geometry, so that a damaged header cannot make it allocate
// without bound.
constexpr uint32_t kMaxQpColumns = 256;
constexpr uint32_t kMaxQpCapacity = 1u << 16;
// The header as layout version 1 first had it (without the QP table's fields): a file written
// by such a publisher is still read, without a table.
constexpr size_t kMinHeaderSize = offsetof(Header, qp_table_offset);
static_assert(offsetof(Header, qp_table_offset) == 120);

uint64_t* qp_row_words(void* buf, uint32_t row) {
  auto* h = static_cast<Header*>(buf);
  char* rows = static_cast<char*>(buf) + h->qp_table_offset + size_t{h->qp_columns} * kNameLen;
  return reinterpret_cast<uint64_t*>(rows + size_t{row} * h->qp_row_size);
}

uint64_t row_word0(const QpRow& r) {
  return (r.qpn & 0xffffffu) | uint64_t{r.type & 0xffu} << 32 | uint64_t{r.state & 0xffu} << 40;
}

// The writer's half of the table's seqlock (stats_shm.h): odd before the rows change, even
// (release) after. The rows' stores are releases (store_u64): none is seen without the odd
// number before it.
class QpTableWrite {
 public:
  explicit QpTableWrite(Header* h) : seq_(h->qp_seq) {
    begin_ = seq_.load(std::memory_order_relaxed);
    seq_.store(begin_ + 1, std::memory_order_relaxed);
  }
  ~QpTableWrite() { seq_.store(begin_ + 2, std::memory_order_release); }
  QpTableWrite(const QpTableWrite&) = delete;
  QpTableWrite& operator=(const QpTableWrite&) = delete;

 private:
  std::atomic_ref<uint64_t> seq_;
  uint64_t begin_;
};

void clear_row(uint64_t* w, uint32_t columns) {
  for (size_t k = 0; k < kQpRowWords + columns; ++k) store_u64(&w[k], 0);
}

// Reads the QP table of the layout at p (len bytes; h: its header) into *s. False when the
// table's geometry does not fit the bytes.
bool read_qp_table(const char* p, size_t len, const Header& h, Snapshot* s);

}  // namespace

size_t layout_size(size_t n_entries, size_t qp_capacity) {
  const size_t table = qp_capacity == 0 ? 0 : kQpColumns * kNameLen + qp_capacity * kQpRowSize;
  return sizeof(Header) + n_entries * sizeof(Entry) + table;
}

bool write_layout(void* buf, const Identity& id, const std::vector<std::string>& names,
                  size_t qp_capacity) {
  if (names.size() > kMaxEntries || qp_capacity > kMaxQpCapacity) return false;
  std::memset(buf, 0, layout_size(names.size(), qp_capacity));
  auto* h = static_cast<Header*>(buf);
  h->version = kLayoutVersion;
  h->header_size = sizeof(Header);
  h->entry_size = sizeof(Entry);
  h->n_entries = static_cast<uint32_t>(names.size());
  h->pid = id.pid;
  h->ipv4 = id.ip.is_v4() ? id.ip.v4() : 0;
  std::memcpy(h->ip, id.ip.data(), sizeof h->ip);
  h->start_time = id.start_time;
  copy_cstr(h->comm, sizeof h->comm, id.comm);
  copy_cstr(h->device, sizeof h->device, id.device);
  copy_cstr(h->netdev, sizeof h->netdev, id.netdev);
  h->mtu = id.mtu;
  h->port_state = kPortDown;
  auto* e = reinterpret_cast<Entry*>(static_cast<char*>(buf) + sizeof(Header));
  for (size_t i = 0; i < names.size(); ++i) copy_cstr(e[i].name, sizeof e[i].name, names[i]);
  if (qp_capacity != 0) {
    h->qp_table_offset = static_cast<uint32_t>(sizeof(Header) + names.size() * sizeof(Entry));
    h->qp_columns = static_cast<uint32_t>(kQpColumns);
    h->qp_capacity = static_cast<uint32_t>(qp_capacity);
    h->qp_row_size = static_cast<uint32_t>(kQpRowSize);
    char* col = static_cast<char*>(buf) + h->qp_table_offset;
    for (const transport::QpCounterInfo& c : transport::kQpCounterInfo) {
      copy_cstr(col, kNameLen, c.name);
      col += kNameLen;
    }
  }
  // The magic last, with a release store: a reader that sees it (it maps the same pages) sees
  // the rest.
  uint64_t magic;
  std::memcpy(&magic, kMagic, sizeof magic);
  std::atomic_ref<uint64_t>(h->magic).store(magic, std::memory_order_release);
  return true;
}

std::optional<Snapshot> parse(const void* data, size_t len, std::string* err) {
  auto fail = [err](std::string why) -> std::optional<Snapshot> {
    if (err) *err = std::move(why);
    return std::nullopt;
  };
  const auto* p = static_cast<const char*>(data);
  // Version and sizes are read field by field, so even a file cut inside the header is judged
  // without reading past its end.
  if (len < sizeof kMagic + sizeof(uint32_t)) return fail("truncated header");
  if (std::memcmp(p, kMagic, sizeof kMagic) != 0) return fail("not a uroce statistics file");
  uint32_t version;
  std::memcpy(&version, p + offsetof(Header, version), sizeof version);
  if (version != kLayoutVersion)
    return fail("layout version " + std::to_string(version) + ", this reader knows " +
                std::to_string(kLayoutVersion));
  if (len < kMinHeaderSize) return fail("truncated header");
  Header h{};
  uint32_t header_size;
  std::memcpy(&header_size, p + offsetof(Header, header_size), sizeof header_size);
  // Up to the QP table's seqlock: what follows changes under it and is read with atomic loads.
  std::memcpy(&h, p, std::min<size_t>({offsetof(Header, qp_seq), header_size, len}));
  if (h.header_size < kMinHeaderSize || h.entry_size < sizeof(Entry) || h.n_entries > kMaxEntries ||
      h.header_size > len)
    return fail("bad header sizes");
  // A header without the QP table's fields (an older publisher) has none.
  if (h.header_size < offsetof(Header, qp_used) + sizeof h.qp_used) {
    h.qp_table_offset = h.qp_columns = h.qp_capacity = h.qp_row_size = 0;
  }
  if ((len - h.header_size) / h.entry_size < h.n_entries) return fail("truncated entries");
  Snapshot s;
  s.id.pid = h.pid;
  s.id.start_time = h.start_time;
  s.id.comm = read_cstr(h.comm, sizeof h.comm);
  s.id.device = read_cstr(h.device, sizeof h.device);
  // A header from before the 16-byte address (152 bytes) has only the IPv4 one. The address
  // never changes after the file is made: a plain copy (header_size <= len was checked).
  if (h.header_size >= offsetof(Header, ip) + sizeof h.ip) {
    s.id.ip = wire::IpAddr::from_bytes(reinterpret_cast<const uint8_t*>(p) + offsetof(Header, ip));
  } else {
    s.id.ip = wire::IpAddr(h.ipv4);
  }
  s.id.netdev = read_cstr(h.netdev, sizeof h.netdev);
  s.id.mtu = h.mtu;
  uint32_t port;
  std::memcpy(&port, p + offsetof(Header, port_state), sizeof port);
  s.port_state = port;
  s.snapshot_ns = load_u64(p + offsetof(Header, snapshot_ns));
  s.counters.reserve(h.n_entries);
  for (uint32_t i = 0; i < h.n_entries; ++i) {
    const char* e = p + h.header_size + size_t(i) * h.entry_size;
    s.counters.emplace_back(read_cstr(e, kNameLen), load_u64(e + offsetof(Entry, value)));
  }
  if (h.qp_table_offset != 0 && !read_qp_table(p, len, h, &s)) return fail("bad QP table sizes");
  return s;
}

namespace {
bool read_qp_table(const char* p, size_t len, const Header& h, Snapshot* s) {
  const size_t entries_end = h.header_size + size_t{h.n_entries} * h.entry_size;
  if (h.qp_table_offset < entries_end || h.qp_table_offset % 8 != 0 ||
      reinterpret_cast<uintptr_t>(p) % 8 != 0 || h.qp_columns > kMaxQpColumns ||
      h.qp_capacity > kMaxQpCapacity || h.qp_row_size % 8 != 0 ||
      h.qp_row_size < (kQpRowWords + h.qp_columns) * sizeof(uint64_t))
    return false;
  const size_t cols_bytes = size_t{h.qp_columns} * kNameLen;
  if (h.qp_table_offset > len || len - h.qp_table_offset < cols_bytes ||
      (len - h.qp_table_offset - cols_bytes) / h.qp_row_size < h.qp_capacity)
    return false;
  s->has_qp_table = true;
  // Which counter of QpCounters each column is (-1: one this reader does not know).
  std::vector<int> field(h.qp_columns, -1);
  for (uint32_t c = 0; c < h.qp_columns; ++c) {
    const std::string name = read_cstr(p + h.qp_table_offset + size_t{c} * kNameLen, kNameLen);
    for (size_t k = 0; k < transport::kQpCounterCount; ++k)
      if (name == transport::kQpCounterInfo[k].name) field[c] = static_cast<int>(k);
  }
  const char* rows = p + h.qp_table_offset + cols_bytes;
  const size_t row_words = h.qp_row_size / sizeof(uint64_t);
  auto* hdr = reinterpret_cast<const Header*>(p);
  std::atomic_ref<uint64_t> seq(const_cast<Header*>(hdr)->qp_seq);
  std::vector<uint64_t> copy;
  // The reader's half of the seqlock: copy, then keep the copy only if no write began or ended
  // meanwhile. A publisher holds it for microseconds every 100 ms; one that stays odd died
  // half-way, and its table is left unread.
  for (int attempt = 0; attempt < 1000; ++attempt) {
    if (attempt != 0) sched_yield();
    const uint64_t before = seq.load(std::memory_order_acquire);
    if (before % 2 != 0) continue;
    const uint32_t live = load_u32(&hdr->qp_live);
    const uint32_t used = std::min(load_u32(&hdr->qp_used), h.qp_capacity);
    copy.resize(size_t{used} * row_words);
    for (size_t i = 0; i < copy.size(); ++i)
      copy[i] = load_u64(rows + (i / row_words) * h.qp_row_size + (i % row_words) * 8);
    // The loads above are acquires: this look cannot move before them.
    if (seq.load(std::memory_order_relaxed) != before) continue;
    s->qp_live = live;
    for (uint32_t r = 0; r < used; ++r) {
      const uint64_t* w = copy.data() + size_t{r} * row_words;
      if ((w[0] & 0xffffff) == 0) continue;  // empty: its QP was destroyed
      QpRow row;
      row.qpn = static_cast<uint32_t>(w[0] & 0xffffff);
      row.type = static_cast<uint32_t>((w[0] >> 32) & 0xff);
      row.state = static_cast<uint32_t>((w[0] >> 40) & 0xff);
      row.peer_qpn = static_cast<uint32_t>(w[1] & 0xffffffff);
      std::array<uint8_t, 16> peer;
      std::memcpy(peer.data(), &w[2], 16);
      row.peer_ip = wire::IpAddr(peer);
      uint64_t values[transport::kQpCounterCount] = {};
      for (uint32_t c = 0; c < h.qp_columns; ++c)
        if (field[c] >= 0) values[field[c]] = w[kQpRowWords + c];
      size_t k = 0;
      transport::for_each_qp_counter(row.counters,
                                     [&](const char*, uint64_t& v) { v = values[k++]; });
      s->qps.push_back(row);
    }
    std::sort(s->qps.begin(), s->qps.end(),
              [](const QpRow& a, const QpRow& b) { return a.qpn < b.qpn; });
    return true;
  }
  s->qp_table_busy = true;
  return true;
}
}  // namespace

void set_qp_rows(void* buf, std::span<const QpRow> rows) {
  auto* h = static_cast<Header*>(buf);
  if (h->qp_capacity == 0) return;
  std::vector<const QpRow*> order;
  order.reserve(rows.size());
  for (const QpRow& r : rows) order.push_back(&r);
  const size_t n = std::min<size_t>(order.size(), h->qp_capacity);
  std::partial_sort(order.begin(), order.begin() + static_cast<ptrdiff_t>(n), order.end(),
                    [](const QpRow* a, const QpRow* b) { return a->qpn < b->qpn; });
  QpTableWrite write(h);
  for (uint32_t i = 0; i < n; ++i) {
    uint64_t* w = qp_row_words(buf, i);
    store_u64(&w[0], row_word0(*order[i]));
    store_u64(&w[1], order[i]->peer_qpn);
    uint64_t peer[2];
    std::memcpy(peer, order[i]->peer_ip.data(), 16);
    store_u64(&w[2], peer[0]);
    store_u64(&w[3], peer[1]);
    size_t k = kQpRowWords;
    transport::for_each_qp_counter(order[i]->counters,
                                   [&](const char*, uint64_t v) { store_u64(&w[k++], v); });
  }
  for (uint32_t i = static_cast<uint32_t>(n); i < h->qp_used; ++i)
    clear_row(qp_row_words(buf, i), h->qp_columns);
  store_u32(&h->qp_used, static_cast<uint32_t>(n));
  store_u32(&h->qp_live, static_cast<uint32_t>(rows.size()));
}

void drop_qp_row(void* buf, uint32_t qpn) {
  auto* h = static_cast<Header*>(buf);
  if (h->qp_capacity == 0 || qpn == 0) return;
  for (uint32_t i = 0; i < h->qp_used; ++i) {
    uint64_t* w = qp_row_words(buf, i);
    if ((w[0] & 0xffffff) != (qpn & 0xffffff)) continue;
    QpTableWrite write(h);
    clear_row(w, h->qp_columns);
    if (h->qp_live > 0) store_u32(&h->qp_live, h->qp_live - 1);
    return;
  }
}

std::optional<Snapshot> read_file(const std::string& path, std::string* err) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) {
    if (err) *err = std::strerror(errno);
    return std::nullopt;
  }
  struct stat st {};
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    if (err) *err = "not a regular file";
    close(fd);
    return std::nullopt;
  }
  size_t len = static_cast<size_t>(st.st_size);
  if (len == 0) {
    close(fd);
    return parse("", 0, err);
  }
  // Mapped rather than read, so each value is one atomic load. Publishers never shrink the file
  // (it is sized once, before the magic is written), so the mapping stays backed.
  void* base = mmap(nullptr, len, PROT_READ, MAP_SHARED, fd, 0);
  close(fd);
  if (base == MAP_FAILED) {
    if (err) *err = std::string("mmap: ") + std::strerror(errno);
    return std::nullopt;
  }
  auto s = parse(base, len, err);
  munmap(base, len);
  return s;
}

std::string shm_name(pid_t pid, const std::string& device) {
  return "/uroce." + std::to_string(pid) + "." + device;
}

std::vector<std::string> list_files(const std::string& dir) {
  std::vector<std::string> out;
  DIR* d = opendir(dir.c_str());
  if (!d) return out;
  while (dirent* e = readdir(d)) {
    std::string n = e->d_name;
    if (n.rfind("uroce.", 0) != 0) continue;
    size_t dot = n.find('.', 6);
    if (dot == std::string::npos || dot == 6 || dot + 1 == n.size()) continue;
    if (!std::all_of(n.begin() + 6, n.begin() + dot, [](char c) { return c >= '0' && c <= '9'; }))
      continue;
    out.push_back(dir + "/" + n);
  }
  closedir(d);
  std::sort(out.begin(), out.end());
  return out;
}

std::optional<ProcInfo> proc_info(pid_t pid) {
  if (pid <= 0) return std::nullopt;
  std::ifstream f("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!f || !std::getline(f, line)) return std::nullopt;
  // "pid (comm) state ppid …": comm may hold spaces and parentheses, so it ends at the last ')'.
  size_t open = line.find('('), close = line.rfind(')');
  if (open == std::string::npos || close == std::string::npos || close < open) return std::nullopt;
  ProcInfo info;
  info.comm = line.substr(open + 1, close - open - 1);
  std::istringstream rest(line.substr(close + 1));
  std::string field;
  // Fields 3..21 precede starttime (field 22, proc(5)).
  for (int i = 3; i <= 21; ++i)
    if (!(rest >> field)) return std::nullopt;
  if (!(rest >> info.start_time)) return std::nullopt;
  return info;
}

bool publisher_alive(const Identity& id) {
  if (id.pid <= 0) return false;
  if (kill(id.pid, 0) != 0 && errno == ESRCH) return false;
  auto info = proc_info(id.pid);
  if (!info) return false;  // exited between the two checks (or no /proc: cannot tell, assume gone)
  return info->start_time == id.start_time;
}

bool publishing_enabled(std::string* err) {
  const char* v = std::getenv("UROCE_PUBLISH");
  if (!v || !*v || std::strcmp(v, "1") == 0) return true;
  if (std::strcmp(v, "0") == 0) return false;
  if (err) *err = std::string("UROCE_PUBLISH=") + v + ": expected 0 or 1; not publishing";
  return false;
}

Publisher::Publisher(std::string name, void* base, size_t len, size_t n)
    : name_(std::move(name)), path_(std::string(kShmDir) + name_), base_(base), len_(len), n_(n) {}

std::unique_ptr<Publisher> Publisher::create(const Identity& id,
                                             const std::vector<std::string>& names,
                                             std::string* err) {
  auto fail = [err](std::string why) -> std::unique_ptr<Publisher> {
    if (err) *err = std::move(why);
    return nullptr;
  };
  if (id.device.empty() || id.device.size() >= kNameLen || id.device.find('/') != std::string::npos)
    return fail("device name '" + id.device + "' cannot name a shared-memory file");
  if (names.size() > kMaxEntries) return fail("too many counters");
  std::string name = shm_name(id.pid, id.device);
  int fd = -1;
  for (int attempt = 0; attempt < 2 && fd < 0; ++attempt) {
    fd = shm_open(name.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd >= 0 || errno != EEXIST || attempt > 0) break;
    // Left by an earlier process with our pid (it died without closing), or published by a
    // device of the same name that is open in this process right now.
    std::string why;
    auto old = read_file(std::string(kShmDir) + name, &why);
    if (old && old->id.pid == id.pid && old->id.start_time == id.start_time)
      return fail(std::string(kShmDir) + name + " is published by another open device");
    shm_unlink(name.c_str());
  }
  if (fd < 0) return fail("shm_open " + name + ": " + std::strerror(errno));
  // shm_open's mode is filtered by the umask; readers of other users need 0644.
  fchmod(fd, 0644);
  size_t len = layout_size(names.size(), kQpTableCapacity);
  if (ftruncate(fd, static_cast<off_t>(len)) != 0) {
    int e = errno;
    close(fd);
    shm_unlink(name.c_str());
    return fail("ftruncate " + name + ": " + std::strerror(e));
  }
  void* base = mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  int e = errno;
  close(fd);
  if (base == MAP_FAILED) {
    shm_unlink(name.c_str());
    return fail("mmap " + name + ": " + std::strerror(e));
  }
  write_layout(base, id, names, kQpTableCapacity);
  return std::unique_ptr<Publisher>(new Publisher(std::move(name), base, len, names.size()));
}

Publisher::~Publisher() {
  withdraw();
  munmap(base_, len_);
}

void Publisher::withdraw() {
  if (withdrawn_) return;
  withdrawn_ = true;
  shm_unlink(name_.c_str());
}

size_t remove_dead_files(const std::string& dir) {
  size_t removed = 0;
  for (const std::string& path : list_files(dir)) {
    struct stat st;
    if (stat(path.c_str(), &st) != 0 || st.st_uid != getuid()) continue;  // another user's
    auto s = read_file(path, nullptr);
    // Another layout (another uroce version) or a file being written: left alone.
    if (!s || publisher_alive(s->id)) continue;
    if (unlink(path.c_str()) == 0) ++removed;
  }
  return removed;
}

uint64_t* Publisher::slot(size_t i) {
  auto* e = reinterpret_cast<Entry*>(static_cast<char*>(base_) + sizeof(Header));
  return i < n_ ? &e[i].value : nullptr;
}

void Publisher::set(size_t i, uint64_t v) {
  if (uint64_t* p = slot(i)) store_u64(p, v);
}

void Publisher::set_port_active(bool active) {
  store_u32(&static_cast<Header*>(base_)->port_state, active ? kPortActive : kPortDown);
}

void Publisher::set_snapshot_ns(uint64_t ns) {
  store_u64(&static_cast<Header*>(base_)->snapshot_ns, ns);
}

void Publisher::set_qps(std::span<const QpRow> rows) {
  set_qp_rows(base_, rows);
}

void Publisher::drop_qp(uint32_t qpn) {
  drop_qp_row(base_, qpn);
}

std::string cc_slot_name(size_t slot, size_t field) {
  char b[kNameLen];
  std::snprintf(b, sizeof b, "ccqp%02zu_%s", slot, kCcQpFields[field]);
  return b;
}

bool parse_cc_slot_name(const std::string& name, size_t* slot, size_t* field) {
  if (name.size() < 8 || name.compare(0, 4, "ccqp") != 0 || name[6] != '_') return false;
  if (name[4] < '0' || name[4] > '9' || name[5] < '0' || name[5] > '9') return false;
  const size_t n = size_t(name[4] - '0') * 10 + size_t(name[5] - '0');
  if (n >= kCcQpSlots) return false;
  for (size_t f = 0; f < kCcQpFieldCount; ++f)
    if (name.compare(7, std::string::npos, kCcQpFields[f]) == 0) {
      *slot = n;
      *field = f;
      return true;
    }
  return false;
}

}  // namespace uroce::stats_shm

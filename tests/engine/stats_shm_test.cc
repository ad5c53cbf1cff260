// The shared-memory statistics layout (engine/stats_shm.h): writer and reader agree, and a reader
// rejects whatever is not a complete layout of its own version without reading past the bytes it
// was given.
#include "engine/stats_shm.h"

#include <gtest/gtest.h>

#include <fcntl.h>
#include <infiniband/verbs.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

namespace uroce::stats_shm {
namespace {

Identity identity(const std::string& device) {
  Identity id;
  id.pid = getpid();
  auto self = proc_info(id.pid);
  EXPECT_TRUE(self.has_value());
  if (self) {
    id.start_time = self->start_time;
    id.comm = self->comm;
  }
  id.device = device;
  id.ip = wire::IpAddr(0x7f470102);  // 127.71.1.2
  id.netdev = "lo";
  id.mtu = 4096;
  return id;
}

// A device name no other test (or earlier run of this one) uses.
std::string unique_device(const char* stem) {
  static int n = 0;
  return std::string(stem) + std::to_string(getpid()) + "_" + std::to_string(n++);
}

// An 8-byte-aligned buffer holding a layout, as a mapping would.
std::vector<uint64_t> layout(const Identity& id, const std::vector<std::string>& names) {
  std::vector<uint64_t> buf((layout_size(names.size()) + 7) / 8);
  EXPECT_TRUE(write_layout(buf.data(), id, names));
  return buf;
}

Entry* entries(std::vector<uint64_t>& buf) {
  return reinterpret_cast<Entry*>(reinterpret_cast<char*>(buf.data()) + sizeof(Header));
}

bool exists(const std::string& path) {
  return access(path.c_str(), F_OK) == 0;
}

// The per-QP counters' one list (transport/qp_counters.h) feeds the struct, the published names
// and the sums: the names are the ones `uroce stats` has always shown, in that order, each fits an
// entry, and the sum adds every field.
TEST(StatsShmTest, QpCountersArePublishedFromTheirOneList) {
  std::vector<std::string> names;
  for_each_qp_counter(transport::QpCounters{},
                      [&names](const char* name, uint64_t) { names.emplace_back(name); });
  const std::vector<std::string> want = {"qp_sent_pkts",
                                         "qp_rcvd_pkts",
                                         "qp_sent_bytes",
                                         "qp_rcvd_bytes",
                                         "retransmitted_pkts",
                                         "send_window_cuts",
                                         "early_retransmits",
                                         "local_ack_timeout_err",
                                         "rcvd_seq_err",
                                         "implied_nak_seq_err",
                                         "rcvd_rnr_err",
                                         "send_rnr_err",
                                         "rnr_waits",
                                         "rnr_wait_drops",
                                         "out_of_seq_request",
                                         "out_of_sequence",
                                         "duplicate_request",
                                         "retry_exceeded_err",
                                         "retry_rnr_exceeded_err",
                                         "completer_retry_err",
                                         "send_err",
                                         "qp_dropped_pkts",
                                         "qkey_violation",
                                         "out_of_buffer",
                                         "uc_dropped_msgs",
                                         "xrc_srq_invalid",
                                         "np_ecn_marked_roce_packets",
                                         "np_cnp_sent",
                                         "rp_cnp_handled",
                                         "rp_cnp_ignored",
                                         "sr_ooo_accepted",
                                         "sr_sack_sent",
                                         "sr_sack_rcvd",
                                         "sr_selective_resends",
                                         "sr_read_placed",
                                         "mp_sprayed_pkts",
                                         "mp_path_rotations",
                                         "mp_ecn_rotations",
                                         "ack_riders_rcvd"};
  EXPECT_EQ(names, want);
  EXPECT_EQ(names.size(), transport::kQpCounterCount);
  for (const std::string& n : names) EXPECT_LT(n.size(), kNameLen) << n;

  transport::QpCounters a;
  uint64_t v = 0;
  for_each_qp_counter(a, [&v](const char*, uint64_t& c) { c = ++v; });
  transport::QpCounters sum;
  sum += a;
  sum += a;
  v = 0;
  for_each_qp_counter(sum, [&v](const char* name, uint64_t c) { EXPECT_EQ(c, 2 * ++v) << name; });
  EXPECT_EQ(sum.sent_pkts, 2u);                                    // the first row
  EXPECT_EQ(sum.ack_riders_rcvd, 2 * transport::kQpCounterCount);  // the last
}

TEST(StatsShmTest, LayoutRoundTrip) {
  Identity id = identity("uroce7");
  std::vector<std::string> names = {"rcvd_pkts", "sent_pkts", std::string(40, 'x')};
  auto buf = layout(id, names);
  entries(buf)[0].value = 12;
  entries(buf)[1].value = 1ull << 40;
  reinterpret_cast<Header*>(buf.data())->port_state = kPortActive;
  std::string err;
  auto s = parse(buf.data(), layout_size(names.size()), &err);
  ASSERT_TRUE(s) << err;
  EXPECT_EQ(s->id.pid, id.pid);
  EXPECT_EQ(s->id.start_time, id.start_time);
  EXPECT_EQ(s->id.comm, id.comm);
  EXPECT_EQ(s->id.device, "uroce7");
  EXPECT_EQ(s->id.ip, id.ip);
  EXPECT_EQ(s->id.netdev, "lo");
  EXPECT_EQ(s->id.mtu, 4096u);
  EXPECT_EQ(s->port_state, kPortActive);
  ASSERT_EQ(s->counters.size(), 3u);
  EXPECT_EQ(s->counters[0], std::make_pair(std::string("rcvd_pkts"), uint64_t{12}));
  EXPECT_EQ(s->counters[1], std::make_pair(std::string("sent_pkts"), uint64_t{1} << 40));
  EXPECT_EQ(s->counters[2].first, std::string(kNameLen - 1, 'x'));  // cut, still terminated
}

TEST(StatsShmTest, RejectsOtherMagicAndVersion) {
  auto buf = layout(identity("u"), {"a"});
  size_t len = layout_size(1);
  std::string err;
  reinterpret_cast<Header*>(buf.data())->version = kLayoutVersion + 1;
  EXPECT_FALSE(parse(buf.data(), len, &err));
  EXPECT_NE(err.find("version"), std::string::npos) << err;
  reinterpret_cast<Header*>(buf.data())->version = kLayoutVersion;
  ASSERT_TRUE(parse(buf.data(), len, &err)) << err;
  reinterpret_cast<Header*>(buf.data())->magic ^= 1;
  EXPECT_FALSE(parse(buf.data(), len, &err));
  EXPECT_NE(err.find("not a uroce"), std::string::npos) << err;
}

TEST(StatsShmTest, RejectsEveryTruncation) {
  std::vector<std::string> names = {"a", "b", "c"};
  auto buf = layout(identity("u"), names);
  size_t full = layout_size(names.size());
  // Copied into a buffer of exactly `len` bytes, so reading past it is a sanitizer error.
  for (size_t len = 0; len < full; ++len) {
    auto bytes = std::make_unique<char[]>(len + 1);
    std::memcpy(bytes.get(), buf.data(), len);
    std::string err;
    EXPECT_FALSE(parse(bytes.get(), len, &err)) << len;
    EXPECT_FALSE(err.empty());
  }
  EXPECT_TRUE(parse(buf.data(), full, nullptr));
}

TEST(StatsShmTest, RejectsInconsistentSizes) {
  std::string err;
  auto buf = layout(identity("u"), {"a", "b"});
  auto* h = reinterpret_cast<Header*>(buf.data());
  h->n_entries = 0xffffffff;  // would read far past the file
  EXPECT_FALSE(parse(buf.data(), layout_size(2), &err));
  h->n_entries = 2;
  h->entry_size = 8;  // smaller than an entry
  EXPECT_FALSE(parse(buf.data(), layout_size(2), &err));
  h->entry_size = sizeof(Entry);
  h->header_size = 0x7fffffff;
  EXPECT_FALSE(parse(buf.data(), layout_size(2), &err));
  h->header_size = sizeof(Header);
  EXPECT_TRUE(parse(buf.data(), layout_size(2), &err)) << err;
}

TEST(StatsShmTest, UnterminatedStringsAreCutAtTheirField) {
  auto buf = layout(identity("u"), {"a"});
  auto* h = reinterpret_cast<Header*>(buf.data());
  std::memset(h->device, 'd', sizeof h->device);
  std::memset(h->netdev, 'n', sizeof h->netdev);
  std::memset(entries(buf)[0].name, 'e', kNameLen);
  auto s = parse(buf.data(), layout_size(1), nullptr);
  ASSERT_TRUE(s);
  EXPECT_EQ(s->id.device, std::string(kNameLen, 'd'));
  EXPECT_EQ(s->id.netdev, std::string(kNetdevLen, 'n'));
  EXPECT_EQ(s->counters[0].first, std::string(kNameLen, 'e'));
}

TEST(StatsShmTest, ReadFileRejectsTruncatedFile) {
  auto buf = layout(identity("u"), {"a", "b"});
  char path[] = "/tmp/uroce-stats-test.XXXXXX";
  int fd = mkstemp(path);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(write(fd, buf.data(), layout_size(2) - 3), ssize_t(layout_size(2) - 3));
  close(fd);
  std::string err;
  EXPECT_FALSE(read_file(path, &err));
  EXPECT_NE(err.find("truncated"), std::string::npos) << err;
  ASSERT_EQ(truncate(path, 0), 0);  // empty
  EXPECT_FALSE(read_file(path, &err));
  unlink(path);
  EXPECT_FALSE(read_file(path, &err));  // gone
}

TEST(StatsShmTest, PublisherRoundTripAndUnlink) {
  std::string dev = unique_device("pub");
  std::string err;
  auto pub = Publisher::create(identity(dev), {"x", "y"}, &err);
  ASSERT_NE(pub, nullptr) << err;
  EXPECT_EQ(pub->path(), std::string(kShmDir) + shm_name(getpid(), dev));
  pub->set(1, 77);
  *pub->slot(0) = 5;  // a counter bound to its slot writes here
  pub->set_port_active(true);
  pub->set_snapshot_ns(123);
  EXPECT_EQ(pub->slot(2), nullptr);
  auto files = list_files();
  EXPECT_NE(std::find(files.begin(), files.end(), pub->path()), files.end());
  auto s = read_file(pub->path(), &err);
  ASSERT_TRUE(s) << err;
  EXPECT_EQ(s->id.device, dev);
  EXPECT_EQ(s->port_state, kPortActive);
  EXPECT_EQ(s->snapshot_ns, 123u);
  EXPECT_EQ(s->counters[0].second, 5u);
  EXPECT_EQ(s->counters[1].second, 77u);
  EXPECT_TRUE(publisher_alive(s->id));
  std::string path = pub->path();
  pub.reset();
  EXPECT_FALSE(exists(path));
}

TEST(StatsShmTest, SecondPublisherOfTheSameDeviceIsRefused) {
  std::string dev = unique_device("dup");
  std::string err;
  auto first = Publisher::create(identity(dev), {"x"}, &err);
  ASSERT_NE(first, nullptr) << err;
  first->set(0, 9);
  EXPECT_EQ(Publisher::create(identity(dev), {"x"}, &err), nullptr);
  EXPECT_NE(err.find("another open device"), std::string::npos) << err;
  auto s = read_file(first->path(), &err);  // untouched
  ASSERT_TRUE(s) << err;
  EXPECT_EQ(s->counters[0].second, 9u);
}

TEST(StatsShmTest, LeftoverOfADeadProcessIsReplaced) {
  std::string dev = unique_device("old");
  Identity old = identity(dev);
  old.start_time += 1;  // the same pid, an earlier process
  auto buf = layout(old, {"x"});
  std::string name = shm_name(getpid(), dev);
  int fd = shm_open(name.c_str(), O_RDWR | O_CREAT | O_EXCL, 0644);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(write(fd, buf.data(), layout_size(1)), ssize_t(layout_size(1)));
  close(fd);
  auto s = read_file(std::string(kShmDir) + name, nullptr);
  ASSERT_TRUE(s);
  EXPECT_FALSE(publisher_alive(s->id));  // start time differs
  std::string err;
  auto pub = Publisher::create(identity(dev), {"x", "y"}, &err);
  ASSERT_NE(pub, nullptr) << err;
  s = read_file(pub->path(), &err);
  ASSERT_TRUE(s) << err;
  EXPECT_EQ(s->counters.size(), 2u);
  EXPECT_TRUE(publisher_alive(s->id));
}

// A process killed with its device open leaves its file; the next device to publish removes the
// files of this user's processes that no longer run, and keeps those of live ones.
TEST(StatsShmTest, APublisherRemovesTheFilesOfDeadProcesses) {
  char dir[] = "/tmp/uroce-stats-dead.XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  auto put = [&](const Identity& id, pid_t pid) {
    auto buf = layout(id, {"x"});
    const std::string path = std::string(dir) + "/uroce." + std::to_string(pid) + "." + id.device;
    std::ofstream(path, std::ios::binary)
        .write(reinterpret_cast<const char*>(buf.data()),
               static_cast<std::streamsize>(layout_size(1)));
    return path;
  };
  Identity dead = identity("uroce0");
  dead.start_time += 1;  // the same pid, an earlier process
  const std::string dead_path = put(dead, getpid());
  const std::string live_path = put(identity("uroce1"), getpid());
  const std::string other_path = std::string(dir) + "/uroce.1.garbage";
  std::ofstream(other_path) << "not a statistics file";
  EXPECT_EQ(remove_dead_files(dir), 1u);
  EXPECT_NE(access(dead_path.c_str(), F_OK), 0) << "the dead process's file is removed";
  EXPECT_EQ(access(live_path.c_str(), F_OK), 0) << "a live process's file stays";
  EXPECT_EQ(access(other_path.c_str(), F_OK), 0) << "a file of another layout is left alone";
  for (const auto& p : {dead_path, live_path, other_path}) unlink(p.c_str());
  rmdir(dir);
}

TEST(StatsShmTest, ExitedProcessIsNotAlive) {
  pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) _exit(0);
  Identity id;
  id.pid = child;
  auto info = proc_info(child);  // may be gone already; a zombie still has its stat
  if (info) id.start_time = info->start_time;
  ASSERT_EQ(waitpid(child, nullptr, 0), child);
  EXPECT_FALSE(proc_info(child).has_value());
  EXPECT_FALSE(publisher_alive(id));
  id.pid = 0;
  EXPECT_FALSE(publisher_alive(id));
}

TEST(StatsShmTest, BadDeviceNamesAreRefused) {
  std::string err;
  EXPECT_EQ(Publisher::create(identity("a/b"), {"x"}, &err), nullptr);
  EXPECT_EQ(Publisher::create(identity(""), {"x"}, &err), nullptr);
  EXPECT_EQ(Publisher::create(identity(std::string(kNameLen, 'a')), {"x"}, &err), nullptr);
}

TEST(StatsShmTest, ListFilesMatchesOnlyPublishedNames) {
  char dir[] = "/tmp/uroce-stats-dir.XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  for (const char* n : {"uroce.12.uroce0", "uroce.x.uroce0", "uroce.12.", "other", "uroce..a"})
    std::ofstream(std::string(dir) + "/" + n) << "";
  auto files = list_files(dir);
  ASSERT_EQ(files.size(), 1u);
  EXPECT_EQ(files[0], std::string(dir) + "/uroce.12.uroce0");
  for (const char* n : {"uroce.12.uroce0", "uroce.x.uroce0", "uroce.12.", "other", "uroce..a"})
    unlink((std::string(dir) + "/" + n).c_str());
  rmdir(dir);
}

TEST(StatsShmTest, PublishKnob) {
  const char* saved = std::getenv("UROCE_PUBLISH");
  std::string keep = saved ? saved : "";
  std::string err;
  unsetenv("UROCE_PUBLISH");
  EXPECT_TRUE(publishing_enabled(&err));
  setenv("UROCE_PUBLISH", "1", 1);
  EXPECT_TRUE(publishing_enabled(&err));
  setenv("UROCE_PUBLISH", "0", 1);
  err.clear();
  EXPECT_FALSE(publishing_enabled(&err));
  EXPECT_TRUE(err.empty());
  setenv("UROCE_PUBLISH", "no", 1);
  EXPECT_FALSE(publishing_enabled(&err));
  EXPECT_NE(err.find("UROCE_PUBLISH"), std::string::npos);
  if (saved)
    setenv("UROCE_PUBLISH", keep.c_str(), 1);
  else
    unsetenv("UROCE_PUBLISH");
}

// ---- the QP table ----

// A row whose every counter is `v` (and whose identity is derived from its QPN), so a reader can
// tell a whole row from a torn one.
QpRow row(uint32_t qpn, uint64_t v) {
  QpRow r;
  r.qpn = qpn;
  r.type = IBV_QPT_RC;
  r.state = IBV_QPS_RTS;
  r.peer_qpn = qpn + 0x100;
  r.peer_ip = wire::IpAddr(0x7f000000 | qpn);
  for_each_qp_counter(r.counters, [v](const char*, uint64_t& c) { c = v; });
  return r;
}

// Each row read back is exactly one row published: identity and every counter.
void expect_row(const QpRow& got, uint32_t qpn, uint64_t v) {
  EXPECT_EQ(got.qpn, qpn);
  EXPECT_EQ(got.type, uint32_t{IBV_QPT_RC});
  EXPECT_EQ(got.state, uint32_t{IBV_QPS_RTS});
  EXPECT_EQ(got.peer_qpn, qpn + 0x100);
  EXPECT_EQ(got.peer_ip, wire::IpAddr(0x7f000000 | qpn));
  for_each_qp_counter(got.counters, [&](const char* name, uint64_t c) {
    EXPECT_EQ(c, v) << "QP " << qpn << " " << name;
  });
}

std::vector<uint32_t> qpns(const Snapshot& s) {
  std::vector<uint32_t> out;
  for (const QpRow& r : s.qps) out.push_back(r.qpn);
  return out;
}

// Rows go in and come back out of a published file, sorted by QPN; a destroyed QP's row goes at
// once (drop_qp) and stays gone when the next snapshot rewrites the table; a QPN that comes back
// is a new row.
TEST(StatsShmTest, QpTableRoundTripAcrossADestroy) {
  const std::string dev = unique_device("qpt");
  std::string err;
  auto pub = Publisher::create(identity(dev), {"x"}, &err);
  ASSERT_TRUE(pub) << err;
  auto read = [&] {
    auto s = read_file(pub->path(), &err);
    EXPECT_TRUE(s) << err;
    return s ? *s : Snapshot{};
  };
  Snapshot s = read();
  EXPECT_TRUE(s.has_qp_table);
  EXPECT_TRUE(s.qps.empty());

  std::vector<QpRow> rows = {row(0x13, 3), row(0x11, 1), row(0x12, 2)};
  pub->set_qps(rows);
  s = read();
  ASSERT_EQ(qpns(s), (std::vector<uint32_t>{0x11, 0x12, 0x13}));
  EXPECT_EQ(s.qp_live, 3u);
  for (const QpRow& r : s.qps) expect_row(r, r.qpn, r.qpn - 0x10);

  pub->drop_qp(0x12);  // destroyed between two snapshots
  s = read();
  EXPECT_EQ(qpns(s), (std::vector<uint32_t>{0x11, 0x13}));
  EXPECT_EQ(s.qp_live, 2u);
  pub->drop_qp(0x77);  // no such row: nothing changes
  EXPECT_EQ(qpns(read()), (std::vector<uint32_t>{0x11, 0x13}));

  rows = {row(0x11, 10), row(0x13, 30)};  // the next snapshot
  pub->set_qps(rows);
  s = read();
  ASSERT_EQ(qpns(s), (std::vector<uint32_t>{0x11, 0x13}));
  expect_row(s.qps[0], 0x11, 10);
  expect_row(s.qps[1], 0x13, 30);

  rows = {row(0x12, 0)};  // 0x12 again, a new QP: its own counters, nothing of the old one
  pub->set_qps(rows);
  s = read();
  ASSERT_EQ(qpns(s), (std::vector<uint32_t>{0x12}));
  expect_row(s.qps[0], 0x12, 0);

  pub->set_qps({});
  s = read();
  EXPECT_TRUE(s.qps.empty());
  EXPECT_EQ(s.qp_live, 0u);
}

// More QPs than rows: the lowest QPNs get them, and qp_live says how many there are.
TEST(StatsShmTest, QpTableKeepsTheLowestQpnsWhenFull) {
  std::vector<std::string> names = {"x"};
  std::vector<uint64_t> buf((layout_size(names.size(), 2) + 7) / 8);
  ASSERT_TRUE(write_layout(buf.data(), identity("u"), names, 2));
  std::vector<QpRow> rows = {row(0x30, 1), row(0x10, 1), row(0x20, 1)};
  set_qp_rows(buf.data(), rows);
  std::string err;
  auto s = parse(buf.data(), layout_size(names.size(), 2), &err);
  ASSERT_TRUE(s) << err;
  EXPECT_EQ(qpns(*s), (std::vector<uint32_t>{0x10, 0x20}));
  EXPECT_EQ(s->qp_live, 3u);
}

// A reader in another thread (as `uroce top` in another process) copying the table while the
// publisher rewrites it, QPs coming and going, never sees a row half-written, a row twice or a
// row of a QP that is not in the set it was published with.
TEST(StatsShmTest, QpTableReaderNeverSeesATornTable) {
  std::vector<std::string> names = {"x"};
  const size_t len = layout_size(names.size(), 8);
  std::vector<uint64_t> buf((len + 7) / 8);
  ASSERT_TRUE(write_layout(buf.data(), identity("u"), names, 8));
  std::atomic<bool> done{false};
  std::thread writer([&] {
    for (uint64_t gen = 1; gen <= 20000; ++gen) {
      // Generation g publishes QPs 0x10 .. 0x10 + g % 6, every counter g; odd generations also
      // destroy one of them between snapshots.
      std::vector<QpRow> rows;
      for (uint32_t q = 0; q <= gen % 6; ++q) rows.push_back(row(0x10 + q, gen));
      set_qp_rows(buf.data(), rows);
      if (gen % 2) drop_qp_row(buf.data(), 0x10 + uint32_t(gen % 3));
    }
    done = true;
  });
  size_t reads = 0, torn = 0;
  while (!done || reads == 0) {
    std::string err;
    auto s = parse(buf.data(), len, &err);
    ASSERT_TRUE(s) << err;
    ++reads;
    if (s->qp_table_busy || s->qps.empty()) continue;
    const uint64_t gen = s->qps[0].counters.sent_pkts;
    for (size_t i = 0; i < s->qps.size(); ++i) {
      const QpRow& r = s->qps[i];
      bool whole = r.peer_qpn == r.qpn + 0x100 && r.qpn >= 0x10 && r.qpn <= 0x10 + gen % 6 &&
                   (i == 0 || r.qpn > s->qps[i - 1].qpn);
      for_each_qp_counter(r.counters, [&](const char*, uint64_t c) { whole = whole && c == gen; });
      if (!whole) ++torn;
    }
  }
  writer.join();
  EXPECT_EQ(torn, 0u) << "of " << reads << " reads";
}

// The table's geometry is checked like the entries': a file cut anywhere inside it, or one
// claiming more rows than it holds, is refused, never read past.
TEST(StatsShmTest, QpTableSizesAreChecked) {
  std::vector<std::string> names = {"a"};
  const size_t full = layout_size(names.size(), 3);
  std::vector<uint64_t> buf((full + 7) / 8);
  ASSERT_TRUE(write_layout(buf.data(), identity("u"), names, 3));
  std::vector<QpRow> rows = {row(0x11, 5)};
  set_qp_rows(buf.data(), rows);
  for (size_t len = layout_size(names.size()); len < full; len += 8) {
    std::vector<uint64_t> cut((len + 7) / 8);
    std::memcpy(cut.data(), buf.data(), len);
    EXPECT_FALSE(parse(cut.data(), len, nullptr)) << len;
  }
  auto* h = reinterpret_cast<Header*>(buf.data());
  h->qp_capacity = 1u << 20;
  EXPECT_FALSE(parse(buf.data(), full, nullptr));
  h->qp_capacity = 3;
  h->qp_row_size = 8;  // smaller than a row
  EXPECT_FALSE(parse(buf.data(), full, nullptr));
  h->qp_row_size = static_cast<uint32_t>((kQpRowWords + transport::kQpCounterCount) * 8);
  std::string err;
  auto s = parse(buf.data(), full, &err);
  ASSERT_TRUE(s) << err;
  ASSERT_EQ(s->qps.size(), 1u);
  expect_row(s->qps[0], 0x11, 5);
}

// Columns are found by name: one this reader does not know is skipped, the others still land in
// their fields. A file of a publisher whose header predates the table (120 bytes) has none.
TEST(StatsShmTest, QpTableColumnsByNameAndOlderFilesWithout) {
  std::vector<std::string> names = {"a"};
  const size_t full = layout_size(names.size(), 1);
  std::vector<uint64_t> buf((full + 7) / 8);
  ASSERT_TRUE(write_layout(buf.data(), identity("u"), names, 1));
  std::vector<QpRow> rows = {row(0x11, 9)};
  set_qp_rows(buf.data(), rows);
  auto* h = reinterpret_cast<Header*>(buf.data());
  char* col0 = reinterpret_cast<char*>(buf.data()) + h->qp_table_offset;
  ASSERT_STREQ(col0, "qp_sent_pkts");
  std::strcpy(col0, "some_future_counter");
  auto s = parse(buf.data(), full, nullptr);
  ASSERT_TRUE(s);
  ASSERT_EQ(s->qps.size(), 1u);
  EXPECT_EQ(s->qps[0].counters.sent_pkts, 0u);  // its column is unknown now
  EXPECT_EQ(s->qps[0].counters.rcvd_pkts, 9u);

  // The older layout: the entries right after a 120-byte header, nothing after them.
  std::vector<uint64_t> old((120 + sizeof(Entry) + 7) / 8);
  std::memcpy(old.data(), buf.data(), 120);
  std::memcpy(reinterpret_cast<char*>(old.data()) + 120,
              reinterpret_cast<char*>(buf.data()) + sizeof(Header), sizeof(Entry));
  reinterpret_cast<Header*>(old.data())->header_size = 120;
  std::string err;
  s = parse(old.data(), 120 + sizeof(Entry), &err);
  ASSERT_TRUE(s) << err;
  EXPECT_FALSE(s->has_qp_table);
  ASSERT_EQ(s->counters.size(), 1u);
  EXPECT_EQ(s->counters[0].first, "a");
}

TEST(StatsShmTest, AnIpv6DeviceAddressAndThe152ByteHeaderBeforeIt) {
  Identity id = identity("u6");
  id.ip = *wire::IpAddr::parse("fd00::1");
  std::vector<std::string> names = {"a"};
  auto buf = layout(id, names);
  auto s = parse(buf.data(), layout_size(names.size()), nullptr);
  ASSERT_TRUE(s);
  EXPECT_EQ(s->id.ip.to_string(), "fd00::1");
  EXPECT_EQ(reinterpret_cast<Header*>(buf.data())->ipv4, 0u);  // for readers of 152 bytes

  // A publisher from before the 16-byte address: a 152-byte header, the entries right after it,
  // the address in `ipv4` only.
  constexpr size_t kOld = offsetof(Header, ip);
  static_assert(kOld == 152);
  Identity v4 = identity("u4");
  auto full = layout(v4, names);
  std::vector<uint64_t> old((kOld + sizeof(Entry) + 7) / 8);
  std::memcpy(old.data(), full.data(), kOld);
  std::memcpy(reinterpret_cast<char*>(old.data()) + kOld,
              reinterpret_cast<char*>(full.data()) + sizeof(Header), sizeof(Entry));
  reinterpret_cast<Header*>(old.data())->header_size = kOld;
  std::string err;
  s = parse(old.data(), kOld + sizeof(Entry), &err);
  ASSERT_TRUE(s) << err;
  EXPECT_EQ(s->id.ip, v4.ip);
  EXPECT_EQ(s->id.ip.to_string(), "127.71.1.2");
  ASSERT_EQ(s->counters.size(), 1u);
  EXPECT_EQ(s->counters[0].first, "a");
}

}  // namespace
}  // namespace uroce::stats_shm

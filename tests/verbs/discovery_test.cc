// Discovery through libc (src/verbs/discovery.cc): this binary links liburoce, whose definitions
// of stat, open, opendir … interpose on glibc's as they do under uroce-run, so each test calls
// libc as UCX, Python or coreutils would and checks what the uroce device disc0 (127.0.23.1, set
// by ctest) looks like — and that every other path behaves as without liburoce.
#include <dirent.h>
#include <fcntl.h>
#include <infiniband/verbs.h>
#include <limits.h>
#include <net/if.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

extern "C" int __xstat(int ver, const char* path, struct stat* buf);
extern "C" int __open_2(const char* path, int flags);

namespace {

constexpr const char* kDev = "/sys/class/infiniband/disc0";
constexpr const char* kNode = "/dev/infiniband/disc0";

std::string slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

std::string read_fd(int fd) {
  std::string out;
  char buf[256];
  ssize_t n;
  while ((n = read(fd, buf, sizeof buf)) > 0) out.append(buf, static_cast<size_t>(n));
  return out;
}

std::vector<std::string> list(const char* dir) {
  std::vector<std::string> names;
  DIR* d = opendir(dir);
  if (!d) return names;
  while (dirent* e = readdir(d)) names.emplace_back(e->d_name);
  closedir(d);
  std::sort(names.begin(), names.end());
  return names;
}

bool has(const std::vector<std::string>& v, const std::string& s) {
  return std::find(v.begin(), v.end(), s) != v.end();
}

class DiscoveryTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* devs = getenv("UROCE_DEVICES");
    if (!devs || std::strcmp(devs, "disc0=127.0.23.1") != 0)
      GTEST_SKIP() << "run by ctest, with UROCE_DEVICES=disc0=127.0.23.1";
    struct stat st;
    if (syscall(SYS_newfstatat, AT_FDCWD, kDev, &st, 0) == 0)
      GTEST_SKIP() << kDev << " exists in the real sysfs";
  }
};

TEST_F(DiscoveryTest, TheClassDirectoryListsTheDevice) {
  struct stat st;
  ASSERT_EQ(stat("/sys/class/infiniband", &st), 0) << strerror(errno);
  EXPECT_TRUE(S_ISDIR(st.st_mode));  // Open MPI's check (opal_common_verbs_check_basics)
  const auto names = list("/sys/class/infiniband");
  EXPECT_TRUE(has(names, "disc0"));
  EXPECT_TRUE(has(names, "."));
  EXPECT_TRUE(has(names, ".."));
  EXPECT_EQ(list(kDev), (std::vector<std::string>{".", "..", "device", "fw_ver", "node_guid",
                                                  "node_type", "ports", "sys_image_guid"}));
  EXPECT_EQ(list("/sys/class/infiniband/disc0/device/net"),
            (std::vector<std::string>{".", "..", "lo"}));
}

TEST_F(DiscoveryTest, FilesReadAsTheKernelWritesThem) {
  const std::string port = std::string(kDev) + "/ports/1";
  EXPECT_EQ(slurp(port + "/gid_attrs/types/0"), "RoCE v2\n");
  EXPECT_EQ(slurp(port + "/gid_attrs/ndevs/0"), "lo\n");
  EXPECT_EQ(slurp(port + "/gids/0"), "0000:0000:0000:0000:0000:ffff:7f00:1701\n");
  EXPECT_EQ(slurp(port + "/link_layer"), "Ethernet\n");
  EXPECT_EQ(slurp(port + "/state"), "4: ACTIVE\n");
  EXPECT_EQ(slurp(std::string(kDev) + "/node_type"), "1: CA\n");

  // Every open entry point: open, open64, openat, __open_2, fopen.
  const std::string types = port + "/gid_attrs/types/0";
  for (int variant = 0; variant < 4; ++variant) {
    int fd = variant == 0   ? open(types.c_str(), O_RDONLY | O_CLOEXEC)
             : variant == 1 ? open64(types.c_str(), O_RDONLY)
             : variant == 2 ? openat(AT_FDCWD, types.c_str(), O_RDONLY)
                            : __open_2(types.c_str(), O_RDONLY);
    ASSERT_GE(fd, 0) << variant << ": " << strerror(errno);
    EXPECT_EQ(read_fd(fd), "RoCE v2\n") << variant;
    close(fd);
  }
  FILE* f = fopen(types.c_str(), "re");
  ASSERT_NE(f, nullptr);
  char line[32] = {};
  ASSERT_NE(fgets(line, sizeof line, f), nullptr);
  EXPECT_STREQ(line, "RoCE v2\n");
  fclose(f);
}

TEST_F(DiscoveryTest, StatLooksLikeSysfs) {
  const std::string types = std::string(kDev) + "/ports/1/gid_attrs/types/0";
  struct stat st;
  ASSERT_EQ(stat(types.c_str(), &st), 0);
  EXPECT_TRUE(S_ISREG(st.st_mode));
  EXPECT_EQ(st.st_mode & 07777, 0444u);
  EXPECT_EQ(st.st_size, 4096);  // sysfs attributes report a page whatever they hold
  struct stat st2;
  ASSERT_EQ(lstat(types.c_str(), &st2), 0);
  EXPECT_EQ(st.st_ino, st2.st_ino);
  ASSERT_EQ(fstatat(AT_FDCWD, types.c_str(), &st2, 0), 0);
  EXPECT_EQ(st.st_ino, st2.st_ino);
  ASSERT_EQ(__xstat(1, types.c_str(), &st2), 0);  // binaries built before glibc 2.33
  EXPECT_EQ(st.st_ino, st2.st_ino);
  struct statx sx;
  ASSERT_EQ(statx(AT_FDCWD, types.c_str(), 0, STATX_BASIC_STATS, &sx), 0);
  EXPECT_EQ(sx.stx_ino, st.st_ino);
  EXPECT_TRUE(S_ISREG(sx.stx_mode));
  ASSERT_EQ(stat(kDev, &st), 0);
  EXPECT_TRUE(S_ISDIR(st.st_mode));
  EXPECT_EQ(st.st_nlink, 4u);  // "." and its two subdirectories, ports and device
  EXPECT_EQ(access(types.c_str(), R_OK), 0);
  if (geteuid() != 0) {
    EXPECT_EQ(access(types.c_str(), W_OK), -1);
    EXPECT_EQ(errno, EACCES);
  }
}

TEST_F(DiscoveryTest, WritesAndDirectoryOpensAreRefused) {
  const std::string types = std::string(kDev) + "/ports/1/gid_attrs/types/0";
  EXPECT_EQ(open(types.c_str(), O_WRONLY), -1);
  EXPECT_EQ(errno, EACCES);  // sysfs: an attribute without a store method
  EXPECT_EQ(open(types.c_str(), O_RDONLY | O_DIRECTORY), -1);
  EXPECT_EQ(errno, ENOTDIR);
  EXPECT_EQ(fopen(types.c_str(), "w"), nullptr);
  EXPECT_EQ(errno, EACCES);
  EXPECT_EQ(open(kDev, O_RDONLY | O_DIRECTORY), -1);
  EXPECT_EQ(errno, EOPNOTSUPP);
  struct stat st;
  EXPECT_EQ(stat((std::string(kDev) + "/nothing").c_str(), &st), -1);
  EXPECT_EQ(errno, ENOENT);
  EXPECT_EQ(stat((std::string(kDev) + "/node_type/x").c_str(), &st), -1);
  EXPECT_EQ(errno, ENOTDIR);
  EXPECT_EQ(stat("/sys/class/infiniband/disc9", &st), -1);
  EXPECT_EQ(errno, ENOENT);
}

TEST_F(DiscoveryTest, TheDevNodeIsACharacterDeviceAsUcxWantsIt) {
  // uct_ib_device_is_accessible: stat, S_ISCHR, access(R_OK | W_OK).
  struct stat st;
  ASSERT_EQ(stat(kNode, &st), 0) << strerror(errno);
  EXPECT_TRUE(S_ISCHR(st.st_mode));
  EXPECT_EQ(access(kNode, R_OK | W_OK), 0);
  struct stat null_st;
  ASSERT_EQ(stat("/dev/null", &null_st), 0);
  EXPECT_EQ(st.st_rdev, null_st.st_rdev);  // what `uroce dev-nodes` makes: /dev/null's numbers
  const int fd = open(kNode, O_RDWR);
  ASSERT_GE(fd, 0);
  EXPECT_EQ(write(fd, "x", 1), 1);
  EXPECT_EQ(read_fd(fd), "");
  close(fd);
  EXPECT_TRUE(has(list("/dev/infiniband"), "disc0"));
  char buf[PATH_MAX];
  ASSERT_NE(realpath(kNode, buf), nullptr);
  EXPECT_STREQ(buf, kNode);
  EXPECT_EQ(readlink(kNode, buf, sizeof buf), -1);
  EXPECT_EQ(errno, EINVAL);
  EXPECT_EQ(stat("/dev/infiniband/rdma_cm", &st) == 0,
            access("/dev/infiniband/rdma_cm", F_OK) == 0);
}

TEST_F(DiscoveryTest, TheNetdevIsALinkToSysClassNet) {
  const std::string net = std::string(kDev) + "/device/net/lo";
  char buf[PATH_MAX] = {};
  ASSERT_EQ(readlink(net.c_str(), buf, sizeof buf), 18);
  EXPECT_STREQ(buf, "../../../../net/lo");
  struct stat st;
  ASSERT_EQ(lstat(net.c_str(), &st), 0);
  EXPECT_TRUE(S_ISLNK(st.st_mode));
  ASSERT_EQ(stat(net.c_str(), &st), 0);
  EXPECT_TRUE(S_ISDIR(st.st_mode));
  EXPECT_EQ(slurp(net + "/mtu"), slurp("/sys/class/net/lo/mtu"));
  EXPECT_EQ(list((net + "/").c_str()), list("/sys/class/net/lo/"));
  char want[PATH_MAX];
  ASSERT_NE(realpath("/sys/class/net/lo", want), nullptr);
  char* got = canonicalize_file_name(net.c_str());
  ASSERT_NE(got, nullptr);
  EXPECT_STREQ(got, want);
  free(got);
}

TEST_F(DiscoveryTest, DirectoryCallsWalkTheListing) {
  DIR* d = opendir(kDev);
  ASSERT_NE(d, nullptr);
  EXPECT_EQ(dirfd(d), -1);
  EXPECT_EQ(errno, ENOTSUP);
  std::vector<std::string> first;
  long middle = -1;
  while (dirent64* e = readdir64(d)) {
    first.emplace_back(e->d_name);
    if (first.size() == 3) middle = telldir(d);
    if (first.back() == "ports") {
      EXPECT_EQ(e->d_type, DT_DIR);
    }
    if (first.back() == "node_type") {
      EXPECT_EQ(e->d_type, DT_REG);
    }
  }
  ASSERT_EQ(first.size(), 8u);
  seekdir(d, middle);
  dirent entry;
  dirent* result = nullptr;
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"  // programs still call it
  ASSERT_EQ(readdir_r(d, &entry, &result), 0);
#pragma GCC diagnostic pop
  ASSERT_EQ(result, &entry);
  EXPECT_EQ(first[3], entry.d_name);
  rewinddir(d);
  dirent* again = readdir(d);
  ASSERT_NE(again, nullptr);
  EXPECT_EQ(first[0], again->d_name);
  EXPECT_EQ(closedir(d), 0);

  dirent** names = nullptr;
  const int n = scandir(kDev, &names, nullptr, alphasort);
  ASSERT_EQ(n, 8);
  EXPECT_STREQ(names[0]->d_name, ".");
  EXPECT_STREQ(names[7]->d_name, "sys_image_guid");
  for (int i = 0; i < n; ++i) free(names[i]);
  free(names);
}

TEST_F(DiscoveryTest, AnswersAgreeWithTheVerbs) {
  int num = 0;
  ibv_device** devs = ibv_get_device_list(&num);
  ASSERT_NE(devs, nullptr);
  ibv_device* dev = nullptr;
  for (int i = 0; i < num; ++i)
    if (std::strcmp(ibv_get_device_name(devs[i]), "disc0") == 0) dev = devs[i];
  ASSERT_NE(dev, nullptr);
  EXPECT_STREQ(dev->ibdev_path, kDev);
  ibv_context* ctx = ibv_open_device(dev);
  ASSERT_NE(ctx, nullptr);
  ibv_device_attr attr{};
  ASSERT_EQ(ibv_query_device(ctx, &attr), 0);
  EXPECT_EQ(slurp(std::string(kDev) + "/fw_ver"), std::string(attr.fw_ver) + "\n");
  const uint64_t guid = be64toh(attr.node_guid);
  char text[32];
  std::snprintf(text, sizeof text, "%04x:%04x:%04x:%04x\n", unsigned(guid >> 48),
                unsigned(guid >> 32) & 0xffff, unsigned(guid >> 16) & 0xffff,
                unsigned(guid & 0xffff));
  EXPECT_EQ(slurp(std::string(kDev) + "/node_guid"), text);
  ibv_port_attr port{};
  ASSERT_EQ(ibv_query_port(ctx, 1, &port), 0);
  EXPECT_EQ(list((std::string(kDev) + "/ports/1/gids").c_str()).size(),
            static_cast<size_t>(port.gid_tbl_len) + 2);
  EXPECT_EQ(slurp(std::string(kDev) + "/ports/1/state"),
            port.state == IBV_PORT_ACTIVE ? "4: ACTIVE\n" : "1: DOWN\n");
  ibv_gid_entry entry{};
  ASSERT_EQ(ibv_query_gid_ex(ctx, 1, 0, &entry, 0), 0);
  EXPECT_EQ(entry.gid_type, IBV_GID_TYPE_ROCE_V2);
  char ifname[IF_NAMESIZE] = {};
  ASSERT_NE(if_indextoname(entry.ndev_ifindex, ifname), nullptr);
  EXPECT_EQ(slurp(std::string(kDev) + "/ports/1/gid_attrs/ndevs/0"), std::string(ifname) + "\n");
  ibv_close_device(ctx);
  ibv_free_device_list(devs);
}

TEST_F(DiscoveryTest, ErrnoIsKeptOnSuccess) {
  struct stat st;
  errno = 4242;
  ASSERT_EQ(stat(kDev, &st), 0);
  EXPECT_EQ(errno, 4242);
  ASSERT_EQ(stat(kNode, &st), 0);
  EXPECT_EQ(errno, 4242);
  const int fd = open((std::string(kDev) + "/node_type").c_str(), O_RDONLY);
  ASSERT_GE(fd, 0);
  EXPECT_EQ(errno, 4242);
  close(fd);
  errno = 4242;
  ASSERT_EQ(stat("/", &st), 0);
  EXPECT_EQ(errno, 4242);
}

// Everything outside the two directories is the real file system's answer, errors included.
// sysfs attributes carry no extended attributes on a host without SELinux: getxattr fails with
// ENODATA and listxattr lists none, following a last link or not; other paths get the kernel's
// answer.
TEST_F(DiscoveryTest, ExtendedAttributesAreNone) {
  const std::string types = std::string(kDev) + "/ports/1/gid_attrs/types/0";
  char buf[256];
  EXPECT_EQ(getxattr(types.c_str(), "security.selinux", buf, sizeof buf), -1);
  EXPECT_EQ(errno, ENODATA);
  EXPECT_EQ(lgetxattr(types.c_str(), "security.selinux", buf, sizeof buf), -1);
  EXPECT_EQ(errno, ENODATA);
  EXPECT_EQ(listxattr(types.c_str(), buf, sizeof buf), 0);
  EXPECT_EQ(llistxattr(kDev, buf, sizeof buf), 0);

  char want[256];
  EXPECT_EQ(listxattr("/proc/self/exe", buf, sizeof buf),
            syscall(SYS_listxattr, "/proc/self/exe", want, sizeof want));
  EXPECT_EQ(llistxattr("/tmp", buf, sizeof buf),
            syscall(SYS_llistxattr, "/tmp", want, sizeof want));
  const ssize_t got = getxattr("/tmp", "user.uroce-none", buf, sizeof buf);
  const int got_errno = errno;
  EXPECT_EQ(got, syscall(SYS_getxattr, "/tmp", "user.uroce-none", want, sizeof want));
  EXPECT_EQ(got_errno, errno);
  EXPECT_EQ(lgetxattr("/tmp", "user.uroce-none", buf, sizeof buf),
            syscall(SYS_lgetxattr, "/tmp", "user.uroce-none", want, sizeof want));
}

TEST(DiscoveryPassthrough, OtherPathsAreUntouched) {
  struct stat ours, theirs;
  ASSERT_EQ(stat("/proc/self/exe", &ours), 0);
  ASSERT_EQ(syscall(SYS_newfstatat, AT_FDCWD, "/proc/self/exe", &theirs, 0), 0);
  EXPECT_EQ(ours.st_ino, theirs.st_ino);
  EXPECT_EQ(stat("/nonexistent/uroce", &ours), -1);
  EXPECT_EQ(errno, ENOENT);
  EXPECT_EQ(access("/sys/class/infiniband_verbs/abi_version", F_OK),
            static_cast<int>(
                syscall(SYS_faccessat, AT_FDCWD, "/sys/class/infiniband_verbs/abi_version", F_OK)));
  // A program's bug still gets the kernel's EFAULT. Called through pointers: glibc declares the
  // path nonnull, which UBSan checks at a direct call (the attribute is not part of the type), and
  // the point is what the interposed functions do with it.
  const char* volatile null_path = nullptr;
  int (*volatile stat_fn)(const char*, struct stat*) = &stat;
  int (*volatile open_fn)(const char*, int, ...) = &open;
  EXPECT_EQ(stat_fn(null_path, &ours), -1);
  EXPECT_EQ(errno, EFAULT);
  EXPECT_EQ(open_fn(null_path, O_RDONLY), -1);
  EXPECT_EQ(errno, EFAULT);
  const auto here = list("/proc/self");
  EXPECT_TRUE(has(here, "status"));
  char tmpl[] = "/tmp/uroce-discovery-XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  const std::string file = std::string(tmpl) + "/f";
  FILE* f = fopen(file.c_str(), "w");
  ASSERT_NE(f, nullptr);
  fputs("x", f);
  fclose(f);
  EXPECT_EQ(slurp(file), "x");
  unlink(file.c_str());
  rmdir(tmpl);
}

// Readers of real and of the view's directories on several threads at once.
TEST_F(DiscoveryTest, ThreadsListAndStatAtOnce) {
  std::atomic<int> bad{0};
  std::vector<std::thread> threads;
  const auto want_dev = list(kDev);
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 300; ++i) {
        if (list(kDev) != want_dev) ++bad;
        if (!has(list("/proc/self"), "status")) ++bad;
        struct stat st;
        if (stat(t % 2 ? kNode : "/dev/null", &st) != 0 || !S_ISCHR(st.st_mode)) ++bad;
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(bad.load(), 0);
}

}  // namespace

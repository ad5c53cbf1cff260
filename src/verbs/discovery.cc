// Discovery without a root step: liburoce answers the file-system look-ups middleware makes about
// RDMA devices — /sys/class/infiniband/<dev>/… and /dev/infiniband/<dev> — for uroce devices,
// from the view of sysfs_view.h, and passes every other path through untouched. It interposes
// glibc's path-taking entry points (each at glibc's own symbol version, liburoce.map): the stat
// family (stat, lstat, fstatat, their *64 twins, the __xstat ABI of binaries built before glibc
// 2.33, statx), access, faccessat, euidaccess, open and openat with their *64 twins and _FORTIFY
// variants (__open_2 …), fopen, opendir with the DIR calls, scandir, readlink (and _chk), realpath
// (and _chk), canonicalize_file_name, and the xattr look-ups `ls -l` makes. docs/middleware.md
// ("Discovery") lists who reads what, and why a per-user mount of a real directory was not the way.
//
// The rules every entry point keeps:
// - Unrelated paths cost one inline prefix test (SysfsView::claims: the path starts with
//   "/sys/class/infiniband" or "/dev/infiniband") before the real call. errno is left to the real
//   call; nothing else is touched.
// - The real file system wins: a claimed path that exists (lstat succeeds, or fails otherwise than
//   with ENOENT) is passed through, so a kernel device or a node `uroce dev-nodes` made is seen as
//   it is. Listing /sys/class/infiniband or /dev/infiniband merges the real entries with the
//   view's.
// - The real functions come from dlvsym(RTLD_NEXT) (so other interposers behind liburoce keep
//   working), resolved all at once by a constructor, or on the first call when another library's
//   constructor calls before it. A call made on the same thread while that resolution runs (an
//   allocator interposed under dlvsym that opens a file) is served by the system call itself, so
//   nothing recurses through dlsym.
// - Async-signal-safety: the passthrough adds no lock and no allocation. Once the view exists, the
//   view's answers to stat, open, access and readlink allocate nothing either (memfd_create, write
//   and lseek serve a file's text); building the view, on the first claimed look-up, reads the
//   configuration like ibv_get_device_list and is not async-signal-safe.
// - Only absolute paths are looked at; a path relative to a directory fd or to the working
//   directory (after a chdir into the view) passes through. A directory of the view can be
//   listed (opendir, scandir) but not opened as a file descriptor (open: EOPNOTSUPP), and dirfd()
//   of its DIR reports ENOTSUP, as POSIX allows.
// - UROCE_DISCOVERY=0 turns the view off (everything passes through).
#undef _FORTIFY_SOURCE  // this file defines the functions fortification wraps
#include <dirent.h>
#include <dlfcn.h>
#include <endian.h>
#include <fcntl.h>
#include <limits.h>
#include <net/if.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <mutex>
#include <new>
#include <unordered_set>
#include <utility>
#include <vector>

#include "objects.h"
#include "provider.h"
#include "sysfs_view.h"

#ifndef UROCE_VERSION_STRING
#error "UROCE_VERSION_STRING must be defined by the build"
#endif
#if !defined(__x86_64__) || !defined(__GLIBC__)
#error "liburoce.map names glibc's x86_64 symbol versions for the discovery entry points"
#endif

static_assert(sizeof(struct stat) == sizeof(struct stat64) &&
              sizeof(struct dirent) == sizeof(struct dirent64));

// glibc 2.33 dropped these from <sys/stat.h>; binaries built before it still call them. Version 1
// (_STAT_VER_LINUX) is x86_64's struct stat.
extern "C" {
int __xstat(int ver, const char* path, struct stat* buf);
int __xstat64(int ver, const char* path, struct stat64* buf);
int __lxstat(int ver, const char* path, struct stat* buf);
int __lxstat64(int ver, const char* path, struct stat64* buf);
int __fxstatat(int ver, int dirfd, const char* path, struct stat* buf, int flags);
int __fxstatat64(int ver, int dirfd, const char* path, struct stat64* buf, int flags);
// _FORTIFY_SOURCE's checked variants (bits/fcntl2.h, bits/unistd.h, bits/stdlib.h).
int __open_2(const char* path, int flags);
int __open64_2(const char* path, int flags);
int __openat_2(int dirfd, const char* path, int flags);
int __openat64_2(int dirfd, const char* path, int flags);
ssize_t __readlink_chk(const char* path, char* buf, size_t len, size_t buflen);
ssize_t __readlinkat_chk(int dirfd, const char* path, char* buf, size_t len, size_t buflen);
char* __realpath_chk(const char* path, char* resolved, size_t resolvedlen);
}

#define UROCE_EXPORT extern "C" __attribute__((visibility("default")))

namespace uv = uroce::verbs;
using uv::SysfsView;

namespace {

using DirFilter = int (*)(const struct dirent*);
using DirCompare = int (*)(const struct dirent**, const struct dirent**);
using DirFilter64 = int (*)(const struct dirent64*);
using DirCompare64 = int (*)(const struct dirent64**, const struct dirent64**);

// ---- the real functions ---------------------------------------------------------------------

// One slot per interposed function: the name and glibc version it is exported at (liburoce.map)
// and the real definition behind liburoce.
struct Libc {
  int (*open)(const char*, int, ...);
  int (*open64)(const char*, int, ...);
  int (*open_2)(const char*, int);
  int (*open64_2)(const char*, int);
  int (*openat)(int, const char*, int, ...);
  int (*openat64)(int, const char*, int, ...);
  int (*openat_2)(int, const char*, int);
  int (*openat64_2)(int, const char*, int);
  FILE* (*fopen)(const char*, const char*);
  FILE* (*fopen64)(const char*, const char*);
  int (*stat)(const char*, struct stat*);
  int (*stat64)(const char*, struct stat64*);
  int (*lstat)(const char*, struct stat*);
  int (*lstat64)(const char*, struct stat64*);
  int (*fstatat)(int, const char*, struct stat*, int);
  int (*fstatat64)(int, const char*, struct stat64*, int);
  int (*xstat)(int, const char*, struct stat*);
  int (*xstat64)(int, const char*, struct stat64*);
  int (*lxstat)(int, const char*, struct stat*);
  int (*lxstat64)(int, const char*, struct stat64*);
  int (*fxstatat)(int, int, const char*, struct stat*, int);
  int (*fxstatat64)(int, int, const char*, struct stat64*, int);
  int (*statx)(int, const char*, int, unsigned, struct statx*);
  int (*access)(const char*, int);
  int (*faccessat)(int, const char*, int, int);
  int (*euidaccess)(const char*, int);
  int (*eaccess)(const char*, int);
  ssize_t (*readlink)(const char*, char*, size_t);
  ssize_t (*readlinkat)(int, const char*, char*, size_t);
  ssize_t (*readlink_chk)(const char*, char*, size_t, size_t);
  ssize_t (*readlinkat_chk)(int, const char*, char*, size_t, size_t);
  char* (*realpath)(const char*, char*);
  char* (*realpath_chk)(const char*, char*, size_t);
  char* (*canonicalize_file_name)(const char*);
  DIR* (*opendir)(const char*);
  struct dirent* (*readdir)(DIR*);
  struct dirent64* (*readdir64)(DIR*);
  int (*readdir_r)(DIR*, struct dirent*, struct dirent**);
  int (*readdir64_r)(DIR*, struct dirent64*, struct dirent64**);
  int (*closedir)(DIR*);
  int (*dirfd)(DIR*);
  void (*rewinddir)(DIR*);
  void (*seekdir)(DIR*, long);
  long (*telldir)(DIR*);
  int (*scandir)(const char*, struct dirent***, DirFilter, DirCompare);
  int (*scandir64)(const char*, struct dirent64***, DirFilter64, DirCompare64);
  int (*scandirat)(int, const char*, struct dirent***, DirFilter, DirCompare);
  int (*scandirat64)(int, const char*, struct dirent64***, DirFilter64, DirCompare64);
  ssize_t (*getxattr)(const char*, const char*, void*, size_t);
  ssize_t (*lgetxattr)(const char*, const char*, void*, size_t);
  ssize_t (*listxattr)(const char*, char*, size_t);
  ssize_t (*llistxattr)(const char*, char*, size_t);
};

struct Slot {
  const char* name;
  const char* version;
  size_t offset;  // of the member in Libc
};

#define UROCE_SLOT(member, sym, ver) \
  { sym, ver, offsetof(Libc, member) }
constexpr Slot kSlots[] = {
    UROCE_SLOT(open, "open", "GLIBC_2.2.5"),
    UROCE_SLOT(open64, "open64", "GLIBC_2.2.5"),
    UROCE_SLOT(open_2, "__open_2", "GLIBC_2.7"),
    UROCE_SLOT(open64_2, "__open64_2", "GLIBC_2.7"),
    UROCE_SLOT(openat, "openat", "GLIBC_2.4"),
    UROCE_SLOT(openat64, "openat64", "GLIBC_2.4"),
    UROCE_SLOT(openat_2, "__openat_2", "GLIBC_2.7"),
    UROCE_SLOT(openat64_2, "__openat64_2", "GLIBC_2.7"),
    UROCE_SLOT(fopen, "fopen", "GLIBC_2.2.5"),
    UROCE_SLOT(fopen64, "fopen64", "GLIBC_2.2.5"),
    UROCE_SLOT(stat, "stat", "GLIBC_2.33"),
    UROCE_SLOT(stat64, "stat64", "GLIBC_2.33"),
    UROCE_SLOT(lstat, "lstat", "GLIBC_2.33"),
    UROCE_SLOT(lstat64, "lstat64", "GLIBC_2.33"),
    UROCE_SLOT(fstatat, "fstatat", "GLIBC_2.33"),
    UROCE_SLOT(fstatat64, "fstatat64", "GLIBC_2.33"),
    UROCE_SLOT(xstat, "__xstat", "GLIBC_2.2.5"),
    UROCE_SLOT(xstat64, "__xstat64", "GLIBC_2.2.5"),
    UROCE_SLOT(lxstat, "__lxstat", "GLIBC_2.2.5"),
    UROCE_SLOT(lxstat64, "__lxstat64", "GLIBC_2.2.5"),
    UROCE_SLOT(fxstatat, "__fxstatat", "GLIBC_2.4"),
    UROCE_SLOT(fxstatat64, "__fxstatat64", "GLIBC_2.4"),
    UROCE_SLOT(statx, "statx", "GLIBC_2.28"),
    UROCE_SLOT(access, "access", "GLIBC_2.2.5"),
    UROCE_SLOT(faccessat, "faccessat", "GLIBC_2.4"),
    UROCE_SLOT(euidaccess, "euidaccess", "GLIBC_2.2.5"),
    UROCE_SLOT(eaccess, "eaccess", "GLIBC_2.4"),
    UROCE_SLOT(readlink, "readlink", "GLIBC_2.2.5"),
    UROCE_SLOT(readlinkat, "readlinkat", "GLIBC_2.4"),
    UROCE_SLOT(readlink_chk, "__readlink_chk", "GLIBC_2.4"),
    UROCE_SLOT(readlinkat_chk, "__readlinkat_chk", "GLIBC_2.5"),
    UROCE_SLOT(realpath, "realpath", "GLIBC_2.3"),
    UROCE_SLOT(realpath_chk, "__realpath_chk", "GLIBC_2.4"),
    UROCE_SLOT(canonicalize_file_name, "canonicalize_file_name", "GLIBC_2.2.5"),
    UROCE_SLOT(opendir, "opendir", "GLIBC_2.2.5"),
    UROCE_SLOT(readdir, "readdir", "GLIBC_2.2.5"),
    UROCE_SLOT(readdir64, "readdir64", "GLIBC_2.2.5"),
    UROCE_SLOT(readdir_r, "readdir_r", "GLIBC_2.2.5"),
    UROCE_SLOT(readdir64_r, "readdir64_r", "GLIBC_2.2.5"),
    UROCE_SLOT(closedir, "closedir", "GLIBC_2.2.5"),
    UROCE_SLOT(dirfd, "dirfd", "GLIBC_2.2.5"),
    UROCE_SLOT(rewinddir, "rewinddir", "GLIBC_2.2.5"),
    UROCE_SLOT(seekdir, "seekdir", "GLIBC_2.2.5"),
    UROCE_SLOT(telldir, "telldir", "GLIBC_2.2.5"),
    UROCE_SLOT(scandir, "scandir", "GLIBC_2.2.5"),
    UROCE_SLOT(scandir64, "scandir64", "GLIBC_2.2.5"),
    UROCE_SLOT(scandirat, "scandirat", "GLIBC_2.15"),
    UROCE_SLOT(scandirat64, "scandirat64", "GLIBC_2.15"),
    UROCE_SLOT(getxattr, "getxattr", "GLIBC_2.3"),
    UROCE_SLOT(lgetxattr, "lgetxattr", "GLIBC_2.3"),
    UROCE_SLOT(listxattr, "listxattr", "GLIBC_2.3"),
    UROCE_SLOT(llistxattr, "llistxattr", "GLIBC_2.3"),
};
#undef UROCE_SLOT
static_assert(sizeof kSlots / sizeof kSlots[0] == sizeof(Libc) / sizeof(void*),
              "one slot per member of Libc");

Libc g_libc;  // written once, before g_resolved is set
std::atomic<bool> g_resolved{false};
std::mutex g_resolve_mu;
// Set while this thread resolves: a call it makes meanwhile (from inside dlvsym) must not resolve
// again. initial-exec: reading it never allocates (liburoce is loaded at start-up: preloaded or
// linked).
__attribute__((tls_model("initial-exec"))) thread_local bool t_resolving = false;

// The real functions, or null while this thread is resolving them (the caller then makes the
// system call itself).
const Libc* libc() {
  if (g_resolved.load(std::memory_order_acquire)) return &g_libc;
  if (t_resolving) return nullptr;
  const int saved = errno;
  std::lock_guard<std::mutex> g(g_resolve_mu);
  if (!g_resolved.load(std::memory_order_relaxed)) {
    t_resolving = true;
    // RTLD_NEXT finds what lies behind liburoce; libc's own handle covers a liburoce that came
    // after libc in the search order (nothing to pass on to then but libc).
    void* self_libc = dlopen("libc.so.6", RTLD_LAZY | RTLD_NOLOAD);
    for (const Slot& s : kSlots) {
      void* fn = dlvsym(RTLD_NEXT, s.name, s.version);
      if (!fn && self_libc) fn = dlvsym(self_libc, s.name, s.version);
      std::memcpy(reinterpret_cast<char*>(&g_libc) + s.offset, &fn, sizeof fn);
    }
    if (self_libc) dlclose(self_libc);
    t_resolving = false;
    g_resolved.store(true, std::memory_order_release);
  }
  errno = saved;
  return &g_libc;
}

// Resolved before main, so that the passthrough never takes the lock or calls dlvsym later.
__attribute__((constructor)) void resolve_at_load() {
  libc();
}

// The system calls behind the real functions, for the calls made during resolution.
int sys_openat(int dirfd, const char* path, int flags, mode_t mode) {
  return static_cast<int>(syscall(SYS_openat, dirfd, path, flags, mode));
}
int sys_fstatat(int dirfd, const char* path, struct stat* st, int flags) {
  return static_cast<int>(syscall(SYS_newfstatat, dirfd, path, st, flags));
}
int sys_faccessat(int dirfd, const char* path, int mode, int flags) {
  return flags ? static_cast<int>(syscall(SYS_faccessat2, dirfd, path, mode, flags))
               : static_cast<int>(syscall(SYS_faccessat, dirfd, path, mode));
}
ssize_t sys_readlinkat(int dirfd, const char* path, char* buf, size_t len) {
  return syscall(SYS_readlinkat, dirfd, path, buf, len);
}

// Real calls on claimed paths (always absolute: the dirfd is irrelevant).
int real_fstatat(const char* path, struct stat* st, int flags) {
  const Libc* c = libc();
  return c && c->fstatat ? c->fstatat(AT_FDCWD, path, st, flags)
                         : sys_fstatat(AT_FDCWD, path, st, flags);
}

// ---- the view -------------------------------------------------------------------------------

bool link_up(const std::string& netdev) {
  // The rule of ports/link_watch.h: administratively up and running. An interface that cannot be
  // asked about reads as up, as `uroce devices` shows it.
  ifreq ifr{};
  if (netdev.size() >= sizeof ifr.ifr_name) return true;
  std::memcpy(ifr.ifr_name, netdev.c_str(), netdev.size());
  const int s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (s < 0) return true;
  const bool known = ioctl(s, SIOCGIFFLAGS, &ifr) == 0;
  close(s);
  if (!known) return true;
  const unsigned flags = static_cast<unsigned>(ifr.ifr_flags);
  return (flags & IFF_UP) && (flags & IFF_RUNNING);
}

struct View {
  SysfsView view;
  struct stat sys_st {};  // of /sys and /dev: the device number and times the view's nodes report
  struct stat dev_st {};
};

std::atomic<const View*> g_view{nullptr};
std::once_flag g_view_once;

// The view of this process's devices (the registry's: UROCE_DEVICES), built on the first claimed
// look-up; null when there is nothing to show or UROCE_DISCOVERY=0.
const View* view() {
  if (const View* v = g_view.load(std::memory_order_acquire)) return v;
  const int saved = errno;
  std::call_once(g_view_once, [] {
    const char* on = getenv("UROCE_DISCOVERY");
    if (on && std::strcmp(on, "0") == 0) return;
    std::vector<uv::ViewDevice> devs;
    try {
      for (const uv::VDevice* d : uv::devices()) {
        uv::ViewDevice v;
        v.name = d->cfg.name;
        v.ipv4 = d->cfg.ipv4;
        v.netdev = d->cfg.netdev;
        v.roce_v1 = d->cfg.port == uroce::PortKind::kDpdk && d->cfg.dpdk.roce_v1;
        v.guid = be64toh(d->guid_be);
        v.fw_ver = "uroce " UROCE_VERSION_STRING;  // as ibv_query_device (query.cc)
        devs.push_back(std::move(v));
      }
      if (devs.empty()) return;
      auto* v = new View{SysfsView(devs, link_up)};  // lives until exit, like the devices
      real_fstatat("/sys", &v->sys_st, 0);
      real_fstatat("/dev", &v->dev_st, 0);
      g_view.store(v, std::memory_order_release);
    } catch (const std::exception&) {  // nothing may unwind through stat(); no view then
    }
  });
  errno = saved;
  return g_view.load(std::memory_order_acquire);
}

// True when the real file system answers for `path` (it exists, or looking fails otherwise than
// with ENOENT): then the call is passed through.
bool real_has(const char* path) {
  struct stat st;
  const int saved = errno;
  const bool has = real_fstatat(path, &st, AT_SYMLINK_NOFOLLOW) == 0 || errno != ENOENT;
  errno = saved;
  return has;
}

// What a claimed call does: pass the original through, answer from a node, go to a real path
// (a link out of the view, or the marker), or fail.
struct Answer {
  enum class What : uint8_t { kPass, kNode, kRealPath, kError } what = What::kPass;
  const View* v = nullptr;
  SysfsView::Found found;
  bool marker = false;  // kRealPath for /dev/infiniband/<dev>: the path is /dev/null
  // kRealPath: the real path to look up instead.
  const char* real_path() const { return marker ? SysfsView::kMarkerTarget : found.path; }
};

Answer answer(const char* path, bool follow) {
  Answer a;
  if (real_has(path)) return a;
  a.v = view();
  if (!a.v) return a;
  a.found = a.v->view.find(path, follow);
  using W = SysfsView::Found::What;
  switch (a.found.what) {
    case W::kNotOurs:
      return a;
    case W::kError:
      a.what = Answer::What::kError;
      return a;
    case W::kRewrite:
      a.what = Answer::What::kRealPath;
      return a;
    case W::kNode:
      if (a.found.node->kind == SysfsView::Kind::kMarker) {
        a.what = Answer::What::kRealPath;
        a.marker = true;
      } else {
        a.what = Answer::What::kNode;
      }
      return a;
  }
  return a;
}

int fail(int err) {
  errno = err;
  return -1;
}

// Carries out an answer for an entry point: `real` (the real call with the caller's other
// arguments) on the original path or on the real path instead, the error with `failed` (-1 or
// null) and errno, or `on_node` for a node of the view.
template <typename Real, typename OnNode>
auto serve(const Answer& a, const char* path, decltype(std::declval<Real>()(path)) failed,
           Real&& real, OnNode&& on_node) -> decltype(real(path)) {
  switch (a.what) {
    case Answer::What::kPass:
      return real(path);
    case Answer::What::kRealPath:
      return real(a.real_path());
    case Answer::What::kError:
      errno = a.found.error;
      return failed;
    case Answer::What::kNode:
      break;
  }
  return on_node();
}

uint64_t inode_of(const char* path) {
  uint64_t h = 1469598103934665603ull;  // FNV-1a: stable per path, never 0 in practice
  for (const char* p = path; *p; ++p) h = (h ^ static_cast<unsigned char>(*p)) * 1099511628211ull;
  return h | 1;
}

void fill_stat(const Answer& a, struct stat* st) {
  const SysfsView::Node& n = *a.found.node;
  const bool in_dev =
      std::strncmp(a.found.path, SysfsView::kDevDir.data(), SysfsView::kDevDir.size()) == 0;
  *st = in_dev ? a.v->dev_st : a.v->sys_st;  // device number and times
  st->st_ino = inode_of(a.found.path);
  st->st_uid = 0;
  st->st_gid = 0;
  st->st_rdev = 0;
  st->st_blksize = 4096;
  st->st_blocks = 0;
  switch (n.kind) {
    case SysfsView::Kind::kDir:
      st->st_mode = S_IFDIR | 0755;
      st->st_nlink = 2 + n.subdirs;
      st->st_size = 0;
      break;
    case SysfsView::Kind::kLink:
      st->st_mode = S_IFLNK | 0777;
      st->st_nlink = 1;
      st->st_size = static_cast<off_t>(n.content.size());
      break;
    default:  // a sysfs attribute: read-only, and 4096 bytes whatever it holds, as the kernel says
      st->st_mode = S_IFREG | 0444;
      st->st_nlink = 1;
      st->st_size = 4096;
      break;
  }
}

// stat, lstat, fstatat and the old __xstat ABI on a claimed path.
int stat_claimed(const char* path, struct stat* st, int flags,
                 int (*real)(const char*, struct stat*, int)) {
  const Answer a = answer(path, !(flags & AT_SYMLINK_NOFOLLOW));
  return serve(
      a, path, -1, [&](const char* p) { return real(p, st, flags); },
      [&] {
        fill_stat(a, st);
        return 0;
      });
}

int real_fstatat_cb(const char* path, struct stat* st, int flags) {
  return real_fstatat(path, st, flags);
}

void fill_statx(const struct stat& st, struct statx* sx) {
  std::memset(sx, 0, sizeof *sx);
  sx->stx_mask = STATX_BASIC_STATS;
  sx->stx_blksize = static_cast<uint32_t>(st.st_blksize);
  sx->stx_nlink = static_cast<uint32_t>(st.st_nlink);
  sx->stx_uid = st.st_uid;
  sx->stx_gid = st.st_gid;
  sx->stx_mode = static_cast<uint16_t>(st.st_mode);
  sx->stx_ino = st.st_ino;
  sx->stx_size = static_cast<uint64_t>(st.st_size);
  sx->stx_blocks = static_cast<uint64_t>(st.st_blocks);
  sx->stx_atime = {st.st_atim.tv_sec, static_cast<uint32_t>(st.st_atim.tv_nsec), 0};
  sx->stx_mtime = {st.st_mtim.tv_sec, static_cast<uint32_t>(st.st_mtim.tv_nsec), 0};
  sx->stx_ctime = {st.st_ctim.tv_sec, static_cast<uint32_t>(st.st_ctim.tv_nsec), 0};
  sx->stx_dev_major = major(st.st_dev);
  sx->stx_dev_minor = minor(st.st_dev);
}

// A file's text in a sealed memfd: a read-only file descriptor in all but name, made without
// touching any file system.
int open_text(std::string_view text, int flags) {
  const int fd =
      memfd_create("uroce-sysfs", MFD_ALLOW_SEALING | ((flags & O_CLOEXEC) ? MFD_CLOEXEC : 0));
  if (fd < 0) return -1;
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int err = errno;
      close(fd);
      return fail(err);
    }
    done += static_cast<size_t>(n);
  }
  fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE | F_SEAL_SEAL);
  lseek(fd, 0, SEEK_SET);
  return fd;
}

// open and openat on a claimed path; `real` makes the real call with the caller's arguments.
template <typename Real>
int open_claimed(const char* path, int flags, Real&& real) {
  const Answer a = answer(path, !(flags & O_NOFOLLOW));
  return serve(a, path, -1, real, [&] {
    const SysfsView::Node& n = *a.found.node;
    if ((flags & O_CREAT) && (flags & O_EXCL)) return fail(EEXIST);
    if (n.kind == SysfsView::Kind::kLink) return fail(ELOOP);  // O_NOFOLLOW on the link itself
    if (n.kind == SysfsView::Kind::kDir) {
      if ((flags & O_ACCMODE) != O_RDONLY) return fail(EISDIR);
      return fail(EOPNOTSUPP);  // no directory file descriptor without a directory (see above)
    }
    if (flags & O_DIRECTORY) return fail(ENOTDIR);
    // sysfs refuses to open an attribute without a store method for writing, even to root.
    if ((flags & O_ACCMODE) != O_RDONLY || (flags & O_TRUNC)) return fail(EACCES);
    return open_text(a.v->view.read(n), flags);
  });
}

bool needs_mode(int flags) {
  return (flags & O_CREAT) || (flags & O_TMPFILE) == O_TMPFILE;
}

int access_claimed(const char* path, int mode, bool effective, int follow_flags,
                   int (*real)(const char*, int, int)) {
  const Answer a = answer(path, !(follow_flags & AT_SYMLINK_NOFOLLOW));
  return serve(
      a, path, -1, [&](const char* p) { return real(p, mode, follow_flags); },
      [&] {
        if (mode == F_OK) return 0;
        // Owned by root: root may read and write anything and execute what has an x bit (a
        // directory); anyone else has the "other" bits, r-x on directories and r-- on files.
        const bool dir = a.found.node->kind == SysfsView::Kind::kDir;
        const uid_t uid = effective ? geteuid() : getuid();
        int allowed = uid == 0 ? (R_OK | W_OK | (dir ? X_OK : 0)) : (R_OK | (dir ? X_OK : 0));
        if (a.found.node->kind == SysfsView::Kind::kLink) allowed = R_OK | W_OK | X_OK;
        return (mode & ~allowed) ? fail(EACCES) : 0;
      });
}

int real_faccessat_cb(const char* path, int mode, int flags) {
  const Libc* c = libc();
  return c && c->faccessat ? c->faccessat(AT_FDCWD, path, mode, flags)
                           : sys_faccessat(AT_FDCWD, path, mode, flags);
}

ssize_t readlink_claimed(const char* path, char* buf, size_t len) {
  const Answer a = answer(path, false);
  auto real = [](const char* p, char* b, size_t l) -> ssize_t {
    const Libc* c = libc();
    return c && c->readlinkat ? c->readlinkat(AT_FDCWD, p, b, l)
                              : sys_readlinkat(AT_FDCWD, p, b, l);
  };
  if (a.marker) return fail(EINVAL);  // a character device, not a link to /dev/null
  return serve(
      a, path, ssize_t{-1}, [&](const char* p) { return real(p, buf, len); },
      [&]() -> ssize_t {
        if (a.found.node->kind != SysfsView::Kind::kLink) return fail(EINVAL);
        const std::string& t = a.found.node->content;
        const size_t n = std::min(len, t.size());
        std::memcpy(buf, t.data(), n);
        return static_cast<ssize_t>(n);
      });
}

char* realpath_claimed(const char* path, char* resolved) {
  const Libc* c = libc();
  if (!c || !c->realpath) {
    errno = ENOSYS;
    return nullptr;
  }
  Answer a = answer(path, true);
  if (a.marker) a.what = Answer::What::kNode;  // a node of its own, not a link to /dev/null
  return serve(
      a, path, static_cast<char*>(nullptr), [&](const char* p) { return c->realpath(p, resolved); },
      [&]() -> char* {
        const char* out = a.found.path;
        if (!resolved) return strdup(out);
        const size_t n = strnlen(out, PATH_MAX - 1);  // the caller's buffer holds PATH_MAX
        std::memcpy(resolved, out, n);
        resolved[n] = '\0';
        return resolved;
      });
}

// ---- directories ----------------------------------------------------------------------------

// A DIR* of the view: a list read at opendir (the merged real entries included), handed out
// with the calls readdir makes. Every DIR function checks the registry first; while no such DIR
// is open that costs one relaxed load.
struct SynthDir {
  std::vector<struct dirent64> entries;
  size_t pos = 0;
  struct dirent64 current {};
};

std::atomic<int> g_synth_open{0};
std::mutex g_synth_mu;
std::unordered_set<const void*>* g_synth = nullptr;  // under g_synth_mu; allocated on first use

SynthDir* synth(DIR* d) {
  if (g_synth_open.load(std::memory_order_relaxed) == 0) return nullptr;
  std::lock_guard<std::mutex> g(g_synth_mu);
  return g_synth && g_synth->count(d) ? reinterpret_cast<SynthDir*>(d) : nullptr;
}

void add_entry(std::vector<struct dirent64>& out, const char* name, unsigned char type,
               uint64_t ino) {
  struct dirent64 e {};
  e.d_ino = ino;
  e.d_off = static_cast<off64_t>(out.size() + 1);
  e.d_reclen = sizeof e;
  e.d_type = type;
  std::snprintf(e.d_name, sizeof e.d_name, "%s", name);
  out.push_back(e);
}

// Appends the entry of the view's `dir/name` (its d_type, and the inode stat reports for it).
void add_child(std::vector<struct dirent64>& out, const View* v, const char* dir,
               const std::string& name) {
  char child[PATH_MAX + NAME_MAX + 2];
  std::snprintf(child, sizeof child, "%s/%s", dir, name.c_str());
  const auto f = v->view.find(child, false);
  unsigned char type = DT_UNKNOWN;
  if (f.node) {
    switch (f.node->kind) {
      case SysfsView::Kind::kDir:
        type = DT_DIR;
        break;
      case SysfsView::Kind::kLink:
        type = DT_LNK;
        break;
      case SysfsView::Kind::kMarker:
        type = DT_CHR;
        break;
      case SysfsView::Kind::kFile:
        type = DT_REG;
        break;
    }
  }
  add_entry(out, name.c_str(), type, inode_of(child));
}

DIR* open_synth(std::vector<struct dirent64> entries) {
  auto* s = new (std::nothrow) SynthDir;
  if (!s) {
    errno = ENOMEM;
    return nullptr;
  }
  s->entries = std::move(entries);
  std::lock_guard<std::mutex> g(g_synth_mu);
  if (!g_synth) g_synth = new std::unordered_set<const void*>;
  g_synth->insert(s);
  g_synth_open.fetch_add(1, std::memory_order_relaxed);
  return reinterpret_cast<DIR*>(s);
}

DIR* opendir_claimed(const char* path) {
  const Libc* c = libc();
  if (!c || !c->opendir) {
    errno = ENOSYS;
    return nullptr;
  }
  char norm[PATH_MAX];
  const bool merge =
      SysfsView::normalize(path, norm, sizeof norm, nullptr) && SysfsView::is_merge_point(norm);
  std::vector<struct dirent64> entries;
  if (real_has(path)) {
    const View* v = merge ? view() : nullptr;
    if (!v) return c->opendir(path);
    // The real directory exists: its entries, then the view's devices it does not have.
    DIR* real = c->opendir(path);
    if (!real) return nullptr;
    std::unordered_set<std::string> seen;
    while (struct dirent64* e = c->readdir64(real)) {
      seen.insert(e->d_name);
      entries.push_back(*e);
    }
    c->closedir(real);
    const auto f = v->view.find(norm, true);
    if (f.what == SysfsView::Found::What::kNode) {
      for (const std::string& name : f.node->children) {
        if (seen.count(name)) continue;
        add_child(entries, v, norm, name);
      }
    }
    return open_synth(std::move(entries));
  }
  const Answer a = answer(path, true);
  return serve(
      a, path, static_cast<DIR*>(nullptr), [&](const char* p) { return c->opendir(p); },
      [&]() -> DIR* {
        const SysfsView::Node& n = *a.found.node;
        if (n.kind != SysfsView::Kind::kDir) {
          errno = ENOTDIR;
          return nullptr;
        }
        add_entry(entries, ".", DT_DIR, inode_of(a.found.path));
        add_entry(entries, "..", DT_DIR, 1);
        for (const std::string& name : n.children) add_child(entries, a.v, a.found.path, name);
        return open_synth(std::move(entries));
      });
}

struct dirent64* synth_next(SynthDir* s) {
  if (s->pos >= s->entries.size()) return nullptr;
  s->current = s->entries[s->pos++];
  return &s->current;
}

struct dirent64* dir_next(DIR* d) {
  if (SynthDir* s = synth(d)) return synth_next(s);
  return libc()->readdir64(d);
}

int dir_close(DIR* d) {
  if (SynthDir* s = synth(d)) {
    {
      std::lock_guard<std::mutex> g(g_synth_mu);
      g_synth->erase(s);
    }
    g_synth_open.fetch_sub(1, std::memory_order_relaxed);
    delete s;
    return 0;
  }
  return libc()->closedir(d);
}

// scandir over opendir_claimed: glibc's own scandir opens the directory with an internal call
// that liburoce cannot see.
template <typename Ent, typename Filter, typename Compare>
int scandir_claimed(const char* path, Ent*** list, Filter filter, Compare compar) {
  DIR* d = opendir_claimed(path);
  if (!d) return -1;
  std::vector<Ent*> out;
  bool oom = false;
  while (const struct dirent64* e = dir_next(d)) {
    const Ent* ent = reinterpret_cast<const Ent*>(e);
    if (filter && !filter(ent)) continue;
    auto* copy = static_cast<Ent*>(malloc(sizeof(Ent)));
    if (!copy) {
      oom = true;
      break;
    }
    std::memcpy(copy, ent, sizeof(Ent));
    out.push_back(copy);
  }
  dir_close(d);
  auto** arr = oom ? nullptr : static_cast<Ent**>(malloc(sizeof(Ent*) * (out.size() + 1)));
  if (!arr) {
    for (Ent* p : out) free(p);
    return fail(ENOMEM);
  }
  if (compar)
    qsort(out.data(), out.size(), sizeof(Ent*),
          reinterpret_cast<int (*)(const void*, const void*)>(compar));
  std::copy(out.begin(), out.end(), arr);
  *list = arr;
  return static_cast<int>(out.size());
}

}  // namespace

// ---- the exported entry points --------------------------------------------------------------
// Each: unclaimed paths straight to the real function (or, during resolution, the system call).

#define UROCE_OPEN_MODE(flags) \
  mode_t mode = 0;             \
  if (needs_mode(flags)) {     \
    va_list ap;                \
    va_start(ap, flags);       \
    mode = va_arg(ap, mode_t); \
    va_end(ap);                \
  }

namespace {

// The real function in slot `member`, or null while this thread resolves them.
template <typename Fn>
Fn real_fn(Fn Libc::*member) {
  const Libc* c = libc();
  return c ? c->*member : nullptr;
}

// One body for the eight names of open: `call(p)` makes the real call with the caller's other
// arguments. A _FORTIFY_SOURCE variant (`checked`) given flags that need a mode goes to glibc,
// which reports it and aborts.
template <typename Call>
int open_entry(const char* path, int flags, bool checked, Call&& call) {
  if (SysfsView::claims(path) && !(checked && needs_mode(flags)))
    return open_claimed(path, flags, call);
  return call(path);
}

}  // namespace

UROCE_EXPORT int open(const char* path, int flags, ...) {
  UROCE_OPEN_MODE(flags);
  return open_entry(path, flags, false, [&](const char* p) {
    auto f = real_fn(&Libc::open);
    return f ? f(p, flags, mode) : sys_openat(AT_FDCWD, p, flags, mode);
  });
}

UROCE_EXPORT int open64(const char* path, int flags, ...) {
  UROCE_OPEN_MODE(flags);
  return open_entry(path, flags, false, [&](const char* p) {
    auto f = real_fn(&Libc::open64);
    return f ? f(p, flags, mode) : sys_openat(AT_FDCWD, p, flags, mode);
  });
}

UROCE_EXPORT int openat(int dirfd, const char* path, int flags, ...) {
  UROCE_OPEN_MODE(flags);
  return open_entry(path, flags, false, [&](const char* p) {
    auto f = real_fn(&Libc::openat);
    return f ? f(dirfd, p, flags, mode) : sys_openat(dirfd, p, flags, mode);
  });
}

UROCE_EXPORT int openat64(int dirfd, const char* path, int flags, ...) {
  UROCE_OPEN_MODE(flags);
  return open_entry(path, flags, false, [&](const char* p) {
    auto f = real_fn(&Libc::openat64);
    return f ? f(dirfd, p, flags, mode) : sys_openat(dirfd, p, flags, mode);
  });
}
#undef UROCE_OPEN_MODE

UROCE_EXPORT int __open_2(const char* path, int flags) {
  return open_entry(path, flags, true, [&](const char* p) {
    auto f = real_fn(&Libc::open_2);
    return f ? f(p, flags) : sys_openat(AT_FDCWD, p, flags, 0);
  });
}

UROCE_EXPORT int __open64_2(const char* path, int flags) {
  return open_entry(path, flags, true, [&](const char* p) {
    auto f = real_fn(&Libc::open64_2);
    return f ? f(p, flags) : sys_openat(AT_FDCWD, p, flags, 0);
  });
}

UROCE_EXPORT int __openat_2(int dirfd, const char* path, int flags) {
  return open_entry(path, flags, true, [&](const char* p) {
    auto f = real_fn(&Libc::openat_2);
    return f ? f(dirfd, p, flags) : sys_openat(dirfd, p, flags, 0);
  });
}

UROCE_EXPORT int __openat64_2(int dirfd, const char* path, int flags) {
  return open_entry(path, flags, true, [&](const char* p) {
    auto f = real_fn(&Libc::openat64_2);
    return f ? f(dirfd, p, flags) : sys_openat(dirfd, p, flags, 0);
  });
}

namespace {

// fopen's mode string as open flags (glibc's rules: r, w, a, then '+', 'x', 'e' anywhere).
int fopen_flags(const char* mode) {
  int flags = 0;
  switch (mode[0]) {
    case 'r':
      flags = O_RDONLY;
      break;
    case 'w':
      flags = O_WRONLY | O_CREAT | O_TRUNC;
      break;
    case 'a':
      flags = O_WRONLY | O_CREAT | O_APPEND;
      break;
    default:
      return -1;
  }
  for (const char* m = mode + 1; *m; ++m) {
    if (*m == '+') flags = (flags & ~O_ACCMODE) | O_RDWR;
    if (*m == 'x') flags |= O_EXCL;
    if (*m == 'e') flags |= O_CLOEXEC;
  }
  return flags;
}

FILE* fopen_claimed(const char* path, const char* mode, FILE* (*real)(const char*, const char*)) {
  const int flags = mode ? fopen_flags(mode) : -1;
  if (flags < 0) return real(path, mode);  // glibc reports EINVAL
  int fd = -1;
  bool to_real = false;
  const char* real_path = path;
  fd = open_claimed(path, flags, [&](const char* p) {
    to_real = true;
    real_path = p;
    return 0;
  });
  if (to_real) return real(real_path, mode);
  if (fd < 0) return nullptr;
  FILE* f = fdopen(fd, mode);
  if (!f) {
    const int err = errno;
    close(fd);
    errno = err;
  }
  return f;
}

}  // namespace

UROCE_EXPORT FILE* fopen(const char* path, const char* mode) {
  const Libc* c = libc();
  if (!c || !c->fopen) {  // during resolution only
    const int fd = sys_openat(AT_FDCWD, path, mode ? fopen_flags(mode) : O_RDONLY, 0666);
    return fd < 0 ? nullptr : fdopen(fd, mode);
  }
  return SysfsView::claims(path) ? fopen_claimed(path, mode, c->fopen) : c->fopen(path, mode);
}

UROCE_EXPORT FILE* fopen64(const char* path, const char* mode) {
  const Libc* c = libc();
  if (!c || !c->fopen64) {
    const int fd = sys_openat(AT_FDCWD, path, mode ? fopen_flags(mode) : O_RDONLY, 0666);
    return fd < 0 ? nullptr : fdopen(fd, mode);
  }
  return SysfsView::claims(path) ? fopen_claimed(path, mode, c->fopen64) : c->fopen64(path, mode);
}

// ---- stat -------------------------------------------------------------------------------------

#define UROCE_STAT_BODY(member, call, flags)                                                \
  const Libc* c = libc();                                                                   \
  if (SysfsView::claims(path))                                                              \
    return stat_claimed(path, reinterpret_cast<struct stat*>(buf), flags, real_fstatat_cb); \
  return c && c->member ? c->member call                                                    \
                        : sys_fstatat(AT_FDCWD, path, reinterpret_cast<struct stat*>(buf), flags);

UROCE_EXPORT int stat(const char* path, struct stat* buf) noexcept {
    UROCE_STAT_BODY(stat, (path, buf), 0)} UROCE_EXPORT
    int stat64(const char* path,
               struct stat64* buf) noexcept {UROCE_STAT_BODY(stat64, (path, buf), 0)} UROCE_EXPORT
    int lstat(const char* path, struct stat* buf) noexcept {
        UROCE_STAT_BODY(lstat, (path, buf), AT_SYMLINK_NOFOLLOW)} UROCE_EXPORT
    int lstat64(const char* path, struct stat64* buf) noexcept {
        UROCE_STAT_BODY(lstat64, (path, buf), AT_SYMLINK_NOFOLLOW)} UROCE_EXPORT
    int __xstat(int ver, const char* path,
                struct stat* buf){UROCE_STAT_BODY(xstat, (ver, path, buf), 0)} UROCE_EXPORT
    int __xstat64(int ver, const char* path,
                  struct stat64* buf){UROCE_STAT_BODY(xstat64, (ver, path, buf), 0)} UROCE_EXPORT
    int __lxstat(int ver, const char* path, struct stat* buf){
        UROCE_STAT_BODY(lxstat, (ver, path, buf), AT_SYMLINK_NOFOLLOW)} UROCE_EXPORT
    int __lxstat64(int ver, const char* path, struct stat64* buf){
        UROCE_STAT_BODY(lxstat64, (ver, path, buf), AT_SYMLINK_NOFOLLOW)}
#undef UROCE_STAT_BODY

#define UROCE_FSTATAT_BODY(member, call)                                                    \
  const Libc* c = libc();                                                                   \
  if (SysfsView::claims(path))                                                              \
    return stat_claimed(path, reinterpret_cast<struct stat*>(buf), flags, real_fstatat_cb); \
  return c && c->member ? c->member call                                                    \
                        : sys_fstatat(dirfd, path, reinterpret_cast<struct stat*>(buf), flags);

UROCE_EXPORT int fstatat(int dirfd, const char* path, struct stat* buf, int flags) noexcept {
    UROCE_FSTATAT_BODY(fstatat, (dirfd, path, buf, flags))} UROCE_EXPORT
    int fstatat64(int dirfd, const char* path, struct stat64* buf, int flags) noexcept {
        UROCE_FSTATAT_BODY(fstatat64, (dirfd, path, buf, flags))} UROCE_EXPORT
    int __fxstatat(int ver, int dirfd, const char* path, struct stat* buf, int flags){
        UROCE_FSTATAT_BODY(fxstatat, (ver, dirfd, path, buf, flags))} UROCE_EXPORT
    int __fxstatat64(int ver, int dirfd, const char* path, struct stat64* buf,
                     int flags){UROCE_FSTATAT_BODY(fxstatat64, (ver, dirfd, path, buf, flags))}
#undef UROCE_FSTATAT_BODY

UROCE_EXPORT
    int statx(int dirfd, const char* path, int flags, unsigned mask, struct statx* buf) noexcept {
  const Libc* c = libc();
  auto real = [&](const char* p) {
    return c && c->statx ? c->statx(dirfd, p, flags, mask, buf)
                         : static_cast<int>(syscall(SYS_statx, dirfd, p, flags, mask, buf));
  };
  if (!SysfsView::claims(path)) return real(path);
  const Answer a = answer(path, !(flags & AT_SYMLINK_NOFOLLOW));
  return serve(a, path, -1, real, [&] {
    struct stat st;
    fill_stat(a, &st);
    fill_statx(st, buf);
    return 0;
  });
}

// ---- access -----------------------------------------------------------------------------------

UROCE_EXPORT int access(const char* path, int mode) noexcept {
  if (SysfsView::claims(path)) return access_claimed(path, mode, false, 0, real_faccessat_cb);
  const Libc* c = libc();
  return c && c->access ? c->access(path, mode) : sys_faccessat(AT_FDCWD, path, mode, 0);
}

UROCE_EXPORT int faccessat(int dirfd, const char* path, int mode, int flags) noexcept {
  if (SysfsView::claims(path))
    return access_claimed(path, mode, flags & AT_EACCESS, flags, real_faccessat_cb);
  const Libc* c = libc();
  return c && c->faccessat ? c->faccessat(dirfd, path, mode, flags)
                           : sys_faccessat(dirfd, path, mode, flags);
}

UROCE_EXPORT int euidaccess(const char* path, int mode) noexcept {
  if (SysfsView::claims(path))
    return access_claimed(path, mode, true, AT_EACCESS, real_faccessat_cb);
  const Libc* c = libc();
  return c && c->euidaccess ? c->euidaccess(path, mode)
                            : sys_faccessat(AT_FDCWD, path, mode, AT_EACCESS);
}

UROCE_EXPORT int eaccess(const char* path, int mode) noexcept {
  if (SysfsView::claims(path))
    return access_claimed(path, mode, true, AT_EACCESS, real_faccessat_cb);
  const Libc* c = libc();
  return c && c->eaccess ? c->eaccess(path, mode) : sys_faccessat(AT_FDCWD, path, mode, AT_EACCESS);
}

// ---- readlink, realpath ---------------------------------------------------------------------

UROCE_EXPORT ssize_t readlink(const char* path, char* buf, size_t len) noexcept {
  if (SysfsView::claims(path)) return readlink_claimed(path, buf, len);
  const Libc* c = libc();
  return c && c->readlink ? c->readlink(path, buf, len) : sys_readlinkat(AT_FDCWD, path, buf, len);
}

UROCE_EXPORT ssize_t readlinkat(int dirfd, const char* path, char* buf, size_t len) noexcept {
  if (SysfsView::claims(path)) return readlink_claimed(path, buf, len);
  const Libc* c = libc();
  return c && c->readlinkat ? c->readlinkat(dirfd, path, buf, len)
                            : sys_readlinkat(dirfd, path, buf, len);
}

UROCE_EXPORT ssize_t __readlink_chk(const char* path, char* buf, size_t len, size_t buflen) {
  const Libc* c = libc();
  if (SysfsView::claims(path) && len <= buflen) return readlink_claimed(path, buf, len);
  return c && c->readlink_chk ? c->readlink_chk(path, buf, len, buflen)
                              : sys_readlinkat(AT_FDCWD, path, buf, len);
}

UROCE_EXPORT ssize_t __readlinkat_chk(int dirfd, const char* path, char* buf, size_t len,
                                      size_t buflen) {
  const Libc* c = libc();
  if (SysfsView::claims(path) && len <= buflen) return readlink_claimed(path, buf, len);
  return c && c->readlinkat_chk ? c->readlinkat_chk(dirfd, path, buf, len, buflen)
                                : sys_readlinkat(dirfd, path, buf, len);
}

UROCE_EXPORT char* realpath(const char* path, char* resolved) noexcept {
  if (SysfsView::claims(path)) return realpath_claimed(path, resolved);
  const Libc* c = libc();
  if (c && c->realpath) return c->realpath(path, resolved);
  errno = ENOSYS;
  return nullptr;
}

UROCE_EXPORT char* __realpath_chk(const char* path, char* resolved, size_t resolvedlen) {
  const Libc* c = libc();
  if (SysfsView::claims(path) && resolvedlen >= PATH_MAX) return realpath_claimed(path, resolved);
  if (c && c->realpath_chk) return c->realpath_chk(path, resolved, resolvedlen);
  errno = ENOSYS;
  return nullptr;
}

UROCE_EXPORT char* canonicalize_file_name(const char* path) noexcept {
  if (SysfsView::claims(path)) return realpath_claimed(path, nullptr);
  const Libc* c = libc();
  if (c && c->canonicalize_file_name) return c->canonicalize_file_name(path);
  errno = ENOSYS;
  return nullptr;
}

// ---- directories ----------------------------------------------------------------------------

UROCE_EXPORT DIR* opendir(const char* path) {
  if (SysfsView::claims(path)) return opendir_claimed(path);
  const Libc* c = libc();
  if (c && c->opendir) return c->opendir(path);
  const int fd = sys_openat(AT_FDCWD, path, O_RDONLY | O_DIRECTORY | O_CLOEXEC, 0);
  return fd < 0 ? nullptr : fdopendir(fd);
}

UROCE_EXPORT struct dirent* readdir(DIR* d) {
  if (SynthDir* s = synth(d)) return reinterpret_cast<struct dirent*>(synth_next(s));
  const Libc* c = libc();
  if (c && c->readdir) return c->readdir(d);
  errno = ENOSYS;
  return nullptr;
}

UROCE_EXPORT struct dirent64* readdir64(DIR* d) {
  if (SynthDir* s = synth(d)) return synth_next(s);
  const Libc* c = libc();
  if (c && c->readdir64) return c->readdir64(d);
  errno = ENOSYS;
  return nullptr;
}

UROCE_EXPORT int readdir_r(DIR* d, struct dirent* entry, struct dirent** result) {
  if (SynthDir* s = synth(d)) {
    const struct dirent64* e = synth_next(s);
    if (e) std::memcpy(entry, e, sizeof *entry);
    *result = e ? entry : nullptr;
    return 0;
  }
  const Libc* c = libc();
  return c && c->readdir_r ? c->readdir_r(d, entry, result) : ENOSYS;
}

UROCE_EXPORT int readdir64_r(DIR* d, struct dirent64* entry, struct dirent64** result) {
  if (SynthDir* s = synth(d)) {
    const struct dirent64* e = synth_next(s);
    if (e) *entry = *e;
    *result = e ? entry : nullptr;
    return 0;
  }
  const Libc* c = libc();
  return c && c->readdir64_r ? c->readdir64_r(d, entry, result) : ENOSYS;
}

UROCE_EXPORT int closedir(DIR* d) {
  if (synth(d)) return dir_close(d);
  const Libc* c = libc();
  return c && c->closedir ? c->closedir(d) : fail(ENOSYS);
}

UROCE_EXPORT int dirfd(DIR* d) noexcept {
  if (synth(d)) return fail(ENOTSUP);  // no directory behind it (see the file's header)
  const Libc* c = libc();
  return c && c->dirfd ? c->dirfd(d) : fail(ENOSYS);
}

UROCE_EXPORT void rewinddir(DIR* d) noexcept {
  if (SynthDir* s = synth(d)) {
    s->pos = 0;
    return;
  }
  const Libc* c = libc();
  if (c && c->rewinddir) c->rewinddir(d);
}

UROCE_EXPORT void seekdir(DIR* d, long pos) noexcept {
  if (SynthDir* s = synth(d)) {
    s->pos = pos < 0 ? 0 : std::min(static_cast<size_t>(pos), s->entries.size());
    return;
  }
  const Libc* c = libc();
  if (c && c->seekdir) c->seekdir(d, pos);
}

UROCE_EXPORT long telldir(DIR* d) noexcept {
  if (SynthDir* s = synth(d)) return static_cast<long>(s->pos);
  const Libc* c = libc();
  return c && c->telldir ? c->telldir(d) : fail(ENOSYS);
}

UROCE_EXPORT int scandir(const char* path, struct dirent*** list, DirFilter filter,
                         DirCompare compar) {
  if (SysfsView::claims(path)) return scandir_claimed(path, list, filter, compar);
  const Libc* c = libc();
  return c && c->scandir ? c->scandir(path, list, filter, compar) : fail(ENOSYS);
}

UROCE_EXPORT int scandir64(const char* path, struct dirent64*** list, DirFilter64 filter,
                           DirCompare64 compar) {
  if (SysfsView::claims(path)) return scandir_claimed(path, list, filter, compar);
  const Libc* c = libc();
  return c && c->scandir64 ? c->scandir64(path, list, filter, compar) : fail(ENOSYS);
}

UROCE_EXPORT int scandirat(int dirfd, const char* path, struct dirent*** list, DirFilter filter,
                           DirCompare compar) {
  if (SysfsView::claims(path)) return scandir_claimed(path, list, filter, compar);
  const Libc* c = libc();
  return c && c->scandirat ? c->scandirat(dirfd, path, list, filter, compar) : fail(ENOSYS);
}

UROCE_EXPORT int scandirat64(int dirfd, const char* path, struct dirent64*** list,
                             DirFilter64 filter, DirCompare64 compar) {
  if (SysfsView::claims(path)) return scandir_claimed(path, list, filter, compar);
  const Libc* c = libc();
  return c && c->scandirat64 ? c->scandirat64(dirfd, path, list, filter, compar) : fail(ENOSYS);
}

// ---- extended attributes --------------------------------------------------------------------
// `ls -l` asks for each file's SELinux label (libselinux: lgetxattr). The view's nodes have no
// attributes: ENODATA and an empty list, as sysfs answers on a host without SELinux.

namespace {

template <typename Real>
ssize_t xattr_claimed(const char* path, bool follow, bool list, Real&& real) {
  const Answer a = answer(path, follow);
  return serve(a, path, ssize_t{-1}, real, [&]() -> ssize_t { return list ? 0 : fail(ENODATA); });
}

}  // namespace

UROCE_EXPORT ssize_t getxattr(const char* path, const char* name, void* value,
                              size_t size) noexcept {
  const Libc* c = libc();
  auto real = [&](const char* p) {
    return c && c->getxattr ? c->getxattr(p, name, value, size)
                            : syscall(SYS_getxattr, p, name, value, size);
  };
  return SysfsView::claims(path) ? xattr_claimed(path, true, false, real) : real(path);
}

UROCE_EXPORT ssize_t lgetxattr(const char* path, const char* name, void* value,
                               size_t size) noexcept {
  const Libc* c = libc();
  auto real = [&](const char* p) {
    return c && c->lgetxattr ? c->lgetxattr(p, name, value, size)
                             : syscall(SYS_lgetxattr, p, name, value, size);
  };
  return SysfsView::claims(path) ? xattr_claimed(path, false, false, real) : real(path);
}

UROCE_EXPORT ssize_t listxattr(const char* path, char* list, size_t size) noexcept {
  const Libc* c = libc();
  auto real = [&](const char* p) {
    return c && c->listxattr ? c->listxattr(p, list, size) : syscall(SYS_listxattr, p, list, size);
  };
  return SysfsView::claims(path) ? xattr_claimed(path, true, true, real) : real(path);
}

UROCE_EXPORT ssize_t llistxattr(const char* path, char* list, size_t size) noexcept {
  const Libc* c = libc();
  auto real = [&](const char* p) {
    return c && c->llistxattr ? c->llistxattr(p, list, size)
                              : syscall(SYS_llistxattr, p, list, size);
  };
  return SysfsView::claims(path) ? xattr_claimed(path, false, true, real) : real(path);
}

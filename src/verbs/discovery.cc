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
//
// The files: this one holds the interposed entry points on files (open, fopen, the stat family,
// access, readlink, realpath, the xattrs) with what each does on a claimed path;
// discovery_dirs.cc the directory ones (opendir, the DIR calls, scandir); discovery_view.cc the
// view and the answer for a claimed path; discovery_libc.cc the real functions behind liburoce;
// discovery.h what they share.
#undef _FORTIFY_SOURCE  // this file defines the functions fortification wraps
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <string>
#include <string_view>

#include "discovery.h"

static_assert(sizeof(struct stat) == sizeof(struct stat64));

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

using namespace uroce::verbs::discovery;
using uroce::verbs::SysfsView;

namespace {

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

// ---- extended attributes --------------------------------------------------------------------
// `ls -l` asks for each file's SELinux label (libselinux: lgetxattr). The view's nodes have no
// attributes: ENODATA and an empty list, as sysfs answers on a host without SELinux.

namespace {

template <typename Real>
ssize_t xattr_claimed(const char* path, bool follow, bool list, Real&& real) {
  const Answer a = answer(path, follow);
  return serve(a, path, ssize_t{-1}, real, [&]() -> ssize_t { return list ? 0 : fail(ENODATA); });
}

// One of the four xattr calls: answered for a path the sysfs view claims, else libc's `Fn` (the
// system call `sysno` when libc has none) with `args`. `follow`: the call follows a last link
// (getxattr, listxattr), `list`: it lists names.
template <auto Fn, typename... Args>
ssize_t xattr_call(const char* path, bool follow, bool list, long sysno, Args... args) {
  const Libc* c = libc();
  auto real = [&](const char* p) {
    return c && c->*Fn ? (c->*Fn)(p, args...) : syscall(sysno, p, args...);
  };
  return SysfsView::claims(path) ? xattr_claimed(path, follow, list, real) : real(path);
}

}  // namespace

UROCE_EXPORT ssize_t getxattr(const char* path, const char* name, void* value,
                              size_t size) noexcept {
  return xattr_call<&Libc::getxattr>(path, true, false, SYS_getxattr, name, value, size);
}

UROCE_EXPORT ssize_t lgetxattr(const char* path, const char* name, void* value,
                               size_t size) noexcept {
  return xattr_call<&Libc::lgetxattr>(path, false, false, SYS_lgetxattr, name, value, size);
}

UROCE_EXPORT ssize_t listxattr(const char* path, char* list, size_t size) noexcept {
  return xattr_call<&Libc::listxattr>(path, true, true, SYS_listxattr, list, size);
}

UROCE_EXPORT ssize_t llistxattr(const char* path, char* list, size_t size) noexcept {
  return xattr_call<&Libc::llistxattr>(path, false, true, SYS_llistxattr, list, size);
}

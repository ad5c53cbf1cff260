// The real functions behind liburoce's discovery entry points (discovery.h, discovery.cc): the
// table of glibc names and symbol versions liburoce interposes, resolved all at once through
// dlvsym(RTLD_NEXT) by a constructor (or on the first call when another library's constructor
// calls before it), and the system calls that serve a call made while that resolution runs. Apart
// from the entry points so that the one piece that touches the dynamic linker is read alone.
#undef _FORTIFY_SOURCE  // as every discovery file: the same glibc declarations throughout
#include <dlfcn.h>
#include <fcntl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstddef>
#include <cstring>
#include <mutex>

#include "discovery.h"

#if !defined(__x86_64__) || !defined(__GLIBC__)
#error "liburoce.map names glibc's x86_64 symbol versions for the discovery entry points"
#endif

namespace uroce::verbs::discovery {

Libc g_libc;
std::atomic<bool> g_resolved{false};

namespace {

// A slot of Libc: the name and glibc version it is exported at (liburoce.map).
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

std::mutex g_resolve_mu;
// Set while this thread resolves: a call it makes meanwhile (from inside dlvsym) must not resolve
// again. initial-exec: reading it never allocates (liburoce is loaded at start-up: preloaded or
// linked).
__attribute__((tls_model("initial-exec"))) thread_local bool t_resolving = false;

}  // namespace

const Libc* resolve_libc() {
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

namespace {

// Resolved before main, so that the passthrough never takes the lock or calls dlvsym later.
__attribute__((constructor)) void resolve_at_load() {
  libc();
}

}  // namespace

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

int real_fstatat(const char* path, struct stat* st, int flags) {
  const Libc* c = libc();
  return c && c->fstatat ? c->fstatat(AT_FDCWD, path, st, flags)
                         : sys_fstatat(AT_FDCWD, path, st, flags);
}

}  // namespace uroce::verbs::discovery

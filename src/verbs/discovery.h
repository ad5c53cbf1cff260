// What the discovery files share (discovery.cc's header says what discovery does and the rules
// every entry point keeps): the real libc functions behind liburoce (discovery_libc.cc) and the
// view's answer to a claimed path (discovery_view.cc). The interposed entry points — files in
// discovery.cc, directories in discovery_dirs.cc — are built on these two alone. Internal to
// liburoce: nothing here is exported.
#pragma once

#include <dirent.h>
#include <stdio.h>
#include <sys/stat.h>
#include <sys/types.h>

#include <atomic>
#include <cerrno>
#include <cstdint>
#include <utility>

#include "sysfs_view.h"

// An interposed glibc entry point: exported from liburoce (the version script gives it glibc's
// symbol version, liburoce.map).
#define UROCE_EXPORT extern "C" __attribute__((visibility("default")))

namespace uroce::verbs::discovery {

using DirFilter = int (*)(const struct dirent*);
using DirCompare = int (*)(const struct dirent**, const struct dirent**);
using DirFilter64 = int (*)(const struct dirent64*);
using DirCompare64 = int (*)(const struct dirent64**, const struct dirent64**);

// ---- the real functions (discovery_libc.cc) ---------------------------------------------------

// One slot per interposed function: the real definition behind liburoce (the name and glibc
// version each is looked up at are in discovery_libc.cc's table).
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

extern Libc g_libc;  // written once, before g_resolved is set
extern std::atomic<bool> g_resolved;

// libc()'s slow path: resolves every slot (once, under a lock), or returns null on the thread
// that is resolving them.
const Libc* resolve_libc();

// The real functions, or null while this thread is resolving them (the caller then makes the
// system call itself). Inline: once resolved (before main), the passthrough costs one load.
inline const Libc* libc() {
  if (g_resolved.load(std::memory_order_acquire)) return &g_libc;
  return resolve_libc();
}

// The system calls behind the real functions, for the calls made during resolution.
int sys_openat(int dirfd, const char* path, int flags, mode_t mode);
int sys_fstatat(int dirfd, const char* path, struct stat* st, int flags);
int sys_faccessat(int dirfd, const char* path, int mode, int flags);
ssize_t sys_readlinkat(int dirfd, const char* path, char* buf, size_t len);

// Real calls on claimed paths (always absolute: the dirfd is irrelevant).
int real_fstatat(const char* path, struct stat* st, int flags);

// ---- the view (discovery_view.cc) -------------------------------------------------------------

struct View {
  SysfsView view;
  struct stat sys_st {};  // of /sys and /dev: the device number and times the view's nodes report
  struct stat dev_st {};
};

// The view of this process's devices (the registry's: UROCE_DEVICES), built on the first claimed
// look-up; null when there is nothing to show or UROCE_DISCOVERY=0.
const View* view();

// True when the real file system answers for `path` (it exists, or looking fails otherwise than
// with ENOENT): then the call is passed through.
bool real_has(const char* path);

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

// The answer for a claimed path; `follow`: a link at the end is followed (stat, not lstat).
Answer answer(const char* path, bool follow);

inline int fail(int err) {
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

// The inode number stat and readdir report for a path of the view: stable per path.
uint64_t inode_of(const char* path);

// What stat reports for the node of an answer (Answer::What::kNode).
void fill_stat(const Answer& a, struct stat* st);

}  // namespace uroce::verbs::discovery

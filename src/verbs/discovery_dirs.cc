// Directories of the view, for discovery (discovery.h; the rules are in discovery.cc's header):
// opendir on a claimed path gives a DIR* of its own — the view's entries, merged with the real
// directory's at /sys/class/infiniband and /dev/infiniband — and every DIR call (readdir and its
// twins, closedir, dirfd, rewinddir, seekdir, telldir) tells such a DIR from glibc's before
// passing on; scandir is rebuilt over that opendir. Apart from the file entry points because a
// listing is a small state machine of its own (an open list, a position) that they never touch.
#undef _FORTIFY_SOURCE  // as every discovery file: the same glibc declarations throughout
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <mutex>
#include <new>
#include <string>
#include <unordered_set>
#include <vector>

#include "discovery.h"

static_assert(sizeof(struct dirent) == sizeof(struct dirent64));

using namespace uroce::verbs::discovery;
using uroce::verbs::SysfsView;

namespace {

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
  if (synth(d)) return fail(ENOTSUP);  // no directory behind it (discovery.cc's header)
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

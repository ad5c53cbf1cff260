// The view's side of discovery (discovery.h): the view of this process's devices, built once on
// the first claimed look-up from the device registry, and the answer for a claimed path — pass it
// through when the real file system has it, else the view's node, link or error — with what stat
// reports for a node. Apart from the interposed entry points (discovery.cc, discovery_dirs.cc),
// which only carry answers out; the pure view itself is sysfs_view.h.
#undef _FORTIFY_SOURCE  // as every discovery file: the same glibc declarations throughout
#include <endian.h>
#include <fcntl.h>
#include <net/if.h>
#include <stdlib.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
#include <mutex>
#include <string>
#include <vector>

#include "discovery.h"
#include "objects.h"
#include "provider.h"

#ifndef UROCE_VERSION_STRING
#error "UROCE_VERSION_STRING must be defined by the build"
#endif

namespace uv = uroce::verbs;

namespace uroce::verbs::discovery {
namespace {

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

std::atomic<const View*> g_view{nullptr};
std::once_flag g_view_once;

}  // namespace

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
        v.ipv6 = d->cfg.ipv6;
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

bool real_has(const char* path) {
  struct stat st;
  const int saved = errno;
  const bool has = real_fstatat(path, &st, AT_SYMLINK_NOFOLLOW) == 0 || errno != ENOENT;
  errno = saved;
  return has;
}

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

}  // namespace uroce::verbs::discovery

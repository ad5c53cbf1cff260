// The view of sysfs.h: a map from normalised path to node, built once from the configuration.
#include "sysfs_view.h"

#include <infiniband/verbs.h>

#include <cerrno>
#include <cstdio>
#include <algorithm>
#include <cstring>

#include "transport/env.h"

namespace uroce::verbs {
namespace {

std::string hex_groups(const uint8_t* bytes, size_t groups) {
  std::string s;
  char part[8];
  for (size_t i = 0; i < groups; ++i) {
    std::snprintf(part, sizeof part, "%s%02x%02x", i ? ":" : "", bytes[2 * i], bytes[2 * i + 1]);
    s += part;
  }
  return s;
}

// The port's fixed attributes, as src/verbs/query.cc reports them through ibv_query_port: one
// lane (1X) at EDR's 25 Gb/s, IP-based GIDs, no LIDs (RoCE).
constexpr const char* kRate = "25 Gb/sec (1X EDR)\n";  // kernel's rate_show for EDR, width 1X
constexpr uint32_t kCapMask = IBV_PORT_IP_BASED_GIDS;

}  // namespace

std::string sysfs_gid_text(const uint8_t raw[16]) {
  return hex_groups(raw, 8);
}

SysfsView::SysfsView(const std::vector<ViewDevice>& devices,
                     std::function<bool(const std::string&)> link_up)
    : link_up_(std::move(link_up)) {
  add(std::string(kSysClass), Node{});
  add(std::string(kDevDir), Node{});
  for (const ViewDevice& d : devices) {
    // A name that would leave the directory cannot be a node of it.
    if (d.name.empty() || d.name == "." || d.name == ".." || d.name.find('/') != std::string::npos)
      continue;
    const std::string dev = std::string(kSysClass) + "/" + d.name;
    add(dev, Node{});
    add_file(dev + "/node_type", "1: CA\n");  // RDMA_NODE_IB_CA, as rxe and RNICs
    uint8_t guid[8];
    for (int i = 0; i < 8; ++i) guid[i] = static_cast<uint8_t>(d.guid >> (56 - 8 * i));
    add_file(dev + "/node_guid", hex_groups(guid, 4) + "\n");
    add_file(dev + "/sys_image_guid", hex_groups(guid, 4) + "\n");
    add_file(dev + "/fw_ver", d.fw_ver + "\n");

    const std::string port = dev + "/ports/1";
    add(dev + "/ports", Node{});
    add(port, Node{});
    Node state;
    state.kind = Kind::kFile;
    state.live = Node::Live::kState;
    state.netdev = d.netdev;
    add(port + "/state", state);
    state.live = Node::Live::kPhysState;
    add(port + "/phys_state", state);
    add_file(port + "/link_layer", "Ethernet\n");
    add_file(port + "/rate", kRate);
    add_file(port + "/lid", "0x0\n");
    add_file(port + "/sm_lid", "0x0\n");
    add_file(port + "/sm_sl", "0\n");
    add_file(port + "/lid_mask_count", "0\n");
    char cap[16];
    std::snprintf(cap, sizeof cap, "0x%08x\n", kCapMask);
    add_file(port + "/cap_mask", cap);

    // The GID table (query.cc): the GID of the address at index 0 (RoCE v2: IPv4-mapped, or the
    // IPv6 address itself), and again at index 1 as RoCE v1 when the port carries v1.
    const wire::IpAddr addr = d.ipv6 != wire::IpAddr{} ? d.ipv6 : wire::IpAddr(d.ipv4);
    uint8_t gid[16];
    std::memcpy(gid, addr.data(), 16);
    add(port + "/gids", Node{});
    add(port + "/gid_attrs", Node{});
    add(port + "/gid_attrs/types", Node{});
    add(port + "/gid_attrs/ndevs", Node{});
    const int len = d.roce_v1 ? 2 : 1;
    for (int i = 0; i < len; ++i) {
      const std::string idx = std::to_string(i);
      add_file(port + "/gids/" + idx, sysfs_gid_text(gid) + "\n");
      // The kernel's names for the two types (drivers/infiniband/core/cache.c, gid_type_str).
      add_file(port + "/gid_attrs/types/" + idx,
               i == static_cast<int>(transport::kRoceV1GidIndex) ? "IB/RoCE v1\n" : "RoCE v2\n");
      if (!d.netdev.empty()) add_file(port + "/gid_attrs/ndevs/" + idx, d.netdev + "\n");
    }
    add(port + "/pkeys", Node{});
    add_file(port + "/pkeys/0", "0xffff\n");  // the default P_Key, the only one (query.cc)

    // device/net/<netdev>: where rdma-core's tests look for the interface of a RoCE device.
    add(dev + "/device", Node{});
    add(dev + "/device/net", Node{});
    if (!d.netdev.empty()) {
      Node link;
      link.kind = Kind::kLink;
      link.content = "../../../../net/" + d.netdev;  // from …/<dev>/device/net/ to /sys/class/net
      link.resolved = "/sys/class/net/" + d.netdev;
      add(dev + "/device/net/" + d.netdev, link);
    }

    Node marker;
    marker.kind = Kind::kMarker;
    add(std::string(kDevDir) + "/" + d.name, marker);
  }
  for (auto& entry : nodes_) std::sort(entry.second.children.begin(), entry.second.children.end());
}

void SysfsView::add(const std::string& path, Node n) {
  const bool dir = n.kind == Kind::kDir;
  auto [it, fresh] = nodes_.emplace(path, std::move(n));
  if (!fresh) return;  // a second device of the same name adds nothing
  const size_t slash = path.rfind('/');
  auto parent = nodes_.find(std::string_view(path).substr(0, slash));
  if (parent == nodes_.end()) return;
  parent->second.children.push_back(path.substr(slash + 1));
  if (dir) ++parent->second.subdirs;
}

void SysfsView::add_file(const std::string& path, std::string text) {
  Node n;
  n.kind = Kind::kFile;
  n.content = std::move(text);
  add(path, std::move(n));
}

bool SysfsView::claims(const char* path) {
  if (path == nullptr || path[0] != '/') return false;
  std::string_view dir;
  if (path[1] == 's')
    dir = kSysClass;
  else if (path[1] == 'd')
    dir = kDevDir;
  else
    return false;
  // strncmp stops at the path's end, so it never reads past a short path.
  if (std::strncmp(path, dir.data(), dir.size()) != 0) return false;
  return path[dir.size()] == '\0' || path[dir.size()] == '/';
}

bool SysfsView::normalize(const char* in, char* out, size_t cap, bool* dir_only) {
  if (in == nullptr || in[0] != '/' || cap < 2) return false;
  size_t n = 0;  // out[0, n) is the result so far, without a trailing '/'
  const char* p = in;
  bool trailing = false;
  while (*p) {
    while (*p == '/') ++p;
    const char* start = p;
    while (*p && *p != '/') ++p;
    const size_t len = static_cast<size_t>(p - start);
    const bool dot = len == 1 && start[0] == '.';
    const bool dotdot = len == 2 && start[0] == '.' && start[1] == '.';
    // A path ending in '/', "." or ".." names a directory.
    trailing = *p == '/' || len == 0 || dot || dotdot;
    if (len == 0 || dot) continue;
    if (dotdot) {
      while (n > 0 && out[n - 1] != '/') --n;
      if (n > 0) --n;  // the '/' before the removed component
      continue;
    }
    if (n + 1 + len + 1 > cap) return false;
    out[n++] = '/';
    std::memcpy(out + n, start, len);
    n += len;
  }
  if (n == 0) out[n++] = '/';
  out[n] = '\0';
  if (dir_only) *dir_only = trailing && n > 1;
  return true;
}

SysfsView::Found SysfsView::find(const char* path, bool follow) const {
  Found f;
  char buf[sizeof f.path];
  bool dir_only = false;
  if (!normalize(path, buf, sizeof buf, &dir_only) || !claims(buf)) return f;
  const std::string_view norm(buf);
  // Walk the components from the claimed directory on: a link before the last one leads out of
  // the view, a file before the last one is not a directory.
  size_t end = norm.substr(0, kSysClass.size()) == kSysClass ? kSysClass.size() : kDevDir.size();
  for (;;) {
    const size_t slash = end < norm.size() ? end : std::string_view::npos;
    const std::string_view prefix = norm.substr(0, end);
    auto it = nodes_.find(prefix);
    if (it == nodes_.end()) {
      f.what = Found::What::kError;
      f.error = ENOENT;
      return f;
    }
    const Node& n = it->second;
    const bool last = slash == std::string_view::npos;
    if (n.kind == Kind::kLink && (!last || follow || dir_only)) {
      const std::string_view rest = last ? std::string_view() : norm.substr(slash);
      if (n.resolved.size() + rest.size() + 2 > sizeof f.path) return f;  // not ours: too long
      f.what = Found::What::kRewrite;
      char* o = f.path;
      o = std::copy(n.resolved.begin(), n.resolved.end(), o);
      o = std::copy(rest.begin(), rest.end(), o);
      if (dir_only) *o++ = '/';
      *o = '\0';
      return f;
    }
    if (last) {
      if (dir_only && n.kind != Kind::kDir) {
        f.what = Found::What::kError;
        f.error = ENOTDIR;
        return f;
      }
      f.what = Found::What::kNode;
      f.node = &n;
      std::memcpy(f.path, norm.data(), norm.size() + 1);
      return f;
    }
    if (n.kind != Kind::kDir) {
      f.what = Found::What::kError;
      f.error = ENOTDIR;
      return f;
    }
    end = norm.find('/', slash + 1);
    if (end == std::string_view::npos) end = norm.size();
  }
}

std::string_view SysfsView::read(const Node& n) const {
  if (n.live == Node::Live::kNone) return n.content;
  // No netdev to watch (a DPDK port): ACTIVE, as `uroce devices` reports it.
  const bool up = n.netdev.empty() || !link_up_ || link_up_(n.netdev);
  // The kernel's texts (drivers/infiniband/core/sysfs.c, state_show and phys_state_show); the
  // numbers are IBTA PortInfo:PortState and PortPhysicalState, as query.cc reports them.
  if (n.live == Node::Live::kPhysState) return up ? "5: LinkUp\n" : "3: Disabled\n";
  return up ? "4: ACTIVE\n" : "1: DOWN\n";
}

bool SysfsView::is_merge_point(std::string_view normalised) {
  return normalised == kSysClass || normalised == kDevDir;
}

}  // namespace uroce::verbs

// The kernel's view of an RDMA device, for uroce devices: what /sys/class/infiniband/<dev>/… and
// /dev/infiniband/<dev> would hold if a kernel driver backed them. Middleware reads these paths
// beside the verbs API to decide whether a device is usable and how: UCX lists no device without
// its /dev/infiniband node and takes the RoCE version of a GID from sysfs only; rdma-core's test
// suite finds a device's IP address through the netdev sysfs names; Open MPI's verbs code gives
// up when /sys/class/infiniband is missing (docs/middleware.md, "Discovery"). The preload answers
// those look-ups from this view (discovery.cc); this file is the view alone: pure, no file
// system, built from the device configuration, tested in tests/verbs/sysfs_view_test.cc.
//
// The layout follows the kernel's (drivers/infiniband/core/sysfs.c, Documentation/ABI/stable/
// sysfs-class-infiniband) for what uroce can say truthfully:
//   /sys/class/infiniband/                     directory (merged with the real one, if any)
//     <dev>/node_type, node_guid, sys_image_guid, fw_ver
//     <dev>/ports/1/{state, phys_state, link_layer, rate, lid, sm_lid, sm_sl, lid_mask_count,
//                    cap_mask}
//     <dev>/ports/1/gids/<i>, gid_attrs/types/<i>, gid_attrs/ndevs/<i>, pkeys/0
//     <dev>/device/net/<netdev>                  symlink to ../../../../net/<netdev>
//   /dev/infiniband/<dev>                        a character device: /dev/null, as `uroce
//                                                dev-nodes` makes it (a marker, nothing more)
// Every value is the one the verbs return for the same device (src/verbs/query.cc): the GID table
// (index 0 RoCE v2; index 1 RoCE v1 on a DPDK device with roce_v1=1), the node GUID, the port's
// capability flags, width and speed, the link state of the netdev. Not presented:
// /sys/class/infiniband_verbs (uroce has no uverbs character device: presenting one would send the
// system libibverbs looking for a kernel driver), /sys/devices/… (a uroce device is a directory
// here, not a link into a device tree), counters.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "transport/wire/ip.h"

namespace uroce::verbs {

// What the view needs to know of one device: its configuration, nothing that needs it open.
struct ViewDevice {
  std::string name;      // ibv_device.name and .dev_name
  uint32_t ipv4 = 0;     // host byte order (an IPv4 device)
  wire::IpAddr ipv6{};   // an IPv6 device's address (then ipv4 is 0); :: for an IPv4 device
  std::string netdev;    // the interface the address lives on; "" when none (a DPDK port)
  bool roce_v1 = false;  // GID index 1 is RoCE v1 (DPDK, roce_v1=1)
  uint64_t guid = 0;     // node GUID, host byte order (the value ibv_query_device reports)
  std::string fw_ver;    // ibv_device_attr.fw_ver
};

class SysfsView {
 public:
  // The two directories whose look-ups the view answers. A path is the view's business only if it
  // is one of them or lies below one (paths are compared as given: absolute, no "//" or "/./"
  // before the prefix ends).
  static constexpr std::string_view kSysClass = "/sys/class/infiniband";
  static constexpr std::string_view kDevDir = "/dev/infiniband";
  // The node standing in for /dev/infiniband/<dev> (see above).
  static constexpr const char* kMarkerTarget = "/dev/null";

  enum class Kind : uint8_t { kDir, kFile, kLink, kMarker };

  struct Node {
    Kind kind = Kind::kDir;
    std::string content;   // kFile: the text; kLink: the link's target as readlink says
    std::string resolved;  // kLink: the absolute path the target names
    std::vector<std::string> children;  // kDir: entry names, sorted
    // A kFile whose text follows the link of `netdev` when it is read (ports/1/state and
    // phys_state); kNone: `content` is the text.
    enum class Live : uint8_t { kNone, kState, kPhysState } live = Live::kNone;
    std::string netdev;
    unsigned subdirs = 0;  // kDir: how many children are directories (st_nlink is 2 + this)
  };

  // What a look-up of a path finds.
  struct Found {
    enum class What : uint8_t {
      kNotOurs,  // outside the view: the caller passes the original path on untouched
      kNode,     // a node of the view (`node`)
      kRewrite,  // goes through a link out of the view: look up `path` in the real file system
      kError,    // a path the view answers with an error (`error`: ENOENT, ENOTDIR)
    } what = What::kNotOurs;
    const Node* node = nullptr;
    int error = 0;
    char path[4096] = {};  // kNode: the normalised path; kRewrite: the real path
  };

  // `link_up(netdev)` says whether the interface is up (IFF_UP and IFF_RUNNING), as the port
  // state of an open device does (ports/link_watch.h); asked when a state file is read.
  SysfsView(const std::vector<ViewDevice>& devices,
            std::function<bool(const std::string&)> link_up);

  // True when `path` names one of the two directories or lies below one: the cheap first test
  // every interposed call makes (no allocation, no system call, async-signal-safe). Null and
  // relative paths are never claimed.
  static bool claims(const char* path);

  // Removes "." and empty components and resolves ".." lexically (the view's only links lead
  // out of it, so within it lexical and real resolution agree). `*dir_only` says whether the
  // path ended in '/' (its last component must then be a directory). False when `in` is not
  // absolute or does not fit `cap` bytes.
  static bool normalize(const char* in, char* out, size_t cap, bool* dir_only);

  // The look-up: no allocation, so that the calls libc makes async-signal-safe (stat, open,
  // access, readlink) stay so once the view exists. `follow` decides what a link as the last
  // component yields: followed (kRewrite to its target, as stat and open do) or the link itself
  // (kNode, as lstat and readlink do). Links before the last component are always followed.
  Found find(const char* path, bool follow) const;

  // The text of a file node, as a read returns it (no allocation).
  std::string_view read(const Node& n) const;

  // True for the two directories whose real counterparts, when they exist, are merged with the
  // view's entries (listing /sys/class/infiniband on a host with an RNIC shows both).
  static bool is_merge_point(std::string_view normalised);

  bool empty() const { return nodes_.size() <= 2; }

 private:
  void add(const std::string& path, Node n);
  void add_file(const std::string& path, std::string text);

  std::map<std::string, Node, std::less<>> nodes_;
  std::function<bool(const std::string&)> link_up_;
};

// "0000:0000:0000:0000:0000:ffff:7f00:0001": a GID as the kernel's gids/<i> file prints it.
std::string sysfs_gid_text(const uint8_t raw[16]);

}  // namespace uroce::verbs

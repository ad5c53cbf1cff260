// The uroce devices of this process: read once from the configuration (engine/config.h), then
// immutable, so that is_uroce() can be asked from any thread without a lock.
#include <endian.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>

#include "util/log.h"
#include "objects.h"
#include "provider.h"

namespace uroce::verbs {
namespace {

// Node GUID of a device, needed before the device is opened (ibv_get_device_guid in
// ibv_devices). It must equal Device::guid(), which ibv_query_device reports once the device is
// open: the EUI-64 of the locally administered MAC 02:00:a:b:c:d (see engine/device.cc). The
// verbs tests check that the two agree.
__be64 guid_for(uint32_t ipv4) {
  uint64_t g = (uint64_t{ipv4 >> 24} << 40) | (uint64_t{0xfffe} << 24) | (ipv4 & 0xffffff);
  return htobe64(g);
}

void copy_name(char* dst, size_t cap, const std::string& src) {
  std::snprintf(dst, cap, "%s", src.c_str());
}

std::atomic<const std::vector<VDevice*>*> g_devices{nullptr};
std::once_flag g_once;

void load() {
  auto* list = new std::vector<VDevice*>();  // lives until exit: devices outlive any list
  std::string err;
  try {
    auto cfgs = load_device_config(&err);
    if (!cfgs) {
      uroce::log().error("{}; no uroce devices are available", err);
    } else {
      int index = 0;
      for (const auto& cfg : *cfgs) list->push_back(new VDevice(cfg, index++));
    }
  } catch (const std::exception& e) {  // nothing may unwind through ibv_get_device_list
    uroce::log().error("reading the device configuration: {}", e.what());
    list->clear();
  }
  g_devices.store(list, std::memory_order_release);
}

// At exit, the engine threads of the devices still open are simply cut off, with whatever they were
// doing. That is harmless for the engine's own state, not for its peers: an application that
// exits as soon as it polls an error completion — the responder's LOC_LEN_ERR of a SEND too long
// for its receive, say — races the engine thread, which pushed that completion before it
// transmitted the NAK telling the requester why. Lost, that NAK leaves the peer to retry until
// IBV_WC_RETRY_EXC_ERR instead of completing with IBV_WC_REM_INV_REQ_ERR at once (seen in about
// one run in ten of `ibv_rc_pingpong -e` on a loaded host). An engine pass ends with its transmit
// flush and runs under the device lock, so taking that lock once per device lets the pass finish;
// the flush then sends what a pass the application ran itself held back (Datapath::set_hold).
// Then UROCE_STATS=1 prints the counters of a device the program never closed, and its `uroce
// stats` file goes (nothing reads a dead process's counters; 191 piled up in an afternoon).
std::atomic<void (*)()> g_before_drain{nullptr};

void drain_at_exit() {
  if (auto* fn = g_before_drain.load(std::memory_order_acquire)) fn();
  const auto* list = g_devices.load(std::memory_order_acquire);
  if (!list) return;
  for (VDevice* d : *list) d->drain();
}

}  // namespace

VDevice::VDevice(const DeviceConfig& c, int i)
    : DeviceAbi{}, cfg(c), index(i), guid_be(guid_for(c.addr().v4())) {
  // RoCE devices report the InfiniBand transport and a CA node, like rxe and RNICs do.
  dev.node_type = IBV_NODE_CA;
  dev.transport_type = IBV_TRANSPORT_IB;
  copy_name(dev.name, sizeof dev.name, cfg.name);
  copy_name(dev.dev_name, sizeof dev.dev_name, cfg.name);
  // The sysfs directory is the one the preload presents (sysfs_view.h, discovery.cc), where
  // rdma-core puts its devices'. There is no uverbs character device: dev_path stays empty.
  std::snprintf(dev.ibdev_path, sizeof dev.ibdev_path, "/sys/class/infiniband/%s",
                cfg.name.c_str());
}

std::shared_ptr<Device> VDevice::acquire(std::string* err) {
  std::lock_guard<std::mutex> g(mu_);
  if (auto d = open_.lock()) return d;
  std::unique_ptr<Device> d = Device::open(cfg, err);
  if (!d) return nullptr;
  std::shared_ptr<Device> shared(std::move(d));
  open_ = shared;
  opened_by_ = getpid();
  static std::once_flag at_exit;
  std::call_once(at_exit, [] { std::atexit(drain_at_exit); });
  return shared;
}

void VDevice::at_quick_exit() {
  std::shared_ptr<Device> d;
  {
    std::unique_lock<std::mutex> g(mu_, std::try_to_lock);
    if (!g.owns_lock() || opened_by_ != getpid()) return;
    d = open_.lock();
  }
  if (!d) return;
  {
    // Printing sums the QPs' counters under the device lock: not if it is held — by this very
    // thread, interrupted by a signal handler that calls _exit, it would never be released.
    std::unique_lock<std::mutex> l(d->lock(), std::try_to_lock);
    if (!l.owns_lock()) return;
  }
  d->print_stats_once();
  d->withdraw_stats();
}

void VDevice::drain() {
  std::shared_ptr<Device> d;
  {
    std::lock_guard<std::mutex> g(mu_);
    if (opened_by_ != getpid()) return;
    d = open_.lock();
  }
  if (!d) return;
  d->flush();
  d->print_stats_once();
  d->withdraw_stats();
}

void set_before_drain(void (*fn)()) {
  g_before_drain.store(fn, std::memory_order_release);
}

const std::vector<VDevice*>& devices() {
  std::call_once(g_once, load);
  return *g_devices.load(std::memory_order_acquire);
}

bool is_uroce(const ibv_device* dev) {
  const auto* list = g_devices.load(std::memory_order_acquire);
  if (!list || !dev) return false;
  for (const VDevice* d : *list)
    if (static_cast<const DeviceAbi*>(d) == reinterpret_cast<const DeviceAbi*>(dev)) return true;
  return false;
}

const char* device_name(ibv_device* dev) {
  return to_v(dev)->dev.name;
}
__be64 device_guid(ibv_device* dev) {
  return to_v(dev)->guid_be;
}
int device_index(ibv_device* dev) {
  return to_v(dev)->index;
}

}  // namespace uroce::verbs

// A process that ends with _exit() or _Exit() runs no atexit handler, so drain_at_exit never
// runs there: fio's jobs, forked children that end so (fio's fork_main), never printed
// UROCE_STATS=1's counters nor removed their `uroce stats` file. liburoce defines both at
// glibc's version (liburoce.map) and does what it safely can first (VDevice::at_quick_exit),
// then ends the process as glibc's does (exit_group). A vfork child's _exit (posix_spawn's,
// a shell's) finds no device this process opened and only exits.
#define UROCE_EXPORT extern "C" __attribute__((visibility("default")))

namespace {

[[noreturn]] void quick_exit_with_stats(int status) {
  if (const auto* list = uroce::verbs::g_devices.load(std::memory_order_acquire))
    for (uroce::verbs::VDevice* d : *list) d->at_quick_exit();
  for (;;) syscall(SYS_exit_group, status);
}

}  // namespace

UROCE_EXPORT void _exit(int status) {
  quick_exit_with_stats(status);
}
UROCE_EXPORT void _Exit(int status) {
  quick_exit_with_stats(status);
}

// The DPDK environment (EAL) of a process, initialised once, by the first DPDK device that opens.
// uroce lives inside other people's programs, so it initialises the EAL as a guest:
// - no hugepages (--no-huge -m 256), no PCI scan unless a device is a PCI address (--no-pci),
//   no telemetry thread, one lcore (-l 0: no worker threads), no shared config (--no-shconf: no
//   secondary processes), a file prefix of its own (--file-prefix=uroce<pid>);
// - rte_eal_init pins the calling thread to its main lcore's CPU: the caller's affinity is
//   restored afterwards, so the application thread that opened the device is not pinned;
// - EAL's own threads (the interrupt thread) start with every signal blocked, so
//   process-directed signals reach the application;
// - the runtime directory the EAL makes (/var/run/dpdk/uroce<pid>) is removed at once (with
//   --no-shconf it stays empty), and those of dead uroce processes are removed too.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

struct rte_mempool;

namespace uroce::dpdk {

// Initialises the EAL if no device did yet, with uroce's arguments followed by `extra`.
// `needs_pci`: leave out --no-pci (a device named by PCI address). true when the EAL is up
// (now or before); false and *err otherwise (the EAL's own message is logged). Arguments given
// after the EAL is up are ignored, with a warning when they differ.
bool eal_ensure(const std::vector<std::string>& extra, bool needs_pci, std::string* err);

// The EAL arguments eal_ensure uses for `extra` (for logs and tests).
std::vector<std::string> eal_arguments(const std::vector<std::string>& extra, bool needs_pci);

// Gives the calling thread an lcore id of its own (rte_thread_register) the first time it works a
// port, so that its mbuf allocations and frees go through the pools' per-lcore caches. A thread
// without one (LCORE_ID_ANY: every thread but the one that initialised the EAL, which uroce
// starts with a single lcore) takes each mbuf from the pool's shared ring — first in, first out,
// so every receive copy writes into the coldest of 4096 buffers and every transmit builds in one.
// Measured over memif: registering the engine and polling threads raised a 64 KiB RDMA WRITE
// stream at MTU 4096 about 1.7x (docs/performance.md). Purely an optimisation: a thread that is
// not registered is still correct. At most kMaxThreadCaches threads are registered at a time
// (a cache keeps up to 1.5 x its size of each pool's mbufs while its thread does something else,
// so a bound keeps most of a pool usable); the rest work through the rings. A registered thread
// flushes its caches back to every live pool and releases its lcore id when it exits. Call only
// once the EAL is up; cheap after the first call (one thread-local read).
constexpr int kMaxThreadCaches = 4;
void eal_thread_enter();
// Pools whose caches an exiting thread flushes (eal_thread_enter): a port tracks its pools from
// creation until just before it frees them.
void eal_track_pool(rte_mempool* mp);
void eal_untrack_pool(rte_mempool* mp);
// Threads registered now (for tests).
int eal_registered_threads();
// One line of DPDK's log (eal_ensure gives DPDK a stream that ends here), into uroce's log at the
// level DPDK gave it (RTE_LOG_ERR and worse: error; WARNING: warn; NOTICE, INFO: info; DEBUG:
// debug) and prefixed "dpdk: ". Messages known to be harmless go to debug.
void log_dpdk_line(std::string_view line, uint32_t level);

}  // namespace uroce::dpdk

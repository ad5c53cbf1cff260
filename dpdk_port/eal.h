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

#include <string>
#include <vector>

namespace uroce::dpdk {

// Initialises the EAL if no device did yet, with uroce's arguments followed by `extra`.
// `needs_pci`: leave out --no-pci (a device named by PCI address). true when the EAL is up
// (now or before); false and *err otherwise (the EAL's own message is logged). Arguments given
// after the EAL is up are ignored, with a warning when they differ.
bool eal_ensure(const std::vector<std::string>& extra, bool needs_pci, std::string* err);

// The EAL arguments eal_ensure uses for `extra` (for logs and tests).
std::vector<std::string> eal_arguments(const std::vector<std::string>& extra, bool needs_pci);

}  // namespace uroce::dpdk

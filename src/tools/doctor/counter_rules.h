// The running processes' counters (published in shared memory, engine/stats_shm.h) turned into
// sentences an engineer acts on — "packets are lost between the two devices", "the receiver
// does not post receives fast enough" — each naming the counters that show it, with the fix.
// The same readings docs/troubleshooting.md teaches, written once as rules. Pure: the tests
// feed counter values and assert on the checks.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "tools/doctor/report.h"
#include "transport/wire/ip.h"

namespace uroce::doctor {

// One device as the running processes publish it: their counters summed (a device several
// processes share is one address, docs/architecture.md), and per peer address the QP-table
// figures that say where losses and RNRs go.
struct PeerFigures {
  uint64_t retransmitted_pkts = 0;
  uint64_t local_ack_timeout_err = 0;
  uint64_t rnr = 0;  // rcvd_rnr_err + send_rnr_err
};
struct DeviceCounterView {
  std::string device;
  wire::IpAddr ip{};
  std::vector<pid_t> pids;
  bool port_active = true;
  std::map<std::string, uint64_t> counters;   // absent counters read as 0
  std::map<wire::IpAddr, PeerFigures> peers;  // by peer address (either family), from the QP tables
};

// One check per reading (port, loss, retries, RNR, ICRC, ECN/CNP, drops by cause, PFC), each
// passing with the counters it looked at when they are zero.
std::vector<Check> diagnose_counters(const DeviceCounterView& v);

}  // namespace uroce::doctor

// uroce doctor [PEER]: the RoCE engineer's checklist, walked for the devices this environment
// configures (device_checks.h), the path to PEER (path_checks.h) and the counters the running
// processes publish (counter_rules.h); each check printed with its verdict, evidence and fix
// (report.h). docs/troubleshooting.md, "uroce doctor", says what each check does and what is
// conclusive.
#pragma once

#include <CLI/CLI.hpp>

#include <optional>
#include <string>
#include <vector>

#include "tools/doctor/report.h"
#include "tools/qp_view.h"
#include "transport/wire/ip.h"

namespace uroce::doctor {

struct DoctorOptions {
  std::string device;  // only this device (and the path from it); "": every device,
                       // the path from the first
  std::string peer;    // address or host name; "": no path checks
  bool json = false;
  int dscp = -1;      // the TOS probe's DSCP; -1: the device's, else 26
  int wait_ms = 500;  // how long each probe waits for its answer
};

// Adds `doctor` and its options (filling *o) to the uroce command.
CLI::App* add_command(CLI::App& app, DoctorOptions* o);

// Prints the report on stdout; returns its exit code (report.h), or 2 when PEER or the device
// named cannot be found.
int cmd_doctor(const DoctorOptions& o, const tools::Collect& collect);

// ---- the peer's address (pure) -------------------------------------------------------------
// The address to probe among a name's: the first of the device's family, else the first (which
// family_mismatch then reports).
wire::IpAddr choose_peer(const std::vector<wire::IpAddr>& candidates, bool device_ipv6);
// A failed "path.family" check when the peer is of the other family than the device (an IPv6
// device asked about an IPv4 peer, or the reverse): no probe can tell anything about that path.
// peer_text: the peer as given (a name or a literal).
std::optional<Check> family_mismatch(const std::string& device, const std::string& device_addr,
                                     bool device_ipv6, const std::string& peer_text,
                                     const wire::IpAddr& peer);

}  // namespace uroce::doctor

// A received packet as the receive pipeline (engine/datapath.h) hands it to the dispatch
// (engine/dispatch.h): checked, parsed, with what the port knew of its headers.
#pragma once

#include <cstdint>

#include "transport/env.h"
#include "wire/wire.h"

namespace uroce {

// `pkt.payload` points into the port's (or the fault injector's) buffers: valid until the
// pipeline's next rx_burst().
struct RxPacket {
  wire::Packet pkt;
  transport::RxInfo info;
  uint16_t ip_id = 0;  // the IP Identification the ICRC was valid for
};

}  // namespace uroce

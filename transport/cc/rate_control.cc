// The rate-control factory and the event names.
#include "transport/cc/rate_control.h"

#include "transport/cc/dcqcn.h"
#include "transport/cc/timely.h"

namespace uroce::transport::cc {

const char* to_string(CcEvent::Kind k) {
  switch (k) {
    case CcEvent::Kind::kCnp:
      return "CNP";
    case CcEvent::Kind::kAlpha:
      return "ALPHA";
    case CcEvent::Kind::kTimer:
      return "TIMER";
    case CcEvent::Kind::kBytes:
      return "BYTES";
    case CcEvent::Kind::kRtt:
      return "RTT";
  }
  return "?";
}

const char* to_string(CcEvent::Stage s) {
  switch (s) {
    case CcEvent::Stage::kNone:
      return "";
    case CcEvent::Stage::kCut:
      return "CUT";
    case CcEvent::Stage::kFastRecovery:
      return "FR";
    case CcEvent::Stage::kAdditive:
      return "AI";
    case CcEvent::Stage::kHyper:
      return "HI";
  }
  return "?";
}

std::unique_ptr<RateControl> make_rate_control(const CcConfig& c, uint64_t line_bps) {
  switch (c.algorithm) {
    case Algorithm::kDcqcn:
      return std::make_unique<DcqcnRp>(c.dcqcn, line_bps);
    case Algorithm::kTimely:
      return std::make_unique<Timely>(c.timely, line_bps);
    case Algorithm::kNone:
      break;
  }
  return std::make_unique<NoRateControl>(line_bps);
}

}  // namespace uroce::transport::cc

// The IB static rates (IBTA 9.11 / PortInfo, ibv_rate): each enum value with its multiple of
// 2.5 Gbit/s (0 where the rate is no such multiple) and its rate in Mbit/s, as libibverbs'
// ibv_rate_to_mult / ibv_rate_to_mbps give them. An RC or UC QP's path (IBV_QP_AV) may name one
// in ah_attr.static_rate; the QP's pacer then holds its sends to it (qp_impl.h, sync_pacer).
#pragma once

#include <infiniband/verbs.h>

namespace uroce::transport {

struct StaticRate {
  ibv_rate rate;
  int mult;
  int mbps;
};
inline constexpr StaticRate kStaticRates[] = {
    {IBV_RATE_2_5_GBPS, 1, 2500},     {IBV_RATE_5_GBPS, 2, 5000},
    {IBV_RATE_10_GBPS, 4, 10000},     {IBV_RATE_20_GBPS, 8, 20000},
    {IBV_RATE_30_GBPS, 12, 30000},    {IBV_RATE_40_GBPS, 16, 40000},
    {IBV_RATE_60_GBPS, 24, 60000},    {IBV_RATE_80_GBPS, 32, 80000},
    {IBV_RATE_120_GBPS, 48, 120000},  {IBV_RATE_14_GBPS, 0, 14062},
    {IBV_RATE_56_GBPS, 0, 56250},     {IBV_RATE_112_GBPS, 0, 112500},
    {IBV_RATE_168_GBPS, 0, 168750},   {IBV_RATE_25_GBPS, 10, 25781},
    {IBV_RATE_100_GBPS, 40, 103125},  {IBV_RATE_200_GBPS, 80, 206250},
    {IBV_RATE_300_GBPS, 120, 309375}, {IBV_RATE_28_GBPS, 11, 28125},
    {IBV_RATE_50_GBPS, 20, 53125},    {IBV_RATE_400_GBPS, 160, 425000},
    {IBV_RATE_600_GBPS, 240, 637500},
};

// The rate of a static_rate value as the caller stored it (an int: it may be no enum value),
// in Mbit/s; 0 for IBV_RATE_MAX (no limit); -1 for a value that names no rate.
inline int static_rate_mbps(int stored) {
  if (stored == IBV_RATE_MAX) return 0;
  for (const auto& r : kStaticRates)
    if (static_cast<int>(r.rate) == stored) return r.mbps;
  return -1;
}

}  // namespace uroce::transport

/* uroce: a user-space RoCEv2 transport that is also a libibverbs provider.
 *
 * Programs use uroce through the ordinary verbs API (<infiniband/verbs.h>): either run unmodified
 * under `uroce-run PROGRAM…` (liburoce preloaded in front of the system libibverbs), or link
 * liburoce directly (`pkg-config --libs uroce`, or CMake `find_package(uroce)` and the target
 * uroce::uroce). Devices come from UROCE_DEVICES, e.g. UROCE_DEVICES=uroce0=127.0.0.1.
 *
 * This header adds the few uroce-specific calls. It is C and C++. */
#ifndef UROCE_UROCE_H
#define UROCE_UROCE_H

#include <infiniband/verbs.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The library's version, "MAJOR.MINOR.PATCH". */
const char* uroce_version(void);

/* 1 if `dev` (from ibv_get_device_list) is a uroce device, 0 if it belongs to another provider. */
int uroce_is_uroce_device(struct ibv_device* dev);

/* One device counter. Names follow Linux rxe's hw_counters where one exists (rcvd_pkts,
 * sent_pkts, rcvd_icrc_err…); `name` points to static storage. */
struct uroce_counter {
  const char* name;
  uint64_t value;
};

/* Reads the counters of the device `ctx` was opened on, shared by every context of that device in
 * the process. Fills up to `max` entries of `out` and returns how many counters the device has
 * (call with max 0 to size the array), or -1 with errno EINVAL when `ctx` is not a uroce context
 * or `out` is NULL with max > 0. Values are read without stopping the engine: each is exact, the
 * set is not a snapshot. */
int uroce_query_counters(struct ibv_context* ctx, struct uroce_counter* out, int max);

#ifdef __cplusplus
}
#endif

#endif /* UROCE_UROCE_H */

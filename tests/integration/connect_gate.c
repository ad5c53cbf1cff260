// libconnect_gate.so: an LD_PRELOAD shim for perftest -R's client, in tests/integration/rdma_cm.sh
// (uroce to uroce) and tests/interop/run.sh (uroce and the rxe guest, either the client).
// perftest -R makes a control connection, exchanges its parameters over it, and then connects
// the test connection; its server listens for that one only after the exchange. A client that
// connects first is rejected (REJ reason 8: nobody listens) and perftest 4.5's retry path then
// crashes (fixed upstream in perftest 3d9d8d0). Against a TCG guest slow to listen again,
// uroce's client lost that race three times in a row. A test cannot order two processes' steps
// from outside, so this shim does: every rdma_connect() after the first waits until the file
// URO_CONNECT_GATE names exists — the harness creates it once the server listens again (uroce's
// server says so at UROCE_LOG=info; the guest lists it in `rdma resource show cm_id`) — and then
// calls the real one. Nothing else of the program changes. After kMaxWaitS without the file it
// goes on, and says so.
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

struct rdma_cm_id;
struct rdma_conn_param;

enum { kMaxWaitS = 60, kPollMs = 5 };

int rdma_connect(struct rdma_cm_id* id, struct rdma_conn_param* param) {
  typedef int (*connect_fn)(struct rdma_cm_id*, struct rdma_conn_param*);
  static connect_fn real;
  static int calls;
  if (!real) real = (connect_fn)dlsym(RTLD_NEXT, "rdma_connect");
  if (!real) {
    fprintf(stderr, "connect_gate: no rdma_connect to call\n");
    return -1;
  }
  const char* gate = getenv("URO_CONNECT_GATE");
  if (calls++ > 0 && gate && *gate) {
    const struct timespec step = {0, kPollMs * 1000000L};
    int waited_ms = 0;
    while (access(gate, F_OK) != 0 && waited_ms < kMaxWaitS * 1000) {
      nanosleep(&step, NULL);
      waited_ms += kPollMs;
    }
    fprintf(stderr, "connect_gate: connect %d %s after %d ms\n", calls,
            access(gate, F_OK) == 0 ? "opened" : "NOT opened", waited_ms);
  }
  return real(id, param);
}

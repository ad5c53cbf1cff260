// The forked job of errno_test.cc's fork test, as fio runs its jobs: this program opens no device;
// its child does — the last of UROCE_DEVICES, a CQ on it — prints "<its pid>" on stdout and ends
// with _exit(0), which runs no atexit handler (fio's fork_main). This program waits for it and
// exits with its status.
#include <infiniband/verbs.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>

int main() {
  std::fflush(stdout);
  const pid_t pid = fork();
  if (pid < 0) return 3;
  if (pid == 0) {
    int n = 0;
    ibv_device** list = ibv_get_device_list(&n);
    if (!list || n == 0) _exit(2);
    ibv_context* ctx = ibv_open_device(list[n - 1]);
    if (!ctx) _exit(2);
    ibv_cq* cq = ibv_create_cq(ctx, 16, nullptr, nullptr, 0);
    if (!cq) _exit(2);
    std::printf("%d\n", static_cast<int>(getpid()));
    std::fflush(stdout);
    _exit(0);  // the device stays open, as in fio's jobs
  }
  int status = 0;
  if (waitpid(pid, &status, 0) != pid) return 4;
  return WIFEXITED(status) ? WEXITSTATUS(status) : 5;
}

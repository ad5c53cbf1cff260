// Signals and uroce's own threads. A process-directed signal (SIGALRM, SIGINT, SIGCHLD…) goes to
// any one thread that does not block it; if that were an engine thread, the application would
// never see it: its handler would run on a uroce thread, and the application's blocking call
// (ibv_get_cq_event, read, poll) would not be interrupted with EINTR. So uroce's threads block
// every signal, and signals reach the application's threads as without uroce.
#pragma once

#include <signal.h>

namespace uroce {

// Blocks every signal in the calling thread while it lives and restores the mask after: a thread
// created meanwhile starts with every signal blocked (pthread_sigmask(3): new threads inherit
// their creator's mask).
class AllSignalsBlocked {
 public:
  AllSignalsBlocked() {
    sigset_t all;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &saved_);
  }
  ~AllSignalsBlocked() { pthread_sigmask(SIG_SETMASK, &saved_, nullptr); }
  AllSignalsBlocked(const AllSignalsBlocked&) = delete;
  AllSignalsBlocked& operator=(const AllSignalsBlocked&) = delete;

 private:
  sigset_t saved_;
};

}  // namespace uroce

// rdma_cm's event channels (rdma_cm.h): uroce's queue of events behind each channel, the fd an
// application polls, reading uroce's events and the real library's in turn, and synchronous ids
// (a NULL channel), whose calls wait for their own event.
#include <fcntl.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <system_error>
#include <vector>

#include "cm/rdma_cm.h"

namespace uroce::cm {

EventQueue::EventQueue() : fd_(eventfd(0, EFD_CLOEXEC | EFD_SEMAPHORE | EFD_NONBLOCK)) {
  if (fd_ < 0) throw std::system_error(errno, std::generic_category(), "eventfd");
}

EventQueue::~EventQueue() {
  close_fd();
}

void EventQueue::close_fd() {
  std::lock_guard<std::mutex> g(mu_);
  if (fd_ >= 0) close(fd_);
  fd_ = -1;
}

void EventQueue::push(EventObj* e) {
  std::lock_guard<std::mutex> g(mu_);
  q_.push_back(e);
  uint64_t one = 1;
  ssize_t r = write(fd_, &one, sizeof one);  // cannot fail short of 2^64-2 unread events
  (void)r;
}

EventObj* EventQueue::pop() {
  std::lock_guard<std::mutex> g(mu_);
  if (q_.empty()) return nullptr;
  EventObj* e = q_.front();
  q_.pop_front();
  uint64_t v;
  ssize_t r = read(fd_, &v, sizeof v);
  (void)r;
  return e;
}

ChannelObj* new_channel(bool sync) {
  ChannelObj* c = nullptr;
  try {
    c = new ChannelObj();
  } catch (const std::exception&) {
    errno = EMFILE;
    return nullptr;
  }
  c->sync = sync;
  c->ch.fd = c->q.fd();
  if (!sync) {
    c->epfd = epoll_create1(EPOLL_CLOEXEC);
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.fd = c->q.fd();
    if (c->epfd < 0 || epoll_ctl(c->epfd, EPOLL_CTL_ADD, c->q.fd(), &ev) < 0) {
      int err = errno;
      destroy_channel(c);
      errno = err;
      return nullptr;
    }
    c->ch.fd = c->epfd;
  }
  return c;
}

// The real library's destroy only closes its fd and frees the channel: it calls nothing back, so
// mu may be held.
void destroy_channel(ChannelObj* ch) {
  if (rdma_event_channel* r = ch->real.load(std::memory_order_acquire)) {
    InReal in;
    UROCE_REAL(rdma_destroy_event_channel, "RDMACM_1.0")(r);
  }
  if (ch->epfd >= 0) close(ch->epfd);
  delete ch;
}

// rping's CM thread, for one, acknowledges the DISCONNECTED event and calls rdma_get_cm_event
// again while the main thread, woken by that event, tears down and destroys the channel. With
// librdmacm the thread is nearly always asleep in read() of the channel's fd by then, and stays
// asleep until the process exits (closing an fd wakes no reader); when it comes late, it reads a
// closed fd and the program exits with EBADF. Retired channels are therefore kept (a few hundred
// bytes each, fds closed) and a late caller sleeps as an early one would — unless the
// application made the fd non-blocking: its read() would not have slept, and fails with EBADF.
void retire_channel(ChannelObj* ch) {
  static std::mutex mu;
  static std::vector<ChannelObj*>* retired = new std::vector<ChannelObj*>();  // reachable
  if (rdma_event_channel* r = ch->real.exchange(nullptr, std::memory_order_acq_rel)) {
    InReal in;
    UROCE_REAL(rdma_destroy_event_channel, "RDMACM_1.0")(r);
  }
  if (ch->epfd >= 0) {
    const int fl = fcntl(ch->epfd, F_GETFL);
    ch->retired_nonblocking = fl >= 0 && (fl & O_NONBLOCK);
  }
  ch->retired.store(true, std::memory_order_release);
  if (ch->epfd >= 0) close(ch->epfd);
  ch->q.close_fd();
  std::lock_guard<std::mutex> g(mu);
  retired->push_back(ch);
}

namespace {

// A thread asleep on a destroyed channel (retire_channel) never wakes, as in librdmacm's read();
// poll is a cancellation point, so pthread_cancel still ends it.
[[noreturn]] void park_forever() {
  for (;;) poll(nullptr, 0, -1);
}

// Waits until `ch` may have an event: its epoll fd (async), or its event fd and its real
// channel's fd (a synchronous id's channel). 0 or an errno (EINTR when a signal interrupted the
// wait: librdmacm's blocking read() of the channel returns it too).
int wait_channel(ChannelObj* ch) {
  pollfd p[2]{};
  nfds_t n = 0;
  if (ch->epfd >= 0) {
    p[n++] = {ch->epfd, POLLIN, 0};
  } else {
    p[n++] = {ch->q.fd(), POLLIN, 0};
    if (rdma_event_channel* r = ch->real.load(std::memory_order_acquire))
      p[n++] = {r->fd, POLLIN, 0};
  }
  return poll(p, n, -1) < 0 ? errno : 0;
}

}  // namespace

// The two sources are tried in turn so that neither starves the other. Blocks unless the
// application made ch.fd O_NONBLOCK (then EAGAIN); a synchronous id's channel always blocks.
int get_event(ChannelObj* ch, rdma_cm_event** out) {
  for (;;) {
    if (ch->retired.load(std::memory_order_acquire)) {
      if (ch->retired_nonblocking) return fail(EBADF);
      park_forever();
    }
    const bool real_first = (ch->turn.fetch_add(1, std::memory_order_relaxed) & 1) != 0;
    for (int k = 0; k < 2; ++k) {
      if ((k == 0) == real_first) {
        rdma_event_channel* r = ch->real.load(std::memory_order_acquire);
        if (!r) continue;
        rdma_cm_event* re = nullptr;
        int rc, err;
        {
          InReal in;
          errno = 0;
          rc = UROCE_REAL(rdma_get_cm_event, "RDMACM_1.0")(r, &re);
          err = errno;
        }
        if (rc == 0) return take_real_event(re, out);
        if (err != EAGAIN && err != EWOULDBLOCK) return fail(err ? err : EIO);
        continue;
      }
      EventObj* e = ch->q.pop();
      if (!e) continue;
      std::lock_guard<std::mutex> g(svc().mu());
      if (e->owner->state == IdState::kDestroyed) {  // its id went before the event was read
        release_event(e);
        k = -1;  // look at both sources again
        continue;
      }
      *out = &e->ev;
      return 0;
    }
    if (!ch->sync) {
      int fl = fcntl(ch->epfd, F_GETFL);
      if (fl < 0 && ch->retired.load(std::memory_order_acquire)) continue;  // see the top
      if (fl < 0) return -1;
      if (fl & O_NONBLOCK) return fail(EAGAIN);
    }
    if (int rc = wait_channel(ch)) return fail(rc);
  }
}

// Keeps the event in id->event (acknowledging the previous one) and turns a failure into errno.
int complete(IdObj* o) {
  if (!o->chan->sync) return 0;
  if (o->id.event) {
    rdma_ack_cm_event(o->id.event);
    o->id.event = nullptr;
  }
  rdma_cm_event* e = nullptr;
  if (get_event(o->chan, &e) != 0) return -1;
  o->id.event = e;
  if (e->status) {
    if (e->event == RDMA_CM_EVENT_REJECTED) return fail(ECONNREFUSED);
    return fail(e->status < 0 ? -e->status : e->status);
  }
  switch (e->event) {
    case RDMA_CM_EVENT_ADDR_ERROR:
    case RDMA_CM_EVENT_ROUTE_ERROR:
    case RDMA_CM_EVENT_CONNECT_ERROR:
    case RDMA_CM_EVENT_UNREACHABLE:
      return fail(EHOSTUNREACH);
    case RDMA_CM_EVENT_REJECTED:
      return fail(ECONNREFUSED);
    default:
      return 0;
  }
}

}  // namespace uroce::cm

// The IB Communication Manager of one port (IBTA vol. 1 ch. 12): the connection state machine
// (12.9), its retransmissions, duplicate detection, disconnection and time wait, and SIDR
// (12.11). Pure and deterministic: MADs come in through on_mad(), time is a parameter of every
// call, and what the agent sends and what its consumer must hear leave through two outboxes
// (take_mads(), take_events()). The caller (src/cm/service.cc) owns the socket-side GSI QP and the
// clock; tests drive two agents over a lossy virtual link (tests/cm/agent_test.cc).
//
// Addresses: a peer is its IP address (wire::IpAddr: IPv4-mapped or IPv6): MADs go to that
// address's GSI QP (QPN 1).
//
// The consumer (rdma_cm) decides what to answer: a REQ becomes an Event::kReq and stays in
// REQ_RCVD until accept() (REP) or reject() (REJ); a REP becomes an Event::kRep and stays in
// REP_RCVD until establish() (RTU) or reject(). Everything else — retransmission, MRA for a
// consumer that is slow to answer, answering duplicates from a cache, REJ for a REQ nobody
// listens for, DREP for a DREQ of a connection that is gone — the agent does itself.
#pragma once

#include <cstdint>
#include <map>
#include <span>
#include <vector>

#include "cm/mad.h"
#include "wire/ip.h"

namespace uroce::cm {

using wire::IpAddr;

using Time = uint64_t;  // nanoseconds, any epoch (the caller's clock)
inline constexpr Time kNever = ~Time{0};

// Connection states of IBTA 12.9.6 (figure 154), passive and active, and time wait.
enum class ConnState : uint8_t {
  kIdle,
  kReqSent,     // active: REQ out, waiting for REP/REJ/MRA
  kMraReqRcvd,  // active: the passive side MRA'd our REQ; waiting longer (REP Wait)
  kRepRcvd,     // active: REP in, waiting for the consumer to establish (RTU) or reject
  kReqRcvd,     // passive: REQ in, waiting for the consumer to accept (REP) or reject
  kMraReqSent,  // passive: a duplicate REQ came while the consumer thought; MRA sent
  kRepSent,     // passive: REP out, waiting for RTU
  kEstablished,
  kDreqSent,
  kDreqRcvd,
  kTimeWait,
};
const char* state_name(ConnState s);

// Tunables, each a CM timeout value (4.096 µs × 2^value) unless said otherwise.
struct AgentConfig {
  uint64_t ca_guid = 0;  // Local CA GUID in REQ/REP
  // How long this side takes to answer a REQ or REP, announced in the REQ (Remote/Local CM
  // Response Timeout); also how long the active side waits before resending its REQ. 16 = 268 ms:
  // the uroce CM answers from its own thread in microseconds, and a lost MAD then costs a quarter
  // second, not the 4.3 s of the kernel's default (20).
  uint8_t cm_response_timeout = 16;
  // Retransmissions of a REQ, REP or DREQ before the connection attempt fails (IBTA: 0..15). The
  // kernel's rdma_cm uses 15.
  uint8_t max_cm_retries = 15;
  // Packet lifetime added twice to every wait (12.6.5 "PacketLifeTime"): 12 = 16.8 ms.
  uint8_t packet_lifetime = 12;
  // The extra time asked for in an MRA when the consumer has not answered a REQ yet (12.6.6):
  // 21 = 8.6 s per MRA; the active side resends its REQ after it and is MRA'd again.
  uint8_t mra_service_timeout = 21;
  // How long a connection stays in time wait (12.9.7), and a SIDR reply stays cached for
  // duplicates: 17 = 537 ms.
  uint8_t time_wait = 17;
  // The first local communication ID / SIDR request ID; the next ones follow (0 is skipped). Set
  // from a random number by the service so that a restarted process does not reuse old IDs.
  uint32_t first_comm_id = 1;
  // The IDs this agent may hand out: comm_id_base | (n & comm_id_mask). On a device other
  // processes share, the base holds this process's slot so that the steering program brings
  // each CM message to the process whose ID it names (PortShare, docs/architecture.md).
  uint32_t comm_id_base = 0;
  uint32_t comm_id_mask = 0xffffffff;
  uint32_t tid_prefix = 0;  // high 32 bits of the transaction IDs this agent starts
};

struct OutMad {
  IpAddr dst_ip{};  // the MAD goes to that address's QP1
  Mad mad{};
};

struct Event {
  enum class Type : uint8_t {
    kReq,           // passive: a REQ for a listened-to service (id: the new connection)
    kRep,           // active: REP received; consumer must establish() or reject()
    kEstablished,   // passive: RTU received (or notify_established())
    kRej,           // REJ received (either side, before establishment)
    kReqTimeout,    // active: REQ retries exhausted (no answer)
    kRepTimeout,    // passive: REP retries exhausted (no RTU)
    kDreq,          // DREQ received (or crossed ours): the connection is closing
    kDrep,          // DREP received for our DREQ
    kDreqTimeout,   // our DREQ was never answered
    kTimeWaitExit,  // the connection's local ID is free again
    kSidrReq,       // passive: a SIDR REQ for a listened-to service (id: reply handle)
    kSidrRep,       // active: SIDR REP received (id: our request ID)
    kSidrTimeout,   // active: SIDR REQ retries exhausted
  };
  explicit Event(Type t) : type(t) {}
  // A request for a listener (kReq, kSidrReq) from `peer_ip`, handled under `id`.
  Event(Type t, uint32_t id, uint64_t listen_cookie, IpAddr peer_ip)
      : type(t), id(id), listen_cookie(listen_cookie), peer_ip(peer_ip) {}
  Type type;
  uint32_t id = 0;             // local communication ID (or SIDR handle / request ID)
  uint64_t listen_cookie = 0;  // kReq/kSidrReq: what listen() was given
  IpAddr peer_ip{};
  Req req;                            // kReq
  Rep rep;                            // kRep
  Rej rej;                            // kRej
  SidrReq sidr_req;                   // kSidrReq
  SidrRep sidr_rep;                   // kSidrRep
  std::vector<uint8_t> private_data;  // kEstablished (RTU), kDreq, kDrep
  // The timeouts (kReqTimeout, kRepTimeout, kDreqTimeout, kSidrTimeout): the attempt ended
  // before its retries ran out, because nothing listens on the peer's UDP 4791 (on_unreachable).
  bool unreachable = false;
};
const char* event_name(Event::Type t);

struct AgentCounters {
  uint64_t mads_sent = 0, mads_received = 0;
  uint64_t retransmits = 0;      // REQ/REP/DREQ/SIDR REQ resent after a timeout
  uint64_t duplicates = 0;       // duplicate REQ/REP/DREQ/SIDR REQ answered from state
  uint64_t dropped = 0;          // malformed, unexpected or for an unknown connection
  uint64_t rej_no_listener = 0;  // REQs/SIDR REQs for a service nobody listens on
  uint64_t held = 0;             // REQs/SIDR REQs held for a reserved service (reserve())
};

class Agent {
 public:
  explicit Agent(const AgentConfig& cfg);

  // Listening: REQs and SIDR REQs for `service_id` become events carrying `cookie`. EADDRINUSE
  // when someone listens already.
  int listen(uint64_t service_id, uint64_t cookie);
  void unlisten(uint64_t service_id);

  // A service bound (rdma_bind_addr) but not yet listened to. Programs tell their peer the port
  // between the two calls (qperf does, over its TCP control connection), and the peer's REQ can
  // come first; the kernel's CM would reject it (no listener), but there the window is
  // microseconds, here it can hold the opening of the device. A REQ or SIDR REQ for a reserved
  // service therefore waits (up to kMaxHeld per service, its retransmissions replacing it) for
  // listen(), after which take_held() takes it as if it came then; unreserve() (the id destroyed
  // without listening) answers what waits as nobody listening does. Counted (reserve/unreserve
  // pairs).
  void reserve(uint64_t service_id);
  void unreserve(uint64_t service_id, Time now);
  void take_held(uint64_t service_id, Time now);
  static constexpr size_t kMaxHeld = 16;

  // Active side. `req` carries everything but the communication ID, the CA GUID and the CM
  // timeouts/retries, which the agent fills in. Returns the local communication ID (never 0).
  uint32_t connect(IpAddr dst_ip, Req req, Time now);
  // REP_RCVD → ESTABLISHED: sends RTU. EINVAL in another state or for an unknown ID.
  int establish(uint32_t id, std::span<const uint8_t> private_data, Time now);

  // Passive side. REQ_RCVD/MRA_REQ_SENT → REP_SENT. `rep`'s IDs and GUID are filled in.
  int accept(uint32_t id, Rep rep, Time now);
  // RTU not yet received but the QP saw traffic (IBV_EVENT_COMM_EST): REP_SENT → ESTABLISHED
  // (no event: the caller knows).
  int notify_established(uint32_t id);

  // Either side, before establishment: sends REJ and forgets the connection (REQ_RCVD,
  // MRA_REQ_SENT, REP_SENT, REP_RCVD). EINVAL otherwise.
  int reject(uint32_t id, uint16_t reason, std::span<const uint8_t> private_data, Time now);

  // ESTABLISHED → DREQ_SENT (DREQ out, retried); DREQ_RCVD → TIME_WAIT (DREP out); already
  // disconnecting: 0, nothing sent. EINVAL before establishment (use reject) or unknown ID.
  int disconnect(uint32_t id, std::span<const uint8_t> private_data, Time now);

  // The consumer is gone: tidy up as the kernel's ib_destroy_cm_id does — REJ what is not yet
  // established, DREQ (or DREP) what is, and let time wait run out silently. No further events
  // for `id`.
  void destroy(uint32_t id, Time now);
  // The process exits: destroy() for every connection, as the kernel's CM does for the ids of a
  // process whose rdma_cm file closes — DREQ for an established one, DREP for one the peer
  // disconnected, REJ for one half made — so its peers learn it now, not by their retries.
  void destroy_all(Time now);

  // SIDR (12.11). Active: returns the request ID; `timeout` and `retries` from the consumer
  // (rdma_resolve_route's timeout, librdmacm's defaults otherwise).
  uint32_t sidr_request(IpAddr dst_ip, SidrReq req, Time now);
  // Passive: answers the SIDR REQ event `id` (and later duplicates from cache). EINVAL unknown.
  int sidr_reply(uint32_t id, SidrRep rep, Time now);
  void sidr_cancel(uint32_t id);  // active: stop retrying, no event

  // A MAD received on QP1 from `src_ip`. Anything malformed is counted and dropped.
  void on_mad(IpAddr src_ip, std::span<const uint8_t> mad, Time now);
  // Runs what is due at `now` (retransmissions, timeouts, time wait).
  void on_timer(Time now);
  // The port learnt that nothing listens on `peer_ip`'s UDP 4791 (ICMP port unreachable for a
  // datagram sent there: ports/port.h, PortEvent). No retransmission can be answered, so what
  // waits on that peer for an answer ends now as if its retries had run out, with
  // Event::unreachable set: a REQ (kReqTimeout), a REP (kRepTimeout, and no REJ: nobody would
  // read it), a DREQ (kDreqTimeout, then time wait), an active SIDR REQ (kSidrTimeout). Nothing
  // else changes: an established connection's QPs learn of it from their own packets. Returns
  // how many attempts ended.
  size_t on_unreachable(IpAddr peer_ip, Time now);
  Time next_deadline() const;

  std::vector<OutMad> take_mads();
  std::vector<Event> take_events();

  ConnState state(uint32_t id) const;  // kIdle for an unknown ID
  size_t connection_count() const { return conns_.size(); }
  const AgentCounters& counters() const { return counters_; }

 private:
  struct Conn {
    ConnState state = ConnState::kIdle;
    bool active = false;
    bool orphan = false;  // destroyed by the consumer: no events, forgotten after time wait
    IpAddr peer_ip{};
    uint32_t remote_id = 0;
    uint32_t remote_qpn = 0;
    uint64_t tid = 0;
    uint64_t listen_cookie = 0;
    // The message retransmitted at `deadline` while retries_left > 0 (REQ, REP, DREQ), and the
    // cached answer to a duplicate (MRA, REP, RTU, DREP).
    Mad retx{};
    Mad cached{};
    bool has_cached = false;
    int retries_left = 0;
    Time retry_ns = 0;  // wait between retransmissions
    Time deadline = kNever;
    uint8_t max_retries = 0;
    uint8_t peer_response_timeout = 0;  // how long the peer said it takes to answer us
  };
  struct Sidr {
    bool active = false;
    IpAddr peer_ip{};
    uint32_t remote_request_id = 0;  // passive: the peer's request ID
    uint64_t tid = 0;
    uint64_t listen_cookie = 0;
    Mad retx{};  // active: the SIDR REQ; passive: the cached SIDR REP
    bool replied = false;
    int retries_left = 0;
    Time retry_ns = 0;
    Time deadline = kNever;
  };

  uint32_t alloc_id();
  uint64_t new_tid();
  Time wait_for(uint8_t timeout_value) const;  // timeout + 2 × packet lifetime
  void send(IpAddr dst_ip, const Mad& mad);
  void emit(Event ev);
  void emit_for(uint32_t id, const Conn& c, Event ev);
  void enter_time_wait(uint32_t id, Conn& c, Time now);
  // Ends a connection whose retransmissions are over (run out, or `unreachable`) as IBTA 12.9.6
  // says for its state; returns the iterator after it.
  std::map<uint32_t, Conn>::iterator give_up(std::map<uint32_t, Conn>::iterator it, Time now,
                                             bool unreachable);
  void send_rej_raw(IpAddr dst_ip, uint64_t tid, uint32_t local_id, uint32_t remote_id, MsgRef what,
                    uint16_t reason, std::span<const uint8_t> pd = {});

  void on_req(IpAddr src, const MadHeader& h, const uint8_t* msg, Time now);
  void on_mra(IpAddr src, const uint8_t* msg, Time now);
  void on_rej(IpAddr src, const uint8_t* msg, Time now);
  void on_rep(IpAddr src, const uint8_t* msg, Time now);
  void on_rtu(IpAddr src, const uint8_t* msg, Time now);
  void on_dreq(IpAddr src, const MadHeader& h, const uint8_t* msg, Time now);
  void on_drep(IpAddr src, const uint8_t* msg, Time now);
  void on_sidr_req(IpAddr src, const MadHeader& h, const uint8_t* msg, Time now);
  void on_sidr_rep(IpAddr src, const uint8_t* msg, Time now);
  Conn* find(uint32_t id, IpAddr src);

  AgentConfig cfg_;
  uint32_t next_id_;
  uint32_t next_tid_ = 1;
  std::map<uint32_t, Conn> conns_;  // by local communication ID
  std::map<uint32_t, Sidr> sidrs_;  // by local ID (request ID when active)
  // (peer ip, peer's comm ID / request ID) → local ID: duplicate REQ / SIDR REQ detection.
  std::map<std::pair<IpAddr, uint32_t>, uint32_t> remote_index_, sidr_index_;
  std::map<uint64_t, uint64_t> listeners_;  // service ID → cookie
  // A REQ / SIDR REQ waiting for its service's listen(): where from, its TID, the whole MAD.
  struct Held {
    IpAddr src;
    uint64_t tid;
    std::vector<uint8_t> mad;
  };
  bool hold(IpAddr src, const MadHeader& h, std::span<const uint8_t> mad);
  void replay(uint64_t service_id, Time now);
  std::map<uint64_t, int> reserved_;  // service ID → reservations
  std::map<uint64_t, std::vector<Held>> held_;
  std::vector<OutMad> mads_;
  std::vector<Event> events_;
  AgentCounters counters_;
};

}  // namespace uroce::cm

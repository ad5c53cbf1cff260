// rdma_write: the client writes a known pattern straight into the server's memory with RDMA WRITE;
// the server's CPU takes no part until the last write, which carries an immediate value and so
// also consumes a receive on the server and raises a completion there. RC executes the writes in
// order, so once that completion is seen, every earlier byte has landed too; the
// server then checks its buffer and tells the client the verdict.
//
//   server: rdma_write -d uroce0 [-p PORT] [-s SIZE] [-n WRITES]
//   client: rdma_write -d uroce0 [-p PORT] [-s SIZE] [-n WRITES] SERVER_IP
#include "common.h"

using namespace example;

namespace {

int run_server(const Options& o) {
  Rdma r(o, o.size, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
  // Receive for the final WRITE_WITH_IMM: it carries no payload into the receive queue, only the
  // immediate, so an empty scatter list is enough. Posted before the client can see our QPN.
  ibv_recv_wr rwr{}, *bad_rwr = nullptr;
  rwr.wr_id = 1;
  if (ibv_post_recv(r.qp, &rwr, &bad_rwr)) die("ibv_post_recv failed");
  Peer peer = handshake(o, r);

  ibv_wc wc = r.poll("waiting for the client's WRITE_WITH_IMM");
  if (wc.opcode != IBV_WC_RECV_RDMA_WITH_IMM || !(wc.wc_flags & IBV_WC_WITH_IMM))
    die("expected a RECV_RDMA_WITH_IMM completion, got opcode %d", wc.opcode);
  const uint32_t imm = ntohl(wc.imm_data);
  bool ok = imm == static_cast<uint32_t>(o.iters);
  if (!ok) std::fprintf(stderr, "immediate data %u, expected %d (the write count)\n", imm, o.iters);

  // The whole buffer must hold the pattern: a zero byte means a write never arrived.
  for (size_t i = 0; i < o.size; ++i) {
    if (r.buf[i] != pattern(i)) {
      std::fprintf(stderr, "mismatch at byte %zu: 0x%02x, expected 0x%02x\n", i, r.buf[i],
                   pattern(i));
      ok = false;
      break;
    }
  }
  tcp_exchange_byte(peer.fd, ok ? 0 : 1);
  close(peer.fd);
  std::printf("%s: %zu bytes received in %d RDMA WRITEs\n", ok ? "OK" : "FAILED", o.size, o.iters);
  return ok ? 0 : 1;
}

int run_client(const Options& o) {
  Rdma r(o, o.size, IBV_ACCESS_LOCAL_WRITE);
  for (size_t i = 0; i < o.size; ++i) r.buf[i] = pattern(i);
  Peer peer = handshake(o, r);
  if (peer.remote.len < o.size)
    die("the server's buffer holds %" PRIu64 " bytes, fewer than -s %zu", peer.remote.len, o.size);

  // Split the buffer into o.iters writes and post them as one chained list: the NIC works
  // through them without further calls into the library.
  ibv_sge sge[32];
  ibv_send_wr wr[32];
  const size_t chunk = (o.size + o.iters - 1) / o.iters;
  int n = 0;
  for (size_t off = 0; off < o.size; off += chunk, ++n) {
    sge[n] = {.addr = r.local.addr + off,
              .length = static_cast<uint32_t>(std::min(chunk, o.size - off)),
              .lkey = r.mr->lkey};
    wr[n] = {};
    wr[n].wr_id = n;
    wr[n].sg_list = &sge[n];
    wr[n].num_sge = 1;
    wr[n].opcode = IBV_WR_RDMA_WRITE;
    wr[n].wr.rdma.remote_addr = peer.remote.addr + off;
    wr[n].wr.rdma.rkey = peer.remote.rkey;
    if (n > 0) wr[n - 1].next = &wr[n];
  }
  // The last write also notifies the server; the immediate tells it how many writes to expect.
  wr[n - 1].opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
  wr[n - 1].imm_data = htonl(static_cast<uint32_t>(n));
  ibv_send_wr* bad = nullptr;
  if (int rc = ibv_post_send(r.qp, wr, &bad))
    die("ibv_post_send failed at WR %lu: %s", bad ? bad->wr_id : 0UL, std::strerror(rc));
  for (int i = 0; i < n; ++i) r.poll("RDMA WRITE");

  // A send completion only says the server's NIC has the data; the server's check is the proof.
  const uint8_t verdict = tcp_exchange_byte(peer.fd, 0);
  close(peer.fd);
  if (verdict != 0) die("the server found the written data wrong");
  std::printf("OK: %zu bytes written in %d RDMA WRITEs\n", o.size, n);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"RDMA WRITE example: the client fills the server's buffer"};
  Options o;
  add_common_options(app, o);
  app.add_option("-s,--size", o.size, "bytes to write")
      ->check(CLI::Range(1, 1 << 30))
      ->capture_default_str();
  app.add_option("-n,--writes", o.iters, "number of RDMA WRITEs to split them into")
      ->check(CLI::Range(1, 32))
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  // Every write must carry at least one byte, so there can be no more writes than bytes.
  if (static_cast<size_t>(o.iters) > o.size) o.iters = static_cast<int>(o.size);
  // With the chunk rounded up, fewer writes may cover the buffer: both sides must agree on it.
  const size_t chunk = (o.size + o.iters - 1) / o.iters;
  o.iters = static_cast<int>((o.size + chunk - 1) / chunk);
  return o.is_server() ? run_server(o) : run_client(o);
}

// rdma_read: the server fills a buffer with a known pattern and publishes its address and rkey;
// the client pulls it into its own memory with RDMA READs and checks every byte. The server's CPU
// does nothing during the transfer: its NIC answers the reads.
//
//   server: rdma_read -d uroce0 [-p PORT] [-s SIZE] [-n READS]
//   client: rdma_read -d uroce0 [-p PORT] [-s SIZE] [-n READS] SERVER_IP
#include "common.h"

using namespace example;

namespace {

int run_server(const Options& o) {
  Rdma r(o, o.size, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ);
  for (size_t i = 0; i < o.size; ++i) r.buf[i] = pattern(i);
  Peer peer = handshake(o, r);
  // Keep the buffer registered until the client has read it and says how that went.
  const uint8_t verdict = tcp_exchange_byte(peer.fd, 0);
  close(peer.fd);
  std::printf("%s: the client read %zu bytes\n", verdict == 0 ? "OK" : "FAILED", o.size);
  return verdict == 0 ? 0 : 1;
}

int run_client(const Options& o) {
  Rdma r(o, o.size, IBV_ACCESS_LOCAL_WRITE);  // a READ response writes locally
  Peer peer = handshake(o, r);
  if (peer.remote.len < o.size)
    die("the server's buffer holds %" PRIu64 " bytes, fewer than -s %zu", peer.remote.len, o.size);

  // One READ per chunk, posted as a single chain. Only max_rd_atomic of them are in flight at a
  // time; the rest wait in the send queue.
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
    wr[n].opcode = IBV_WR_RDMA_READ;
    wr[n].wr.rdma.remote_addr = peer.remote.addr + off;
    wr[n].wr.rdma.rkey = peer.remote.rkey;
    if (n > 0) wr[n - 1].next = &wr[n];
  }
  ibv_send_wr* bad = nullptr;
  if (int rc = ibv_post_send(r.qp, wr, &bad))
    die("ibv_post_send failed at WR %lu: %s", bad ? bad->wr_id : 0UL, std::strerror(rc));
  // Completions of one send queue come back in posting order.
  bool ok = true;
  for (int i = 0; i < n; ++i) {
    ibv_wc wc = r.poll("RDMA READ");
    if (wc.opcode != IBV_WC_RDMA_READ || wc.wr_id != static_cast<uint64_t>(i)) {
      std::fprintf(stderr, "completion %d: opcode %d wr_id %lu, expected an RDMA_READ for WR %d\n",
                   i, wc.opcode, static_cast<unsigned long>(wc.wr_id), i);
      ok = false;
    }
  }
  // A successful READ completion means the data is in our buffer: check all of it.
  for (size_t i = 0; ok && i < o.size; ++i) {
    if (r.buf[i] != pattern(i)) {
      std::fprintf(stderr, "mismatch at byte %zu: 0x%02x, expected 0x%02x\n", i, r.buf[i],
                   pattern(i));
      ok = false;
    }
  }
  tcp_exchange_byte(peer.fd, ok ? 0 : 1);
  close(peer.fd);
  std::printf("%s: %zu bytes read in %d RDMA READs\n", ok ? "OK" : "FAILED", o.size, n);
  return ok ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"RDMA READ example: the client pulls the server's buffer"};
  Options o;
  add_common_options(app, o);
  app.add_option("-s,--size", o.size, "bytes to read")
      ->check(CLI::Range(1, 1 << 30))
      ->capture_default_str();
  app.add_option("-n,--reads", o.iters, "number of RDMA READs to split them into")
      ->check(CLI::Range(1, 32))
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  if (static_cast<size_t>(o.iters) > o.size) o.iters = static_cast<int>(o.size);
  return o.is_server() ? run_server(o) : run_client(o);
}

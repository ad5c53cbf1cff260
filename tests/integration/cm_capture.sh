#!/usr/bin/env bash
# Captures an rping connection over uroce (uroce's own capture, UROCE_PCAP) and checks with tshark
# that the connection management travelled as IB CM MADs that Wireshark decodes: on the client,
# REQ, REP, RTU, then DREQ and DREP, no malformed packet, the REQ for the IP CM service ID of
# TCP port PORT (Annex A11); and that a REQ for a port nobody listens on is answered with a REJ
# whose reason is 8 (invalid service ID).
#   cm_capture.sh UROCE_RUN SERVER_IP CLIENT_IP PORT
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
run=$1 srv_ip=$2 cli_ip=$3 port=$4
dir=$(mktemp -d /tmp/uroce-cm-capture.XXXXXX)
trap 'rm -rf "$dir"' EXIT
fail=
# The first failure is the one reported. (A function, not fail="${fail:-…}": inside that
# double-quoted expansion bash takes an apostrophe for a quote, and the text after it for code.)
failing() { [[ -n $fail ]] || fail=$1; }

CAPTURE_DIR=$dir "$here/rdma_cm.sh" "$run" "$srv_ip" "$cli_ip" "$port" rping -C 10 >"$dir/run.out" 2>&1 ||
  { cat "$dir/run.out"; echo "FAIL: rping over rdma_cm failed"; exit 1; }
# The CM MADs of a capture, attribute IDs in time order (records are sorted: a sender's record can
# land in the file just after the answer to it), repeats folded and MRAs (0x11) left out: a loaded
# machine may retransmit a REQ or DREQ, or MRA a REQ.
cm_sequence() {
  tshark -r "$1" -Y 'infiniband.mad.mgmtclass == 0x07' -T fields -e frame.time_epoch \
    -e infiniband.mad.attributeid 2>/dev/null | sort -n | cut -f2 | uniq | grep -v '^0x0011$' |
    tr '\n' ' '
}
# IBTA table 107: REQ 0x10, REP 0x13, RTU 0x14, DREQ 0x15, DREP 0x16. rping's client exits right
# after its DREQ (it does not wait for the DREP); the server answers it.
seq=$(cm_sequence "$dir/client.pcap")
echo "CM messages on the client: $seq"
[[ $seq == "0x0010 0x0013 0x0014 0x0015 "* ]] || fail="client: expected REQ REP RTU DREQ, got: $seq"
seq=$(cm_sequence "$dir/server.pcap")
echo "CM messages on the server: $seq"
[[ $seq == "0x0010 0x0013 0x0014 0x0015 0x0016 " ]] ||
  failing "server: expected REQ REP RTU DREQ DREP, got: $seq"
pcap=$dir/client.pcap
malformed=$(tshark -r "$pcap" -Y _ws.malformed 2>/dev/null | wc -l)
((malformed == 0)) || failing "$malformed malformed packets"
sid=$(tshark -r "$pcap" -Y 'infiniband.mad.attributeid == 0x0010' -T fields \
  -e infiniband.cm.req.serviceid 2>/dev/null | head -1)
printf -v want '0x00000000010%x%04x' 6 "$port"
[[ $sid == "$want" ]] || failing "REQ service ID $sid, expected $want"
qpn=$(tshark -r "$pcap" -Y 'infiniband.mad.attributeid == 0x0010' -T fields -e infiniband.bth.destqp \
  2>/dev/null | head -1)
[[ $qpn == 0x000001 ]] || failing "the REQ went to QP $qpn, not QP1"

# A REQ's and a REP's Starting PSN is the PSN its sender receives (IBTA 12.7; the kernel's CM):
# the server's first request carries the REQ's, the client's first request the REP's.
first_request_psn() { # PCAP SRC_IP: the PSN of the first RC request (not an ACK) SRC_IP sent
  tshark -r "$1" -Y "ip.src == $2 && infiniband.bth.destqp != 1 && infiniband.bth.opcode != 17" \
    -T fields -e frame.time_epoch -e infiniband.bth.psn 2>/dev/null | sort -n | head -1 | cut -f2
}
hex_to_dec() { [[ -n $1 ]] && printf '%d' "$1"; }
req_psn=$(hex_to_dec "$(tshark -r "$dir/server.pcap" -Y 'infiniband.mad.attributeid == 0x0010' \
  -T fields -e infiniband.cm.req.startpsn 2>/dev/null | head -1)")
rep_psn=$(hex_to_dec "$(tshark -r "$dir/client.pcap" -Y 'infiniband.mad.attributeid == 0x0013' \
  -T fields -e infiniband.cm.rep.startpsn 2>/dev/null | head -1)")
srv_psn=$(first_request_psn "$dir/server.pcap" "$srv_ip")
cli_psn=$(first_request_psn "$dir/client.pcap" "$cli_ip")
echo "REQ Starting PSN $req_psn, server's first PSN $srv_psn; REP Starting PSN $rep_psn, client's first PSN $cli_psn"
[[ -n $req_psn && $srv_psn == "$req_psn" ]] || failing "the server did not start at the REQ's PSN"
[[ -n $rep_psn && $cli_psn == "$rep_psn" ]] || failing "the client did not start at the REP's PSN"

# Nobody listens on PORT+1: rping's client is rejected at once with reason 8, and told why.
(
  export UROCE_DEVICES=uroce0=$srv_ip UROCE_LOG=info
  timeout 30 "$run" rping -s -a "$srv_ip" -p "$port" -C 1 >"$dir/srv2.out" 2>&1 &
  for _ in $(seq 600); do grep -q "listening on" "$dir/srv2.out" && break; sleep 0.05; done
  UROCE_DEVICES=uroce0=$cli_ip UROCE_PCAP=$dir/rej.pcap timeout 30 "$run" rping -c -v \
    -a "$srv_ip" -p $((port + 1)) -C 1 >"$dir/rej.out" 2>&1
  kill %1 2>/dev/null
  wait
)
cat "$dir/rej.out"
grep -q "RDMA_CM_EVENT_REJECTED" "$dir/rej.out" || failing "no REJECTED event for an unserved port"
# uroce's log (UROCE_LOG=info) says what the event's number means.
grep -q "connection to $srv_ip:$((port + 1)) rejected by the peer: nobody listens on that port" \
  "$dir/rej.out" || failing "uroce did not say why the connection was rejected"
reason=$(tshark -r "$dir/rej.pcap" -Y 'infiniband.mad.attributeid == 0x0012' -T fields \
  -e infiniband.cm.rej.reason 2>/dev/null | head -1)
echo "REJ reason: $reason"
[[ $reason == 0x0008 || $reason == 8 ]] || failing "REJ reason $reason, expected 8"

if [[ -n $fail ]]; then
  echo "FAIL: $fail"
  exit 1
fi
echo "PASS"

#!/usr/bin/env python3
"""Checks XRC packets in a uroce capture (UROCE_PCAP: raw IPv4 records) independently of uroce's
own code: every packet's ICRC recomputed with zlib's CRC-32 over the RoCEv2 pseudo-packet (IBTA
Annex A17.8: 8 bytes of ones, the IPv4 header with TOS, TTL and checksum masked, the UDP header
with its checksum masked, BTH with its resv8a byte masked), every packet an XRC opcode (0xa0-0xbf,
IBTA Table 38), every request carrying an XRCETH right after BTH that names the SRQ its receiver
printed, every response carrying none.

  xrc_capture.py PCAP SERVER_IP SERVER_SRQN CLIENT_IP CLIENT_SRQN
"""
import socket
import struct
import sys
import zlib

from pcap_records import ip_packets

# XRC requests (Table 38, low five bits): SEND 0-5, WRITE 6-11, READ REQUEST 12, CMP SWAP 19,
# FETCH ADD 20, SEND with invalidate 22-23. The rest (READ responses 13-16, ACK 17, ATOMIC ACK
# 18) are responses.
REQUESTS = set(range(0, 13)) | {19, 20, 22, 23}


def icrc(ip, ihl):
    pseudo = bytearray(b"\xff" * 8) + bytearray(ip[:-4])
    pseudo[8 + 1] = 0xFF                 # TOS (DSCP, ECN)
    pseudo[8 + 8] = 0xFF                 # TTL
    pseudo[8 + 10:8 + 12] = b"\xff\xff"  # header checksum
    pseudo[8 + ihl + 6:8 + ihl + 8] = b"\xff\xff"  # UDP checksum
    pseudo[8 + ihl + 8 + 4] = 0xFF       # BTH resv8a (FECN, BECN)
    return zlib.crc32(bytes(pseudo)) & 0xFFFFFFFF


def main():
    path, srv_ip, srv_srqn, cli_ip, cli_srqn = sys.argv[1:6]
    srqn_of = {socket.inet_aton(srv_ip): int(srv_srqn, 16), socket.inet_aton(cli_ip): int(cli_srqn, 16)}
    counts = {"packets": 0, "requests": 0, "responses": 0}
    errors = []
    for ip in ip_packets(path, 4):
        counts["packets"] += 1
        ihl = (ip[0] & 0xF) * 4
        ib = ip[ihl + 8:]
        opcode = ib[0]
        where = f"packet {counts['packets']} (opcode {opcode:#04x})"
        if struct.unpack("<I", ib[-4:])[0] != icrc(ip, ihl):
            errors.append(f"{where}: bad ICRC")
        if opcode >> 5 != 5:
            errors.append(f"{where}: not an XRC opcode")
            continue
        if (opcode & 0x1F) in REQUESTS:
            counts["requests"] += 1
            reserved, srqn = ib[12], int.from_bytes(ib[13:16], "big")
            want = srqn_of.get(ip[16:20])  # the SRQ of the side the packet goes to
            if reserved != 0 or srqn != want:
                errors.append(f"{where}: XRCETH {ib[12:16].hex()}, want SRQ {want:#x}")
        else:
            counts["responses"] += 1
            if (opcode & 0x1F) == 17 and len(ib) != 12 + 4 + 4:
                errors.append(f"{where}: an XRC ACK is BTH + AETH + ICRC, got {len(ib)} bytes")
    print(" ".join(f"{k}: {v}" for k, v in counts.items()))
    if not counts["requests"] or not counts["responses"]:
        errors.append("expected both requests and responses")
    for e in errors[:10]:
        print("FAIL:", e)
    sys.exit(1 if errors else 0)


main()

#!/usr/bin/env python3
"""Checks the RoCEv2-over-IPv6 packets of a capture independently of uroce's own code: every
UDP 4791 datagram between the two given IPv6 addresses has its ICRC recomputed with zlib's CRC-32
over the IPv6 pseudo-packet (IBTA Annex A17.8.2: 8 bytes of ones, the IPv6 header with Traffic
Class, Flow Label and Hop Limit masked to ones, the UDP header with its checksum masked, BTH with
its resv8a byte masked, then the rest of the packet), and its addresses are the devices' own
(plain IPv6, never IPv4-mapped).

  ipv6_capture.py PCAP ADDR_A ADDR_B [ADDR…]  (pcap: Ethernet, raw IP or Linux cooked records)
"""
import ipaddress
import struct
import sys
import zlib

from pcap_records import ip_packets

ROCEV2_PORT = 4791


def icrc(ip6):
    hdr = bytearray(ip6[:40])
    hdr[0] |= 0x0F                  # Traffic Class, high nibble (Version stays)
    hdr[1:4] = b"\xff\xff\xff"      # Traffic Class low nibble, Flow Label
    hdr[7] = 0xFF                   # Hop Limit
    udp = bytearray(ip6[40:48])
    udp[6:8] = b"\xff\xff"          # UDP checksum
    ib = bytearray(ip6[48:-4])
    ib[4] = 0xFF                    # BTH resv8a (FECN, BECN)
    return zlib.crc32(b"\xff" * 8 + bytes(hdr) + bytes(udp) + bytes(ib)) & 0xFFFFFFFF


def main():
    path = sys.argv[1]
    addrs = {ipaddress.IPv6Address(a).packed for a in sys.argv[2:]}
    packets = bad = 0
    errors = []
    opcodes = {}
    for ip6 in ip_packets(path, 6):
        if ip6[6] != 17 or len(ip6) < 48 + 12 + 4:  # next header UDP; BTH and ICRC at least
            continue
        dport, = struct.unpack(">H", ip6[42:44])
        if dport != ROCEV2_PORT:
            continue
        packets += 1
        src, dst = ip6[8:24], ip6[24:40]
        opcode = ip6[48]
        opcodes[opcode] = opcodes.get(opcode, 0) + 1
        where = f"packet {packets} (opcode {opcode:#04x})"
        if src not in addrs or dst not in addrs:
            errors.append(f"{where}: addresses {ipaddress.IPv6Address(src)} -> "
                          f"{ipaddress.IPv6Address(dst)} are not the devices'")
        udp_len, = struct.unpack(">H", ip6[44:46])
        if udp_len != len(ip6) - 40:
            errors.append(f"{where}: UDP length {udp_len}, datagram {len(ip6) - 40}")
            continue
        if struct.unpack("<I", ip6[-4:])[0] != icrc(ip6):
            bad += 1
            errors.append(f"{where}: bad ICRC")
    print(f"IPv6 RoCEv2 packets: {packets}, bad ICRC: {bad}; opcodes (opcode: count): " +
          ", ".join(f"{k:#04x}: {v}" for k, v in sorted(opcodes.items())))
    if packets == 0:
        errors.append("no IPv6 RoCEv2 packets in the capture")
    for e in errors[:10]:
        print("FAIL:", e)
    sys.exit(1 if errors else 0)


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Known-answer vectors for the RoCEv2 ICRC over UDP/IPv6, computed independently of uroce's C++.

The ICRC (IBTA Annex A17.3.3) is zlib's CRC-32 over a pseudo-packet: 8 bytes of ones standing in
for the LRH, the IP header with the fields a router may change set to all ones, the UDP header with
its checksum set to all ones, the BTH with its resv8a byte (FECN/BECN) set to all ones, then the
rest of the IB packet up to the ICRC. It goes on the wire least significant byte first.
  IPv4 masks: TOS, TTL, header checksum.
  IPv6 masks: Traffic Class, Flow Label, Hop Limit (the first four bytes become 6f ff ff ff).

  icrc_vectors.py check-ipv4   recompute the ICRC of every captured IPv4 frame in vectors/ and
                               compare it with the one on the wire: proves this script's CRC
                               convention (which bytes, which masks, byte order) on known data
  icrc_vectors.py write        (re)write the IPv6 vectors, vectors/roce_ipv6_*.hex
  icrc_vectors.py check        check-ipv4, then check that the IPv6 vectors on disk are exactly
                               what `write` would produce (run by ctest: wire.icrc_vectors_py)

The IPv6 frames are built here from their fields (Ethernet, IPv6, UDP with a valid checksum, BTH
and extended headers per IBTA 9.2-9.3, payload, pad, ICRC), not captured: no RoCEv2-over-IPv6
capture from a real NIC is in the repository yet.
"""
import pathlib
import struct
import sys
import zlib

VECTORS = pathlib.Path(__file__).resolve().parent / "vectors"
ROCEV2_PORT = 4791


def icrc_over(pseudo: bytes) -> bytes:
    """The ICRC as it appears on the wire: zlib's value, least significant byte first."""
    return struct.pack("<I", zlib.crc32(pseudo) & 0xFFFFFFFF)


def mask_bth(ib: bytes) -> bytes:
    return ib[:4] + b"\xff" + ib[5:]


def pseudo_ipv4(ip: bytes) -> bytes:
    ihl = (ip[0] & 0x0F) * 4
    hdr = bytearray(ip[:ihl])
    hdr[1] = 0xFF  # TOS
    hdr[8] = 0xFF  # TTL
    hdr[10:12] = b"\xff\xff"  # header checksum
    udp = bytearray(ip[ihl:ihl + 8])
    udp[6:8] = b"\xff\xff"
    return b"\xff" * 8 + bytes(hdr) + bytes(udp) + mask_bth(ip[ihl + 8:])


def pseudo_ipv6(ip: bytes) -> bytes:
    hdr = bytearray(ip[:40])
    hdr[0] |= 0x0F  # Traffic Class, high nibble (the Version nibble stays)
    hdr[1:4] = b"\xff\xff\xff"  # Traffic Class low nibble, Flow Label
    hdr[7] = 0xFF  # Hop Limit
    udp = bytearray(ip[40:48])
    udp[6:8] = b"\xff\xff"
    return b"\xff" * 8 + bytes(hdr) + bytes(udp) + mask_bth(ip[48:])


def read_hex(path: pathlib.Path) -> bytes:
    return bytes.fromhex("".join(path.read_text().split()))


def format_hex(frame: bytes) -> str:
    """The layout of the captured vectors: 2-byte groups, 16 bytes a line."""
    words = [frame[i:i + 2].hex() for i in range(0, len(frame), 2)]
    return "".join(" ".join(words[i:i + 8]) + "\n" for i in range(0, len(words), 8))


def check_ipv4() -> int:
    bad = 0
    n = 0
    for path in sorted(VECTORS.glob("*.hex")):
        frame = read_hex(path)
        if frame[12:14] != b"\x08\x00":
            continue  # the IPv6 vectors this script writes
        ip_len = struct.unpack(">H", frame[16:18])[0]
        ip = frame[14:14 + ip_len]
        got = icrc_over(pseudo_ipv4(ip[:-4]))
        n += 1
        if got != ip[-4:]:
            print(f"{path.name}: computed {got.hex()}, on the wire {ip[-4:].hex()}")
            bad += 1
    if n == 0:
        print("no IPv4 vectors found")
        return 1
    print(f"check-ipv4: {n - bad}/{n} captured IPv4 frames reproduce their ICRC")
    return bad


# --- building RoCEv2-over-IPv6 frames ----------------------------------------------------------


def ip6(text: str) -> bytes:
    """IPv6 text to 16 bytes, without the socket module's help (full or '::' forms, hex only)."""
    head, _, tail = text.partition("::")
    h = [int(x, 16) for x in head.split(":") if x]
    t = [int(x, 16) for x in tail.split(":") if x]
    words = h + [0] * (8 - len(h) - len(t)) + t if "::" in text else h
    assert len(words) == 8, text
    return struct.pack(">8H", *words)


def bth(opcode, dqpn, psn, pad=0, se=False, migreq=True, ackreq=False, fecn=False, becn=False,
        pkey=0xFFFF):
    b0 = opcode
    b1 = (se << 7) | (migreq << 6) | (pad << 4)  # TVer 0
    resv8a = (fecn << 7) | (becn << 6)
    return struct.pack(">BBHB3sB3s", b0, b1, pkey, resv8a, dqpn.to_bytes(3, "big"), ackreq << 7,
                       psn.to_bytes(3, "big"))


def reth(va, rkey, length):
    return struct.pack(">QII", va, rkey, length)


def aeth(syndrome, msn):
    return struct.pack(">B3s", syndrome, msn.to_bytes(3, "big"))


def deth(qkey, sqpn):
    return struct.pack(">I", qkey) + b"\x00" + sqpn.to_bytes(3, "big")


def ones_complement_sum(data: bytes) -> int:
    if len(data) % 2:
        data += b"\x00"
    s = sum(struct.unpack(f">{len(data) // 2}H", data))
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    return s


def frame_ipv6(src, dst, sport, ib, tc=0, flow=0, hlim=64, mac_dst="020000000002",
               mac_src="020000000001"):
    """An Ethernet/IPv6/UDP/RoCEv2 frame: `ib` is BTH..pad; the ICRC is computed and appended."""
    src_b, dst_b = ip6(src), ip6(dst)
    udp_len = 8 + len(ib) + 4
    ip_hdr = struct.pack(">IHBB", 6 << 28 | tc << 20 | flow, udp_len, 17, hlim) + src_b + dst_b
    udp_hdr = struct.pack(">HHHH", sport, ROCEV2_PORT, udp_len, 0)
    icrc = icrc_over(pseudo_ipv6(ip_hdr + udp_hdr + ib))
    # A valid UDP checksum (mandatory over IPv6, RFC 8200 8.1); it covers the ICRC, and the ICRC
    # masks it, so it is computed last.
    pseudo_hdr = src_b + dst_b + struct.pack(">IxxxB", udp_len, 17)
    csum = 0xFFFF ^ ones_complement_sum(pseudo_hdr + udp_hdr + ib + icrc)
    udp_hdr = udp_hdr[:6] + struct.pack(">H", csum or 0xFFFF)
    eth = bytes.fromhex(mac_dst + mac_src) + b"\x86\xdd"
    return eth + ip_hdr + udp_hdr + ib + icrc


def padded(payload: bytes):
    pad = -len(payload) % 4
    return payload + b"\x00" * pad, pad


def vectors():
    a, b = "fd00:1::1", "fd00:1::2"
    send_payload, send_pad = padded(b"uroce: RC SEND ONLY over IPv6")  # 29 bytes, pad 3
    send_ib = bth(0x04, dqpn=0x000123, psn=0x345678, pad=send_pad, ackreq=True) + send_payload
    out = {
        # RC SEND ONLY with a short payload and 3 pad bytes.
        "roce_ipv6_rc_send_only": frame_ipv6(a, b, 0xC0DE, send_ib),
        # The ACK that answers it (AETH syndrome 0x1f: ACK, no credit count; MSN 1).
        "roce_ipv6_rc_ack": frame_ipv6(
            b, a, 0xD00D, bth(0x11, dqpn=0x000456, psn=0x345678) + aeth(0x1F, 1),
            mac_dst="020000000001", mac_src="020000000002"),
        # RC RDMA WRITE FIRST of a 4 KiB write, 1024 bytes of payload (longer than the 256 bytes
        # uroce's ICRC copies behind the pseudo-header: the two-call path).
        "roce_ipv6_rc_write_first": frame_ipv6(
            a, b, 0xC0DE,
            bth(0x06, dqpn=0x000123, psn=0x345679) + reth(0x00007F0012345000, 0x1234ABCD, 4096) +
            bytes((i * 7 + 3) & 0xFF for i in range(1024))),
        # The SEND ONLY above as a network may deliver it: Traffic Class 0x6b (DSCP 26, ECN CE),
        # another Flow Label, Hop Limit 3, and FECN set in BTH (so another UDP checksum). Every
        # changed field is masked: its ICRC equals the first vector's.
        "roce_ipv6_rc_send_only_marked": frame_ipv6(
            a, b, 0xC0DE,
            bth(0x04, dqpn=0x000123, psn=0x345678, pad=send_pad, ackreq=True, fecn=True) +
            send_payload, tc=0x6B, flow=0xABCDE, hlim=3),
        # UD SEND ONLY between link-local addresses (the GIDs a port has without configuration),
        # with a nonzero Traffic Class and Flow Label as sent.
        "roce_ipv6_ud_send_only": frame_ipv6(
            "fe80::5054:ff:fec0:1", "fe80::5054:ff:fec0:2", 0xE5A1,
            bth(0x64, dqpn=0x000011, psn=0x000001, se=True, migreq=False) +
            deth(0x11111111, 0x000022) + bytes(range(64)), tc=0x68, flow=0x12345, hlim=255),
    }
    icrc = {name: f[-4:] for name, f in out.items()}
    assert icrc["roce_ipv6_rc_send_only"] == icrc["roce_ipv6_rc_send_only_marked"]
    assert len(set(icrc.values())) == len(icrc) - 1
    return out


def main(argv):
    mode = argv[1] if len(argv) > 1 else ""
    if mode == "check-ipv4":
        return 1 if check_ipv4() else 0
    if mode == "write":
        for name, frame in vectors().items():
            (VECTORS / f"{name}.hex").write_text(format_hex(frame))
            print(f"{name}.hex: ICRC on the wire {frame[-4:].hex()}")
        return 0
    if mode == "check":
        bad = check_ipv4()
        for name, frame in vectors().items():
            path = VECTORS / f"{name}.hex"
            if not path.exists() or read_hex(path) != frame:
                print(f"{path.name}: differs from what `write` produces")
                bad += 1
        if not bad:
            print("check: the IPv6 vectors on disk are the ones this script computes")
        return 1 if bad else 0
    print(__doc__)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))

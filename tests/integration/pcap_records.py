"""The IP packets of a pcap file, for the capture checks (xrc_capture.py, ipv6_capture.py):
Ethernet, Linux cooked (SLL) and raw-IP link types, little-endian pcap (not pcapng: convert with
`editcap -F pcap`)."""
import struct
import sys

ETHERTYPE = {4: b"\x08\x00", 6: b"\x86\xdd"}


def ip_packets(path, version):
    """Yields each packet's IP header onwards, for the packets of IP `version` (4 or 6)."""
    data = open(path, "rb").read()
    magic, = struct.unpack("<I", data[:4])
    if magic not in (0xA1B2C3D4, 0xA1B23C4D):
        sys.exit(f"{path}: not a little-endian pcap file")
    link, = struct.unpack("<I", data[20:24])
    off = 24
    while off + 16 <= len(data):
        incl, = struct.unpack("<I", data[off + 8:off + 12])
        off += 16
        frame = data[off:off + incl]
        off += incl
        if link == 1:  # Ethernet
            if frame[12:14] == ETHERTYPE[version]:
                yield frame[14:]
        elif link == 113:  # Linux cooked (SLL)
            if frame[14:16] == ETHERTYPE[version]:
                yield frame[16:]
        elif link in (101, 228, 229):  # raw IP, raw IPv4, raw IPv6
            if frame and frame[0] >> 4 == version:
                yield frame

#!/usr/bin/env python3
"""Sends IEEE 802.1Qbb priority PAUSE (PFC) frames on an interface, as a switch would.

    pfc_inject.py IFACE PRIORITY COUNT INTERVAL_S DELAY_S

Waits DELAY_S, then sends COUNT frames INTERVAL_S apart, each pausing PRIORITY for the most
quanta there are (0xffff). Needs CAP_NET_RAW.
"""
import socket
import struct
import sys
import time


def main() -> int:
    iface, prio, count, interval, delay = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), \
        float(sys.argv[4]), float(sys.argv[5])
    s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
    s.bind((iface, 0))
    src = s.getsockname()[4]
    times = [0] * 8
    times[prio] = 0xFFFF
    # MAC Control (EtherType 0x8808) to 01:80:c2:00:00:01, opcode 0x0101, class-enable vector,
    # eight pause times; padded to the 60-byte minimum frame.
    frame = bytes.fromhex("0180c2000001") + src + struct.pack("!HHH", 0x8808, 0x0101, 1 << prio)
    frame += struct.pack("!8H", *times)
    frame += bytes(60 - len(frame))
    time.sleep(delay)
    for _ in range(count):
        s.send(frame)
        time.sleep(interval)
    return 0


if __name__ == "__main__":
    sys.exit(main())

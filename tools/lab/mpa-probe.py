#!/usr/bin/env python3
"""Host-side MPA (RFC 5044) start-up probe against an iWARP listener.

Opens TCP to HOST:PORT, sends an MPA Request (revision 1, no markers, no CRC, no private
data) and checks that an accepted MPA Reply comes back. Exit 0 on an accepted Reply, 1
otherwise, printing what was received. Stand-in until the project's own Rust siw
provider can do this end to end.
"""
import socket
import struct
import sys

REQ_KEY = b"MPA ID Req Frame"
REP_KEY = b"MPA ID Rep Frame"
FLAG_MARKERS, FLAG_CRC, FLAG_REJECT = 0x80, 0x40, 0x20


def recv_exact(sock, n):
    buf = b""
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            break
        buf += chunk
    return buf


def main():
    host, port = sys.argv[1], int(sys.argv[2])
    timeout = float(sys.argv[3]) if len(sys.argv) > 3 else 30.0
    with socket.create_connection((host, port), timeout) as s:
        s.settimeout(timeout)
        s.sendall(REQ_KEY + bytes([0x00, 1]) + struct.pack(">H", 0))
        try:
            hdr = recv_exact(s, 20)
        except socket.timeout:
            print("mpa-probe: no MPA Reply within %.0fs" % timeout)
            return 1
        if len(hdr) < 20 or hdr[:16] != REP_KEY:
            print("mpa-probe: no MPA Reply, got %d bytes: %r" % (len(hdr), hdr[:40]))
            return 1
        flags, rev, pd_len = hdr[16], hdr[17], struct.unpack(">H", hdr[18:20])[0]
        pdata = recv_exact(s, pd_len) if pd_len else b""
        print("mpa-probe: MPA Reply flags=0x%02x (M=%d C=%d R=%d) rev=%d pd_len=%d pdata=%r"
              % (flags, bool(flags & FLAG_MARKERS), bool(flags & FLAG_CRC),
                 bool(flags & FLAG_REJECT), rev, pd_len, pdata[:32]))
        if flags & FLAG_REJECT:
            print("mpa-probe: the listener rejected the connection")
            return 1
        if flags & FLAG_MARKERS:
            print("mpa-probe: the listener asks for markers, which we did not offer")
            return 1
        if rev not in (1, 2) or len(pdata) != pd_len:
            print("mpa-probe: bad revision or truncated private data")
            return 1
    print("MPA_REPLY_OK")
    return 0


if __name__ == "__main__":
    sys.exit(main())

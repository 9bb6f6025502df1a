#!/usr/bin/env python3
"""A TCP relay that holds every byte DELAY_MS in each direction: the latency half of a WAN link,
for kernels without netem (CONFIG_NET_SCH_NETEM unset); bandwidth is shaped by htb on the veth.

    delay-relay.py LISTEN_HOST:PORT TARGET_HOST:PORT DELAY_MS

Each direction is a delay line: one thread reads and time-stamps, another sends each piece once
its time has come. The line holds at most 8 MiB per direction (reading waits beyond that), so
memory stays bounded. Runs until killed.
"""
import collections
import socket
import sys
import threading
import time

CAP = 8 << 20


def pipe(src, dst, delay):
    line = collections.deque()
    held = [0]
    cv = threading.Condition()
    done = [False]

    def reader():
        try:
            while True:
                with cv:
                    while held[0] >= CAP:
                        cv.wait()
                data = src.recv(256 << 10)
                with cv:
                    line.append((time.monotonic() + delay, data))
                    held[0] += len(data)
                    cv.notify_all()
                if not data:
                    return
        except OSError:
            with cv:
                line.append((time.monotonic(), b""))
                cv.notify_all()

    def writer():
        try:
            while True:
                with cv:
                    while not line:
                        cv.wait()
                    due, data = line.popleft()
                    held[0] -= len(data)
                    cv.notify_all()
                wait = due - time.monotonic()
                if wait > 0:
                    time.sleep(wait)
                if not data:
                    dst.shutdown(socket.SHUT_WR)
                    return
                dst.sendall(data)
        except OSError:
            pass
        finally:
            done[0] = True

    threading.Thread(target=reader, daemon=True).start()
    threading.Thread(target=writer, daemon=True).start()


def main():
    lh, lp = sys.argv[1].rsplit(":", 1)
    th, tp = sys.argv[2].rsplit(":", 1)
    delay = float(sys.argv[3]) / 1000
    srv = socket.create_server((lh, int(lp)), reuse_port=False)
    while True:
        c, _ = srv.accept()
        try:
            t = socket.create_connection((th, int(tp)))
        except OSError:
            c.close()
            continue
        for s in (c, t):
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        pipe(c, t, delay)
        pipe(t, c, delay)


if __name__ == "__main__":
    main()

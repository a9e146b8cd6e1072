#!/usr/bin/env python3
"""Resident memory per idle keep-alive connection.

Starts Gapura (one shard, a fixed-answer host) on loopback, opens 500
connections that each make one request (the warm-up), reads the server's
VmRSS, opens N more connections the same way and leaves them all idle,
then reads VmRSS again: the growth divided by N is the memory one idle
connection holds. The server is stopped by its pid at the end. All
traffic goes to 127.0.0.1. Python 3.11, standard library only.

  bench/idle-memory.py [--connections N] [--gapura PATH]
"""
import argparse
import os
import resource
import socket
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS"):
                return int(line.split()[1])
    return 0


def open_idle(port, n):
    conns = []
    for _ in range(n):
        s = socket.create_connection(("127.0.0.1", port))
        s.sendall(b"GET / HTTP/1.1\r\nHost: a.test\r\n\r\n")
        got = b""
        while b"hello" not in got:
            chunk = s.recv(4096)
            if not chunk:
                sys.exit("the server closed a connection")
            got += chunk
        conns.append(s)
    return conns


def main():
    p = argparse.ArgumentParser(prog="bench/idle-memory.py")
    p.add_argument("--connections", type=int, default=5000)
    p.add_argument("--gapura", default=os.path.join(ROOT, "target", "release", "gapura"))
    args = p.parse_args()
    want = args.connections + 600
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < want:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(want, hard), hard))
    port, admin = free_port(), free_port()
    with tempfile.TemporaryDirectory(prefix="gapura-idle-") as work:
        profile = os.path.join(work, "p.toml")
        with open(profile, "w") as f:
            f.write(f"""[server]
listen = ["127.0.0.1:{port}"]
admin = "127.0.0.1:{admin}"
shards = 1
max_connections_per_shard = {want + 1000}
idle_timeout_ms = 600000

[[host]]
names = ["a.test"]
default = true
kind = "respond"
status = 200
body = "hello\\n"

[protection]
off = ["all"]
""")
        server = subprocess.Popen([args.gapura, "run", "--allow-root", "--profile", profile],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            deadline = time.time() + 15
            while True:
                try:
                    socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                    break
                except OSError:
                    if time.time() > deadline or server.poll() is not None:
                        sys.exit("gapura did not start")
                    time.sleep(0.05)
            warm = open_idle(port, 500)
            time.sleep(0.5)
            before = rss_kib(server.pid)
            idle = open_idle(port, args.connections)
            time.sleep(1)
            after = rss_kib(server.pid)
            each = (after - before) * 1024 / args.connections
            print(f"{args.connections} idle connections: VmRSS {before} KiB -> {after} KiB, "
                  f"{each:.0f} bytes per idle connection")
            for s in warm + idle:
                s.close()
        finally:
            server.terminate()
            server.wait(timeout=15)


if __name__ == "__main__":
    main()

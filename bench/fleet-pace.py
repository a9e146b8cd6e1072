#!/usr/bin/env python3
"""A fleet-scoped limit at any client pace (docs/fleet.md, "Exact at any
pace"): three Gapura nodes share a 300-a-minute per-client limit through
one local Redis (`sync_ms = 100`, `nodes_expected = 3`); one client sends
600 requests over one keep-alive connection per node, in turn, as fast as
the answers come (or pausing `--pause-ms` every `--every` requests), and
counts the 200s. Then a client on one node only: how many it gets in its
first 2 s. Each run uses a fresh client address (127.0.N.1), so each
starts from a full bucket.

`--budget`: the same with a fleet-scoped source budget of 300 an hour
per /24 (`[quota.source]`, windows cut from Unix time) in place of the
rate limit; each run's client is in a /24 of its own.

  bench/fleet-pace.py [--gapura PATH] [--pauses 0,5,50] [--budget]

Needs target/release/gapura, redis-server. Every process started here is
stopped by its pid; all traffic goes to 127.0.0.1.
"""
import argparse
import os
import socket
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "bench"))
from overhead import free_port, wait_port  # noqa: E402


LIMIT_RATE = """[[rate_limit]]
name = "client"
requests = 300
per = "minute"
scope = "fleet"

[defaults]
rate_limit = "client"
"""

LIMIT_BUDGET = """[quota]
window_ms = 3600000

[quota.source]
requests = 300
scope = "fleet"
"""


def node_profile(port, redis_port, key, name, limit):
    return f"""[server]
listen = ["127.0.0.1:{port}"]
admin = "off"
shards = 1

[fleet]
redis = "redis://127.0.0.1:{redis_port}"
sync_ms = 100
nodes_expected = 3
node = "{name}"
key_file = "{key}"

{limit}
[[host]]
names = ["f.test"]
default = true
kind = "respond"
status = 200
body = "ok\\n"

[protection]
off = ["all"]
"""


class Conn:
    def __init__(self, src, port):
        self.s = socket.socket()
        self.s.bind((src, 0))
        self.s.connect(("127.0.0.1", port))
        self.f = self.s.makefile("rb")

    def get(self):
        self.s.sendall(b"GET / HTTP/1.1\r\nHost: f.test\r\n\r\n")
        status = int(self.f.readline().split()[1])
        length = 0
        while True:
            line = self.f.readline()
            if line in (b"\r\n", b""):
                break
            if line.lower().startswith(b"content-length:"):
                length = int(line.split(b":")[1])
        self.f.read(length)
        return status

    def close(self):
        self.s.close()


def spread(src, ports, n, pause_ms, every):
    conns = [Conn(src, p) for p in ports]
    ok = 0
    t0 = time.monotonic()
    for i in range(n):
        if conns[i % len(conns)].get() == 200:
            ok += 1
        if pause_ms and (i + 1) % every == 0:
            time.sleep(pause_ms / 1000)
    secs = time.monotonic() - t0
    for c in conns:
        c.close()
    return ok, secs


def one_node(src, port, secs):
    c = Conn(src, port)
    ok = 0
    end = time.monotonic() + secs
    while time.monotonic() < end:
        if c.get() == 200:
            ok += 1
    c.close()
    return ok


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--gapura", default=os.path.join(ROOT, "target/release/gapura"))
    ap.add_argument("--pauses", default="0,5,50")
    ap.add_argument("--every", type=int, default=60)
    ap.add_argument("--budget", action="store_true",
                    help="a source budget of 300 an hour in place of the rate limit")
    args = ap.parse_args()
    limit = LIMIT_BUDGET if args.budget else LIMIT_RATE
    tmp = tempfile.mkdtemp(prefix="fleet-pace-")
    key = os.path.join(tmp, "fleet.key")
    with open(key, "w") as f:
        f.write("the pace benchmark's fleet key, 40 chars\n")
    procs = []
    try:
        rport = free_port()
        procs.append(subprocess.Popen(
            ["redis-server", "--port", str(rport), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "no", "--dir", tmp],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        if not wait_port(rport):
            sys.exit("redis-server did not start")
        ports = []
        for i in range(3):
            port = free_port()
            path = os.path.join(tmp, f"node{i}.toml")
            with open(path, "w") as f:
                f.write(node_profile(port, rport, key, f"n{i}", limit))
            procs.append(subprocess.Popen([args.gapura, "run", "--allow-root", "--profile", path],
                                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
            if not wait_port(port):
                sys.exit("gapura did not start")
            ports.append(port)
        time.sleep(0.5)
        if args.budget and 3600 - time.time() % 3600 < 60:
            print("(the hour's window ends within a minute: counts may span two)")
        print("| client pace | admitted of 600 | over 300 | seconds |")
        print("|---|---:|---:|---:|")
        for k, pause in enumerate(int(p) for p in args.pauses.split(",")):
            ok, secs = spread(f"127.0.{10 + k}.1", ports, 600, pause, args.every)
            pace = "as fast as the answers come" if not pause else \
                f"a {pause} ms pause every {args.every}"
            print(f"| {pace} | {ok} | {100 * (ok - 300) / 300:+.1f} % | {secs:.2f} |")
        ok = one_node("127.0.40.1", ports[0], 2.0)
        print(f"\none node only, as fast as it answers: {ok} admitted in 2 s "
              f"({100 * ok / 300:.0f} % of the limit)")
    finally:
        for p in reversed(procs):
            p.terminate()
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


if __name__ == "__main__":
    main()

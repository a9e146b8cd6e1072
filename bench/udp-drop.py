#!/usr/bin/env python3
"""The kernel's and Gapura's cost of dropping datagrams, end to end.

Starts Gapura (release build, one shard pinned to core 0) with one relay
whose source-prefix budget is 1 datagram per window, sends it COUNT
datagrams of SIZE bytes from 127.0.0.1 (core 1, a plain Python sender), and
reads the server's user and system CPU from /proc around the flood and the
drop counters from /metrics. Every datagram but the first of each window is
dropped (`prefix_budget`) without a reply; the figure is the server's CPU
per dropped datagram, user and system apart.

  bench/udp-drop.py [--count 1000000] [--size 64] [--gapura target/release/gapura]

Traffic goes to 127.0.0.1 only; every process started is stopped by PID.
"""
import argparse
import os
import re
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def ticks(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return int(fields[11]), int(fields[12])


def free_port(kind):
    s = socket.socket(socket.AF_INET, kind)
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--count", type=int, default=1_000_000)
    p.add_argument("--size", type=int, default=64)
    p.add_argument("--gapura", default=os.path.join(ROOT, "target/release/gapura"))
    o = p.parse_args()
    udp, admin = free_port(socket.SOCK_DGRAM), free_port(socket.SOCK_STREAM)
    with tempfile.TemporaryDirectory() as d:
        prof = os.path.join(d, "drop.toml")
        with open(prof, "w") as f:
            f.write(f"""[server]
shards = 1
listen = []
admin = "127.0.0.1:{admin}"
[[udp]]
name = "drop"
listen = ["127.0.0.1:{udp}"]
servers = ["127.0.0.1:9"]
prefix = {{ requests = 1 }}
window_ms = 3600000
""")
        log = open(os.path.join(d, "gapura.log"), "w")
        g = subprocess.Popen(["taskset", "-c", "0", o.gapura, "run", "--allow-root", "--profile", prof],
                             stdout=log, stderr=log)
        try:
            for _ in range(200):
                try:
                    urllib.request.urlopen(f"http://127.0.0.1:{admin}/metrics", timeout=1)
                    break
                except OSError:
                    time.sleep(0.05)
            os.sched_setaffinity(0, {1})
            s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 1 << 20)
            data = b"\x42" * o.size
            s.sendto(data, ("127.0.0.1", udp))  # the one the budget admits
            time.sleep(0.2)
            u0, s0 = ticks(g.pid)
            t0 = time.monotonic()
            for _ in range(o.count):
                s.sendto(data, ("127.0.0.1", udp))
            time.sleep(1.5)  # the shard drains its socket; its ticker publishes
            u1, s1 = ticks(g.pid)
            wall = time.monotonic() - t0
            text = urllib.request.urlopen(f"http://127.0.0.1:{admin}/metrics").read().decode()
            dropped = sum(int(v) for v in re.findall(
                r'gapura_udp_dropped_total\{[^}]*reason="prefix_budget"\} (\d+)', text))
        finally:
            g.terminate()
            g.wait(timeout=15)
    hz = os.sysconf("SC_CLK_TCK")
    per = dropped / 1e6
    print(f"sent {o.count} datagrams of {o.size} B in {wall:.2f} s; dropped (prefix_budget): {dropped}")
    if dropped:
        print(f"server CPU per dropped datagram: user {(u1 - u0) / hz / per:.3f} µs, "
              f"system {(s1 - s0) / hz / per:.3f} µs")
    return 0 if dropped else 1


if __name__ == "__main__":
    sys.exit(main())

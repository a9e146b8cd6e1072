#!/usr/bin/env python3
"""gRPC unary calls through Gapura, HAProxy (`proto h2` both sides) and
nginx's `grpc_pass`, side by side: server CPU per call and h2load's
latency, each server's ratio taken within the same round.

The upstream is `grpc-echo` (bench/src/bin/grpc-echo.rs: h2c, answers each
call with its message and the trailers `grpc-status: 0`), pinned to the
load core. Each round, each server in turn starts fresh pinned to the
server core with one worker (nginx: `worker_processes 1`, `listen ...
http2`, `grpc_pass` to an upstream block with `keepalive`; Gapura: `shards
= 1`, an `[[upstream]]` with `protocol = "h2"`; HAProxy: `nbthread 1`,
`bind ... proto h2`, `server ... proto h2` with `http-reuse always`) and
takes:

  grpc-unary   h2load over h2c, 64 connections, 10 streams each, every
               request a gRPC unary call (POST, `content-type:
               application/grpc`, `te: trailers`, a 5-byte framed message)

Its CPU (utime + stime of its process tree, from /proc) is read before and
after the load. Every process started here is stopped by its pid; all
traffic goes to 127.0.0.1. Python 3.11, standard library only.

  cargo build --release -p gapura -p gapura-bench --bin gapura --bin grpc-echo
  bench/grpc.py [--rounds N] [--duration S] [--gapura PATH] [--only gapura|haproxy|nginx]
"""
import argparse
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from tls import TICKS, cpu_ticks, free_port, wait_port  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SERVERS = ("gapura", "haproxy", "nginx")


def say(msg):
    print(f"grpc.py: {msg}", file=sys.stderr, flush=True)


def start_gapura(binary, work, port, core, upstream):
    admin = free_port()
    profile = os.path.join(work, "gapura.toml")
    with open(profile, "w") as f:
        f.write(f"""[server]
listen = ["127.0.0.1:{port}"]
admin = "127.0.0.1:{admin}"
shards = 1
max_requests_per_connection = 0

[[upstream]]
name = "grpc"
servers = ["127.0.0.1:{upstream}"]
protocol = "h2"
h2_connections_per_server = 1
h2_streams_per_connection = 1000

[[host]]
names = ["bench.test"]
default = true
kind = "proxy"
  [[host.route]]
  path = "/"
  upstream = "grpc"
  request_id = "off"

[protection]
off = ["all"]
""")
    log = open(os.path.join(work, "gapura.log"), "w")
    return subprocess.Popen(["taskset", "-c", str(core), binary, "run", "--allow-root",
                             "--profile", profile], stdout=log, stderr=log)


def start_nginx(work, port, core, upstream):
    conf = os.path.join(work, "nginx.conf")
    with open(conf, "w") as f:
        f.write(f"""worker_processes 1;
daemon off;
pid {work}/nginx.pid;
error_log {work}/nginx-error.log;
events {{ worker_connections 4096; }}
http {{
    access_log off;
    keepalive_requests 1000000;
    http2_max_requests 1000000;
    upstream grpc {{
        server 127.0.0.1:{upstream};
        keepalive 64;
        keepalive_requests 1000000;
    }}
    server {{
        listen 127.0.0.1:{port} http2;
        location / {{
            grpc_pass grpc://grpc;
        }}
    }}
}}
""")
    return subprocess.Popen(["taskset", "-c", str(core), "nginx", "-c", conf, "-p", work],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def start_haproxy(work, port, core, upstream):
    conf = os.path.join(work, "haproxy.cfg")
    with open(conf, "w") as f:
        f.write(f"""global
    nbthread 1
    maxconn 4096

defaults
    mode http
    timeout connect 5s
    timeout client 30s
    timeout server 30s
    option http-keep-alive

frontend grpc
    bind 127.0.0.1:{port} proto h2
    default_backend echo

backend echo
    http-reuse always
    server echo 127.0.0.1:{upstream} proto h2
""")
    return subprocess.Popen(["taskset", "-c", str(core), "haproxy", "-db", "-f", conf],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def h2load(port, secs, core, message):
    cmd = ["taskset", "-c", str(core), "h2load", "-c64", "-m10", "-t1", "-D", str(secs),
           "-d", message, "-H", "content-type: application/grpc", "-H", "te: trailers",
           f"http://127.0.0.1:{port}/bench.Echo/Unary"]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=secs + 60).stdout
    m = re.search(r"requests: \d+ total, \d+ started, (\d+) done, (\d+) succeeded", out)
    lat = re.search(r"time for request:\s+(\S+)\s+(\S+)\s+(\S+)", out)
    if not m:
        say("h2load: " + out[-400:])
        return 0, None
    if m.group(1) != m.group(2):
        say(f"h2load: {m.group(1)} done, {m.group(2)} succeeded")
    return int(m.group(2)), lat.group(3) if lat else None


def run_server(name, args, work, upstream, message):
    port = free_port()
    if name == "gapura":
        proc = start_gapura(args.gapura, work, port, args.server_core, upstream)
    elif name == "haproxy":
        proc = start_haproxy(work, port, args.server_core, upstream)
    else:
        proc = start_nginx(work, port, args.server_core, upstream)
    try:
        wait_port(port, proc)
        h2load(port, 1, args.load_core, message)  # warm-up
        before = cpu_ticks(proc.pid)
        n, mean = h2load(port, args.duration, args.load_core, message)
        used = cpu_ticks(proc.pid) - before
        return (used / TICKS * 1e6 / n if n else float("nan"), n, mean)
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def main():
    p = argparse.ArgumentParser(prog="bench/grpc.py")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--duration", type=int, default=5)
    p.add_argument("--gapura", default=os.path.join(ROOT, "target", "release", "gapura"))
    p.add_argument("--echo", default=os.path.join(ROOT, "target", "release", "grpc-echo"))
    p.add_argument("--only", choices=SERVERS)
    p.add_argument("--server-core", type=int, default=0)
    p.add_argument("--load-core", type=int, default=1)
    args = p.parse_args()
    servers = [args.only] if args.only else list(SERVERS)
    rows = {s: [] for s in servers}
    with tempfile.TemporaryDirectory(prefix="gapura-grpc-bench-") as work:
        message = os.path.join(work, "message")
        with open(message, "wb") as f:
            f.write(b"\0\0\0\0\x05hello")
        up_port = free_port()
        upstream = subprocess.Popen(["taskset", "-c", str(args.load_core), args.echo, str(up_port)])
        try:
            wait_port(up_port, upstream)
            for r in range(args.rounds):
                for s in servers:
                    say(f"round {r + 1}: {s}")
                    rows[s].append(run_server(s, args, work, up_port, message))
        finally:
            upstream.send_signal(signal.SIGTERM)
            upstream.wait(timeout=15)
    print(f"# gRPC unary (h2load -c64 -m10): server CPU µs per call, {args.rounds} rounds "
          f"of {args.duration} s; h2load's mean time per request")
    for s in servers:
        cells = ", ".join(f"{us:.2f} µs ({n} calls, mean {mean})" for us, n, mean in rows[s])
        print(f"{s:7} {cells}")
    if "gapura" not in rows:
        return
    for other in (s for s in servers if s != "gapura"):
        ratios = [g[0] / n[0] for g, n in zip(rows["gapura"], rows[other])]
        print(f"gapura / {other} per round: " + ", ".join(f"{r:.2f}" for r in ratios)
              + f"; median {statistics.median(ratios):.2f}")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""HTTP/2 clients with many streams, proxied to an HTTP/1.1 upstream: server
CPU per request, requests a second, and the upstream connections each
server opens, Gapura beside HAProxy and nginx in the same round.

The upstream is nginx (one worker, HTTP/1.1 keep-alive, `return 200`),
pinned to the load core with the load generator (`--layout saturated`,
the default) or to the server's core (`--layout shared`, where the
upstream answers more slowly and more requests are in flight toward it
at once); it counts the
connections it accepts (`stub_status` on a port of its own), so every
server's upstream churn is measured the same way. Each round, each server
in turn starts fresh pinned to the server core with one worker and takes:

  h2-m10    h2load over h2c, 64 connections, 10 streams each
  h2-m100   h2load over h2c, 64 connections, 100 streams each (a
            browser's stream budget)
  h1-c64, h1-c256, h1-c1000
            the same proxying for HTTP/1.1 clients: wrk, that many
            keep-alive connections (`--http1`)

Servers: `gapura` (the build under test), `gapura-base` (another build,
`--base PATH`, for an A/B in the same run), `haproxy` (`bind ... proto
h2`, `http-reuse always`, `maxconn 8000`) and `nginx` (`listen ...
http2`, an upstream block with `keepalive 1024`). Gapura's profile sets
`shards = 1` and leaves its pool at its defaults (a bound of 1,024
connections per server and shard, idle ones kept for 30 s).

Reported per scenario and server: CPU µs per 2xx answer (utime + stime
of the server's process tree, from /proc, over the measured window), 2xx
answers a second, the share of answers that were not 2xx, upstream connections opened during the measured window (the
warm-up before it opens the pool) and their share of requests, and
sockets that entered TIME_WAIT toward the upstream (as `ss` sees them; a
socket closed by a reset leaves none), and for Gapura its queue's
counters over the window (requests that waited for a connection, timed
out, found the queue full). Every process
started here is stopped by its pid; all traffic goes to 127.0.0.1.
Python 3.11, standard library only.

  cargo build --release -p gapura
  bench/h2-upstream-reuse.py [--rounds N] [--duration S] [--warmup S]
      [--scenarios h2-m10,h2-m100,...] [--servers gapura,haproxy,nginx]
      [--layout saturated|shared] [--gapura PATH] [--base PATH]
      [--base-upstream 'max_idle_per_server = 64']
"""
import argparse
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from tls import TICKS, cpu_ticks, free_port, wait_port  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCENARIOS = ("h2-m10", "h2-m100", "h1-c64", "h1-c256", "h1-c1000")
SERVERS = ("gapura", "gapura-base", "haproxy", "nginx")


def say(msg):
    print(f"h2-upstream-reuse.py: {msg}", file=sys.stderr, flush=True)


def start_upstream(work, port, status_port, core):
    conf = os.path.join(work, "upstream.conf")
    with open(conf, "w") as f:
        f.write(f"""worker_processes 1;
daemon off;
pid {work}/upstream.pid;
error_log {work}/upstream-error.log;
worker_rlimit_nofile 20000;
events {{ worker_connections 16000; }}
http {{
    access_log off;
    keepalive_requests 1000000;
    keepalive_timeout 75s;
    server {{
        listen 127.0.0.1:{port} backlog=4096;
        location / {{
            default_type text/plain;
            return 200 "hello\\n";
        }}
    }}
    server {{
        listen 127.0.0.1:{status_port};
        location / {{ stub_status; }}
    }}
}}
""")
    return subprocess.Popen(["taskset", "-c", str(core), "nginx", "-c", conf, "-p", work],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def accepts(status_port):
    text = urllib.request.urlopen(f"http://127.0.0.1:{status_port}/", timeout=5).read().decode()
    # "server accepts handled requests\n A H R"; the status request itself
    # is one accepted connection, taken off.
    nums = re.search(r"\n\s*(\d+)\s+(\d+)\s+(\d+)", text)
    if not nums:
        raise SystemExit(f"the upstream's stub_status said: {text[:200]!r}")
    return int(nums.group(1))


def start_gapura(binary, work, port, core, upstream, extra=""):
    admin = free_port()
    profile = os.path.join(work, "gapura.toml")
    with open(profile, "w") as f:
        f.write(f"""[server]
listen = ["127.0.0.1:{port}"]
admin = "127.0.0.1:{admin}"
shards = 1
max_requests_per_connection = 0

[[upstream]]
name = "origin"
servers = ["127.0.0.1:{upstream}"]
{extra}

[[host]]
names = ["localhost"]
default = true
kind = "proxy"
  [[host.route]]
  path = "/"
  upstream = "origin"

[protection]
off = ["all"]
""")
    log = open(os.path.join(work, "gapura.log"), "w")
    return subprocess.Popen(["taskset", "-c", str(core), binary, "run", "--allow-root",
                             "--profile", profile], stdout=log, stderr=log), admin


def queue_counts(admin):
    """Gapura's queue counters for the group: waited, timed out, found full
    (None where the build has no such counters)."""
    if admin is None:
        return None
    try:
        text = urllib.request.urlopen(f"http://127.0.0.1:{admin}/metrics",
                                      timeout=5).read().decode()
    except OSError:
        return None
    out = []
    for name in ("gapura_upstream_queued_total", "gapura_upstream_queue_timeouts_total",
                 "gapura_upstream_queue_full_total"):
        m = re.search(rf"^{name}{{upstream=\"origin\"}} (\d+)$", text, re.M)
        if not m:
            return None
        out.append(int(m.group(1)))
    return out


def start_haproxy(work, port, core, upstream):
    conf = os.path.join(work, "haproxy.cfg")
    with open(conf, "w") as f:
        f.write(f"""global
    nbthread 1
    maxconn 8000

defaults
    mode http
    maxconn 8000
    timeout connect 5s
    timeout client 30s
    timeout server 30s
    timeout http-keep-alive 75s

frontend proxy
    bind 127.0.0.1:{port} proto h2
    bind 127.0.0.1:{port + 1}
    default_backend upstream

backend upstream
    http-reuse always
    server up 127.0.0.1:{upstream}
""")
    return subprocess.Popen(["taskset", "-c", str(core), "haproxy", "-f", conf, "-db"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def start_nginx(work, port, core, upstream):
    conf = os.path.join(work, "nginx.conf")
    with open(conf, "w") as f:
        f.write(f"""worker_processes 1;
daemon off;
pid {work}/nginx.pid;
error_log {work}/nginx-error.log;
worker_rlimit_nofile 20000;
events {{ worker_connections 8192; }}
http {{
    access_log off;
    keepalive_requests 1000000;
    http2_max_requests 1000000;
    upstream origin {{
        server 127.0.0.1:{upstream};
        keepalive 1024;
        keepalive_requests 1000000;
    }}
    server {{
        listen 127.0.0.1:{port} http2;
        location / {{
            proxy_pass http://origin;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
        }}
    }}
    server {{
        listen 127.0.0.1:{port + 1};
        location / {{
            proxy_pass http://origin;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
        }}
    }}
}}
""")
    return subprocess.Popen(["taskset", "-c", str(core), "nginx", "-c", conf, "-p", work],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def load(scenario, port, secs, core):
    """Requests answered during `secs` of `scenario` against `port`, and
    of those the ones answered 2xx."""
    if scenario.startswith("h2-"):
        streams = scenario.split("-m")[1]
        cmd = ["taskset", "-c", str(core), "h2load", "-c64", f"-m{streams}", "-t1", "-D",
               str(secs), f"http://127.0.0.1:{port}/"]
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=secs + 60).stdout
        m = re.search(r"status codes: (\d+) 2xx, (\d+) 3xx, (\d+) 4xx, (\d+) 5xx", out)
        if not m:
            say("h2load: " + out[-400:])
            return 0, 0
        return sum(int(x) for x in m.groups()), int(m.group(1))
    conns = scenario.split("-c")[1]
    cmd = ["taskset", "-c", str(core), "wrk", "-t1", f"-c{conns}", f"-d{secs}s",
           f"http://127.0.0.1:{port}/"]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=secs + 60).stdout
    m = re.search(r"(\d+) requests in", out)
    bad = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    if not m:
        say("wrk: " + out[-400:])
        return 0, 0
    return int(m.group(1)), int(m.group(1)) - (int(bad.group(1)) if bad else 0)


def time_wait(upstream):
    out = subprocess.run(["ss", "-Htan", "state", "time-wait", f"( dport = :{upstream} )"],
                         capture_output=True, text=True).stdout
    return len(out.splitlines())


def start_server(server, args, work, upstream):
    """The server on fresh ports: (process, port, admin port or None). A
    start that fails (a port taken meanwhile) is tried again, twice."""
    for attempt in range(3):
        port = free_port()
        admin = None
        if server in ("gapura", "gapura-base"):
            binary = args.gapura if server == "gapura" else args.base
            extra = args.base_upstream if server == "gapura-base" else ""
            proc, admin = start_gapura(binary, work, port, args.server_core, upstream, extra)
        elif server == "haproxy":
            proc = start_haproxy(work, port, args.server_core, upstream)
        else:
            proc = start_nginx(work, port, args.server_core, upstream)
        try:
            wait_port(port, proc)
            return proc, port, admin
        except SystemExit as e:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            if attempt == 2:
                raise
            say(f"{server} did not start ({e}); trying again")
            time.sleep(2)


def run_one(server, scenario, args, work, upstream, status_port):
    proc, port, admin = start_server(server, args, work, upstream)
    try:
        # Gapura serves h2c and HTTP/1.1 on one port; the peers on two.
        target = port if server.startswith("gapura") or scenario.startswith("h2") else port + 1
        if args.warmup > 0:
            load(scenario, target, args.warmup, args.load_core)
        # Gapura's counters reach /metrics once a second.
        time.sleep(1.1 if admin else 0)
        q0 = queue_counts(admin)
        a0, c0, tw0 = accepts(status_port), cpu_ticks(proc.pid), time_wait(upstream)
        t0 = time.time()
        n_all, n = load(scenario, target, args.duration, args.load_core)
        wall = time.time() - t0
        c1, a1 = cpu_ticks(proc.pid), accepts(status_port)
        tw1 = time_wait(upstream)
        time.sleep(1.1 if admin else 0)
        q1 = queue_counts(admin)
        queue = [b - a for a, b in zip(q0, q1)] if q0 and q1 else None
        opened = max(0, a1 - a0 - 1)
        cpu_us = (c1 - c0) / TICKS * 1e6 / n if n else float("nan")
        return {"cpu": cpu_us, "rps": n / wall if wall else 0, "opened": opened,
                "failed": (n_all - n) / n_all if n_all else 0.0, "queue": queue,
                "share": opened / n if n else float("nan"), "tw": max(0, tw1 - tw0)}
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        # Let the server's sockets leave before the next one starts.
        time.sleep(1)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--duration", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--scenarios", default="h2-m10,h2-m100,h1-c64,h1-c256,h1-c1000")
    ap.add_argument("--servers", default="gapura,haproxy,nginx")
    ap.add_argument("--gapura", default=os.path.join(ROOT, "target/release/gapura"))
    ap.add_argument("--base", default=None, help="another gapura build, as gapura-base")
    ap.add_argument("--base-upstream", default="",
                    help="TOML lines added to gapura-base's [[upstream]], e.g. "
                         "'max_idle_per_server = 64'")
    ap.add_argument("--server-core", type=int, default=0)
    ap.add_argument("--load-core", type=int, default=1)
    ap.add_argument("--layout", default="saturated", choices=("saturated", "shared"),
                    help="where the upstream runs: the load core (saturated) or the "
                         "server's core (shared)")
    args = ap.parse_args()
    scenarios = [s for s in args.scenarios.split(",") if s]
    servers = [s for s in args.servers.split(",") if s]
    for s in scenarios:
        if s not in SCENARIOS:
            raise SystemExit(f"unknown scenario {s}")
    for s in servers:
        if s not in SERVERS:
            raise SystemExit(f"unknown server {s}")
    if "gapura-base" in servers and not args.base:
        raise SystemExit("gapura-base needs --base PATH")
    import resource
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(20000, hard), hard))
    rows = {}
    with tempfile.TemporaryDirectory(prefix="h2reuse-") as work:
        upstream, status_port = free_port(), free_port()
        up_core = args.load_core if args.layout == "saturated" else args.server_core
        up = start_upstream(work, upstream, status_port, up_core)
        try:
            wait_port(upstream, up)
            wait_port(status_port, up)
            for r in range(args.rounds):
                for scenario in scenarios:
                    for server in servers:
                        res = run_one(server, scenario, args, work, upstream, status_port)
                        rows.setdefault((scenario, server), []).append(res)
                        queue = ""
                        if res["queue"]:
                            queue = (f", queue: {res['queue'][0]} waited, {res['queue'][1]} "
                                     f"timed out, {res['queue'][2]} found it full")
                        say(f"round {r + 1} {scenario} {server}: {res['cpu']:.2f} µs, "
                            f"{res['rps']:.0f} req/s, {res['opened']} opened, "
                            f"{res['tw']} TIME_WAIT{queue}")
        finally:
            up.send_signal(signal.SIGTERM)
            up.wait(10)
    print(f"# HTTP/2 and HTTP/1.1 clients to an HTTP/1.1 upstream ({args.layout} layout): "
          f"median of {args.rounds} rounds of {args.duration} s (after {args.warmup} s of "
          f"warm-up)")
    for scenario in scenarios:
        print(f"\n## {scenario}\n")
        print("| server | CPU µs/req | vs haproxy | vs nginx | req/s (2xx) | not 2xx "
              "| upstream conns opened | opened per request | TIME_WAIT |")
        print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
        med = {}
        for server in servers:
            rs = rows[(scenario, server)]
            med[server] = {k: statistics.median(x[k] for x in rs) for k in rs[0] if k != "queue"}
            qs = [x["queue"] for x in rs if x["queue"]]
            med[server]["queue"] = [statistics.median(q[i] for q in qs) for i in range(3)] if qs else None
        for server in servers:
            m = med[server]
            ratio = lambda peer: (f"{m['cpu'] / med[peer]['cpu']:.2f}x"
                                  if peer in med and med[peer]['cpu'] else "-")
            print(f"| {server} | {m['cpu']:.2f} | {ratio('haproxy')} | {ratio('nginx')} | "
                  f"{m['rps']:.0f} | {m['failed'] * 100:.1f} % | {m['opened']:.0f} | {m['share'] * 100:.3f} % | "
                  f"{m['tw']:.0f} |")
        for server in servers:
            q = med[server].get("queue")
            if q:
                print(f"\n{server}'s queue (median per round): {q[0]:.0f} requests waited for a "
                      f"connection, {q[1]:.0f} past queue_timeout_ms, {q[2]:.0f} found it full")


if __name__ == "__main__":
    main()

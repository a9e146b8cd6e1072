#!/usr/bin/env python3
"""What sharing limits across a fleet costs (docs/fleet.md, "Cost").

  bench/fleet.py overhead [--rounds 3] [--duration 5] [--budget 400000]
  bench/fleet.py ops [--rates 1000,10000,100000] [--duration 8] [--sync-ms 100]

Both start a `redis-server` on a free loopback port (core 1, beside the
load generator) and stop it at the end.

overhead: server CPU per request of one node whose global and source
budgets and per-client rate limit are fleet-scoped (B,
bench/peers/gapura-fleet-shared.toml.in) against the same limits held by
the node alone (A, gapura-fleet-node.toml.in), side by side in one run of
bench/overhead.py (same binary, server on core 0, gapura-loadtest on core
1). The budgets never refuse under the load (--budget per 1 s window) and
are shared once a window passes 1/16 of them; the reconciler's thread is
in the server's CPU.

ops: one fleet-scoped node under gapura-loadtest at each fixed rate
(--rate), Redis's `INFO commandstats` read before and after: Redis
operations a second and per request, beside the node's shared keys per
round and rounds a second (from /metrics).

Needs target/release/gapura and target/release/gapura-loadtest
(`cargo build --release -p gapura -p gapura-loadtest`), redis-server and
redis-cli. Run under `flock /tmp/gapura-bench.lock`.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GAPURA = os.path.join(ROOT, "target/release/gapura")
LOADTEST = os.path.join(ROOT, "target/release/gapura-loadtest")
PEERS = os.path.join(ROOT, "bench/peers")
sys.path.insert(0, os.path.join(ROOT, "bench"))
from overhead import free_port, wait_port  # noqa: E402


def start_redis(tmp):
    port = free_port()
    proc = subprocess.Popen(
        ["taskset", "-c", "1", "redis-server", "--port", str(port), "--bind", "127.0.0.1",
         "--save", "", "--appendonly", "no", "--dir", tmp],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    if not wait_port(port):
        proc.kill()
        sys.exit("redis-server did not start")
    return proc, port


def render(name, tmp, **values):
    text = open(os.path.join(PEERS, name)).read()
    # The fleet's key file (keys what Redis stores; every node has it).
    key = os.path.join(tmp, "fleet.key")
    if not os.path.exists(key):
        with open(key, "w") as f:
            f.write("the benchmark's fleet key, 40 characters\n")
    values.setdefault("KEY_FILE", key)
    for k, v in values.items():
        text = text.replace(f"@{k}@", str(v))
    path = os.path.join(tmp, name.replace(".in", ""))
    with open(path, "w") as f:
        f.write(text)
    return path


def commandstats(port):
    out = subprocess.run(["redis-cli", "-p", str(port), "INFO", "commandstats"],
                         capture_output=True, text=True).stdout
    calls = {}
    for line in out.splitlines():
        if line.startswith("cmdstat_"):
            name, rest = line[len("cmdstat_"):].split(":", 1)
            fields = dict(kv.split("=") for kv in rest.split(","))
            calls[name] = int(fields["calls"])
    return calls


def metric(admin, name):
    text = urllib.request.urlopen(f"http://127.0.0.1:{admin}/metrics", timeout=5).read().decode()
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    return 0.0


def overhead(args, tmp, redis_port):
    a = render("gapura-fleet-node.toml.in", tmp, BUDGET=args.budget)
    b = render("gapura-fleet-shared.toml.in", tmp, BUDGET=args.budget,
               REDIS_PORT=redis_port, SYNC_MS=args.sync_ms)
    # The renderings keep @PORT@ and @ADMIN_PORT@ for overhead.py.
    subprocess.run([sys.executable, os.path.join(ROOT, "bench/overhead.py"), "--a", a, "--b", b,
                    "--rounds", str(args.rounds), "--duration", str(args.duration)], check=True)
    print("redis commands in the run:", commandstats(redis_port))


def ops(args, tmp, redis_port):
    print(f"sync_ms {args.sync_ms}, budgets {args.budget} per 1 s window (shared past 1/16)")
    print("rate/s  achieved/s  redis_ops/s  ops/request  round_keys  rounds/s  commands")
    for rate in [int(r) for r in args.rates.split(",")]:
        port, admin = free_port(), free_port()
        profile = render("gapura-fleet-shared.toml.in", tmp, BUDGET=args.budget,
                         REDIS_PORT=redis_port, SYNC_MS=args.sync_ms,
                         PORT=port, ADMIN_PORT=admin)
        server = subprocess.Popen(["taskset", "-c", "0", GAPURA, "run", "--allow-root",
                                   "--profile", profile],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            if not wait_port(port) or not wait_port(admin):
                sys.exit("gapura did not start")
            report = os.path.join(tmp, "lt.json")
            load = subprocess.Popen(
                ["taskset", "-c", "1", LOADTEST, "-t1", "-c64", f"-R{rate}",
                 f"-d{args.duration}s", "--warmup", "1s", "--no-progress", "-q",
                 "--json", report, "-H", "Host: app.test", f"http://127.0.0.1:{port}/"])
            time.sleep(1.5)
            before, rounds0, t0 = commandstats(redis_port), metric(admin, "gapura_fleet_sync_rounds_total"), time.time()
            keys = []
            while load.poll() is None and time.time() - t0 < args.duration - 1.0:
                keys.append(metric(admin, "gapura_fleet_round_keys"))
                time.sleep(0.5)
            after, rounds1, t1 = commandstats(redis_port), metric(admin, "gapura_fleet_sync_rounds_total"), time.time()
            load.wait(timeout=args.duration + 30)
            with open(report) as f:
                r = json.load(f)
            achieved = r["summary"]["requests_per_s"]
            delta = {k: after.get(k, 0) - before.get(k, 0) for k in after}
            delta = {k: v for k, v in delta.items() if v and k not in ("info",)}
            total = sum(delta.values())
            secs = t1 - t0
            print(f"{rate:>6}  {achieved:>10.0f}  {total / secs:>11.1f}  {total / secs / max(achieved, 1):>11.6f}"
                  f"  {sum(keys) / max(len(keys), 1):>10.1f}  {(rounds1 - rounds0) / secs:>8.1f}  {delta}")
        finally:
            server.terminate()
            server.wait(timeout=10)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("mode", choices=["overhead", "ops"])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--duration", type=int, default=5)
    ap.add_argument("--budget", type=int, default=400000)
    ap.add_argument("--sync-ms", type=int, default=100)
    ap.add_argument("--rates", default="1000,10000,100000")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        redis, redis_port = start_redis(tmp)
        try:
            (overhead if args.mode == "overhead" else ops)(args, tmp, redis_port)
        finally:
            redis.terminate()
            redis.wait(timeout=10)


if __name__ == "__main__":
    main()

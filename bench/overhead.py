#!/usr/bin/env python3
"""Side-by-side cost of a profile change: Gapura with profile A and with
profile B under the same load, alternating, in one run.

The server runs on core 0 (one shard), gapura-loadtest on core 1 (-t1),
and for `--upstream` a one-worker nginx `return 200` on core 1 beside the
generator. Per round and profile: server CPU (user + system from /proc)
per request the generator completed. The report gives each round, the
medians, the ratio B/A of the medians, the median of the per-round
ratios (steadier when the machine's load drifts), each profile's median
user and system time per request (where a difference lies), the ratio of
each profile's best round (other load only ever adds CPU) and, from 8
rounds up, the ratio of each profile's lower quartile.

  bench/overhead.py --a PROFILE_A --b PROFILE_B [--upstream] [--rounds 3]
                    [--duration 5] [--connections 64] [--b-env KEY=VALUE]
                    [--a-bin GAPURA_A] [--b-bin GAPURA_B]
                    [--generator gapura-loadtest|wrk] [--pipeline N]

--generator wrk loads with `wrk -t1` instead (bench/peers/wrk-report.lua
counts its responses; its requests carry only Host); --pipeline N writes
N requests per batch on each connection (gapura-loadtest's --pipeline,
or bench/peers/wrk-pipeline.lua).

With --a-bin/--b-bin and one profile given as both A and B, it compares
two builds instead (keep a copy of the old target/release/gapura).

Profiles are templates: @PORT@, @ADMIN_PORT@, @UPSTREAM_PORT@ and
@POW_KEY_FILE@ are replaced. --pow-key HEX writes that proof-of-work key
(64 hex digits) to the key file and sends every request of both profiles
with a valid `gapura_pow` cookie for host "localhost" and client 127.0.0.1
(the proof-of-work overhead: B protects the route, A does not). Needs target/release/gapura and target/release/gapura-loadtest
(built with `cargo build --release -p gapura -p gapura-loadtest`).
"""
import argparse
import base64
import hashlib
import hmac
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GAPURA = os.environ.get("GAPURA_BIN", os.path.join(ROOT, "target/release/gapura"))
LOADTEST = os.environ.get("LOADTEST_BIN", os.path.join(ROOT, "target/release/gapura-loadtest"))
TICKS = os.sysconf("SC_CLK_TCK")


def fnv1a64(data):
    h = 0xcbf29ce484222325
    for b in data:
        h = ((h ^ b) * 0x100000001b3) & 0xFFFFFFFFFFFFFFFF
    return h


def pow_cookie(key, label, client, expires, difficulty):
    """A `gapura_pow` cookie value, made as gate/src/pow.rs makes it."""
    raw = bytes([1]) + expires.to_bytes(8, "big") + bytes([difficulty])
    masked = bytes([4]) + bytes(int(x) for x in client.split(".")) + bytes(4)
    mac = hmac.new(key, b"gapura-pow-cookie-v1" + fnv1a64(label.encode()).to_bytes(8, "big")
                   + masked + raw, hashlib.sha256).digest()
    return base64.urlsafe_b64encode(raw + mac[:16]).rstrip(b"=").decode()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cpu_seconds(pid):
    """(user, system) CPU seconds of a process."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return int(fields[11]) / TICKS, int(fields[12]) / TICKS


def wait_port(port, timeout=10.0):
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return True
        except OSError:
            time.sleep(0.05)
    return False


def start_upstream(tmp):
    port = free_port()
    conf = os.path.join(tmp, "nginx.conf")
    with open(conf, "w") as f:
        f.write(f"""worker_processes 1; daemon off; master_process off;
pid {tmp}/nginx.pid; error_log {tmp}/nginx.err warn;
events {{ worker_connections 8192; }}
http {{ access_log off; keepalive_requests 1000000;
client_body_temp_path {tmp}/cb; proxy_temp_path {tmp}/pt; fastcgi_temp_path {tmp}/ft;
uwsgi_temp_path {tmp}/ut; scgi_temp_path {tmp}/st;
server {{ listen 127.0.0.1:{port}; location / {{ default_type text/plain; return 200 "hello, world\\n"; }} }} }}
""")
    proc = subprocess.Popen(["taskset", "-c", "1", "nginx", "-c", conf, "-p", tmp],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    if not wait_port(port):
        proc.kill()
        sys.exit("upstream nginx did not start")
    return proc, port


def run_once(template, tmp, upstream_port, args, env=None, binary=GAPURA):
    port, admin = free_port(), free_port()
    text = open(template).read()
    text = text.replace("@PORT@", str(port)).replace("@ADMIN_PORT@", str(admin))
    text = text.replace("@UPSTREAM_PORT@", str(upstream_port or 0))
    text = text.replace("@POW_KEY_FILE@", os.path.join(tmp, "pow.key"))
    profile = os.path.join(tmp, "profile.toml")
    with open(profile, "w") as f:
        f.write(text)
    server = subprocess.Popen(["taskset", "-c", "0", binary, "run", "--allow-root", "--profile", profile],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                              env=dict(os.environ, **(env or {})))
    try:
        if not wait_port(port):
            sys.exit(f"gapura did not start with {template}")
        if args.generator == "wrk":
            requests, statuses, (before, after) = load_wrk(port, tmp, args, server.pid)
        else:
            requests, statuses, (before, after) = load_loadtest(port, tmp, args, server.pid)
        per = [(a - b) * 1e6 / max(requests, 1) for a, b in zip(after, before)]
        return sum(per), requests, statuses, per
    finally:
        server.terminate()
        try:
            server.wait(timeout=10)
        except subprocess.TimeoutExpired:
            server.kill()


def load_loadtest(port, tmp, args, pid):
    """gapura-loadtest for the duration after a second's warm-up: the
    responses it counted, their statuses, the server's CPU around them."""
    report = os.path.join(tmp, "lt.json")
    pipeline = ["--pipeline", str(args.pipeline)] if args.pipeline > 1 else []
    load = subprocess.Popen(
        ["taskset", "-c", "1", LOADTEST, "-t1", f"-c{args.connections}",
         f"-d{args.duration}s", "--warmup", "1s", "--no-progress", "-q", *pipeline,
         "--json", report, "-H", "Host: app.test",
         "-H", "User-Agent: " + "Mozilla/5.0 (X11; Linux x86_64) Chrome/131.0.0.0",
         "-H", "X-Forwarded-For: 203.0.113.7", *args.extra_headers,
         f"http://127.0.0.1:{port}/products/item-42?x=1"])
    time.sleep(1.0 + 0.02)
    before = cpu_seconds(pid)
    load.wait(timeout=args.duration + 30)
    after = cpu_seconds(pid)
    with open(report) as f:
        r = json.load(f)
    return r["summary"]["requests"], r.get("status_counts", {}), (before, after)


def load_wrk(port, tmp, args, pid):
    """wrk for the duration (no warm-up of its own: the server's CPU is
    read around the whole run): the responses it counted (the report hook's
    WRKSTAT line), its errors, the server's CPU around them."""
    script = os.path.join(tmp, "wrk.lua")
    with open(script, "w") as f:
        if args.pipeline > 1:
            f.write(open(os.path.join(ROOT, "bench/peers/wrk-pipeline.lua")).read())
        f.write(open(os.path.join(ROOT, "bench/peers/wrk-report.lua")).read())
    extra = ["--", str(args.pipeline)] if args.pipeline > 1 else []
    before = cpu_seconds(pid)
    out = subprocess.run(
        ["taskset", "-c", "1", "wrk", "-t1", f"-c{args.connections}", f"-d{args.duration}s",
         "-s", script, "-H", "Host: app.test", f"http://127.0.0.1:{port}/products/item-42?x=1",
         *extra], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, timeout=args.duration + 30)
    after = cpu_seconds(pid)
    stat = next((line for line in out.stdout.decode().splitlines()
                 if line.startswith("WRKSTAT ")), None)
    if stat is None:
        sys.exit("wrk printed no WRKSTAT line")
    fields = dict(kv.split("=", 1) for kv in stat.split()[1:])
    errors = {k: int(fields[k]) for k in ("connect", "read", "write", "status", "timeout")
              if int(fields[k])}
    return int(fields["requests"]), errors, (before, after)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--a", required=True)
    ap.add_argument("--b", required=True)
    ap.add_argument("--upstream", action="store_true")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--duration", type=int, default=5)
    ap.add_argument("--connections", type=int, default=64)
    ap.add_argument("--a-bin", default=GAPURA, help="the gapura binary A runs")
    ap.add_argument("--b-bin", default=GAPURA,
                    help="the gapura binary B runs (to compare two builds on one profile)")
    ap.add_argument("--b-env", action="append", default=[],
                    help="KEY=VALUE set in B's environment only (to compare a switch)")
    ap.add_argument("--pow-key", help="a proof-of-work key (64 hex digits): see above")
    ap.add_argument("--generator", choices=("gapura-loadtest", "wrk"), default="gapura-loadtest")
    ap.add_argument("--pipeline", type=int, default=1,
                    help="requests written per batch on each connection")
    args = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="gapura-overhead-")
    args.extra_headers = []
    if args.pow_key and args.generator == "wrk":
        sys.exit("--pow-key sends its cookie with gapura-loadtest only")
    if args.pow_key:
        key = bytes.fromhex(args.pow_key)
        path = os.path.join(tmp, "pow.key")
        fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o600)
        os.write(fd, (args.pow_key + "\n").encode())
        os.close(fd)
        cookie = pow_cookie(key, "localhost", "127.0.0.1", int(time.time()) + 86400, 16)
        args.extra_headers = ["-H", f"Cookie: session=abc; gapura_pow={cookie}"]
    up = None
    try:
        up_port = None
        if args.upstream:
            up, up_port = start_upstream(tmp)
        results = {"a": [], "b": []}
        split = {"a": [], "b": []}
        for i in range(args.rounds):
            b_env = dict(kv.split("=", 1) for kv in args.b_env)
            for name, path, env, binary in (("a", args.a, None, args.a_bin),
                                            ("b", args.b, b_env, args.b_bin)):
                us, n, st, (user, system) = run_once(path, tmp, up_port, args, env, binary)
                results[name].append(us)
                split[name].append((user, system))
                print(f"round {i + 1} {name}: {us:.2f} µs/req (user {user:.2f}, system "
                      f"{system:.2f}) over {n} requests, status {st}")
        ma, mb = statistics.median(results["a"]), statistics.median(results["b"])
        print(f"\nmedian A ({os.path.basename(args.a)}): {ma:.2f} µs/req")
        print(f"median B ({os.path.basename(args.b)}): {mb:.2f} µs/req")
        print(f"ratio B/A: {mb / ma:.3f}")
        # Each round runs A then B back to back, so a round's own ratio
        # cancels noise that drifts slower than a round; its median is the
        # steadier figure on a shared machine.
        paired = statistics.median(b / a for a, b in zip(results["a"], results["b"]))
        print(f"median of the per-round ratios B/A: {paired:.3f}")
        # Where the difference lies: the server's own code (user) or the
        # kernel's work for it (system). The kernel samples the split at
        # each tick, so one round's split is rough; the medians are not.
        for name in ("a", "b"):
            mu = statistics.median(u for u, _ in split[name])
            ms = statistics.median(s for _, s in split[name])
            print(f"median split {name.upper()}: user {mu:.2f}, system {ms:.2f} µs/req")
        # Other load on a shared machine only ever adds CPU per request:
        # each profile's best round is its least disturbed one.
        la, lb = min(results["a"]), min(results["b"])
        print(f"best rounds: A {la:.2f}, B {lb:.2f} µs/req, ratio B/A: {lb / la:.3f}")
        # With many rounds, the lower quartile of each profile is steadier
        # than its single best round and still clear of most disturbance.
        if args.rounds >= 8:
            qa = statistics.quantiles(results["a"], n=4)[0]
            qb = statistics.quantiles(results["b"], n=4)[0]
            print(f"lower quartiles: A {qa:.2f}, B {qb:.2f} µs/req, ratio B/A: {qb / qa:.3f}")
    finally:
        if up:
            up.terminate()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()

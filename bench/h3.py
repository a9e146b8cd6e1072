#!/usr/bin/env python3
"""HTTP/3 against Caddy (the local HTTP/3 peer), same certificate (ECDSA
P-256), same answer (`200 hello`), same layout: server CPU per request, per
handshake, and memory per idle connection and per open stream, each
measured for both servers in the same round.

Each round, each server in turn starts fresh pinned to the server core with
one worker (Gapura: `shards = 1`; Caddy: GOMAXPROCS=1) and answers on a TLS
listener that serves HTTP/3 on the same port. Its CPU (utime + stime, from
/proc) is read before and after each load:

  h3-m8       gapura-loadtest --http3, 8 connections with 8 streams each
              (64 streams): CPU per request
  h2-m8       gapura-loadtest --http2, the same shape over TLS: Gapura's
              own h3 / h2 ratio (and Caddy's)
  handshake   aioquic opens connections one after another, each a full
              QUIC handshake and one request: CPU per handshake (the
              client is the bottleneck; the server's CPU per handshake is
              what is compared)
  idle-conns  aioquic holds 200 connections open and idle: the server's
              resident memory grown, per connection
  open-streams
              aioquic opens 4 connections with 50 streams each whose
              request head is begun and never finished: memory grown, per
              stream, beyond the 4 connections' own (idle-conns' figure)

Each memory scenario runs on a server started fresh for it (memory the
loads had allocated and freed would otherwise be reused unseen).

The loads run pinned to the load core. Every process started here is
stopped by its pid. All traffic goes to 127.0.0.1.

  bench/h3.py [--rounds N] [--duration S] [--gapura PATH] [--loadtest PATH]
  bench/h3.py --ab BEFORE [--rounds N] [--duration S] [--gapura PATH]

With --ab, only h3-m8, for the Gapura build at --gapura and the one at
BEFORE, alternating round by round: CPU a request of each.
"""
import argparse
import os
import re
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TICKS = os.sysconf("SC_CLK_TCK")
SERVERS = ("gapura", "caddy")
SCENARIOS = ("h3-m8", "h2-m8", "handshake", "idle-conns", "open-streams")
HOLDER = os.path.join(ROOT, "bench", "h3hold.py")


def say(msg):
    print(f"h3.py: {msg}", file=sys.stderr, flush=True)


def free_port():
    while True:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        try:
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as u:
                u.bind(("127.0.0.1", port))
            return port
        except OSError:
            continue


def cpu_ticks(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def wait_port(port, proc, secs=15):
    deadline = time.time() + secs
    while time.time() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"server exited with {proc.returncode}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return
        except OSError:
            time.sleep(0.05)
    raise SystemExit(f"nothing listens on {port}")


def make_cert(work):
    cert, key = os.path.join(work, "cert.pem"), os.path.join(work, "key.pem")
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256",
         "-nodes", "-subj", "/CN=bench.test", "-addext", "subjectAltName=DNS:bench.test",
         "-days", "2", "-keyout", key, "-out", cert],
        check=True, capture_output=True)
    os.chmod(key, 0o600)
    return cert, key


def start_gapura(binary, work, port, cert, key, core):
    admin = free_port()
    profile = os.path.join(work, "gapura.toml")
    with open(profile, "w") as f:
        f.write(f"""[server]
listen = [{{ addr = "127.0.0.1:{port}", tls = true, http3 = true }}]
admin = "127.0.0.1:{admin}"
shards = 1

[http3]
max_streams = 100

[[certificate]]
names = ["bench.test"]
cert = "{cert}"
key = "{key}"

[[host]]
names = ["bench.test"]
default = true
kind = "respond"
status = 200
content_type = "text/plain"
body = "hello\\n"

[protection]
off = ["all"]
""")
    log = open(os.path.join(work, "gapura.log"), "w")
    return subprocess.Popen(["taskset", "-c", str(core), binary, "run", "--allow-root",
                             "--profile", profile], stdout=log, stderr=log)


def start_caddy(work, port, cert, key, core):
    conf = os.path.join(work, "Caddyfile")
    with open(conf, "w") as f:
        f.write(f"""{{
	admin off
	auto_https off
	servers {{
		protocols h1 h2 h3
	}}
}}
https://bench.test:{port}, https://127.0.0.1:{port} {{
	bind 127.0.0.1
	tls {cert} {key}
	respond "hello
" 200
}}
""")
    log = open(os.path.join(work, "caddy.log"), "w")
    env = dict(os.environ, GOMAXPROCS="1", XDG_DATA_HOME=work, XDG_CONFIG_HOME=work, HOME=work)
    return subprocess.Popen(["taskset", "-c", str(core), "caddy", "run", "--config", conf,
                             "--adapter", "caddyfile"], stdout=log, stderr=log, env=env)


def loadtest(binary, port, secs, core, proto):
    cmd = ["taskset", "-c", str(core), binary, proto, "-k", "-t1", "-c8", "-m8",
           f"-d{secs}s", "--no-progress", "-H", "Host: bench.test", f"https://bench.test:{port}/"]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=secs + 60)
    m = re.search(r"(\d+) requests in", out.stdout)
    codes = re.search(r"Status codes: (.*)", out.stdout)
    if codes and codes.group(1).strip() != f"200: {m.group(1) if m else ''}":
        say(f"{proto}: status codes {codes.group(1)}")
    if not m:
        say(f"{proto}: {out.stdout[-300:]} {out.stderr[-300:]}")
    return int(m.group(1)) if m else 0


def holder(port, core, mode, count, streams=0):
    """Starts the aioquic holder; returns it once it says what it holds."""
    cmd = ["taskset", "-c", str(core), sys.executable, HOLDER, "--connect", f"127.0.0.1:{port}",
           "--authority", "bench.test", "--mode", mode, "--count", str(count),
           "--streams", str(streams)]
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
    line = p.stdout.readline().strip()
    return p, line


def start(name, args, work, cert, key, port, core):
    if name == "gapura":
        proc = start_gapura(args.gapura, work, port, cert, key, core)
    else:
        proc = start_caddy(work, port, cert, key, core)
    wait_port(port, proc)
    time.sleep(0.3)
    return proc


def stop(proc):
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=15)
    except subprocess.TimeoutExpired:
        proc.kill()


def held_growth(name, args, work, cert, key, core, load_core, mode, count, streams=0):
    """Resident memory a fresh server grows by while the holder holds."""
    port = free_port()
    proc = start(name, args, work, cert, key, port, core)
    try:
        # One connection first: what the first handshake allocates once
        # (the TLS configuration) is not any connection's.
        p, _ = holder(port, load_core, "handshakes", 1)
        p.wait(timeout=60)
        time.sleep(0.3)
        before = rss_kib(proc.pid)
        p, line = holder(port, load_core, mode, count, streams)
        time.sleep(1.0)
        grown = rss_kib(proc.pid) - before
        p.send_signal(signal.SIGTERM)
        p.wait(timeout=30)
        return grown
    finally:
        stop(proc)


def run_server(name, args, work, cert, key, port):
    core, load_core = 0, 1
    out = {}
    proc = start(name, args, work, cert, key, port, core)
    try:
        for proto, scen in (("--http3", "h3-m8"), ("--http2", "h2-m8")):
            t0 = cpu_ticks(proc.pid)
            n = loadtest(args.loadtest, port, args.duration, load_core, proto)
            t1 = cpu_ticks(proc.pid)
            out[scen] = ((t1 - t0) / TICKS * 1e6 / n) if n else float("nan")
        t0 = cpu_ticks(proc.pid)
        p, line = holder(port, load_core, "handshakes", args.handshakes)
        p.wait(timeout=300)
        t1 = cpu_ticks(proc.pid)
        done = int(line.split()[0]) if line and line.split()[0].isdigit() else 0
        out["handshake"] = ((t1 - t0) / TICKS * 1e6 / done) if done else float("nan")
    finally:
        stop(proc)
    conns = held_growth(name, args, work, cert, key, core, load_core, "idle", 200)
    out["idle-conns"] = conns / 200
    streams = held_growth(name, args, work, cert, key, core, load_core, "streams", 4, 50)
    out["open-streams"] = (streams - 4 * out["idle-conns"]) / 200
    return out


def ab(args):
    """h3-m8 for two Gapura builds, alternating."""
    builds = (args.gapura, args.ab)
    got = {b: [] for b in builds}
    with tempfile.TemporaryDirectory() as work:
        cert, key = make_cert(work)
        for r in range(args.rounds):
            for b in (builds if r % 2 == 0 else builds[::-1]):
                port = free_port()
                proc = start_gapura(b, work, port, cert, key, 0)
                try:
                    wait_port(port, proc)
                    time.sleep(0.3)
                    t0 = cpu_ticks(proc.pid)
                    n = loadtest(args.loadtest, port, args.duration, 1, "--http3")
                    t1 = cpu_ticks(proc.pid)
                finally:
                    stop(proc)
                got[b].append((t1 - t0) / TICKS * 1e6 / n if n else float("nan"))
    for b in builds:
        print(f"{b}: h3-m8 {' '.join(f'{x:.2f}' for x in got[b])} us/req, "
              f"median {statistics.median(got[b]):.2f}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--duration", type=int, default=5)
    ap.add_argument("--handshakes", type=int, default=300)
    ap.add_argument("--gapura", default=os.path.join(ROOT, "target/release/gapura"))
    ap.add_argument("--loadtest", default=os.path.join(ROOT, "target/release/gapura-loadtest"))
    ap.add_argument("--ab", metavar="BEFORE", help="another Gapura build: h3-m8 of both")
    args = ap.parse_args()
    if args.ab:
        return ab(args)
    rows = {s: {n: [] for n in SCENARIOS} for s in SERVERS}
    with tempfile.TemporaryDirectory() as work:
        cert, key = make_cert(work)
        with open("/etc/hosts") as f:
            if "bench.test" not in f.read():
                raise SystemExit("bench.test must resolve to 127.0.0.1 (add it to /etc/hosts)")
        for r in range(args.rounds):
            order = SERVERS if r % 2 == 0 else SERVERS[::-1]
            for name in order:
                port = free_port()
                got = run_server(name, args, work, cert, key, port)
                for k, v in got.items():
                    rows[name][k].append(v)
                say(f"round {r + 1} {name}: " + ", ".join(f"{k} {v:.2f}" for k, v in got.items()))
    units = {"h3-m8": "us/req", "h2-m8": "us/req", "handshake": "us/handshake",
             "idle-conns": "KiB/conn", "open-streams": "KiB/stream"}
    print(f"| scenario | unit | {' | '.join(SERVERS)} | gapura / caddy |")
    print("|---|---|---|---|---|")
    for scen in SCENARIOS:
        med = {s: statistics.median(rows[s][scen]) for s in SERVERS}
        ratio = med["gapura"] / med["caddy"] if med["caddy"] else float("nan")
        print(f"| {scen} | {units[scen]} | {med['gapura']:.2f} | {med['caddy']:.2f} | {ratio:.2f} |")
    g = {s: statistics.median(rows["gapura"][s]) for s in ("h3-m8", "h2-m8")}
    c = {s: statistics.median(rows["caddy"][s]) for s in ("h3-m8", "h2-m8")}
    print(f"\nh3 / h2 CPU per request: gapura {g['h3-m8'] / g['h2-m8']:.2f}, "
          f"caddy {c['h3-m8'] / c['h2-m8']:.2f}")


if __name__ == "__main__":
    main()

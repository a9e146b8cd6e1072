#!/usr/bin/env python3
"""Automatic certificates beside Caddy: both servers order a certificate for
`a.test` from the same local ACME server (Debian's pebble, with
pebble-challtestsrv answering every name with 127.0.0.1), in the same
layout, and each figure is measured for both in the same round:

  first       from the server's start until a TLS handshake for a.test
              verifies under pebble's root: seconds, and the requests the
              server sent to the ACME server for it (pebble's log lines)
  down        the ACME server down for --down seconds at the start (a
              listener on its port that accepts and closes, counting the
              connections: the server's attempts while it is down), then
              pebble up on the same port: seconds from then until the
              certificate verifies

Each server starts fresh with an empty state directory, challenges
HTTP-01 and TLS-ALPN-01 on ports of its own (pebble is started for each
with those ports), one worker (Gapura: `shards = 1`; Caddy:
GOMAXPROCS=1). pebble rejects no good nonce (PEBBLE_WFE_NONCEREJECT=0) and
validates at once (PEBBLE_VA_NOSLEEP=1). Every process started here is
stopped by its pid. All traffic goes to 127.0.0.1.

  bench/acme.py [--rounds N] [--down S] [--gapura PATH]
"""

import argparse
import os
import signal
import socket
import ssl
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)

from hostile_suite.pebble import Pebble, Refuser, acme_tables, caddyfile, pebble_files  # noqa: E402


def say(msg):
    print(msg, file=sys.stderr, flush=True)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_gapura(binary, work, acme_port, ca, http, tls):
    state = os.path.join(work, "gapura-state")
    profile = os.path.join(work, "gapura.toml")
    with open(profile, "w") as f:
        f.write(f"""[server]
listen = ["127.0.0.1:{http}", {{ addr = "127.0.0.1:{tls}", tls = true }}]
admin = "off"
shards = 1
""" + acme_tables(acme_port, ca, state))
    log = open(os.path.join(work, "gapura.log"), "a")
    return subprocess.Popen([binary, "run", "--allow-root", "--profile", profile],
                            stdout=log, stderr=log)


def start_caddy(work, acme_port, ca, http, tls):
    conf = caddyfile(work, acme_port, ca, http, tls)
    log = open(os.path.join(work, "caddy.log"), "a")
    env = dict(os.environ, GOMAXPROCS="1", XDG_DATA_HOME=work, XDG_CONFIG_HOME=work, HOME=work)
    return subprocess.Popen(["caddy", "run", "--config", conf, "--adapter", "caddyfile"],
                            stdout=log, stderr=log, env=env)


def verified(tls, root_file):
    ctx = ssl.create_default_context(cafile=root_file)
    try:
        with socket.create_connection(("127.0.0.1", tls), timeout=1) as s:
            with ctx.wrap_socket(s, server_hostname="a.test"):
                return True
    except (OSError, ssl.SSLError):
        return False


def wait_verified(tls, root_file, limit=90):
    start = time.monotonic()
    while time.monotonic() - start < limit:
        if verified(tls, root_file):
            return time.monotonic() - start
        time.sleep(0.05)
    return None


def stop(proc):
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def one(name, args, files, down):
    """One server's round: (seconds to the first certificate, ACME
    requests), or with `down`: (attempts while down, seconds after up)."""
    work = tempfile.mkdtemp(prefix=f"acme-{name}-", dir=args.work)
    http, tls, port, mgmt = free_port(), free_port(), free_port(), free_port()
    start = {"gapura": lambda: start_gapura(args.gapura, work, port, files[0], http, tls),
             "caddy": lambda: start_caddy(work, port, files[0], http, tls)}[name]
    refuser = Refuser(port) if down else None
    pebble = None if down else Pebble(work, files, port, mgmt, http, tls)
    proc = start()
    try:
        if down:
            time.sleep(down)
            refuser.stop()
            attempts = refuser.count
            pebble = Pebble(work, files, port, mgmt, http, tls)
        root_file = os.path.join(work, "root.pem")
        with open(root_file, "w") as f:
            f.write(pebble.root(files[0]))
        secs = wait_verified(tls, root_file)
        return (attempts, secs) if down else (secs, pebble.requests())
    finally:
        stop(proc)
        if pebble:
            pebble.stop()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--down", type=float, default=20)
    ap.add_argument("--gapura", default=os.path.join(ROOT, "target/release/gapura"))
    ap.add_argument("--work", default=None)
    args = ap.parse_args()
    work = tempfile.mkdtemp(prefix="acme-bench-", dir=args.work)
    args.work = work
    files = pebble_files(work)
    first = {"gapura": [], "caddy": []}
    down = {"gapura": [], "caddy": []}
    for r in range(args.rounds):
        for name in ("gapura", "caddy"):
            first[name].append(one(name, args, files, 0))
            say(f"round {r + 1} {name} first: {first[name][-1]}")
    for name in ("gapura", "caddy"):
        down[name].append(one(name, args, files, args.down))
        say(f"{name} down {args.down} s: {down[name][-1]}")
    print("| | Gapura | Caddy |")
    print("|---|---:|---:|")
    for label, i, fmt in (("first certificate: seconds from start (median)", 0, "{:.2f}"),
                          ("ACME requests for it (median)", 1, "{:.0f}")):
        vals = []
        for name in ("gapura", "caddy"):
            xs = [x[i] for x in first[name] if x[i] is not None]
            vals.append(fmt.format(statistics.median(xs)) if xs else "none")
        print(f"| {label} | {vals[0]} | {vals[1]} |")
    for label, i, fmt in ((f"attempts while the ACME server was down {args.down:.0f} s", 0, "{}"),
                          ("seconds from its return to the certificate", 1, "{:.2f}")):
        vals = []
        for name in ("gapura", "caddy"):
            x = down[name][0][i]
            vals.append("none" if x is None else fmt.format(x))
        print(f"| {label} | {vals[0]} | {vals[1]} |")


if __name__ == "__main__":
    main()

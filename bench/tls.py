#!/usr/bin/env python3
"""HTTPS against nginx, same certificate (ECDSA P-256), same cipher suites,
same layout: server CPU per request, per new handshake and per resumed
handshake, each as a ratio to nginx measured in the same round.

Each round, each server in turn starts fresh pinned to the server core with
one worker (nginx: `worker_processes 1`; Gapura: `shards = 1`) and answers
`200 hello` on a TLS listener. Its CPU (utime + stime of its process tree,
from /proc) is read before and after each load:

  http-c64       wrk, 64 keep-alive plaintext connections: the same answer
                 without TLS, the floor of https-c64 in the same run
  https-c64      wrk, 64 keep-alive connections: CPU per request
  handshake-new  `openssl s_time -new`: one connection at a time, each a
                 full TLS 1.3 handshake and one request (CPU per handshake)
  resumed-c16    wrk, 16 connections, `Connection: close`: every request is
                 a new connection, and wrk resumes its last session (TLS 1.3
                 tickets), so each is a resumed handshake; Gapura's counters
                 confirm the split
  h2-m10         h2load over TLS (ALPN h2), 64 connections, 10 streams each:
                 CPU per request (nginx: `listen ... ssl http2`)
  proxy-c64      wrk, 64 keep-alive HTTPS connections, each request
                 forwarded to an upstream nginx on the load core (both
                 servers keep a pool of upstream connections)
  http-proxy-c64 the same proxying over 64 plaintext connections: the floor
                 of proxy-c64 in the same run
  tls-upstream-c64
                 wrk, 64 keep-alive plaintext connections, each request
                 forwarded over TLS to an upstream nginx on the load core
                 that demands a client certificate (mTLS: both servers
                 verify the upstream's certificate against the bench's own
                 authority, show a client certificate, keep a pool of
                 upstream connections and resume their sessions): the cost
                 of HTTPS to upstreams, beside http-proxy-c64's plaintext

The loads run pinned to the load core. Both servers negotiate TLS 1.3 with
TLS_AES_256_GCM_SHA384 with these clients (OpenSSL's order; both servers
follow the client's). Every process started here is stopped by its pid.
All traffic goes to 127.0.0.1. Python 3.11, standard library only.

  bench/tls.py [--rounds N] [--duration S] [--gapura PATH] [--only gapura|nginx]
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
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TICKS = os.sysconf("SC_CLK_TCK")
SERVERS = ("gapura", "nginx")
SCENARIOS = ("http-c64", "https-c64", "handshake-new", "resumed-c16", "h2-m10", "proxy-c64",
             "http-proxy-c64", "tls-upstream-c64")


def say(msg):
    print(f"tls.py: {msg}", file=sys.stderr, flush=True)


def free_port():
    """A port free now whose successor is free too (the plaintext listener)."""
    while True:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        try:
            with socket.socket() as t:
                t.bind(("127.0.0.1", port + 1))
            return port
        except OSError:
            continue


def children(pid):
    out = []
    try:
        for tid in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{tid}/children") as f:
                out += [int(c) for c in f.read().split()]
    except OSError:
        pass
    return out


def cpu_ticks(pid):
    total = 0
    for p in [pid, *children(pid)]:
        try:
            with open(f"/proc/{p}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            total += int(fields[11]) + int(fields[12])
        except OSError:
            pass
    return total


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


def make_pki(work):
    """A certificate authority, the TLS upstream's certificate for
    `upstream.test` and a client certificate, all signed by it."""
    path = lambda n: os.path.join(work, n)
    def run(*args):
        subprocess.run(list(args), check=True, capture_output=True)
    run("openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
        "-subj", "/CN=bench authority", "-addext", "basicConstraints=critical,CA:TRUE",
        "-addext", "keyUsage=critical,keyCertSign,cRLSign", "-days", "2",
        "-keyout", path("ca.key"), "-out", path("ca.pem"))
    for name, ext in (("upstream", "subjectAltName=DNS:upstream.test"),
                      ("client", "extendedKeyUsage=clientAuth")):
        with open(path(f"{name}.ext"), "w") as f:
            f.write(ext + "\n")
        run("openssl", "req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
            "-subj", f"/CN={name}", "-keyout", path(f"{name}.key"), "-out", path(f"{name}.csr"))
        run("openssl", "x509", "-req", "-in", path(f"{name}.csr"), "-CA", path("ca.pem"),
            "-CAkey", path("ca.key"), "-CAcreateserial", "-days", "2",
            "-extfile", path(f"{name}.ext"), "-out", path(f"{name}.pem"))
        os.chmod(path(f"{name}.key"), 0o600)
    return {n: path(f) for n, f in (("ca", "ca.pem"), ("up_cert", "upstream.pem"),
                                    ("up_key", "upstream.key"), ("client_cert", "client.pem"),
                                    ("client_key", "client.key"))}


def start_tls_upstream(work, port, core, pki):
    """nginx answering `hello` over TLS, demanding a client certificate
    from the bench's authority."""
    conf = os.path.join(work, "tls-upstream.conf")
    with open(conf, "w") as f:
        f.write(f"""worker_processes 1;
daemon off;
pid {work}/tls-upstream.pid;
error_log {work}/tls-upstream-error.log;
events {{ worker_connections 4096; }}
http {{
    access_log off;
    keepalive_requests 1000000;
    ssl_session_cache shared:up:1m;
    server {{
        listen 127.0.0.1:{port} ssl;
        ssl_certificate {pki["up_cert"]};
        ssl_certificate_key {pki["up_key"]};
        ssl_client_certificate {pki["ca"]};
        ssl_verify_client on;
        location / {{
            default_type text/plain;
            return 200 "hello\\n";
        }}
    }}
}}
""")
    return subprocess.Popen(["taskset", "-c", str(core), "nginx", "-c", conf, "-p", work],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def start_upstream(work, port, core):
    conf = os.path.join(work, "upstream.conf")
    with open(conf, "w") as f:
        f.write(f"""worker_processes 1;
daemon off;
pid {work}/upstream.pid;
error_log {work}/upstream-error.log;
events {{ worker_connections 4096; }}
http {{
    access_log off;
    keepalive_requests 1000000;
    server {{
        listen 127.0.0.1:{port};
        location / {{
            default_type text/plain;
            return 200 "hello\\n";
        }}
    }}
}}
""")
    return subprocess.Popen(["taskset", "-c", str(core), "nginx", "-c", conf, "-p", work],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def start_gapura(binary, work, port, cert, key, core, upstream):
    upstream, tls_upstream, pki = upstream
    admin = free_port()
    profile = os.path.join(work, "gapura.toml")
    with open(profile, "w") as f:
        f.write(f"""[server]
listen = [{{ addr = "127.0.0.1:{port}", tls = true }}, "127.0.0.1:{port + 1}"]
admin = "127.0.0.1:{admin}"
shards = 1
max_requests_per_connection = 0

[[upstream]]
name = "origin"
servers = ["127.0.0.1:{upstream}"]
max_idle_per_server = 64

[[host]]
names = ["proxy.test"]
kind = "proxy"
  [[host.route]]
  path = "/"
  upstream = "origin"
  request_id = "off"

[[upstream]]
name = "tls_origin"
servers = ["127.0.0.1:{tls_upstream}"]
max_idle_per_server = 64
tls = {{ server_name = "upstream.test", ca_file = "{pki["ca"]}", client_cert = "{pki["client_cert"]}", client_key = "{pki["client_key"]}" }}

[[host]]
names = ["tls-upstream.test"]
kind = "proxy"
  [[host.route]]
  path = "/"
  upstream = "tls_origin"
  request_id = "off"

[[certificate]]
names = ["bench.test", "proxy.test"]
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
    proc = subprocess.Popen(["taskset", "-c", str(core), binary, "run", "--allow-root", "--profile", profile],
                            stdout=log, stderr=log)
    return proc, admin


def start_nginx(work, port, cert, key, core, upstream):
    upstream, tls_upstream, pki = upstream
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
    ssl_session_cache off;
    ssl_session_tickets on;
    ssl_protocols TLSv1.2 TLSv1.3;
    upstream origin {{
        server 127.0.0.1:{upstream};
        keepalive 64;
    }}
    upstream tls_origin {{
        server 127.0.0.1:{tls_upstream};
        keepalive 64;
    }}
    server {{
        listen 127.0.0.1:{port} ssl http2;
        listen 127.0.0.1:{port + 1};
        ssl_certificate {cert};
        ssl_certificate_key {key};
        location / {{
            default_type text/plain;
            return 200 "hello\\n";
        }}
        location /p {{
            proxy_pass http://origin;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
        }}
        location /t {{
            proxy_pass https://tls_origin;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_ssl_server_name on;
            proxy_ssl_name upstream.test;
            proxy_ssl_verify on;
            proxy_ssl_trusted_certificate {pki["ca"]};
            proxy_ssl_certificate {pki["client_cert"]};
            proxy_ssl_certificate_key {pki["client_key"]};
            proxy_ssl_session_reuse on;
        }}
    }}
}}
""")
    proc = subprocess.Popen(["taskset", "-c", str(core), "nginx", "-c", conf, "-p", work],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return proc


def wrk(port, conns, secs, core, close, proxy=False, plain=False, tls_upstream=False):
    cmd = ["taskset", "-c", str(core), "wrk", "-t1", f"-c{conns}", f"-d{secs}s"]
    if close:
        cmd += ["-H", "Connection: close"]
    if tls_upstream:
        cmd += ["-H", "Host: tls-upstream.test", f"http://127.0.0.1:{port + 1}/t"]
    else:
        if proxy:
            cmd += ["-H", "Host: proxy.test"]
        if plain:
            cmd.append(f"http://127.0.0.1:{port + 1}/p" if proxy else f"http://127.0.0.1:{port + 1}/")
        else:
            cmd.append(f"https://127.0.0.1:{port}/p" if proxy else f"https://127.0.0.1:{port}/")
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=secs + 30).stdout
    m = re.search(r"(\d+) requests in", out)
    errors = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    if errors:
        say(f"wrk saw {errors.group(1)} non-2xx answers")
    return int(m.group(1)) if m else 0


def s_time(port, secs, core):
    cmd = ["taskset", "-c", str(core), "openssl", "s_time", "-connect", f"127.0.0.1:{port}",
           "-new", "-time", str(secs), "-www", "/"]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=secs + 30).stdout
    m = re.search(r"(\d+) connections in [\d.]+s", out)
    return int(m.group(1)) if m else 0


def h2load(port, secs, core):
    cmd = ["taskset", "-c", str(core), "h2load", "-c64", "-m10", "-t1", "-D", str(secs),
           f"https://127.0.0.1:{port}/"]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=secs + 60).stdout
    m = re.search(r"requests: \d+ total, \d+ started, (\d+) done, (\d+) succeeded", out)
    if not m:
        say("h2load: " + out[-400:])
        return 0
    if m.group(1) != m.group(2):
        say(f"h2load: {m.group(1)} done, {m.group(2)} succeeded")
    return int(m.group(2))


def metric(admin, name):
    try:
        text = urllib.request.urlopen(f"http://127.0.0.1:{admin}/metrics", timeout=2).read().decode()
    except OSError:
        return None
    return sum(int(l.rsplit(" ", 1)[1]) for l in text.splitlines() if l.startswith(name + "{"))


def run_server(name, args, work, cert, key, upstream):
    port = free_port()
    if name == "gapura":
        proc, admin = start_gapura(args.gapura, work, port, cert, key, args.server_core, upstream)
    else:
        proc = start_nginx(work, port, cert, key, args.server_core, upstream)
        admin = None
    results = {}
    try:
        wait_port(port, proc)
        wrk(port, 64, 1, args.load_core, False)  # warm-up
        for sc in args.scenarios:
            before = cpu_ticks(proc.pid)
            if sc == "http-c64":
                n = wrk(port, 64, args.duration, args.load_core, False, plain=True)
            elif sc == "https-c64":
                n = wrk(port, 64, args.duration, args.load_core, False)
            elif sc == "handshake-new":
                n = s_time(port, args.duration, args.load_core)
            elif sc == "resumed-c16":
                n = wrk(port, 16, args.duration, args.load_core, True)
            elif sc == "h2-m10":
                n = h2load(port, args.duration, args.load_core)
            elif sc == "http-proxy-c64":
                n = wrk(port, 64, args.duration, args.load_core, False, proxy=True, plain=True)
            elif sc == "tls-upstream-c64":
                n = wrk(port, 64, args.duration, args.load_core, False, tls_upstream=True)
            else:
                n = wrk(port, 64, args.duration, args.load_core, False, proxy=True)
            if admin:
                results[sc + " resumed"] = metric(admin, "gapura_tls_resumed_total")
            used = cpu_ticks(proc.pid) - before
            us = used / TICKS * 1e6 / n if n else float("nan")
            results[sc] = (us, n)
        if admin:
            results["resumed_seen"] = metric(admin, "gapura_tls_resumed_total")
            results["handshakes_seen"] = metric(admin, "gapura_tls_handshakes_total")
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    return results


def main():
    p = argparse.ArgumentParser(prog="bench/tls.py")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--duration", type=int, default=5)
    p.add_argument("--gapura", default=os.path.join(ROOT, "target", "release", "gapura"))
    p.add_argument("--only", choices=SERVERS)
    p.add_argument("--scenarios", default=",".join(SCENARIOS),
                   help="a comma-separated subset of " + ", ".join(SCENARIOS))
    p.add_argument("--server-core", type=int, default=0)
    p.add_argument("--load-core", type=int, default=1)
    args = p.parse_args()
    args.scenarios = [sc for sc in args.scenarios.split(",") if sc]
    for sc in args.scenarios:
        if sc not in SCENARIOS:
            p.error(f"unknown scenario {sc!r}")
    servers = [args.only] if args.only else list(SERVERS)
    rows = {(s, sc): [] for s in servers for sc in args.scenarios}
    with tempfile.TemporaryDirectory(prefix="gapura-tls-bench-") as work:
        cert, key = make_cert(work)
        pki = make_pki(work)
        upstream_port, tls_upstream_port = free_port(), free_port()
        upstream = start_upstream(work, upstream_port, args.load_core)
        tls_upstream = start_tls_upstream(work, tls_upstream_port, args.load_core, pki)
        try:
            wait_port(upstream_port, upstream)
            wait_port(tls_upstream_port, tls_upstream)
            run_rounds(args, servers, rows, work, cert, key,
                       (upstream_port, tls_upstream_port, pki))
        finally:
            for p in (upstream, tls_upstream):
                p.send_signal(signal.SIGTERM)
                p.wait(timeout=15)
    print_table(args, servers, rows)


def run_rounds(args, servers, rows, work, cert, key, upstream_port):
    for r in range(args.rounds):
        for s in servers:
            say(f"round {r + 1}: {s}")
            res = run_server(s, args, work, cert, key, upstream_port)
            for sc in args.scenarios:
                rows[(s, sc)].append(res[sc])
            if s == "gapura":
                say(f"gapura counted {res['handshakes_seen']} handshakes; resumed, "
                    "cumulative after each scenario: "
                    + ", ".join(f"{sc} {res[sc + ' resumed']}" for sc in args.scenarios))


def print_table(args, servers, rows):
    print(f"# TLS: server CPU µs per unit, {args.rounds} rounds of {args.duration} s, "
          f"server on core {args.server_core}, load on core {args.load_core}\n")
    print("| scenario | server | rounds (CPU µs) | median | vs nginx (median) | units per round |")
    print("|---|---|---|---:|---:|---|")
    for sc in args.scenarios:
        base = statistics.median(u for u, _ in rows[("nginx", sc)]) if "nginx" in servers else None
        for s in servers:
            us = [u for u, _ in rows[(s, sc)]]
            med = statistics.median(us)
            vs = f"{med / base:.2f}×" if base else "—"
            print(f"| {sc} | {s} | {', '.join(f'{u:.2f}' for u in us)} | {med:.2f} | {vs} | "
                  f"{', '.join(str(n) for _, n in rows[(s, sc)])} |")


if __name__ == "__main__":
    main()

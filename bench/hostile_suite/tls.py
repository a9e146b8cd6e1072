"""TLS handshake attacks against a TLS listener, Gapura and nginx side by
side: connections that never send a byte, and ClientHellos trickled a
byte at a time."""
import http.client
import os
import socket
import ssl
import subprocess
import time

from .attack import Legit, Watch, mib, report
from .common import CouldNotRun, figure, free_port
from .gapura import server_block, start_gapura
from .nginx import ensure_nginx, http_conf, start_nginx

NAME = "a.test"


# ------------------------------------------------------------ certificate

def make_cert(ctx):
    """A self-signed P-256 certificate for a.test and 127.0.0.1, made once
    per run; (cert, key) paths, the key mode 0600."""
    d = os.path.join(ctx.work, "tls")
    cert, key = os.path.join(d, "cert.pem"), os.path.join(d, "key.pem")
    if os.path.exists(cert):
        return cert, key
    os.makedirs(d, exist_ok=True)
    r = subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
                        "ec_paramgen_curve:prime256v1", "-nodes", "-keyout", key, "-out", cert,
                        "-days", "2", "-subj", f"/CN={NAME}", "-addext",
                        f"subjectAltName=DNS:{NAME},IP:127.0.0.1"],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if r.returncode != 0:
        raise CouldNotRun(f"openssl req failed: {r.stdout[-200:]}")
    os.chmod(key, 0o600)
    return cert, key


# ---------------------------------------------------------------- servers

def gapura_tls_profile(port, tls_port, admin, cert, key, handshake_ms=None):
    tls = f"\n[tls]\nhandshake_timeout_ms = {handshake_ms}\n" if handshake_ms else ""
    return server_block(port, admin).replace(
        f'listen = ["127.0.0.1:{port}"]',
        f'listen = ["127.0.0.1:{port}", {{ addr = "127.0.0.1:{tls_port}", tls = true }}]') + \
        "max_connections_per_shard = 20000\n" + tls + f"""
[[certificate]]
names = ["{NAME}"]
cert = "{cert}"
key = "{key}"
default = true

[[host]]
names = ["{NAME}"]
default = true
kind = "respond"
status = 200
content_type = "text/plain"
body = "hello\\n"

[protection]
off = ["all"]
"""


def nginx_tls_conf(tls_port, cert, key, header_timeout_ms=None):
    timeout = f"        client_header_timeout {header_timeout_ms}ms;\n" if header_timeout_ms else ""

    def conf(prefix):
        return http_conf(prefix, f"""    server {{
        listen 127.0.0.1:{tls_port} ssl;
        server_name _;
        ssl_certificate {cert};
        ssl_certificate_key {key};
{timeout}        location / {{ return 200 "hello\\n"; }}
    }}""")
    return conf


def tls_sides(ctx, name, handshake_ms=None):
    """[(label, tls port, pids, server)]: Gapura, then nginx when installed."""
    cert, key = make_cert(ctx)
    port, tls_port, admin = free_port(), free_port(), free_port()
    srv = start_gapura(ctx, f"{name}-gapura",
                       gapura_tls_profile(port, tls_port, admin, cert, key, handshake_ms),
                       port, admin)
    sides = [("gapura", tls_port, lambda: [srv.pid], srv)]
    if ensure_nginx(ctx):
        nport = free_port()
        ng = start_nginx(ctx, name, nginx_tls_conf(nport, cert, key, handshake_ms),
                         wait_port=nport)
        sides.append(("nginx", nport, ng.pids, ng))
    return sides, cert


def https_ask(port, cafile):
    """The legitimate client: GET / over HTTPS, the certificate verified."""
    context = ssl.create_default_context(cafile=cafile)

    def ask():
        conn = http.client.HTTPSConnection("127.0.0.1", port, timeout=2, context=context)
        try:
            conn.request("GET", "/", headers={"Host": NAME})
            r = conn.getresponse()
            r.read()
            return r.status
        finally:
            conn.close()
    return ask


# -------------------------------------------------------------- tls-silent

def open_silent(port, n):
    socks = []
    for _ in range(n):
        socks.append(socket.create_connection(("127.0.0.1", port), timeout=5))
    return socks


def scenario_tls_silent(ctx):
    n, hold_s = 1000, 1.5
    sides, cert = tls_sides(ctx, "tls-silent")
    figure("setup", f"{n} TCP connections to the TLS listener that never send a byte; VmRSS "
           f"{hold_s} s after the last opened; a legitimate HTTPS client every 100 ms")
    res = {}
    for label, port, pids, srv in sides:
        watch = Watch(pids).start()
        legit = Legit(https_ask(port, cert)).start()
        socks = open_silent(port, n)
        time.sleep(hold_s)
        growth = watch.growth_now_kib()
        legit.stop()
        watch.stop()
        for s in socks:
            s.setblocking(False)
        closed = sum(1 for s in socks if _peer_closed(s))
        for s in socks:
            s.close()
        report(label, watch, legit, f"{mib(growth)} for {n} silent connections "
               f"({growth * 1024 / n:.0f} bytes each), {closed} already closed by the server")
        res[label] = (growth, watch, legit)
    growth, watch, legit = res["gapura"]
    ok = growth <= 4 * 1024 and legit.all_ok and sides[0][3].proc.poll() is None
    why = (f"{mib(growth)} for {n} silent connections (<= 4 MiB), CPU {watch.cpu_s:.2f} s, "
           f"legit {legit.ok}/{legit.sent}")
    if "nginx" in res:
        why += f"; nginx {mib(res['nginx'][0])}, CPU {res['nginx'][1].cpu_s:.2f} s"
    return ok, why


# ---------------------------------------------------------------- tls-slow

def client_hello():
    """A real ClientHello, as Python's ssl module would send it."""
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    obj = ssl.create_default_context().wrap_bio(incoming, outgoing, server_hostname=NAME)
    try:
        obj.do_handshake()
    except ssl.SSLWantReadError:
        pass
    return outgoing.read()


def trickle(port, n, hello, step_s=0.2, most_s=20.0):
    """`n` connections each sent `hello` one byte per `step_s`; the time
    (from its opening) each was closed by the server, None if never."""
    socks = [socket.create_connection(("127.0.0.1", port), timeout=5) for _ in range(n)]
    opened = [time.monotonic()] * n
    for i, s in enumerate(socks):
        s.setblocking(False)
        opened[i] = time.monotonic()
    closed = [None] * n
    sent = [0] * n
    t0 = time.monotonic()
    while time.monotonic() - t0 < most_s and any(c is None for c in closed):
        for i, s in enumerate(socks):
            if closed[i] is not None:
                continue
            if _peer_closed(s) or not _send_byte(s, hello, sent, i):
                closed[i] = time.monotonic() - opened[i]
        time.sleep(step_s)
    for s in socks:
        s.close()
    return closed, sent


def _peer_closed(s):
    try:
        return s.recv(4096) == b""
    except BlockingIOError:
        return False
    except OSError:
        return True


def _send_byte(s, hello, sent, i):
    if sent[i] >= len(hello):
        return True
    try:
        sent[i] += s.send(hello[sent[i]:sent[i] + 1])
        return True
    except BlockingIOError:
        return True
    except OSError:
        return False


def scenario_tls_slow(ctx):
    n, timeout_ms = 200, 2000
    hello = client_hello()
    sides, cert = tls_sides(ctx, "tls-slow", handshake_ms=timeout_ms)
    figure("setup", f"{n} connections each trickling a {len(hello)}-byte ClientHello one byte per "
           f"200 ms; Gapura [tls] handshake_timeout_ms = {timeout_ms}, nginx client_header_timeout "
           f"{timeout_ms // 1000}s (its handshake timer in 1.22); a legitimate HTTPS client every 100 ms")
    res = {}
    for label, port, pids, srv in sides:
        watch = Watch(pids).start()
        legit = Legit(https_ask(port, cert)).start()
        closed, sent = trickle(port, n, hello)
        legit.stop()
        watch.stop()
        done = [c for c in closed if c is not None]
        late = sum(1 for c in closed if c is None or c > timeout_ms / 1000 + 2)
        report(label, watch, legit, f"{len(done)}/{n} closed by the server, slowest "
               f"{max(done) if done else float('nan'):.2f} s, {late} past {timeout_ms / 1000 + 2:.0f} s; "
               f"{max(sent)} bytes of the hello sent at most")
        res[label] = (closed, late, watch, legit)
    closed, late, watch, legit = res["gapura"]
    done = [c for c in closed if c is not None]
    ok = late == 0 and watch.peak_growth_kib <= 8 * 1024 and legit.all_ok and \
        sides[0][3].proc.poll() is None
    why = (f"{len(done)}/{n} closed, slowest {max(done) if done else float('nan'):.2f} s "
           f"(<= {timeout_ms / 1000 + 2:.0f} s), RSS peak {mib(watch.peak_growth_kib)} (<= 8 MiB), "
           f"CPU {watch.cpu_s:.2f} s, legit {legit.ok}/{legit.sent}")
    if "nginx" in res:
        nclosed, nlate, nw, nl = res["nginx"]
        nd = [c for c in nclosed if c is not None]
        why += (f"; nginx {len(nd)}/{n} closed, slowest {max(nd) if nd else float('nan'):.2f} s, "
                f"RSS {mib(nw.peak_growth_kib)}, legit {nl.ok}/{nl.sent}")
    return ok, why

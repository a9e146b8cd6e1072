"""Attacks on automatic certificates, Gapura and Caddy (Debian's package;
GOMAXPROCS=1 on the server core) side by side, both ordering from the same
local ACME server (pebble) with on-demand certificates allowed by the same
`ask` endpoint, which allows one name only:

  acme-sni-flood   TLS handshakes naming 2,000 distinct names no
                   certificate claims (what a scanner, or someone aiming
                   at the CA's rate limits through the server, sends):
                   asks reaching the `ask` endpoint, orders reaching the
                   ACME server, the server's memory and CPU, and a
                   legitimate HTTPS client beside it (a verified handshake
                   and a GET every 100 ms)
  acme-token-probe 20,000 GETs of /.well-known/acme-challenge/RANDOM
                   (tokens never in flight) over plain HTTP: what answers
                   them, and what the server spends

Every process started here is stopped by its pid; all traffic goes to
127.0.0.1."""
import http.server
import os
import random
import socket
import ssl
import subprocess
import tempfile
import threading
import time

from .attack import Legit, Watch, mib, report
from .common import SERVER_CORE, CouldNotRun, figure, free_port, pinned, port_accepts
from .gapura import server_block, start_gapura
from .h3 import ensure_caddy
from .pebble import Pebble, acme_tables, caddyfile, pebble_files

ALLOWED = "ok.test"


class Ask(http.server.ThreadingHTTPServer):
    """The `ask` endpoint: 200 for ALLOWED, 403 otherwise; counts asks."""

    def __init__(self):
        self.asks = 0

        class H(http.server.BaseHTTPRequestHandler):
            def do_GET(h):  # noqa: N802
                self.asks += 1
                ok = h.path.endswith("domain=" + ALLOWED)
                h.send_response(200 if ok else 403)
                h.send_header("Content-Length", "0")
                h.end_headers()

            def log_message(h, *a):
                pass

        super().__init__(("127.0.0.1", 0), H)
        threading.Thread(target=self.serve_forever, daemon=True).start()

    @property
    def port(self):
        return self.server_address[1]


def gapura_profile(http, tls, admin, acme_port, ca, state, ask_port):
    return server_block(http, admin).replace(
        f'listen = ["127.0.0.1:{http}"]',
        f'listen = ["127.0.0.1:{http}", {{ addr = "127.0.0.1:{tls}", tls = true }}]') + acme_tables(
        acme_port, ca, state,
        f'on_demand = {{ ask = "http://127.0.0.1:{ask_port}/check", rate = "10/minute" }}\n') + """
[protection]
off = ["all"]
"""


def start_caddy(ctx, d, http, tls, acme_port, ca, ask_port):
    conf = caddyfile(d, acme_port, ca, http, tls, ask_port)
    log = open(os.path.join(d, "caddy.log"), "ab")
    env = dict(os.environ, GOMAXPROCS="1", XDG_DATA_HOME=d, XDG_CONFIG_HOME=d, HOME=d)
    proc = ctx.procs.start(pinned(SERVER_CORE, ["caddy", "run", "--config", conf,
                                                "--adapter", "caddyfile"]),
                           stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env)
    log.close()
    deadline = time.monotonic() + 15
    while not port_accepts(tls):
        if proc.poll() is not None or time.monotonic() > deadline:
            raise CouldNotRun("caddy did not start")
        time.sleep(0.05)
    return proc


def verified_get(tls, root_file):
    ctx = ssl.create_default_context(cafile=root_file)
    with socket.create_connection(("127.0.0.1", tls), timeout=2) as s:
        with ctx.wrap_socket(s, server_hostname="a.test") as t:
            t.sendall(b"GET / HTTP/1.1\r\nHost: a.test\r\nConnection: close\r\n\r\n")
            head = t.recv(64)
    return int(head.split(b" ")[1]) if head.startswith(b"HTTP/1.1 ") else head


def handshake_named(tls, name):
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    try:
        with socket.create_connection(("127.0.0.1", tls), timeout=2) as s:
            with ctx.wrap_socket(s, server_hostname=name):
                return True
    except (OSError, ssl.SSLError):
        return False


def sides(ctx):
    """Both servers, each with its pebble, ask endpoint and a.test issued."""
    if not ensure_caddy(ctx):
        raise CouldNotRun("caddy is missing (apt-get install caddy)")
    files = pebble_files(ctx.work)
    out = []
    for name in ("gapura", "caddy"):
        d = tempfile.mkdtemp(prefix=f"acme-{name}-", dir=ctx.work)
        http, tls, admin, acme_port, mgmt = (free_port() for _ in range(5))
        ask = Ask()
        pebble = Pebble(d, files, acme_port, mgmt, http, tls)
        ctx.procs.live.extend([pebble.proc, pebble.dns])
        if name == "gapura":
            profile = gapura_profile(http, tls, admin, acme_port, files[0],
                                     os.path.join(d, "state"), ask.port)
            srv = start_gapura(ctx, os.path.basename(d), profile, http, admin)
            pid = srv.proc.pid
        else:
            pid = start_caddy(ctx, d, http, tls, acme_port, files[0], ask.port).pid
        root_file = os.path.join(d, "root.pem")
        with open(root_file, "w") as f:
            f.write(pebble.root(files[0]))
        deadline = time.monotonic() + 60
        while True:
            try:
                if verified_get(tls, root_file) == 200:
                    break
            except (OSError, ssl.SSLError):
                pass
            if time.monotonic() > deadline:
                raise CouldNotRun(f"{name} got no certificate for a.test")
            time.sleep(0.1)
        out.append((name, pid, http, tls, ask, pebble, root_file))
    return out


def scenario_acme_sni_flood(ctx):
    n = ctx.d(2000, 300)
    figure("setup", f"{n} TLS handshakes naming distinct names no certificate claims, 8 at a "
           f"time; on-demand certificates on, `ask` allows {ALLOWED} only, rate 10/minute; a "
           f"legitimate client verifies a.test's certificate and GETs every 100 ms")
    res = {}
    for name, pid, _http, tls, ask, pebble, root_file in sides(ctx):
        asks0, orders0, t0 = ask.asks, pebble.requests("/order-plz"), time.time()
        legit = Legit(lambda: verified_get(tls, root_file)).start()
        watch = Watch(lambda: [pid]).start()
        done = [0]
        lock = threading.Lock()
        names = iter([f"h{random.getrandbits(48):x}.flood.test" for _ in range(n)])

        def worker():
            while True:
                with lock:
                    sni = next(names, None)
                if sni is None:
                    return
                if handshake_named(tls, sni):
                    with lock:
                        done[0] += 1

        threads = [threading.Thread(target=worker) for _ in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        time.sleep(1.0)
        watch.stop()
        legit.stop()
        asks, orders = ask.asks - asks0, pebble.requests("/order-plz") - orders0
        # The asks are held per minute of the clock: the minutes the attack
        # touched.
        minutes = int(time.time() // 60) - int(t0 // 60) + 1
        report(name, watch, legit,
               f"{n} handshakes with unclaimed names ({done[0]} completed): {asks} asks reached "
               f"the ask endpoint, {orders} orders the ACME server")
        res[name] = (watch, legit, asks, orders, minutes)
    watch, legit, asks, orders, minutes = res["gapura"]
    ok = orders == 0 and asks <= 40 * minutes and watch.peak_growth_kib <= 16 * 1024 and \
        legit.sent > 0 and legit.ok >= 0.99 * legit.sent
    why = (f"gapura: {asks} asks (<= 40 a minute, four times the rate; {minutes} minutes "
           f"touched), {orders} orders (0), RSS peak "
           f"{mib(watch.peak_growth_kib)} (<= 16 MiB), CPU {watch.cpu_s:.2f} s, legit "
           f"{legit.ok}/{legit.sent}")
    if "caddy" in res:
        cw, cl, ca, co, _ = res["caddy"]
        why += (f"; caddy: {ca} asks, {co} orders, RSS peak {mib(cw.peak_growth_kib)}, CPU "
                f"{cw.cpu_s:.2f} s, legit {cl.ok}/{cl.sent}")
    return ok, why


def probe(http, n):
    """`n` GETs of random challenge tokens over keep-alive: statuses."""
    statuses = {}
    s = socket.create_connection(("127.0.0.1", http), timeout=5)
    f = s.makefile("rb")
    for _ in range(n):
        token = f"{random.getrandbits(128):032x}"
        s.sendall(f"GET /.well-known/acme-challenge/{token} HTTP/1.1\r\nHost: a.test\r\n\r\n"
                  .encode())
        line = f.readline()
        status = int(line.split()[1]) if line.startswith(b"HTTP/1.1 ") else 0
        length, close = 0, False
        while True:
            h = f.readline()
            if h in (b"\r\n", b""):
                break
            if h.lower().startswith(b"content-length:"):
                length = int(h.split(b":")[1])
            if h.lower().startswith(b"connection:") and b"close" in h.lower():
                close = True
        f.read(length)
        statuses[status] = statuses.get(status, 0) + 1
        if status == 0 or close:
            s.close()
            s = socket.create_connection(("127.0.0.1", http), timeout=5)
            f = s.makefile("rb")
    s.close()
    return statuses


def scenario_acme_token_probe(ctx):
    n = ctx.d(20000, 2000)
    figure("setup", f"{n} GETs of /.well-known/acme-challenge/RANDOM (never in flight) over "
           f"plain HTTP keep-alive, to a host that answers 200 hello")
    res = {}
    for name, pid, http, _tls, _ask, _pebble, _root in sides(ctx):
        watch = Watch(lambda: [pid]).start()
        statuses = probe(http, n)
        watch.stop()
        report(name, watch, None, f"{n} probes: statuses {statuses}")
        res[name] = (watch, statuses)
    watch, statuses = res["gapura"]
    ok = statuses == {200: n} and watch.peak_growth_kib <= 8 * 1024
    why = (f"gapura: every probe went through the chain to the host's answer {statuses}, RSS "
           f"peak {mib(watch.peak_growth_kib)}, CPU {watch.cpu_s:.2f} s")
    if "caddy" in res:
        cw, cs = res["caddy"]
        why += f"; caddy: {cs}, RSS peak {mib(cw.peak_growth_kib)}, CPU {cw.cpu_s:.2f} s"
    return ok, why

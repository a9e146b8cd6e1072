"""The upstream queue under a many-stream client: one address opens
hundreds of HTTP/2 streams at a slow HTTP/1.1 origin while another address
asks for a page through the same upstream server. What reaches the origin
at once, what the server holds, and whether the other client is served,
for Gapura with the pool's bound alone, Gapura with a per-source
concurrency lease as well, and nginx (a keep-alive pool, no bound)."""
import http.server
import socket
import threading
import time

from .attack import Legit, Watch, mib, report
from .common import figure, free_port
from .gapura import server_block, start_gapura
from .h2 import HEADERS, END_HEADERS, END_STREAM, Conn, request_block
from .h2 import frame
from .nginx import ensure_nginx, h2_listen, http_conf, start_nginx

SLOW_S = 0.5
BOUND = 32
QUEUE_TIMEOUT_MS = 2000
SOURCE_CONCURRENT = 16
ATTACK_CONNS, STREAMS_PER_WAVE = 8, 100
ATTACK_S = 6.0
LEGIT_SOURCE = "127.0.1.1"  # another /24 than the attacker's 127.0.0.1


class SlowHandler(http.server.BaseHTTPRequestHandler):
    """`/slow` answers after SLOW_S, anything else at once; requests in
    progress and their peak are counted."""
    protocol_version = "HTTP/1.1"
    timeout = 30

    def log_message(self, *args):
        pass

    def do_GET(self):
        srv = self.server
        slow = self.path.startswith("/slow")
        with srv.lock:
            srv.requests += 1
            srv.now += 1
            srv.peak = max(srv.peak, srv.now)
        try:
            if slow:
                time.sleep(SLOW_S)
            self.send_response(200)
            self.send_header("Content-Type", "text/plain")
            self.send_header("Content-Length", "3")
            self.end_headers()
            self.wfile.write(b"ok\n")
        except OSError:
            self.close_connection = True
        finally:
            with srv.lock:
                srv.now -= 1


class SlowOrigin(http.server.ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 4096

    def __init__(self, port):
        super().__init__(("127.0.0.1", port), SlowHandler)
        self.lock = threading.Lock()
        self.requests = self.now = self.peak = 0
        self.port = port
        threading.Thread(target=self.serve_forever, kwargs={"poll_interval": 0.1},
                         daemon=True).start()

    def handle_error(self, request, client_address):
        pass

    def reset(self):
        with self.lock:
            self.requests = self.peak = 0

    def close(self):
        self.shutdown()
        self.server_close()


def gapura_profile(port, admin, origin_port, lease):
    quota = (f"\n[quota.source]\nrequests = 1000000\nconcurrent = {SOURCE_CONCURRENT}\n"
             if lease else "")
    hosts = "\n".join(f"""
[[host]]
names = ["{name}"]
{"default = true" if name == "a.test" else ""}
kind = "proxy"
  [[host.route]]
  path = "/"
  upstream = "origin"
""" for name in ("a.test", "legit.test"))
    return server_block(port, admin) + f"""
[[upstream]]
name = "origin"
servers = ["127.0.0.1:{origin_port}"]
max_connections_per_server = {BOUND}
queue_timeout_ms = {QUEUE_TIMEOUT_MS}
{hosts}{quota}
[protection]
off = ["all"]
"""


def legit_ask(port, timeout=3.0):
    """GET /legit for legit.test from LEGIT_SOURCE: the status, or raises."""
    def ask():
        s = socket.socket()
        s.settimeout(timeout)
        try:
            s.bind((LEGIT_SOURCE, 0))
            s.connect(("127.0.0.1", port))
            s.sendall(b"GET /legit HTTP/1.1\r\nHost: legit.test\r\nConnection: close\r\n\r\n")
            head = s.recv(64)
            return int(head.split(b" ", 2)[1])
        finally:
            s.close()
    return ask


def attack(port, seconds):
    """ATTACK_CONNS h2c connections, each opening STREAMS_PER_WAVE GET /slow
    streams every SLOW_S for `seconds`; the connections, for their counts."""
    conns = [Conn(port) for _ in range(ATTACK_CONNS)]
    ids = [1] * len(conns)
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        for i, c in enumerate(conns):
            batch = bytearray()
            for _ in range(STREAMS_PER_WAVE):
                block = request_block(path=b"/slow")
                batch += frame(HEADERS, END_STREAM | END_HEADERS, ids[i], block)
                ids[i] += 2
            c.send(bytes(batch))
        time.sleep(SLOW_S)
    return conns


def gauge(srv, name):
    try:
        return sum(v for n, labels, v in srv.metrics() if n == name)
    except OSError:
        return None


def run_side(label, port, legit_port, pids, origin, srv=None):
    origin.reset()
    watch = Watch(pids).start()
    legit = Legit(legit_ask(legit_port), period_s=0.2).start()
    conns = attack(port, ATTACK_S)
    time.sleep(1.5)  # the last wave's answers
    legit.stop()
    watch.stop()
    statuses = {}
    for c in conns:
        for s, n in c.seen.statuses.items():
            # A status sent by reference to HPACK's dynamic table (a repeated
            # 503 or 429) is not decoded here.
            s = s if s is not None else "by dynamic-table index"
            statuses[s] = statuses.get(s, 0) + n
        c.close()
    extra = (f"origin: {origin.requests} requests, peak {origin.peak} at once; attacker's "
             f"answers {dict(sorted(statuses.items(), key=str))}")
    queue = None
    if srv is not None:
        time.sleep(1.1)  # the shard's counters reach /metrics once a second
        queue = (gauge(srv, "gapura_upstream_queued_total"),
                 gauge(srv, "gapura_upstream_queue_timeouts_total"),
                 gauge(srv, "gapura_upstream_connections_opened_total"))
        extra += (f"; queue: {queue[0]:.0f} waited, {queue[1]:.0f} past the timeout; "
                  f"{queue[2]:.0f} upstream connections opened")
    report(label, watch, legit, extra)
    return watch, legit, origin.peak, queue


def scenario_h2_upstream_queue(ctx):
    origin = SlowOrigin(free_port())
    res = {}
    try:
        figure("setup", f"a proxy host to an origin answering /slow in {SLOW_S * 1000:.0f} ms; "
               f"{ATTACK_CONNS} h2c connections from 127.0.0.1 open {STREAMS_PER_WAVE} GET /slow "
               f"streams each every {SLOW_S} s for {ATTACK_S:.0f} s; a client at {LEGIT_SOURCE} "
               f"asks legit.test (same upstream server) every 200 ms; Gapura: "
               f"max_connections_per_server = {BOUND}, queue_timeout_ms = {QUEUE_TIMEOUT_MS}")
        for label, lease in (("gapura (pool bound only)", False),
                             (f"gapura (+ [quota.source] concurrent = {SOURCE_CONCURRENT})", True)):
            port, admin = free_port(), free_port()
            name = "queue-lease" if lease else "queue"
            srv = start_gapura(ctx, name, gapura_profile(port, admin, origin.port, lease),
                               port, admin)
            try:
                res[label] = run_side(label, port, port, lambda: [srv.pid], origin, srv)
                res[label] += (srv.proc.poll() is None,)
            finally:
                ctx.procs.stop(srv.proc)
        binary = ensure_nginx(ctx)
        if binary is not None:
            nport, lport = free_port(), free_port()

            def conf(prefix):
                return http_conf(prefix, f"""    upstream origin {{
        server 127.0.0.1:{origin.port};
        keepalive 1024;
    }}
    server {{
        {h2_listen(binary, nport)}
        listen 127.0.0.1:{lport};
        location / {{
            proxy_pass http://origin;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
        }}
    }}""")
            ng = start_nginx(ctx, "queue", conf, wait_port=nport)
            try:
                res["nginx"] = run_side("nginx", nport, lport, ng.pids, origin)
            finally:
                ctx.procs.stop(ng.proc)
    finally:
        origin.close()
    bound_only = res["gapura (pool bound only)"]
    leased = res[f"gapura (+ [quota.source] concurrent = {SOURCE_CONCURRENT})"]
    ok = (bound_only[2] <= BOUND and leased[2] <= BOUND and leased[1].all_ok
          and bound_only[0].peak_growth_kib <= 32 * 1024 and bound_only[4] and leased[4])
    why = (f"origin peak {bound_only[2]} and {leased[2]} at once (<= {BOUND}); with the lease the "
           f"other client {leased[1].ok}/{leased[1].sent}, without it {bound_only[1].ok}/"
           f"{bound_only[1].sent} (its requests wait in the same queue); RSS peak "
           f"{mib(bound_only[0].peak_growth_kib)} (<= 32 MiB)")
    if "nginx" in res:
        nw, nl, npeak, _ = res["nginx"]
        why += (f"; nginx: origin peak {npeak} at once, other client {nl.ok}/{nl.sent}, RSS "
                f"{mib(nw.peak_growth_kib)}")
    return ok, why

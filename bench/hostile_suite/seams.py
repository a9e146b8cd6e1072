"""Attacks at the seams between parts (issue "trust at the seams"):

  xff-spoof        a client sends forwarding headers of its own
                   (X-Forwarded-For, X-Real-IP, Forwarded, CF-Connecting-IP
                   naming 203.0.113.66) through a proxy host to an origin
                   that records what it receives; nginx beside it with the
                   usual recipe (proxy_set_header X-Forwarded-For
                   $proxy_add_x_forwarded_for; X-Real-IP $remote_addr):
                   how many requests reach the origin with the spoofed
                   address where an upstream reads the client
  udp-replay-cross-shard
                   a relay with auth on two shards: a valid envelope from
                   127.0.0.10 (one shard), then the same bytes from
                   127.0.0.11 (the other shard, by source steering): what
                   reaches the upstream and what returns to the spoofed
                   source

Every process started here is stopped by its pid; all traffic goes to
127.0.0.1."""
import http.server
import socket
import threading
import time

from .attack import Watch, mib, report
from .common import figure, free_port
from .gapura import server_block, start_gapura
from .h2 import proxy_hosts
from .nginx import ensure_nginx, http_conf, start_nginx
from .udp import Amplifier, dropped, envelope, key_file, one_exchange

SPOOFED = "203.0.113.66"
FORWARDING = [
    ("X-Forwarded-For", SPOOFED),
    ("X-Real-IP", SPOOFED),
    ("Forwarded", f"for={SPOOFED}"),
    ("CF-Connecting-IP", SPOOFED),
]


class Recorder(http.server.ThreadingHTTPServer):
    """An origin that answers 200 and keeps each request's forwarding
    headers."""
    daemon_threads = True

    def __init__(self):
        self.seen = []
        self.lock = threading.Lock()

        class H(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_GET(h):  # noqa: N802
                got = {k.lower(): h.headers.get_all(k) for k, _ in FORWARDING}
                with self.lock:
                    self.seen.append(got)
                h.send_response(200)
                h.send_header("Content-Length", "2")
                h.end_headers()
                h.wfile.write(b"ok")

            def log_message(h, *a):
                pass

        super().__init__(("127.0.0.1", 0), H)
        threading.Thread(target=self.serve_forever, daemon=True).start()

    @property
    def port(self):
        return self.server_address[1]


def spoofed_reads(got):
    """Which of an upstream's usual readings name the spoofed address: the
    first X-Forwarded-For element, X-Real-IP, Forwarded's first `for=`,
    CF-Connecting-IP."""
    out = []
    xff = ",".join(got.get("x-forwarded-for") or [])
    if xff.split(",")[0].strip() == SPOOFED:
        out.append("X-Forwarded-For[0]")
    if SPOOFED in (got.get("x-real-ip") or []):
        out.append("X-Real-IP")
    fwd = ",".join(got.get("forwarded") or [])
    if fwd.split(",")[0].strip().lower().startswith(f"for={SPOOFED}"):
        out.append("Forwarded")
    if SPOOFED in (got.get("cf-connecting-ip") or []):
        out.append("CF-Connecting-IP")
    return out


def get_spoofed(port):
    extra = "".join(f"{k}: {v}\r\n" for k, v in FORWARDING)
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        s.sendall(f"GET /x HTTP/1.1\r\nHost: a.test\r\n{extra}Connection: close\r\n\r\n".encode())
        data = b""
        while True:
            chunk = s.recv(4096)
            if not chunk:
                break
            data += chunk
    return int(data.split(b" ")[1]) if data.startswith(b"HTTP/1.1 ") else 0


def scenario_xff_spoof(ctx):
    n = ctx.d(200, 20)
    figure("setup", f"{n} GETs each carrying {', '.join(k for k, _ in FORWARDING)} that name "
           f"{SPOOFED}, through a proxy host to a recording origin; Gapura's default client "
           "mode (direct); nginx with proxy_set_header X-Forwarded-For "
           "$proxy_add_x_forwarded_for and X-Real-IP $remote_addr")
    res = {}
    for label in ("gapura", "nginx"):
        origin = Recorder()
        port = free_port()
        try:
            if label == "gapura":
                admin = free_port()
                profile = server_block(port, admin) + proxy_hosts(origin.port) + \
                    '\n[protection]\noff = ["all"]\n'
                srv = start_gapura(ctx, "xff-spoof", profile, port, admin)
                pids = lambda: [srv.pid]  # noqa: E731
            else:
                if not ensure_nginx(ctx):
                    continue
                server = f"""    server {{
        listen 127.0.0.1:{port};
        location / {{
            proxy_pass http://127.0.0.1:{origin.port};
            proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for;
            proxy_set_header X-Real-IP $remote_addr;
        }}
    }}"""
                ng = start_nginx(ctx, "xff-spoof", lambda prefix: http_conf(prefix, server),
                                 wait_port=port)
                pids = ng.pids
            watch = Watch(pids).start()
            statuses = [get_spoofed(port) for _ in range(n)]
            watch.stop()
            reads = {}
            for got in origin.seen:
                for r in spoofed_reads(got):
                    reads[r] = reads.get(r, 0) + 1
            report(label, watch, None,
                   f"{statuses.count(200)}/{n} answered 200; the origin saw {len(origin.seen)} "
                   f"requests, the spoofed address where an upstream reads the client: "
                   f"{reads or 'nowhere'}")
            res[label] = (len(origin.seen), reads)
        finally:
            origin.shutdown()
            origin.server_close()
    seen, reads = res["gapura"]
    ok = seen == n and not reads
    why = f"gapura: {seen} reached the origin, spoofed reads {reads or 'none'}"
    if "nginx" in res:
        why += f"; nginx: spoofed reads {res['nginx'][1] or 'none'}"
    return ok, why


def scenario_udp_replay_cross_shard(ctx):
    up = Amplifier(free_port())
    try:
        path, key = key_file(ctx, "udp-replay-cross-shard")
        port, admin = free_port(), free_port()
        profile = f"""[server]
shards = 2
listen = []
admin = "127.0.0.1:{admin}"

[[udp]]
name = "attack"
listen = ["127.0.0.1:{port}"]
servers = ["127.0.0.1:{up.port}"]
auth = {{ keys = ["{path}"] }}

[protection]
off = ["all"]
"""
        srv = start_gapura(ctx, "udp-replay-cross-shard", profile, admin, admin)
        figure("setup", "a relay with auth on two shards (source steering: 127.0.0.10 and "
               "127.0.0.11 land on different shards); a valid envelope from .10, then the same "
               "bytes from .11; the upstream answers every datagram 10 times; nginx has no "
               "authenticated envelope: not run")
        watch = Watch(lambda: [srv.pid]).start()
        before = dropped(srv, "replayed")
        data = envelope(key, 1, b"replay me")
        first = one_exchange("127.0.0.10", port, data)
        reached_first = up.received
        replay = one_exchange("127.0.0.11", port, data, wait_s=1.5)
        deadline = time.monotonic() + 3
        after = dropped(srv, "replayed")
        while after == before and time.monotonic() < deadline:
            time.sleep(0.2)
            after = dropped(srv, "replayed")
        watch.stop()
        report("gapura", watch, None,
               f"first envelope: {first} replies at .10; the upstream received {up.received} "
               f"datagram(s) ({reached_first} before the replay); replay from .11 (other "
               f"shard): {replay} replies; replayed drops {before} -> {after}")
    finally:
        up.close()
    ok = first > 0 and replay == 0 and up.received == 1 and after - before == 1
    why = (f"first relayed ({first} replies), the replay on the other shard reached the upstream "
           f"{up.received - 1} times and got {replay} replies, replayed drops +{after - before}; "
           f"RSS {mib(watch.peak_growth_kib)}")
    return ok, why

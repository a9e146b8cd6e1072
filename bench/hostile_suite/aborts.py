"""aborts: clients abort a proxied request at every stage, against a
threaded Python upstream in this program; the gauges must return."""
import concurrent.futures
import http.client
import http.server
import select
import socket
import threading
import time

from .common import CouldNotRun, figure, free_port, http_get, mget, tcp_sockets_to, wait_until
from .gapura import server_block, start_gapura


class UpstreamHandler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    timeout = 120
    slow_s = 3.0
    big = 4 << 20

    def log_message(self, *args):
        pass

    def setup(self):
        super().setup()
        with self.server.lock:
            self.server.active += 1

    def finish(self):
        try:
            super().finish()
        finally:
            with self.server.lock:
                self.server.active -= 1

    def answer(self, body, ctype="text/plain"):
        self.send_response(200)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        try:
            if self.path.startswith("/slow"):
                time.sleep(self.slow_s)
                self.answer(b"slow\n")
            elif self.path.startswith("/big"):
                self.send_response(200)
                self.send_header("Content-Type", "application/octet-stream")
                self.send_header("Content-Length", str(self.big))
                self.end_headers()
                block = b"b" * 65536
                for _ in range(self.big // len(block)):
                    self.wfile.write(block)
            else:
                self.answer(b"ok\n")
        except OSError:
            self.close_connection = True

    def do_POST(self):
        try:
            n = int(self.headers.get("Content-Length", "0"))
            got = 0
            while got < n:
                chunk = self.rfile.read(min(65536, n - got))
                if not chunk:
                    self.close_connection = True
                    return
                got += len(chunk)
            self.answer(b"posted\n")
        except OSError:
            self.close_connection = True


class QuietServer(http.server.ThreadingHTTPServer):
    """The upstream: a connection the proxy closes part-way (the client
    aborted) is expected here, not a traceback to print."""

    def handle_error(self, request, client_address):
        pass


# The gauges that must return to their values before the test.
_CHECKED = ("connections_open", "leases_active", "lease_keys", "upstream_in_use",
            "upstream_close_wait", "upstream_handlers")


def scenario_aborts(ctx):
    reps, workers = 50, 10
    up_port, port, admin = free_port(), free_port(), free_port()
    httpd = _start_upstream(up_port)
    profile = _aborts_profile(port, admin, up_port)
    figure("profile", f"proxy host -> a threaded Python upstream on 127.0.0.1:{up_port} in this "
           f"program (/slow answers after {UpstreamHandler.slow_s:.0f} s, /big is "
           f"{UpstreamHandler.big >> 20} MiB); [quota.source] concurrent = 64 (a concurrency lease "
           "per client prefix); [protection] off = global, connections, client_rate")
    try:
        srv = start_gapura(ctx, "aborts", profile, port, admin)
        if http_get(port, "/ok", host="p.test")[0] != 200:
            raise CouldNotRun("the proxy does not answer 200 through the upstream")

        def gauges():
            return _gauges(srv, httpd, up_port)

        # Before: the warm request's connection is gone and the pool gauge
        # (published once a second) agrees with the sockets.
        wait_until(lambda: (lambda g: g["connections_open"] == 0 and g["upstream_in_use"] == 0)(
            gauges()), 5, step=0.2)
        pre = gauges()
        figure("gauges before", pre)
        _abort_every_stage(port, reps, workers)
        during = gauges()
        figure("gauges right after the aborts", during)
        whole = _whole_requests(port)
        returned, post = _wait_gauges_back(gauges, pre)
        _proxy_counters(srv)
        alive = srv.proc.poll() is None
        ctx.procs.stop(srv.proc)
    finally:
        httpd.shutdown()
        httpd.server_close()
    return _aborts_verdict(alive, returned, whole, pre, post, reps)


def _start_upstream(up_port):
    """The threaded upstream, serving from a thread of its own."""
    httpd = QuietServer(("127.0.0.1", up_port), UpstreamHandler)
    httpd.daemon_threads = True
    httpd.lock = threading.Lock()
    httpd.active = 0
    up_thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.1},
                                 daemon=True)
    up_thread.start()
    return httpd


def _aborts_profile(port, admin, up_port):
    return server_block(port, admin, "max_connections_per_shard = 20000\n") + f"""
[[upstream]]
name = "origin"
servers = ["127.0.0.1:{up_port}"]
max_idle_per_server = 64

[[host]]
names = ["p.test"]
default = true
kind = "proxy"
  [[host.route]]
  path = "/"
  upstream = "origin"

[quota.source]
concurrent = 64

[protection]
off = ["global", "connections", "client_rate"]
"""


def _gauges(srv, httpd, up_port):
    m = srv.metrics()
    sock = tcp_sockets_to(up_port)
    idle = mget(m, "gapura_upstream_idle_connections")
    return {
        "connections_open": mget(m, "gapura_connections_open"),
        "leases_active": mget(m, "gapura_leases_active"),
        "lease_keys": mget(m, "gapura_lease_keys"),
        "upstream_in_use": sock["established"] + sock["close_wait"] - (idle or 0),
        "upstream_close_wait": sock["close_wait"],
        "upstream_idle": idle,
        "upstream_handlers": httpd.active,
    }


def _raw(port, req):
    s = socket.create_connection(("127.0.0.1", port), timeout=5)
    s.sendall(req)
    return s


def _mid_head(port):
    s = _raw(port, b"GET /ok HTTP/1.1\r\nHost: p.test\r\nX-Partial: abc")
    s.close()
    return None


def _mid_body(port):
    s = _raw(port, b"POST /upload HTTP/1.1\r\nHost: p.test\r\nContent-Length: 1048576\r\n\r\n"
             + b"x" * 4096)
    r, _, _ = select.select([s], [], [], 0.05)
    early = s.recv(64) if r else b""
    s.close()
    return f"an answer before the body: {early[:20]!r}" if early else None


def _waiting(port):
    s = _raw(port, b"GET /slow HTTP/1.1\r\nHost: p.test\r\n\r\n")
    r, _, _ = select.select([s], [], [], 0.3)
    early = s.recv(64) if r else b""
    s.close()
    return f"an answer before the upstream's: {early[:20]!r}" if early else None


def _relaying(port):
    s = _raw(port, b"GET /big HTTP/1.1\r\nHost: p.test\r\n\r\n")
    got = b""
    while len(got) < 16384:
        chunk = s.recv(65536)
        if not chunk:
            break
        got += chunk
    s.close()
    return None if got.startswith(b"HTTP/1.1 200") and len(got) >= 16384 else \
        f"got {len(got)} bytes: {got[:20]!r}"


def _abort_every_stage(port, reps, workers):
    """Each stage aborted `reps` times, `workers` at once."""
    stages = (("mid request head", _mid_head), ("mid request body", _mid_body),
              ("waiting for the upstream", _waiting), ("mid response body", _relaying))
    with concurrent.futures.ThreadPoolExecutor(max_workers=workers) as pool:
        for label, fn in stages:
            t = time.monotonic()
            results = list(pool.map(lambda _: _run_abort(fn, port), range(reps)))
            odd = [r for r in results if r]
            figure(f"aborted {label}", f"{reps} times, {workers} at once, in "
                   f"{time.monotonic() - t:.1f} s"
                   + (f"; {len(odd)} unexpected: {odd[0]}" if odd else ""))


def _whole_requests(port):
    """Sanity: the proxy still serves, a whole 4 MiB answer included.
    Returns (/ok status, /big status, /big length)."""
    st_ok = http_get(port, "/ok", host="p.test", timeout=10)[0]
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=20)
    conn.request("GET", "/big", headers={"Host": "p.test"})
    rb = conn.getresponse()
    big_len = len(rb.read())
    conn.close()
    figure("whole requests afterwards", f"/ok {st_ok}, /big {rb.status} with {big_len} bytes")
    return st_ok, rb.status, big_len


def _wait_gauges_back(gauges, pre):
    """Up to 30 s for the checked gauges to return to `pre`; returns whether
    they did and the last reading."""
    t = time.monotonic()
    last = [None]

    def back():
        last[0] = gauges()
        return all(last[0][k] == pre[k] for k in _CHECKED)

    returned = wait_until(back, 30, step=0.25)
    took = time.monotonic() - t
    post = last[0]
    figure("gauges after", f"{post} ({'back' if returned else 'NOT back'} after {took:.1f} s)")
    return returned, post


def _proxy_counters(srv):
    m = srv.metrics()
    figure("proxy counters", f"gapura_upstream_failures_total "
           f"{mget(m, 'gapura_upstream_failures_total')}, errors by kind "
           + ", ".join(f"{k} {mget(m, 'gapura_errors_total', kind=k)}"
                       for k in ("io", "header_timeout", "body_timeout", "bad_request")))


def _aborts_verdict(alive, returned, whole, pre, post, reps):
    st_ok, big_status, big_len = whole
    whole_ok = st_ok == 200 and big_status == 200 and big_len == UpstreamHandler.big
    ok = alive and returned and whole_ok
    diff = [f"{k} {pre[k]} -> {post[k]}" for k in _CHECKED if post[k] != pre[k]]
    why = (("gauges back to their values before the test" if returned else
            "gauges NOT back after 30 s: " + ", ".join(diff))
           + f" (connections_open {post['connections_open']}, leases_active "
           f"{post['leases_active']}, lease_keys {post['lease_keys']}, upstream in use "
           f"{post['upstream_in_use']}, idle pooled {post['upstream_idle']}) after "
           f"{4 * reps} aborted requests")
    if not whole_ok:
        why += f"; whole requests afterwards failed (/ok {st_ok}, /big {big_status} {big_len} B)"
    if not alive:
        why += "; the proxy died"
    return ok, why


def _run_abort(fn, port):
    try:
        return fn(port)
    except Exception as e:
        return f"{type(e).__name__}: {e}"

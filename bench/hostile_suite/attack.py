"""What the protocol-attack scenarios (h2, tls, udp) share: a server's
memory and CPU watched during an attack (VmRSS summed over its processes,
nginx's master and workers included), a legitimate client answered on a
period beside it, and a counting HTTP/1.1 origin in this program."""
import http.server
import os
import threading
import time

from .common import TICKS, cpu_ticks, figure, http_get, rss_kib


# ------------------------------------------------------------- processes

def children(pid):
    """The direct children of `pid` (nginx's workers under its master)."""
    out = []
    try:
        for tid in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{tid}/children") as f:
                out += [int(x) for x in f.read().split()]
    except OSError:
        pass
    return out


def rss_sum(pids):
    total = 0
    for pid in pids:
        try:
            total += rss_kib(pid)
        except OSError:
            pass
    return total


def cpu_sum(pids):
    total = 0
    for pid in pids:
        try:
            total += cpu_ticks(pid)
        except (OSError, IndexError):
            pass
    return total


class Watch:
    """VmRSS (sampled every 100 ms, peak kept) and CPU seconds of a server
    from start() to stop(); `pids` is called at every sample, so workers
    that come and go are counted."""

    def __init__(self, pids):
        self.pids = pids
        self.stop_ev = threading.Event()

    def start(self):
        ps = self.pids()
        self.rss0 = self.peak = self.last = rss_sum(ps)
        self.cpu0 = self.cpu_last = cpu_sum(ps)
        self.t0 = time.monotonic()
        self.thread = threading.Thread(target=self._sample, daemon=True)
        self.thread.start()
        return self

    def _sample(self):
        while not self.stop_ev.wait(0.1):
            self.sample()

    def sample(self):
        ps = self.pids()
        now = rss_sum(ps)
        if now:
            self.last = now
            self.peak = max(self.peak, now)
            self.cpu_last = max(self.cpu_last, cpu_sum(ps))
        return now

    def growth_now_kib(self):
        return self.sample() - self.rss0

    def stop(self):
        self.sample()
        self.stop_ev.set()
        self.thread.join()
        self.wall = time.monotonic() - self.t0
        return self

    @property
    def peak_growth_kib(self):
        return self.peak - self.rss0

    @property
    def cpu_s(self):
        return (self.cpu_last - self.cpu0) / TICKS

    def text(self):
        return (f"VmRSS {self.rss0 / 1024:.1f} MiB before, peak +{self.peak_growth_kib / 1024:.1f} "
                f"MiB, end +{(self.last - self.rss0) / 1024:.1f} MiB; CPU {self.cpu_s:.2f} s "
                f"in {self.wall:.1f} s")


# ------------------------------------------------------- legitimate client

class Legit:
    """Calls `ask()` every `period_s` from a thread of its own; an answer
    is 200 or it is counted as missed (with the first reasons kept)."""

    def __init__(self, ask, period_s=0.1):
        self.ask, self.period_s = ask, period_s
        self.sent = self.ok = 0
        self.slowest = 0.0
        self.misses = []
        self.stop_ev = threading.Event()

    def start(self):
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()
        return self

    def _run(self):
        nxt = time.monotonic()
        while not self.stop_ev.is_set():
            t = time.monotonic()
            try:
                status = self.ask()
            except Exception as e:  # any failure is a missed answer
                status = f"{type(e).__name__}: {e}"
            self.slowest = max(self.slowest, time.monotonic() - t)
            self.sent += 1
            if status == 200:
                self.ok += 1
            elif len(self.misses) < 3:
                self.misses.append(str(status)[:80])
            nxt += self.period_s
            self.stop_ev.wait(max(0.0, nxt - time.monotonic()))

    def stop(self):
        self.stop_ev.set()
        self.thread.join()
        return self

    @property
    def all_ok(self):
        return self.sent > 0 and self.ok == self.sent

    def text(self):
        out = f"legitimate client {self.ok}/{self.sent} answered 200 (slowest {self.slowest * 1000:.0f} ms)"
        if self.misses:
            out += f", misses: {'; '.join(self.misses)}"
        return out


def http1_ask(port, path="/legit", host="a.test", timeout=2.0):
    return lambda: http_get(port, path, host=host, timeout=timeout)[0]


def report(side, watch, legit=None, extra=""):
    text = watch.text()
    if legit is not None:
        text += "; " + legit.text()
    if extra:
        text += "; " + extra
    figure(side, text)


def mib(kib):
    return f"{kib / 1024:+.1f} MiB"


# ------------------------------------------------------------------ origin

BIG = 1_000_000


class OriginHandler(http.server.BaseHTTPRequestHandler):
    """Counts every request but /legit; /big answers BIG bytes, a POST is
    read to its Content-Length first."""
    protocol_version = "HTTP/1.1"
    timeout = 30

    def log_message(self, *args):
        pass

    def count(self):
        if not self.path.startswith("/legit"):
            with self.server.lock:
                self.server.requests += 1

    def answer(self, n):
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(n))
        self.end_headers()
        block = b"o" * 65536
        while n > 0:
            self.wfile.write(block[:n])
            n -= len(block)

    def do_GET(self):
        self.count()
        try:
            self.answer(BIG if self.path.startswith("/big") else 3)
        except OSError:
            self.close_connection = True

    def do_POST(self):
        self.count()
        try:
            left = int(self.headers.get("Content-Length", "0"))
            while left > 0:
                chunk = self.rfile.read(min(65536, left))
                if not chunk:
                    self.close_connection = True
                    return
                left -= len(chunk)
            self.answer(3)
        except OSError:
            self.close_connection = True


class Origin(http.server.ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 4096

    def __init__(self, port):
        super().__init__(("127.0.0.1", port), OriginHandler)
        self.lock = threading.Lock()
        self.requests = 0
        self.port = port
        threading.Thread(target=self.serve_forever, kwargs={"poll_interval": 0.1},
                         daemon=True).start()

    def handle_error(self, request, client_address):
        pass

    def close(self):
        self.shutdown()
        self.server_close()

"""UDP relay attacks against a `[[udp]]` relay in front of a Python server
that answers every datagram ten times over: a spoofed source (the
amplification bound), a replayed envelope, and a flood of invalid
datagrams beside a legitimate client."""
import hashlib
import hmac
import os
import random
import socket
import struct
import threading
import time

from .attack import Watch, mib, report
from .common import figure, free_port, mget
from .gapura import start_gapura
from .nginx import ensure_nginx, start_nginx, udp_conf

FACTOR = 10


# --------------------------------------------------------------- upstream

class Amplifier:
    """Answers every datagram with FACTOR datagrams as large as it."""

    def __init__(self, port):
        self.port = port
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind(("127.0.0.1", port))
        self.sock.settimeout(0.2)
        self.received = 0
        self.stop_ev = threading.Event()
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self):
        while not self.stop_ev.is_set():
            try:
                data, addr = self.sock.recvfrom(65535)
            except socket.timeout:
                continue
            except OSError:
                break
            self.received += 1
            for _ in range(FACTOR):
                try:
                    self.sock.sendto(data, addr)
                except OSError:
                    pass

    def close(self):
        self.stop_ev.set()
        self.thread.join()
        self.sock.close()


# --------------------------------------------------------------- envelope

def key_file(ctx, name):
    """A key file of 64 hex digits, mode 0600; (path, key bytes)."""
    key = os.urandom(32)
    path = os.path.join(ctx.work, f"{name}.key")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(key.hex() + "\n")
    os.chmod(path, 0o600)
    return path, key


def envelope(key, nonce, payload, key_id=0, ts_ms=None):
    """docs/udp.md: version 1, key id, timestamp (ms, big-endian), nonce
    (big-endian), payload, then the first 16 bytes of HMAC-SHA-256 over
    everything before the tag."""
    ts_ms = int(time.time() * 1000) if ts_ms is None else ts_ms
    head = struct.pack(">BBQQ", 1, key_id, ts_ms, nonce) + payload
    return head + hmac.new(key, head, hashlib.sha256).digest()[:16]


class Nonces:
    def __init__(self):
        self.n = 0
        self.lock = threading.Lock()

    def next(self):
        with self.lock:
            self.n += 1
            return self.n


# ----------------------------------------------------------------- relays

def relay_profile(port, admin, upstream_port, auth_path=None):
    auth = f'auth = {{ keys = ["{auth_path}"] }}\n' if auth_path else ""
    return f"""[server]
shards = 1
listen = []
admin = "127.0.0.1:{admin}"

[[udp]]
name = "attack"
listen = ["127.0.0.1:{port}"]
servers = ["127.0.0.1:{upstream_port}"]
{auth}
[protection]
off = ["all"]
"""


class Relay:
    def __init__(self, label, port, pids, srv):
        self.label, self.port, self.pids, self.srv = label, port, pids, srv


def start_relay(ctx, name, upstream_port, auth_path=None):
    port, admin = free_port(), free_port()
    srv = start_gapura(ctx, name, relay_profile(port, admin, upstream_port, auth_path), admin, admin)
    return Relay("gapura", port, lambda: [srv.pid], srv)


def start_nginx_relay(ctx, name, upstream_port):
    if not ensure_nginx(ctx, stream=True):
        return None
    port = free_port()
    ng = start_nginx(ctx, name, lambda prefix: udp_conf(prefix, port, upstream_port))
    return Relay("nginx", port, ng.pids, ng)


def dropped(srv, reason=None):
    m = srv.metrics()
    if reason:
        return mget(m, "gapura_udp_dropped_total", reason=reason) or 0
    return {labels.get("reason"): int(v) for n, labels, v in m
            if n == "gapura_udp_dropped_total" and v}


def bound(addr, port=0):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind((addr, port))
    return s


# ------------------------------------------------------- legitimate client

class UdpLegit:
    """Sends a datagram every `period_s` (an envelope when given a key) and
    counts the replies, by the sequence number they echo."""

    def __init__(self, addr, relay_port, period_s, key=None, nonces=None, size=50):
        self.sock = bound(addr)
        self.sock.settimeout(0.1)
        self.relay_port, self.period_s, self.key, self.nonces = relay_port, period_s, key, nonces
        self.size = size
        self.sent = self.replies = 0
        self.answered = set()
        self.stop_ev = threading.Event()

    def start(self):
        self.threads = [threading.Thread(target=self._send, daemon=True),
                        threading.Thread(target=self._receive, daemon=True)]
        for t in self.threads:
            t.start()
        return self

    def _send(self):
        nxt = time.monotonic()
        while not self.stop_ev.is_set():
            payload = b"L" + self.sent.to_bytes(4, "big")
            payload += b"l" * (self.size - len(payload))
            data = envelope(self.key, self.nonces.next(), payload) if self.key else payload
            self.sock.sendto(data, ("127.0.0.1", self.relay_port))
            self.sent += 1
            nxt += self.period_s
            self.stop_ev.wait(max(0.0, nxt - time.monotonic()))

    def _receive(self):
        while not self.rx_done():
            try:
                data = self.sock.recv(65535)
            except socket.timeout:
                continue
            except OSError:
                break
            self.replies += 1
            if data[:1] == b"L":
                self.answered.add(int.from_bytes(data[1:5], "big"))

    def rx_done(self):
        return self.stop_ev.is_set() and time.monotonic() > self.rx_until

    def stop(self, linger_s=0.5):
        self.rx_until = time.monotonic() + linger_s
        self.stop_ev.set()
        for t in self.threads:
            t.join()
        self.sock.close()
        return self

    def text(self, per_request=FACTOR):
        return (f"legitimate client {len(self.answered)}/{self.sent} datagrams answered, "
                f"{self.replies}/{self.sent * per_request} replies")


# -------------------------------------------------------------- udp-spoof

def spoof(relay_port, n=20, size=50, gap_s=0.1, addr="127.0.0.77"):
    """From one fixed source address and port: `n` datagrams `gap_s`
    apart; the bytes that come back to that address."""
    s = bound(addr, free_port())
    s.settimeout(0.1)
    back = [0]
    done = threading.Event()

    def count():
        while not done.is_set():
            try:
                back[0] += len(s.recv(65535))
            except socket.timeout:
                continue
            except OSError:
                break
    t = threading.Thread(target=count, daemon=True)
    t.start()
    for i in range(n):
        s.sendto(bytes([i]) * size, ("127.0.0.1", relay_port))
        time.sleep(gap_s)
    time.sleep(1.0)
    done.set()
    t.join()
    s.close()
    return n * size, back[0]


def scenario_udp_spoof(ctx):
    up = Amplifier(free_port())
    try:
        relays = [start_relay(ctx, "udp-spoof", up.port)]
        ng = start_nginx_relay(ctx, "udp-spoof", up.port)
        relays += [ng] if ng else []
        figure("setup", f"a relay without auth -> a Python server answering each datagram {FACTOR} "
               "times as large; 20 x 50-byte datagrams 100 ms apart from 127.0.0.77 (fixed port), "
               "the bytes back to it counted; a legitimate client at 127.0.0.20 every 100 ms; "
               "nginx: stream proxy, no proxy_responses (its UDP default: every response)")
        res = {}
        for r in relays:
            watch = Watch(r.pids).start()
            legit = UdpLegit("127.0.0.20", r.port, 0.1).start()
            sent, back = spoof(r.port)
            legit.stop()
            watch.stop()
            drops = dropped(r.srv) if r.label == "gapura" else {}
            report(r.label, watch, None, f"{sent} bytes sent, {back} back: {back / sent:.2f}x; "
                   f"{legit.text()}{'; drops ' + str(drops) if drops else ''}")
            res[r.label] = (sent, back, watch, legit)
    finally:
        up.close()
    sent, back, watch, legit = res["gapura"]
    ok = back <= 3.0 * sent and len(legit.answered) == legit.sent
    why = (f"{back} bytes back for {sent} sent: {back / sent:.2f}x (<= 3.0x); RSS "
           f"{mib(watch.peak_growth_kib)}, CPU {watch.cpu_s:.2f} s; legit {len(legit.answered)}/"
           f"{legit.sent} answered")
    if "nginx" in res:
        ns, nb, nw, nl = res["nginx"]
        why += f"; nginx {nb / ns:.2f}x, legit {len(nl.answered)}/{nl.sent}"
    return ok, why


# ------------------------------------------------------------- udp-replay

def one_exchange(addr, port, data, wait_s=1.0):
    """Sends `data` from `addr`; the replies that come back within `wait_s`."""
    s = bound(addr)
    s.settimeout(0.1)
    s.sendto(data, ("127.0.0.1", port))
    got, end = 0, time.monotonic() + wait_s
    while time.monotonic() < end:
        try:
            s.recv(65535)
            got += 1
        except socket.timeout:
            pass
    s.close()
    return got


def scenario_udp_replay(ctx):
    up = Amplifier(free_port())
    try:
        path, key = key_file(ctx, "udp-replay")
        r = start_relay(ctx, "udp-replay", up.port, auth_path=path)
        figure("setup", "a relay with auth (one key); a valid envelope from 127.0.0.10, then the "
               "same bytes from 127.0.0.11; nginx has no authenticated envelope: not run")
        watch = Watch(r.pids).start()
        before = dropped(r.srv, "replayed")
        data = envelope(key, 1, b"replay me")
        first = one_exchange("127.0.0.10", r.port, data)
        replay = one_exchange("127.0.0.11", r.port, data, wait_s=1.5)
        # Counters are published once a second.
        deadline = time.monotonic() + 3
        after = dropped(r.srv, "replayed")
        while after == before and time.monotonic() < deadline:
            time.sleep(0.2)
            after = dropped(r.srv, "replayed")
        watch.stop()
        drops = dropped(r.srv)
        report("gapura", watch, None, f"first envelope: {first} replies at 127.0.0.10; replay: "
               f"{replay} replies at 127.0.0.11; gapura_udp_dropped_total{{reason=\"replayed\"}} "
               f"{before} -> {after}; drops {drops}")
    finally:
        up.close()
    ok = first > 0 and replay == 0 and after - before == 1
    why = (f"first relayed ({first} replies at .10), replay from .11 got {replay}, replayed drops "
           f"+{after - before}; RSS {mib(watch.peak_growth_kib)}, CPU {watch.cpu_s:.2f} s")
    return ok, why


# ------------------------------------------------------------ udp-invalid

def flood_sockets(n=512, seed=7):
    """Sockets on `n` random 127/8 addresses outside 127.0.0.0/24 (the
    legitimate client's prefix)."""
    rnd = random.Random(seed)
    socks = []
    for _ in range(n):
        addr = f"127.{rnd.randint(1, 254)}.{rnd.randint(0, 255)}.{rnd.randint(1, 254)}"
        socks.append(bound(addr))
    return socks


def invalid_datagrams(key_len_hint, count, seed=11):
    """Half random bytes, half envelopes with a fresh timestamp and a bad tag."""
    rnd = random.Random(seed)
    out = []
    for i in range(count):
        if i % 2:
            out.append(rnd.randbytes(rnd.randint(20, 200)))
        else:
            head = struct.pack(">BBQQ", 1, 0, int(time.time() * 1000), rnd.getrandbits(63))
            out.append(head + rnd.randbytes(32) + rnd.randbytes(16))
    return out


def flood(port, socks, datagrams, rate=20000):
    t0 = time.monotonic()
    sent = errors = 0
    for i, d in enumerate(datagrams):
        try:
            socks[i % len(socks)].sendto(d, ("127.0.0.1", port))
            sent += 1
        except OSError:
            errors += 1
        if i % 200 == 199:
            delay = t0 + (i + 1) / rate - time.monotonic()
            if delay > 0:
                time.sleep(delay)
    return sent, errors, time.monotonic() - t0


def udp_rcvbuf_errors():
    with open("/proc/net/snmp") as f:
        rows = [line.split() for line in f if line.startswith("Udp:")]
    return int(rows[1][rows[0].index("RcvbufErrors")])


def scenario_udp_invalid(ctx):
    n = 100_000
    up = Amplifier(free_port())
    try:
        path, key = key_file(ctx, "udp-invalid")
        r = start_relay(ctx, "udp-invalid", up.port, auth_path=path)
        figure("setup", f"a relay with auth; {n:,} invalid datagrams (half random bytes, half "
               "envelopes with a bad tag) from 512 addresses in 127/8 at about 20,000 a second, "
               "while a legitimate client at 127.0.0.10 sends a valid envelope every 50 ms "
               f"(each answered {FACTOR} times)")
        socks = flood_sockets()
        datagrams = invalid_datagrams(len(key), n)
        drops0, kernel0 = dropped(r.srv), udp_rcvbuf_errors()
        watch = Watch(r.pids).start()
        legit = UdpLegit("127.0.0.10", r.port, 0.05, key=key, nonces=Nonces()).start()
        time.sleep(0.5)
        sent, errors, secs = flood(r.port, socks, datagrams)
        time.sleep(0.5)
        legit.stop()
        watch.stop()
        for s in socks:
            s.close()
        time.sleep(1.2)  # counters are published once a second
        drops1, kernel1 = dropped(r.srv), udp_rcvbuf_errors()
    finally:
        up.close()
    delta = {k: v - drops0.get(k, 0) for k, v in drops1.items() if v - drops0.get(k, 0)}
    share = legit.replies / max(1, legit.sent * FACTOR)
    per = watch.cpu_s / max(1, sent) * 1e6
    report("gapura", watch, None, f"{sent} invalid sent in {secs:.1f} s ({errors} send errors); "
           f"drops {delta}; kernel UDP receive-buffer drops +{kernel1 - kernel0}; "
           f"{legit.text()}; CPU {per:.2f} us per invalid datagram")
    ok = share >= 0.99 and watch.peak_growth_kib <= 16 * 1024
    why = (f"legit replies {legit.replies}/{legit.sent * FACTOR} ({100 * share:.1f} %, >= 99 %), "
           f"RSS peak {mib(watch.peak_growth_kib)} (<= 16 MiB), CPU {watch.cpu_s:.2f} s = "
           f"{per:.2f} us per invalid datagram; drops {delta}; nginx has no envelope: not run")
    return ok, why

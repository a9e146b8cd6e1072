"""HTTP/3 (QUIC) attacks against a TLS listener that serves HTTP/3, Gapura
and Caddy (Debian's package, the local HTTP/3 peer; installed on demand,
GOMAXPROCS=1 on the server core) side by side, each with the same attack,
a legitimate HTTP/3 client beside it (a new connection and one GET every
100 ms, so new connections are admitted throughout).

The attack traffic is made with aioquic (PyPI): real client Initials
(each a fresh connection's first datagram, a ClientHello in it) and
connections driven by hand to stall or misbehave. Sources are distinct
127/8 addresses bound by this program (no spoofing needed on loopback);
what the server sends back to them is read and counted."""
import asyncio
import os
import random
import shutil
import socket
import ssl
import subprocess
import threading
import time

from .attack import BIG, Legit, Watch, mib, report
from .common import ROOT, SERVER_CORE, CouldNotRun, figure, free_port, mget, pinned, port_accepts
from .gapura import server_block, start_gapura
from .tls import NAME, make_cert


def _aioquic():
    try:
        import aioquic  # noqa: F401
    except ImportError as e:
        raise CouldNotRun("aioquic is missing (python3 -m pip install aioquic)") from e


# ---------------------------------------------------------------- servers

def gapura_h3_profile(port, admin, cert, key, http3="", extra="", body="hello\\n"):
    return server_block(port, admin).replace(
        f'listen = ["127.0.0.1:{port}"]',
        f'listen = [{{ addr = "127.0.0.1:{port}", tls = true, http3 = true }}]') + \
        f"max_connections_per_shard = 20000\n{extra}\n[http3]\n{http3}\n" + f"""
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
body = "{body}"

[protection]
off = ["all"]
"""


def ensure_caddy(ctx):
    if shutil.which("caddy"):
        return True
    if ctx.apt_tried:
        return False
    ctx.apt_tried = True
    subprocess.run(["apt-get", "install", "-y", "caddy"], stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL)
    return shutil.which("caddy") is not None


class Caddy:
    def __init__(self, proc):
        self.proc = proc

    @property
    def pid(self):
        return self.proc.pid


def start_caddy(ctx, name, port, cert, key, root=None):
    d = os.path.join(ctx.work, name)
    os.makedirs(d, exist_ok=True)
    conf = os.path.join(d, "Caddyfile")
    with open(conf, "w") as f:
        f.write(f"""{{
	admin off
	auto_https off
	servers {{
		protocols h1 h2 h3
	}}
}}
https://{NAME}:{port}, https://127.0.0.1:{port} {{
	bind 127.0.0.1
	tls {cert} {key}
	{f"root * {root}" if root else ""}
	{"file_server" if root else 'respond "hello' + chr(10) + '" 200'}
}}
""")
    log = open(os.path.join(d, "caddy.log"), "ab")
    env = dict(os.environ, GOMAXPROCS="1", XDG_DATA_HOME=d, XDG_CONFIG_HOME=d, HOME=d)
    proc = ctx.procs.start(pinned(SERVER_CORE, ["caddy", "run", "--config", conf,
                                                "--adapter", "caddyfile"]),
                           stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                           env=env)
    log.close()
    deadline = time.monotonic() + 15
    while not port_accepts(port):
        if proc.poll() is not None or time.monotonic() > deadline:
            raise CouldNotRun(f"caddy did not start on {port}")
        time.sleep(0.05)
    time.sleep(0.3)
    return Caddy(proc)


def h3_sides(ctx, name, http3="", extra="", big=False):
    """[(label, port, pids, server)]: Gapura, then Caddy when installed.
    `big`: every answer (but the legitimate client's) is BIG bytes."""
    _aioquic()
    cert, key = make_cert(ctx)
    port, admin = free_port(), free_port()
    body = "x" * BIG if big else "hello\\n"
    srv = start_gapura(ctx, f"{name}-gapura", gapura_h3_profile(port, admin, cert, key, http3,
                                                                extra, body), port, admin)
    sides = [("gapura", port, lambda: [srv.pid], srv)]
    if ensure_caddy(ctx):
        cport = free_port()
        root = None
        if big:
            root = os.path.join(ctx.work, name, "www")
            os.makedirs(root, exist_ok=True)
            with open(os.path.join(root, "big"), "wb") as f:
                f.write(b"x" * BIG)
            with open(os.path.join(root, "legit"), "wb") as f:
                f.write(b"ok\n")
        cd = start_caddy(ctx, name, cport, cert, key, root)
        sides.append(("caddy", cport, lambda: [cd.pid], cd))
    return sides


# ------------------------------------------------------------ quic pieces

def client_config():
    from aioquic.h3.connection import H3_ALPN
    from aioquic.quic.configuration import QuicConfiguration
    c = QuicConfiguration(is_client=True, alpn_protocols=H3_ALPN)
    c.server_name = NAME
    c.verify_mode = ssl.CERT_NONE
    return c


def initials(n, port):
    """`n` distinct client Initials (each a new connection's first
    datagram), made without sending them."""
    from aioquic.quic.connection import QuicConnection
    out = []
    for _ in range(n):
        q = QuicConnection(configuration=client_config())
        q.connect(("127.0.0.1", port), now=time.monotonic())
        out.append(q.datagrams_to_send(now=time.monotonic())[0][0])
    return out


def sources(n):
    """`n` UDP sockets, each bound to its own 127/8 address."""
    socks, seen = [], set()
    while len(socks) < n:
        a = f"127.{random.randint(1, 254)}.{random.randint(0, 255)}.{random.randint(1, 254)}"
        if a in seen:
            continue
        seen.add(a)
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 20)
        s.bind((a, 0))
        s.setblocking(False)
        socks.append(s)
    return socks


def drain(socks):
    """Bytes waiting on each socket (what the server sent back)."""
    got = []
    for s in socks:
        n = 0
        while True:
            try:
                n += len(s.recv(65536))
            except BlockingIOError:
                break
            except OSError:
                break
        got.append(n)
    return got


def h3_get(port, timeout=3.0):
    """The legitimate client: a new QUIC connection, one GET /, its status."""
    from aioquic.asyncio.client import connect
    from aioquic.asyncio.protocol import QuicConnectionProtocol
    from aioquic.h3.connection import H3Connection
    from aioquic.h3.events import HeadersReceived

    class C(QuicConnectionProtocol):
        def __init__(self, *a, **k):
            super().__init__(*a, **k)
            self.h3 = H3Connection(self._quic)
            self.status = self._loop.create_future()

        def quic_event_received(self, event):
            for e in self.h3.handle_event(event):
                if isinstance(e, HeadersReceived) and not self.status.done():
                    self.status.set_result(int(dict(e.headers)[b":status"]))

    async def go():
        async with connect("127.0.0.1", port, configuration=client_config(),
                           create_protocol=C) as c:
            sid = c._quic.get_next_available_stream_id()
            c.h3.send_headers(sid, [(b":method", b"GET"), (b":scheme", b"https"),
                                    (b":authority", NAME.encode()), (b":path", b"/legit")],
                              end_stream=True)
            c.transmit()
            return await asyncio.wait_for(c.status, timeout)
    return asyncio.run(asyncio.wait_for(go(), timeout + 1))


def h3_ask(port):
    return lambda: h3_get(port)


def counter(srv, name):
    if not hasattr(srv, "metrics"):
        return None
    return int(mget(srv.metrics(), name, shard="0") or 0)


# -------------------------------------------------------- h3-initial-flood

def scenario_h3_initial_flood(ctx):
    n, n_src = ctx.d(6000, 1500), ctx.d(2000, 500)
    sides = h3_sides(ctx, "h3-initial-flood")
    figure("setup", f"{n} client Initials (each a new connection's ClientHello) from {n_src} "
           f"127/8 sources that never answer, sent as fast as one thread can; Gapura "
           f"[http3] retry = \"auto\"; a legitimate client opens a new connection every 100 ms")
    res = {}
    for label, port, pids, srv in sides:
        pkts = initials(n, port)
        socks = sources(n_src)
        watch = Watch(pids).start()
        legit = Legit(h3_ask(port)).start()
        t0 = time.monotonic()
        for i, p in enumerate(pkts):
            try:
                socks[i % n_src].sendto(p, ("127.0.0.1", port))
            except OSError:
                pass
        sent_s = time.monotonic() - t0
        time.sleep(2.0)
        legit.stop()
        watch.stop()
        back = sum(drain(socks))
        for s in socks:
            s.close()
        retries = counter(srv, "gapura_h3_retries_total")
        accepted = counter(srv, "gapura_h3_connections_total")
        extra = (f"{n} Initials in {sent_s:.2f} s; {back} bytes back to the sources "
                 f"({back / (n * 1200):.2f}x what they sent)")
        if retries is not None:
            extra += f"; {retries} Retry, {accepted} connections accepted"
        report(label, watch, legit, extra)
        res[label] = (watch, legit, retries, accepted, back)
    watch, legit, retries, accepted, back = res["gapura"]
    ok = (retries or 0) > 0 and watch.peak_growth_kib <= 32 * 1024 and \
        legit.ok >= 0.99 * legit.sent and legit.sent > 0 and sides[0][3].proc.poll() is None
    why = (f"{retries} Retry sent, {accepted} accepted, RSS peak {mib(watch.peak_growth_kib)} "
           f"(<= 32 MiB), CPU {watch.cpu_s:.2f} s, legit {legit.ok}/{legit.sent} (>= 99 %)")
    if "caddy" in res:
        cw, cl = res["caddy"][0], res["caddy"][1]
        why += f"; caddy RSS {mib(cw.peak_growth_kib)}, CPU {cw.cpu_s:.2f} s, legit {cl.ok}/{cl.sent}"
    return ok, why


# -------------------------------------------------------- h3-amplification

def scenario_h3_amplification(ctx):
    n = ctx.d(300, 100)
    sides = h3_sides(ctx, "h3-amplification", http3='retry = "never"')
    figure("setup", f"{n} client Initials, each from its own 127/8 source that never answers; "
           f"Gapura [http3] retry = \"never\" (the handshake starts at once, unvalidated); bytes "
           f"the server sends back to each source over 4 s (retransmissions included)")
    res = {}
    for label, port, pids, srv in sides:
        pkts = initials(n, port)
        socks = sources(n)
        watch = Watch(pids).start()
        sent = [0] * n
        for i, (s, p) in enumerate(zip(socks, pkts)):
            s.sendto(p, ("127.0.0.1", port))
            sent[i] = len(p)
        time.sleep(4.0)
        watch.stop()
        back = drain(socks)
        for s in socks:
            s.close()
        worst = max(b / s for b, s in zip(back, sent))
        total = sum(back) / sum(sent)
        report(label, watch, None, f"back/sent {total:.2f}x overall, {worst:.2f}x worst source")
        res[label] = (worst, total, watch)
    worst, total, watch = res["gapura"]
    ok = worst <= 3.0 and sides[0][3].proc.poll() is None
    why = f"worst source {worst:.2f}x (<= 3.0x, RFC 9000 §8.1), overall {total:.2f}x"
    if "caddy" in res:
        why += f"; caddy worst {res['caddy'][0]:.2f}x, overall {res['caddy'][1]:.2f}x"
    return ok, why


# ------------------------------------------------------ h3-slow-handshake

async def _stall_after_retry(port, n):
    """`n` clients that answer a Retry (proving their address) and then
    never finish the handshake; returns how many got a Retry."""
    from aioquic.quic.connection import QuicConnection
    loop = asyncio.get_running_loop()
    done = 0
    socks = sources(n)
    conns = []
    for s in socks:
        q = QuicConnection(configuration=client_config())
        q.connect(("127.0.0.1", port), now=time.monotonic())
        for d, addr in q.datagrams_to_send(now=time.monotonic()):
            s.sendto(d, addr)
        conns.append((s, q))
    end = loop.time() + 2.0
    answered = set()
    while loop.time() < end:
        for i, (s, q) in enumerate(conns):
            if i in answered:
                continue
            try:
                data, addr = s.recvfrom(65536)
            except BlockingIOError:
                continue
            # The first answer (a Retry, or the server's handshake flight):
            # taken once, the next Initial sent, then silence.
            q.receive_datagram(data, addr, now=time.monotonic())
            for d, a in q.datagrams_to_send(now=time.monotonic()):
                s.sendto(d, a)
            answered.add(i)
            done += 1
        await asyncio.sleep(0.01)
    return socks, done


def scenario_h3_slow_handshake(ctx):
    n, timeout_ms = ctx.d(1500, 300), 2000
    sides = h3_sides(ctx, "h3-slow-handshake", http3='retry = "always"',
                     extra=f"\n[tls]\nhandshake_timeout_ms = {timeout_ms}\n")
    figure("setup", f"{n} clients from their own 127/8 sources answer the server's first flight "
           f"(a Retry: their address is proven) and then never finish the handshake; Gapura "
           f"[http3] retry = \"always\", [tls] handshake_timeout_ms = {timeout_ms}; VmRSS while "
           f"they stall and {timeout_ms / 1000 + 2:.0f} s later")
    res = {}
    for label, port, pids, srv in sides:
        watch = Watch(pids).start()
        legit = Legit(h3_ask(port)).start()
        socks, answered = asyncio.run(_stall_after_retry(port, n))
        held = watch.growth_now_kib()
        open_held = counter(srv, "gapura_connections_open")
        time.sleep(timeout_ms / 1000 + 2)
        open_after = counter(srv, "gapura_connections_open")
        timed_out = refused = None
        if hasattr(srv, "metrics"):
            timed_out = int(mget(srv.metrics(), "gapura_tls_handshake_failures_total", shard="0",
                                 reason="timeout") or 0)
            refused = counter(srv, "gapura_h3_handshakes_evicted_total")
        legit.stop()
        watch.stop()
        for s in socks:
            s.close()
        extra = f"{answered}/{n} answered their first flight; {mib(held)} while stalled"
        if open_held is not None:
            extra += (f"; {open_held} connections open while stalled, {open_after} after the "
                      f"timeout, {timed_out} handshakes timed out, {refused} evicted")
        report(label, watch, legit, extra)
        res[label] = (watch, legit, held, open_after, timed_out, refused)
    watch, legit, held, open_after, timed_out, refused = res["gapura"]
    # At most 1,024 handshakes in progress a shard: past it the oldest is
    # closed. At most the legitimate client's own connection is open after.
    stalled = min(n, 1024)
    ok = watch.peak_growth_kib <= 40 * 1024 and open_after <= 1 \
        and (timed_out or 0) >= stalled * 0.9 and (n <= 1024 or (refused or 0) > 0) \
        and legit.ok >= 0.99 * legit.sent and legit.sent > 0
    why = (f"RSS peak {mib(watch.peak_growth_kib)} while {n} stalled (<= 40 MiB: at most 1,024 "
           f"held), {timed_out} handshakes timed out, {refused} evicted, {open_after} connections "
           f"open after the timeout (<= 1: the legitimate client's), "
           f"legit {legit.ok}/{legit.sent}")
    if "caddy" in res:
        cw, cl, ch = res["caddy"][:3]
        # (Caddy's figures: memory only; it has no such counters.)
        why += f"; caddy {mib(ch)} stalled, legit {cl.ok}/{cl.sent}"
    return ok, why


def each_side(sides, attack, describe):
    """Runs `attack(port, watch)` (a coroutine function) against each side
    with its memory and CPU watched and a legitimate client beside it;
    prints each side's line (`describe(result)`); returns
    {label: (watch, legit, result)}."""
    res = {}
    for label, port, pids, srv in sides:
        watch = Watch(pids).start()
        legit = Legit(h3_ask(port)).start()
        result = asyncio.run(attack(port, watch))
        legit.stop()
        watch.stop()
        report(label, watch, legit, describe(result))
        res[label] = (watch, legit, result)
    return res


def answered(legit):
    """The legitimate client was answered (>= 99 % of its requests)."""
    return legit.sent > 0 and legit.ok >= 0.99 * legit.sent


def caddy_said(res, extra=lambda r: ""):
    """Caddy's figures for the PASS/FAIL line, when it ran."""
    if "caddy" not in res:
        return ""
    w, l, r = res["caddy"]
    return (f"; caddy RSS peak {mib(w.peak_growth_kib)}, CPU {w.cpu_s:.2f} s, "
            f"legit {l.ok}/{l.sent}{extra(r)}")


# ------------------------------------------- h3-streams and h3-qpack-bomb

async def _connections(port, n):
    from aioquic.asyncio.client import connect
    held = []
    for _ in range(n):
        cm = connect("127.0.0.1", port, configuration=client_config())
        held.append((cm, await cm.__aenter__()))
    return held


async def _close(held):
    for cm, _ in held:
        try:
            await cm.__aexit__(None, None, None)
        except Exception:
            pass


def scenario_h3_streams(ctx):
    conns, per, header_ms = ctx.d(20, 5), 100, 2000
    sides = h3_sides(ctx, "h3-streams", http3="max_streams = 100",
                     extra=f"header_timeout_ms = {header_ms}\n")
    figure("setup", f"{conns} connections x {per} request streams (every stream the server "
           f"allows), each a HEADERS frame begun and never finished; Gapura header_timeout_ms "
           f"= {header_ms}")

    async def attack(port, watch):
        held = await _connections(port, conns)
        for _, c in held:
            for _ in range(per):
                sid = c._quic.get_next_available_stream_id()
                c._quic.send_stream_data(sid, b"\x01\x40\x64\x00\x00\xd1\xd7\xc1", False)
            c.transmit()
        await asyncio.sleep(1.0)
        peak = watch.growth_now_kib()
        await asyncio.sleep(header_ms / 1000 + 1.5)
        after = watch.growth_now_kib()
        await _close(held)
        return peak, after
    res = each_side(sides, attack,
                    lambda r: f"{mib(r[0])} while held, {mib(r[1])} after the header timeout")
    watch, legit, (peak, after) = res["gapura"]
    ok = watch.peak_growth_kib <= 16 * 1024 and answered(legit)
    why = (f"{conns * per} trickled heads: RSS peak {mib(watch.peak_growth_kib)} (<= 16 MiB), "
           f"{mib(after)} after the timeout, legit {legit.ok}/{legit.sent}")
    return ok, why + caddy_said(res, lambda r: f", {mib(r[1])} after")


def _insert_bomb(entries, size):
    """A QPACK encoder stream (type 0x02) inserting `entries` entries of
    `size` bytes each (Insert With Literal Name)."""
    out = bytearray(b"\x02")
    name, value = b"x-bomb", b"v" * size

    def prefixed(first, bits, v):
        mask = (1 << bits) - 1
        if v < mask:
            return bytes([first | v])
        b = bytearray([first | mask])
        v -= mask
        while v >= 0x80:
            b.append((v & 0x7f) | 0x80)
            v >>= 7
        b.append(v)
        return bytes(b)
    for _ in range(entries):
        out += prefixed(0x40, 5, len(name)) + name + prefixed(0x00, 7, len(value)) + value
    return bytes(out)


def scenario_h3_qpack_bomb(ctx):
    conns = ctx.d(50, 10)
    sides = h3_sides(ctx, "h3-qpack-bomb")
    bomb = _insert_bomb(64, 4096)
    # A field section that references dynamic entry 0 four thousand times
    # (Required Insert Count 1).
    section = b"\x02\x00" + b"\x80" * 4000
    headers = b"\x01" + bytes([0x40 | (len(section) >> 8), len(section) & 0xff]) + section
    figure("setup", f"{conns} connections each opening a QPACK encoder stream that inserts 64 "
           f"entries of 4 KiB (a table the server never allowed), and a request whose field "
           f"section references a dynamic entry 4,000 times")

    async def attack(port, watch):
        held = await _connections(port, conns)
        for _, c in held:
            uni = c._quic.get_next_available_stream_id(is_unidirectional=True)
            c._quic.send_stream_data(uni, bomb, False)
            sid = c._quic.get_next_available_stream_id()
            c._quic.send_stream_data(sid, headers, True)
            c.transmit()
        await asyncio.sleep(2.0)
        closed = sum(1 for _, c in held if c._quic._close_event is not None)
        await _close(held)
        return closed
    res = each_side(sides, attack, lambda r: f"{r}/{conns} connections closed by the server")
    watch, legit, closed = res["gapura"]
    ok = closed == conns and watch.peak_growth_kib <= 16 * 1024 and answered(legit)
    why = (f"{closed}/{conns} closed (QPACK errors), RSS peak {mib(watch.peak_growth_kib)} "
           f"(<= 16 MiB), CPU {watch.cpu_s:.2f} s, legit {legit.ok}/{legit.sent}")
    return ok, why + caddy_said(res, lambda r: f", {r}/{conns} closed")


# ------------------------------------------------------------ h3-cid-churn

def scenario_h3_cid_churn(ctx):
    conns, churn = ctx.d(10, 4), ctx.d(2000, 500)
    sides = h3_sides(ctx, "h3-cid-churn")
    figure("setup", f"{conns} connections each switching to the server's next connection ID "
           f"(retiring the last) {churn} times, as fast as the server issues new ones")

    async def attack(port, watch):
        held = await _connections(port, conns)
        switched = 0
        for _ in range(churn):
            for _, c in held:
                try:
                    c.change_connection_id()
                    switched += 1
                except Exception:
                    pass
            await asyncio.sleep(0.001)
        alive = sum(1 for _, c in held if c._quic._close_event is None)
        await _close(held)
        return switched, alive
    res = each_side(sides, attack,
                    lambda r: f"{r[0]} switches, {r[1]}/{conns} connections alive")
    watch, legit, (switched, alive) = res["gapura"]
    ok = watch.peak_growth_kib <= 16 * 1024 and answered(legit)
    why = (f"{switched} connection-ID switches: RSS peak {mib(watch.peak_growth_kib)} (<= 16 MiB), "
           f"CPU {watch.cpu_s:.2f} s, legit {legit.ok}/{legit.sent}")
    return ok, why + caddy_said(res)


# --------------------------------------------------------- h3-zero-window

def scenario_h3_zero_window(ctx):
    conns, per = ctx.d(4, 2), 100
    sides = h3_sides(ctx, "h3-zero-window", http3="max_streams = 100", big=True)
    figure("setup", f"{conns} connections x {per} streams, each asking for a {BIG:,}-byte answer "
           f"(Gapura: a host's built-in body; Caddy: a file) with every flow-control window of "
           f"the client 0, never raised; VmRSS growth 5 s later (target <= 32 MiB)")

    async def attack(port, watch):
        from aioquic.asyncio.client import connect
        from aioquic.h3.connection import H3Connection
        held = []
        for _ in range(conns):
            cfg = client_config()
            cfg.max_data = 0
            cfg.max_stream_data = 0
            cm = connect("127.0.0.1", port, configuration=cfg)
            held.append((cm, await cm.__aenter__()))
        for _, c in held:
            h3 = H3Connection(c._quic)
            for _ in range(per):
                sid = c._quic.get_next_available_stream_id()
                h3.send_headers(sid, [(b":method", b"GET"), (b":scheme", b"https"),
                                      (b":authority", NAME.encode()), (b":path", b"/big")],
                                end_stream=True)
            c.transmit()
        await asyncio.sleep(5.0)
        grown = watch.growth_now_kib()
        await _close(held)
        return grown
    res = each_side(sides, attack,
                    lambda r: f"{mib(r)} after 5 s with {conns * per} answers waiting")
    watch, legit, grown = res["gapura"]
    ok = watch.peak_growth_kib <= 32 * 1024 and answered(legit)
    why = (f"{conns * per} streams of {BIG:,} bytes against shut windows: RSS peak "
           f"{mib(watch.peak_growth_kib)} (<= 32 MiB), legit {legit.ok}/{legit.sent}")
    return ok, why + caddy_said(res)

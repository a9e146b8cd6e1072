"""idle: 10,000 idle keep-alive connections, waiting and then parked: heap
and VmRSS per connection."""
import socket
import time
import urllib.request

from .common import CouldNotRun, figure, free_port, mget, rss_kib, wait_until
from .gapura import respond_host, server_block, start_gapura


def heap_bytes(srv):
    """The server's heap in use (`GET /heap` on its admin listener), or
    None when it does not know it."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{srv.admin}/heap", timeout=5) as r:
            return int(r.read().decode().strip())
    except (OSError, ValueError):
        return None


def open_idle(port, n, host="a.test"):
    conns = []
    try:
        for _ in range(n):
            s = socket.create_connection(("127.0.0.1", port), timeout=5)
            conns.append(s)
            s.sendall(f"GET / HTTP/1.1\r\nHost: {host}\r\n\r\n".encode())
            got = b""
            while b"hello" not in got:
                chunk = s.recv(4096)
                if not chunk:
                    raise CouldNotRun(f"the server closed connection {len(conns)}")
                got += chunk
    except BaseException:
        for s in conns:
            s.close()
        raise
    return conns


def settled_rss(pid, deadline_s=5):
    """VmRSS once two reads 250 ms apart agree (or at the deadline)."""
    last = rss_kib(pid)
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        time.sleep(0.25)
        now = rss_kib(pid)
        if now == last:
            return now
        last = now
    return last


def scenario_idle(ctx):
    n, warm_n = 10000, 500
    port, admin = free_port(), free_port()
    profile = server_block(port, admin, f"max_connections_per_shard = {n + warm_n + 1000}\n"
                           "idle_timeout_ms = 600000\n") + respond_host() + \
        '\n[protection]\noff = ["all"]\n'
    figure("profile", "respond host, idle_timeout_ms = 600000 (the connections must stay for the "
           "reading), [protection] off = all (10,500 connections from one address)")
    srv = start_gapura(ctx, "idle", profile, port, admin)
    warm = idle = []

    def parked():
        return mget(srv.metrics(), "gapura_connections_parked") or 0

    try:
        warm = open_idle(port, warm_n)
        before = settled_rss(srv.pid)
        heap_before = heap_bytes(srv)
        t = time.monotonic()
        idle = open_idle(port, n)
        opened_s = time.monotonic() - t
        waiting_rss = settled_rss(srv.pid)
        waiting_heap = heap_bytes(srv)
        # A connection quiet for a second parks: it gives its read buffer
        # back and waits holding none.
        t = time.monotonic()
        # Connections park while the shard holds more than 512 (the
        # server's PARK_ABOVE): those whose wait began below it do not.
        want_parked = n + warm_n - 512
        all_parked = wait_until(lambda: parked() >= want_parked, 60)
        parked_s = time.monotonic() - t
        after = settled_rss(srv.pid)
        heap_after = heap_bytes(srv)
        open_now = mget(srv.metrics(), "gapura_connections_open")
        parked_now = parked()
    finally:
        for s in warm + idle:
            s.close()
    alive = srv.proc.poll() is None
    ctx.procs.stop(srv.proc)
    figure("connections", f"{warm_n} warm-up + {n} idle, each after one request "
           f"(opened in {opened_s:.1f} s); gapura_connections_open {open_now}, "
           f"gapura_connections_parked {parked_now} ({parked_s:.1f} s after the last opened)")
    if heap_before is None:
        return False, "the server does not tell its heap in use (GET /heap)"
    rss_waiting = (waiting_rss - before) * 1024 / n
    rss_parked = (after - before) * 1024 / n
    heap_waiting = (waiting_heap - heap_before) / n
    heap_parked = (heap_after - heap_before) / n
    figure("waiting (read buffer held)", f"heap +{heap_waiting:.0f} bytes, VmRSS +{rss_waiting:.0f} "
           "bytes per connection")
    figure("parked", f"heap +{heap_parked:.0f} bytes, VmRSS +{rss_parked:.0f} bytes per connection "
           "(VmRSS keeps the buffers freed at parking: the allocator holds them for reuse)")
    ok = alive and all_parked and heap_parked <= 4096 and open_now == n + warm_n
    why = (f"{heap_parked:.0f} bytes of heap held per parked idle connection (goal <= 4096); "
           f"VmRSS {before} -> {after} KiB, {rss_parked:.0f} bytes per connection")
    if not all_parked:
        why += f"; only {parked_now} of {want_parked} parked"
    if open_now != n + warm_n:
        why += f"; the server reported {open_now} open, not {n + warm_n}"
    if not alive:
        why += "; the server died"
    return ok, why

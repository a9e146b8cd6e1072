"""Faults: reloads (SIGHUPs under load), upstream-kill (a proxy's only
upstream killed and started again) and fd-limit (the server under a low
RLIMIT_NOFILE)."""
import os
import signal
import socket
import threading
import time
from types import SimpleNamespace

from . import common
from .common import (TICKS, CouldNotRun, cpu_ticks, figure, free_port, http_get, mget,
                     nofile_limit, wait_until)
from .gapura import respond_host, server_block, start_gapura
from .load import ensure_tools, finish_wrk, fmt_wrk, start_wrk

_GATEWAY = (502, 503, 504)


def scenario_reloads(ctx):
    ensure_tools(ctx, "wrk")
    n = 100
    port, admin = free_port(), free_port()
    profile = server_block(port, admin) + respond_host() + '\n[protection]\noff = ["all"]\n'
    srv = start_gapura(ctx, "reloads", profile, port, admin)
    m = srv.metrics()
    g0 = mget(m, "gapura_profile_generation")
    ok0 = mget(m, "gapura_reloads_total", result="ok")
    failed0 = mget(m, "gapura_reloads_total", result="failed")
    if g0 is None:
        raise CouldNotRun("no gapura_profile_generation in the metrics")
    secs = int(n * 0.1 + 3)
    wrk_out = os.path.join(ctx.work, "reloads.wrk")
    w = start_wrk(ctx, f"http://127.0.0.1:{port}/", 16, secs, wrk_out)
    try:
        req0 = mget(m, "gapura_requests_total") or 0
        if not wait_until(lambda: (mget(srv.metrics(), "gapura_requests_total") or 0) > req0 + 1000,
                          10):
            raise CouldNotRun("wrk's load did not reach the server")
        t0 = time.monotonic()
        for i in range(n):
            delay = t0 + i * 0.1 - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            os.kill(srv.pid, signal.SIGHUP)
        sent_over = time.monotonic() - t0
        r = finish_wrk(ctx, w, secs, wrk_out)
    finally:
        ctx.procs.stop(w)
    figure("reloads sent", f"{n} SIGHUPs to pid {srv.pid} in {sent_over:.2f} s")
    figure("wrk -t1 -c16 during the reloads", fmt_wrk(r))
    want = g0 + n
    wait_until(lambda: mget(srv.metrics(), "gapura_profile_generation") >= want, 10)
    m = srv.metrics()
    g1 = mget(m, "gapura_profile_generation")
    shard_gen = mget(m, "gapura_snapshot_generation")
    ok_n = mget(m, "gapura_reloads_total", result="ok") - ok0
    failed_n = mget(m, "gapura_reloads_total", result="failed") - failed0
    figure("generation", f"gapura_profile_generation {g0} -> {g1} (+{g1 - g0}); shard serves "
           f"gapura_snapshot_generation {shard_gen}; gapura_reloads_total ok +{ok_n}, "
           f"failed +{failed_n}")
    alive = srv.proc.poll() is None
    ctx.procs.stop(srv.proc)
    ok = (alive and r["socket_errors"] == 0 and r["non2xx"] == 0 and g1 - g0 == n
          and ok_n == n and failed_n == 0)
    why = (f"{r['socket_errors']} socket errors, {r['non2xx']} non-2xx/3xx of {r['requests']} "
           f"requests; generation +{g1 - g0} of {n} reloads (ok +{ok_n}, failed +{failed_n})")
    if not alive:
        why += "; the server died"
    return ok, why


def scenario_upstream_kill(ctx):
    connect_timeout_ms = 1000
    steady, outage, after = ctx.d(3, 2), 2.0, ctx.d(3, 2)
    up_port, up_admin = free_port(), free_port()
    port, admin = free_port(), free_port()
    up_profile = server_block(up_port, up_admin) + respond_host() + \
        '\n[protection]\noff = ["all"]\n'
    profile = _upstream_kill_profile(port, admin, up_port, connect_timeout_ms)
    figure("profile", f"proxy host -> upstream group of one server 127.0.0.1:{up_port} (a second "
           f"gapura, respond host, on core {common.LOAD_CORE}); "
           f"connect_timeout_ms = {connect_timeout_ms}")

    def start_upstream():
        return start_gapura(ctx, "upstream", up_profile, up_port, up_admin,
                            core=common.LOAD_CORE)

    up = start_upstream()
    srv = start_gapura(ctx, "proxy", profile, port, admin)
    if http_get(port)[0] != 200:
        raise CouldNotRun("the proxy does not answer 200 through the upstream")
    records = []  # (t_send, latency or None, status or error string)
    up, times, post_out = _outage_under_gets(ctx, port, records, up, start_upstream,
                                             (steady, outage, after))
    post_after = _post_after_return(port, up)
    alive = srv.proc.poll() is None
    m = srv.metrics() if alive else []
    ctx.procs.stop(srv.proc)
    ctx.procs.stop(up.proc)
    o = _outage_phases(records, times, connect_timeout_ms)
    _upstream_kill_figures(o, records, post_out, post_after, m, connect_timeout_ms)
    return _upstream_kill_verdict(o, post_out, post_after, alive, connect_timeout_ms)


def _upstream_kill_profile(port, admin, up_port, connect_timeout_ms):
    """The proxy's profile: one host proxying to a group of one upstream."""
    return server_block(port, admin) + f"""
[[upstream]]
name = "origin"
servers = ["127.0.0.1:{up_port}"]
connect_timeout_ms = {connect_timeout_ms}

[[host]]
names = ["a.test"]
default = true
kind = "proxy"
  [[host.route]]
  path = "/"
  upstream = "origin"

[protection]
off = ["all"]
"""


def _sequential_gets(port, records, stop):
    """GETs one after another, a new connection each, until `stop` is set;
    each appended to `records` as (t_send, latency, status or error)."""
    while not stop.is_set():
        t = time.monotonic()
        try:
            status, lat = http_get(port, timeout=10)
            records.append((t, lat, status))
        except Exception as e:  # an answer that never came
            records.append((t, time.monotonic() - t, f"{type(e).__name__}: {e}"))
        stop.wait(0.01)


def _outage_under_gets(ctx, port, records, up, start_upstream, phases):
    """The upstream up for the steady phase, killed for the outage (a POST
    sent half-way through it), started again and up for the phase after,
    all under _sequential_gets. Returns the upstream started again, the
    times (kill, restart, listening again) and the POST's (status, latency)."""
    steady, outage, after = phases
    stop = threading.Event()
    th = threading.Thread(target=_sequential_gets, args=(port, records, stop), daemon=True)
    post_out = None
    th.start()
    try:
        time.sleep(steady)  # the steady phase (the upstream is known to be up)
        t_kill = time.monotonic()
        ctx.procs.kill(up.proc)
        figure("upstream killed", f"SIGKILL to pid {up.pid}")
        time.sleep(outage / 2)
        try:
            st, lat = http_get(port, method="POST", body=b"x" * 100, timeout=10)
            post_out = (st, lat)
        except Exception as e:
            post_out = (f"{type(e).__name__}: {e}", None)
        rest = t_kill + outage - time.monotonic()
        if rest > 0:
            time.sleep(rest)
        t_restart = time.monotonic()
        up = start_upstream()
        t_back = time.monotonic()
        figure("upstream started again", f"pid {up.pid}, listening {t_back - t_restart:.3f} s "
               f"after the start (outage {t_back - t_kill:.2f} s)")
        time.sleep(after)
    finally:
        stop.set()
        th.join(timeout=15)
    return up, (t_kill, t_restart, t_back), post_out


def _post_after_return(port, up):
    """A POST now, with nothing else in flight: the upstream must count it
    once. Returns (status, requests the upstream counted)."""
    try:
        before = mget(up.metrics(), "gapura_requests_total")
        st, lat = http_get(port, method="POST", body=b"y" * 100, timeout=10)
        n_after = wait_until(lambda: mget(up.metrics(), "gapura_requests_total") - before, 2)
        return (st, n_after)
    except Exception as e:
        return (f"{type(e).__name__}: {e}", None)


def _outage_phases(records, times, connect_timeout_ms):
    """The GETs sorted into the phases: steady, outage and the first 200
    after the return."""
    t_kill, t_restart, t_back = times
    o = SimpleNamespace()
    o.errors = [r for r in records if isinstance(r[2], str)]
    o.steady = [r for r in records if r[0] + r[1] < t_kill]
    o.down = [r for r in records if t_kill <= r[0] and r[0] + r[1] < t_restart]
    o.down_bad = [r for r in o.down
                  if r[2] not in _GATEWAY or r[1] * 1000 > connect_timeout_ms]
    o.down_max_ms = max((r[1] * 1000 for r in o.down), default=0.0)
    first_200 = next((r for r in records if r[0] >= t_restart and r[2] == 200), None)
    o.first_200_s = None if first_200 is None else max(0.0, first_200[0] + first_200[1] - t_back)
    o.statuses = {}
    for r in records:
        key = r[2] if not isinstance(r[2], str) else "error"
        o.statuses[key] = o.statuses.get(key, 0) + 1
    return o


def _upstream_kill_figures(o, records, post_out, post_after, m, connect_timeout_ms):
    figure("requests", f"{len(records)} sequential GETs, a new connection each: {o.statuses}")
    figure("steady phase", f"{len(o.steady)} answered before the kill, "
           f"{sum(1 for r in o.steady if r[2] == 200)} of them 200")
    figure("outage (sent after the kill, answered before the restart)",
           f"{len(o.down)} requests: {sorted({r[2] for r in o.down}, key=str)}, max latency "
           f"{o.down_max_ms:.1f} ms (connect timeout {connect_timeout_ms} ms)")
    figure("first 200 after the upstream listened again",
           "none" if o.first_200_s is None else f"{o.first_200_s * 1000:.1f} ms after its return")
    figure("POST during the outage", f"status {post_out[0]}" +
           (f", {post_out[1] * 1000:.1f} ms" if post_out[1] is not None else ""))
    figure("POST after the return", f"status {post_after[0]}, requests the upstream counted for it: "
           f"{post_after[1]} (gapura_requests_total of the upstream; more than 1 is a retry)")
    if m:
        figure("proxy counters", f"gapura_upstream_failures_total "
               f"{mget(m, 'gapura_upstream_failures_total')}, 5xx responses "
               f"{mget(m, 'gapura_responses_total', **{'class': '5xx'})}")
    for r in o.errors[:5]:
        figure("no answer", f"sent at +{r[0] - records[0][0]:.3f} s: {r[2]}")


def _upstream_kill_verdict(o, post_out, post_after, alive, connect_timeout_ms):
    post_ok = post_out[0] in _GATEWAY and post_out[1] is not None \
        and post_out[1] * 1000 <= connect_timeout_ms and post_after[0] == 200 and post_after[1] == 1
    ok = (alive and not o.errors and not o.down_bad and len(o.down) > 0
          and o.first_200_s is not None and o.first_200_s <= 1.0 and post_ok)
    why = (f"{len(o.down)} requests in the outage, {len(o.down_bad)} of them not a 502/503/504 "
           f"within {connect_timeout_ms} ms (max {o.down_max_ms:.1f} ms); first 200 "
           + ("never" if o.first_200_s is None else f"{o.first_200_s * 1000:.0f} ms")
           + f" after the return (need <= 1000); {len(o.errors)} requests without an answer; "
           f"POST in the outage {post_out[0]}, POST after counted {post_after[1]}x by the upstream")
    if not alive:
        why += "; the proxy died"
    return ok, why


def scenario_fd_limit(ctx):
    limit, held_n = 256, 600
    port, admin = free_port(), free_port()
    profile = server_block(port, admin) + respond_host() + '\n[protection]\noff = ["all"]\n'
    figure("profile", f"respond host, [protection] off = all (the descriptor limit, not a "
           f"connection limit, must be what stops the accepts); RLIMIT_NOFILE {limit} "
           "(soft and hard, set before exec)")
    srv = start_gapura(ctx, "fd-limit", profile, port, admin, preexec=nofile_limit(limit))
    m0 = srv.metrics()
    candidates = ("gapura_accept_errors_total", "gapura_accept_refused_total",
                  "gapura_connections_refused_total", "gapura_connection_limit_refused_total")
    have = [c for c in candidates if mget(m0, c) is not None]
    figure("counters watched", ", ".join(have) + ("" if "gapura_accept_errors_total" in have else
           " (this binary exposes no gapura_accept_errors_total)"))
    c0 = {c: mget(m0, c) for c in have}
    conns, refused_connects = [], 0
    try:
        for _ in range(held_n):
            try:
                s = socket.create_connection(("127.0.0.1", port), timeout=1)
            except OSError:
                refused_connects += 1
                continue
            conns.append(s)
            try:
                s.sendall(b"GET / HTTP/1.1\r\nHost: a.test\r\n\r\n")
            except OSError:
                pass
        figure("connections opened and held", f"{len(conns)} of {held_n} "
               f"({refused_connects} connects failed)")
        saw_log = wait_until(lambda: srv.log_has("accept failed"), 5)
        figure("server log says 'accept failed'", "yes" if saw_log else "no")
        try:
            fds = len(os.listdir(f"/proc/{srv.pid}/fd"))
        except OSError:
            fds = None
        figure("server descriptors open", fds)
        c_start, t_start = cpu_ticks(srv.pid), time.monotonic()
        time.sleep(2.0)  # the measured window for the server's CPU
        cpu_pct = (cpu_ticks(srv.pid) - c_start) / TICKS / (time.monotonic() - t_start) * 100
        alive = srv.proc.poll() is None
        figure("server CPU while held", f"{cpu_pct:.1f} % of a core over 2 s "
               "(utime + stime, /proc/PID/stat)")
        figure("alive while held", "yes" if alive else f"no (status {srv.proc.returncode})")
    finally:
        t_close = time.monotonic()
        for s in conns:
            s.close()
    recovered = None
    while time.monotonic() - t_close < 2.0 and srv.proc.poll() is None:
        try:
            if http_get(port, timeout=0.5)[0] == 200:
                recovered = time.monotonic() - t_close
                break
        except Exception:
            time.sleep(0.05)
    figure("first 200 after the connections closed",
           "none within 2 s" if recovered is None else f"{recovered * 1000:.0f} ms")
    deltas = {}
    if srv.proc.poll() is None:
        try:
            m1 = wait_until(lambda: _try_metrics(srv), 5)
            if m1:
                deltas = {c: mget(m1, c) - c0[c] for c in have}
        except Exception:
            pass
    figure("counter increases", ", ".join(f"{c} +{d}" for c, d in deltas.items()) or "unreadable")
    alive = alive and srv.proc.poll() is None
    ctx.procs.stop(srv.proc)
    counted = any(d > 0 for d in deltas.values())
    ok = alive and cpu_pct < 20 and counted and recovered is not None
    why = (f"CPU {cpu_pct:.1f} % of a core while {len(conns)} connections were held (need < 20 %), "
           f"{'alive' if alive else 'DIED'}, counters "
           + (", ".join(f"{c} +{d}" for c, d in deltas.items()) or "unreadable")
           + " (need one > 0), first 200 "
           + ("never within 2 s" if recovered is None else f"{recovered * 1000:.0f} ms")
           + " after closing (need <= 2000)")
    return ok, why


def _try_metrics(srv):
    try:
        return srv.metrics()
    except OSError:
        return None

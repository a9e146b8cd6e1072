"""slow-headers and slow-body: wrk alone, then under a slowhttptest attack,
then the floor (the same attack on a decoy server on the load core)."""
import os
import re
import subprocess
import threading
import time

from . import common
from .common import (TICKS, CouldNotRun, cpu_ticks, figure, free_port, mget, pinned,
                     wait_until)
from .gapura import profile_default, respond_host, server_block, start_gapura
from .load import ensure_tools, run_wrk
from .load import fmt_wrk as _fmt_wrk


def fmt_wrk(r):
    out = _fmt_wrk(r) + (f", server CPU {100 * r['server_cpu']:.0f} % of a core, load core "
                         f"{100 * r['load_busy']:.0f} % busy")
    if r["attacker_cpu"]:
        out += f" (slowhttptest {100 * r['attacker_cpu']:.0f} % of it)"
    return out


def core_ticks(core):
    """(busy, all) jiffies of one CPU so far, from /proc/stat."""
    with open("/proc/stat") as f:
        for line in f:
            if line.startswith(f"cpu{core} "):
                v = [int(x) for x in line.split()[1:]]
                idle = v[3] + (v[4] if len(v) > 4 else 0)
                return sum(v) - idle, sum(v)
    return 0, 0


def busy_run(ctx, server, url, d, name, attacker=None):
    """wrk -c16 against `url` for `d` s, with the share of a core the
    server under test spent meanwhile (utime + stime; below 100 % the
    server had time to spare), how busy the load core was, and the
    attacker's share of it."""
    t0, c0 = time.monotonic(), cpu_ticks(server.pid)
    a0 = cpu_ticks(attacker.pid) if attacker else 0
    l0 = core_ticks(common.LOAD_CORE)
    out = run_wrk(ctx, url, 16, d, name)
    wall = time.monotonic() - t0
    out["server_cpu"] = (cpu_ticks(server.pid) - c0) / TICKS / wall
    l1 = core_ticks(common.LOAD_CORE)
    out["load_busy"] = (l1[0] - l0[0]) / max(1, l1[1] - l0[1])
    out["attacker_cpu"] = (cpu_ticks(attacker.pid) - a0) / TICKS / wall if attacker else 0.0
    return out


def attacked_run(ctx, name, target, attack_url, url, body, attack, d, measured):
    """Runs slowhttptest with `attack` connections against `attack_url`
    (served by `target`), waits until `target` holds them (at most 15 s),
    then measures `url` with wrk -c16 for `d` s; stops the attacker.
    Returns (connections held when wrk started, wrk's summary)."""
    cmd = ["slowhttptest", "-B" if body else "-H", "-c", str(attack), "-r", "1000", "-i", "10",
           "-l", str(d + 120), "-x", "24", "-p", "3", "-u", attack_url]
    if body:
        # Big, and under the profile's max_body_bytes (100 MiB), which would
        # refuse the request with 413 at once.
        cmd += ["-s", str(64 << 20)]
    slow_out = os.path.join(ctx.work, f"{name}.slowhttptest")
    f = open(slow_out, "w")
    try:
        slow = ctx.procs.start(pinned(common.LOAD_CORE, cmd), stdout=f,
                               stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=ctx.work)
    finally:
        f.close()
    figure("attacker", " ".join(cmd) + f" (pid {slow.pid})")
    try:
        t0 = time.monotonic()
        peak = [0]

        def opened():
            n = mget(target.metrics(), "gapura_connections_open") or 0
            peak[0] = max(peak[0], n)
            if slow.poll() is not None:
                raise CouldNotRun(f"slowhttptest exited with {slow.returncode}: "
                                  f"{_tail(slow_out)}")
            return n >= attack

        wait_until(opened, 15, step=0.25)
        held = mget(target.metrics(), "gapura_connections_open")
        figure("attack connections open before the measured run",
               f"{held} (peak {peak[0]}, after {time.monotonic() - t0:.1f} s)")
        samples = []
        stop = threading.Event()

        def sample():
            while not stop.is_set():
                try:
                    samples.append(mget(target.metrics(), "gapura_connections_open"))
                except OSError:
                    pass
                stop.wait(0.5)

        th = threading.Thread(target=sample, daemon=True)
        th.start()
        try:
            hit = busy_run(ctx, measured, url, d, f"{name}-attacked", attacker=slow)
        finally:
            stop.set()
            th.join()
        if samples:
            figure("attack connections open during the measured run",
                   f"min {min(samples)}, max {max(samples)} ({len(samples)} samples)")
    finally:
        ctx.procs.stop(slow)
    return held, hit


def scenario_slow(ctx, name, body):
    ensure_tools(ctx, "wrk", "slowhttptest")
    attack = 4000
    d = ctx.d(5, 2)
    port, admin = free_port(), free_port()
    # A body limit of 100 MiB: the attack's 64 MiB bodies are taken, and
    # their pace is what is measured (under the default 1 MiB they would
    # get 413 at once).
    profile = server_block(port, admin, "max_connections_per_shard = 20000\n") + \
        respond_host(extra='limits = { max_body_bytes = "100 MiB" }\n') + \
        '\n[protection]\noff = ["all"]\n'
    header_default = profile_default("header_timeout_ms")
    body_default = profile_default("body_timeout_ms")
    figure("header timeout in effect",
           f"{header_default} ms (header_timeout_ms not set in the profile: the server's default, "
           "docs/profile.md)")
    if body:
        figure("body timeout in effect",
               f"{body_default} ms between two reads of a body (body_timeout_ms not set: default)")
    figure("profile", "one respond host, max_connections_per_shard = 20000, [protection] off = all "
           "(the attack connections come from 127.0.0.1 and must not be refused at accept)")
    srv = start_gapura(ctx, name, profile, port, admin)
    url = f"http://127.0.0.1:{port}/"
    run_wrk(ctx, url, 16, 1, f"{name}-warmup")
    base = busy_run(ctx, srv, url, d, f"{name}-baseline")
    figure("baseline (wrk -t1 -c16 alone)", fmt_wrk(base))

    held, hit = attacked_run(ctx, name, srv, url, url, body, attack, d, srv)
    figure("attacked (same wrk, attack held)", fmt_wrk(hit))
    # The floor: the same attack on a decoy server on the load core, while
    # wrk measures this one. What wrk loses then is the attacker's share
    # of the load core, not this server's.
    dport, dadmin = free_port(), free_port()
    decoy_profile = server_block(dport, dadmin, "max_connections_per_shard = 20000\n") + \
        respond_host() + '\n[protection]\noff = ["all"]\n'
    decoy = start_gapura(ctx, f"{name}-decoy", decoy_profile, dport, dadmin,
                         core=common.LOAD_CORE)
    try:
        _, floor = attacked_run(ctx, f"{name}-decoy", decoy, f"http://127.0.0.1:{dport}/", url,
                                body, attack, d, srv)
    finally:
        ctx.procs.stop(decoy.proc)
    figure("floor (same attack on a decoy on the load core, wrk on this server)", fmt_wrk(floor))
    if floor["rps"]:
        figure("this server's own share",
               f"attacked {hit['rps']:.0f} / floor {floor['rps']:.0f} req/s = "
               f"{hit['rps'] / floor['rps']:.2f}x; floor / baseline = "
               f"{floor['rps'] / base['rps']:.2f}x")
    m = srv.metrics()
    figure("server counters after the attack",
           f"header_timeout {mget(m, 'gapura_errors_total', kind='header_timeout')}, "
           f"body_timeout {mget(m, 'gapura_errors_total', kind='body_timeout')}, "
           f"accepted {mget(m, 'gapura_connections_accepted_total')}, "
           f"refused {mget(m, 'gapura_connections_refused_total')}")
    alive = srv.proc.poll() is None
    ctx.procs.stop(srv.proc)
    rps_ratio = hit["rps"] / base["rps"] if base["rps"] else 0.0
    p99_ratio = hit["p99_ms"] / base["p99_ms"] if base["p99_ms"] else float("inf")
    ok_attack = (held or 0) >= 0.9 * attack
    ok = rps_ratio >= 0.8 and p99_ratio <= 3.0 and ok_attack and alive
    why = (f"attacked {hit['rps']:.0f} req/s = {rps_ratio:.2f}x baseline {base['rps']:.0f} "
           f"(need >= 0.80), p99 {hit['p99_ms']:.3f} ms = {p99_ratio:.2f}x baseline "
           f"{base['p99_ms']:.3f} ms (need <= 3.00), {held} attack connections held "
           f"(need >= {int(0.9 * attack)})")
    if floor["rps"] and base["rps"]:
        why += (f"; floor (attack on a decoy) {floor['rps'] / base['rps']:.2f}x baseline, "
                f"this server's share {hit['rps'] / floor['rps']:.2f}x; server CPU "
                f"{100 * base['server_cpu']:.0f} % of a core alone, "
                f"{100 * hit['server_cpu']:.0f} % attacked, load core "
                f"{100 * hit['load_busy']:.0f} % busy attacked")
    if not alive:
        why += ", the server died"
    return ok, why


def _tail(path, n=4):
    try:
        with open(path, errors="replace") as f:
            text = re.sub(r"\x1b\[[0-9;]*[A-Za-z]", "", f.read())
        return " | ".join(l.strip() for l in text.splitlines() if l.strip())[-400:]
    except OSError:
        return ""


def scenario_slow_headers(ctx):
    return scenario_slow(ctx, "slow-headers", body=False)


def scenario_slow_body(ctx):
    return scenario_slow(ctx, "slow-body", body=True)

"""flood: thousands of unique 127/8 sources against a per-client rate limit
while one legitimate address runs an open loop under it."""
import os
import subprocess
import threading
import time

from . import common
from .common import CouldNotRun, figure, free_port, mget, pinned, rss_kib
from .gapura import respond_host, server_block, start_gapura
from .idle import heap_bytes
from .load import read_report


def scenario_flood(ctx):
    if not os.access(ctx.loadtest, os.X_OK):
        raise CouldNotRun(f"no gapura-loadtest at {ctx.loadtest}")
    warm, measure = ctx.d(5, 3), ctx.d(20, 6)
    total = warm + measure
    chunk, flood_conns = 2, 256
    rate, burst, legit_rate = 20, 40, 10
    port, admin = free_port(), free_port()
    profile = _flood_profile(port, admin, rate, burst)
    _describe_flood(rate, burst, legit_rate, chunk, flood_conns)
    srv = start_gapura(ctx, "flood", profile, port, admin)
    srv.rss_at_rest_kib = rss_kib(srv.pid)
    url = f"http://127.0.0.1:{port}/"
    legit_json = os.path.join(ctx.work, "flood-legit.json")
    flood = _Flood(ctx, srv, url, chunk, flood_conns)
    _run_flood(ctx, flood, url, legit_rate, total, legit_json)
    alive = srv.proc.poll() is None
    m = srv.metrics() if alive else []
    ctx.procs.stop(srv.proc)
    if not os.path.exists(legit_json):
        raise CouldNotRun("the legitimate client wrote no report")
    lg = read_report(legit_json)
    _flood_figures(flood, m)
    success = lg["ok"] / lg["all"] if lg["all"] else 0.0
    figure("legitimate client", f"{lg['ok']} 2xx of {lg['all']} ({100 * success:.2f} %), "
           f"statuses {dict(sorted(lg['status'].items()))}, errors {lg['errors']}")
    mem = _memory_after_warmup(flood.samples, warm, srv.rss_at_rest_kib)
    ok = alive and mem.heap_ok and mem.rss_ok and success >= 0.99
    why = f"{mem.why}; legitimate success {100 * success:.2f} % of {lg['all']} (need >= 99 %)"
    if not alive:
        why += "; the server died"
    return ok, why


def _flood_profile(port, admin, rate, burst):
    return server_block(port, admin, "max_connections_per_shard = 20000\n") + f"""
[[rate_limit]]
name = "per_client"
requests = {rate}
per = "second"
burst = {burst}
key = "ip"

[quota.source]
requests = 1000000
""" + respond_host(extra='rate_limit = "per_client"\n') + """
[protection]
off = ["global", "client_rate", "connections"]
"""


def _describe_flood(rate, burst, legit_rate, chunk, flood_conns):
    figure("profile", f"respond host with rate_limit per_client (key ip: {rate}/s, burst {burst}; "
           "one bucket per address in the rate table); [quota.source] requests = 1000000 per /24 "
           "(its window table tracks every /24, but only the per-client limit refuses); "
           "[protection] off = global (one flooding core would spend the shard's global budget "
           "and refuse the legitimate client with it), client_rate (replaced by per_client), "
           "connections (so the flood's sources reach the request tables)")
    figure("legitimate client",
           f"gapura-loadtest open loop -R {legit_rate} -c2 from 127.0.0.1 only: {legit_rate} req/s "
           f"is half the per-client rate, so the limit never refuses it, and no flood source is "
           "in its /24 (127.0.0.0/24) or shares its bucket")
    figure("flood", f"gapura-loadtest -c{flood_conns} closed loop, a fresh /16 every {chunk} s "
           f"(127.64.0.0/16, 127.65.0.0/16, ...): {flood_conns} new source addresses each time, "
           f"each sending far over {rate}/s")


class _Flood:
    """The flood (runs of gapura-loadtest one after another, each from a
    fresh /16) and the server's VmRSS and heap in use sampled once a second,
    each run by a thread until `stop` is set."""

    def __init__(self, ctx, srv, url, chunk, flood_conns):
        self.ctx, self.srv, self.url = ctx, srv, url
        self.chunk, self.flood_conns = chunk, flood_conns
        self.samples = []
        self.stop = threading.Event()
        self.starting = threading.Lock()
        self.reports = []
        self.procs = []
        self.chunks_run = 0

    def rss_sampler(self, t0):
        while not self.stop.is_set():
            try:
                rss = rss_kib(self.srv.pid)
            except OSError:
                return
            heap = heap_bytes(self.srv)
            self.samples.append((time.monotonic() - t0, rss, heap))
            self.stop.wait(1.0)

    def flooder(self, t_end):
        ctx, chunk, flood_conns = self.ctx, self.chunk, self.flood_conns
        k = 0
        while time.monotonic() < t_end - 0.5:
            left = max(1, min(chunk, int(t_end - time.monotonic())))
            path = os.path.join(ctx.work, f"flood-{k}.json")
            cidr = f"127.{64 + (k % 160)}.0.0/16"
            with self.starting:  # never starts one once the scenario is stopping
                if self.stop.is_set():
                    return
                p = ctx.procs.start(pinned(common.LOAD_CORE, [
                    ctx.loadtest, "-t1", f"-c{flood_conns}", f"-d{left}s", "--timeout", "2s",
                    "--no-progress", "-q", "--source-ips", cidr, "--json", path, self.url]),
                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                    stdin=subprocess.DEVNULL)
                self.procs.append(p)
            try:
                p.wait(timeout=left + 10)
            except subprocess.TimeoutExpired:
                pass
            ctx.procs.stop(p)
            if os.path.exists(path):
                self.reports.append(path)
            self.chunks_run += 1
            k += 1


def _run_flood(ctx, flood, url, legit_rate, total, legit_json):
    """The legitimate client's open loop for `total` seconds, with the flood
    and the VmRSS sampler running beside it; everything stopped after."""
    t0 = time.monotonic()
    legit = ctx.procs.start(pinned(common.LOAD_CORE, [
        ctx.loadtest, "-t1", "-c2", "-R", str(legit_rate), f"-d{total}s", "--timeout", "2s",
        "--no-progress", "-q", "--source-ips", "127.0.0.1/32", "--json", legit_json, url]),
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL)
    th_rss = threading.Thread(target=flood.rss_sampler, args=(t0,), daemon=True)
    th_flood = threading.Thread(target=flood.flooder, args=(t0 + total,), daemon=True)
    th_rss.start()
    th_flood.start()
    try:
        try:
            legit.wait(timeout=total + 15)
        except subprocess.TimeoutExpired:
            pass
        ctx.procs.stop(legit)
        th_flood.join(timeout=flood.chunk + 20)
    finally:
        with flood.starting:
            flood.stop.set()
        for p in flood.procs:
            ctx.procs.stop(p)
        th_rss.join(timeout=5)
        th_flood.join(timeout=5)


def _flood_figures(flood, m):
    """What the flood sent, from its reports, and what the server refused."""
    fl = {"ok": 0, "all": 0, "errors": 0, "429": 0}
    for path in flood.reports:
        r = read_report(path)
        fl["ok"] += r["ok"]
        fl["all"] += r["all"]
        fl["errors"] += r["errors"]
        fl["429"] += r["status"].get(429, 0)
    figure("flood sent", f"{flood.chunks_run} runs, {flood.chunks_run * flood.flood_conns} unique "
           f"sources, {fl['all']} requests: {fl['ok']} 2xx, {fl['429']} 429, {fl['errors']} "
           "socket errors")
    if m:
        figure("server refusals", f"per_client "
               f"{mget(m, 'gapura_rate_limit_total', limit='per_client', result='refused')} "
               f"(gapura_rate_limit_total), by quota level: source "
               f"{mget(m, 'gapura_quota_refused_total', level='source')}, rate "
               f"{mget(m, 'gapura_quota_refused_total', level='rate')}; untracked (a full table) "
               f"{mget(m, 'gapura_quota_untracked_total')}; gapura_quota_admitted_total "
               f"{mget(m, 'gapura_quota_admitted_total')}")


class _Memory:
    """The flood's memory verdict: the heap in use stays within +-5 % of its
    value at the end of the warm-up (the flood's sources allocate nothing:
    the rate and tracked-key tables are reserved whole at start), and
    VmRSS never passes its value at rest plus that heap (the tables' pages
    become resident as the flood's keys are first written into them,
    never more than was reserved)."""

    def __init__(self, ref_heap, heaps, rss_at_rest, hi_rss, warm):
        lo, hi = min(heaps), max(heaps)
        dev_lo, dev_hi = (lo - ref_heap) / ref_heap * 100, (hi - ref_heap) / ref_heap * 100
        bound = rss_at_rest + ref_heap // 1024
        self.heap_ok = abs(dev_lo) <= 5 and abs(dev_hi) <= 5
        self.rss_ok = hi_rss <= bound
        self.why = (f"heap in use at the end of the {warm} s warm-up {ref_heap} bytes, after "
                    f"it min {lo} ({dev_lo:+.1f} %) max {hi} ({dev_hi:+.1f} %) (need within "
                    f"+-5 %); VmRSS max {hi_rss} KiB (need <= {bound} KiB: {rss_at_rest} at "
                    f"rest plus the heap)")


def _memory_after_warmup(samples, warm, rss_at_rest):
    """The VmRSS and heap samples printed, and the verdict on them."""
    after = [s for s in samples if s[0] >= warm and s[2] is not None]
    if not after:
        raise CouldNotRun(f"no heap samples after the {warm} s warm-up (GET /heap)")
    figure("VmRSS (KiB), one a second", " ".join(f"{t:.0f}s:{r}" for t, r, _ in samples))
    figure("heap in use (KiB), one a second",
           " ".join(f"{t:.0f}s:{h // 1024}" for t, _, h in samples if h is not None))
    return _Memory(after[0][2], [h for _, _, h in after], rss_at_rest,
                   max(r for _, r, _ in samples), warm)

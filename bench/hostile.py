#!/usr/bin/env python3
"""Hostile traffic and faults against Gapura, one scenario at a time.

Every scenario starts its own Gapura (one shard, `taskset -c 0`) with a
profile written to a private temp dir, runs its load generators and
attackers on core 1, prints its figures and ends with exactly one line
`PASS <scenario>: ...` or `FAIL <scenario>: ...` carrying the figures that
decided it. A scenario that cannot run (a missing tool, a server that does
not start) prints `FAIL <scenario>: could not run: <why>`. A summary table
of every scenario follows at the end; the exit status is 1 when any
scenario failed.

  slow-headers   wrk alone, then wrk while slowhttptest -H holds 4,000
                 slow-header connections: rps >= 0.8x and p99 <= 3x baseline
  slow-body      the same with slowhttptest -B (slow request bodies)
  flood          gapura-loadtest from thousands of unique 127/8 sources
                 against a per-client rate limit, while one legitimate
                 address runs an open loop under the limit: VmRSS within
                 +-5 % after warm-up, legitimate success >= 99 %
  reloads        100 SIGHUPs 100 ms apart under wrk -c16: no socket error,
                 no non-2xx, the generation advanced by exactly 100
  upstream-kill  a proxy to one upstream (a second Gapura) that is killed
                 for 2 s and started again on the same port: every answer in
                 the outage a 502/503/504 within the connect timeout, the
                 first 200 within 1 s of the upstream's return, no request
                 left without an answer, a POST forwarded once
  idle           10,000 idle keep-alive connections: VmRSS per connection
                 after a 500-connection warm-up, goal <= 4096 bytes
  fd-limit       the server under RLIMIT_NOFILE 256 with 600 connections
                 held: no busy loop (< 20 % of a core), alive, a counter of
                 failed accepts or refusals went up, serving within 2 s once
                 the connections close
  aborts         clients abort a proxied request at every stage (mid head,
                 mid body, waiting for the upstream, mid response body), 50
                 times each: the open-connection, lease and upstream gauges
                 return to their values before the test

All traffic goes to 127.0.0.0/8. Every process is started here and stopped
by its pid (SIGTERM, then SIGKILL after 10 s), also on Ctrl-C or an error.
Python 3.11, standard library only.

  bench/hostile.py [--scenarios a,b] [--quick] [--gapura PATH]
                   [--loadtest PATH] [--no-build]
"""
import argparse
import concurrent.futures
import http.client
import http.server
import json
import os
import re
import resource
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import traceback
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCENARIOS = ("slow-headers", "slow-body", "flood", "reloads", "upstream-kill", "idle",
             "fd-limit", "aborts")
TICKS = os.sysconf("SC_CLK_TCK")
SERVER_CORE = 0
LOAD_CORE = 1


class CouldNotRun(Exception):
    """The scenario could not be run at all (a missing tool, a server that
    did not start); reported as `FAIL <scenario>: could not run: ...`."""


def say(msg=""):
    print(msg, flush=True)


def figure(key, value):
    say(f"  {key}: {value}")


# ---------------------------------------------------------------- processes

class Procs:
    """Every child process this program starts, stopped by its own pid."""

    def __init__(self):
        self.live = []

    def start(self, cmd, **kw):
        p = subprocess.Popen(cmd, **kw)
        self.live.append(p)
        return p

    def stop(self, p, sig=signal.SIGTERM, timeout=10):
        if p is None:
            return
        if p.poll() is None:
            try:
                p.send_signal(sig)
            except ProcessLookupError:
                pass
            try:
                p.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        if p in self.live:
            self.live.remove(p)

    def kill(self, p):
        """SIGKILL by pid (a crash, not a stop) and reap it."""
        if p.poll() is None:
            p.kill()
        p.wait()
        if p in self.live:
            self.live.remove(p)

    def stop_all(self):
        for p in list(reversed(self.live)):
            try:
                self.stop(p)
            except Exception as e:  # keep stopping the others
                say(f"hostile.py: could not stop pid {p.pid}: {e}")


def pinned(core, cmd):
    if shutil.which("taskset") is None or core is None:
        return list(cmd)
    return ["taskset", "-c", str(core), *cmd]


def nofile_limit(n):
    def apply():
        resource.setrlimit(resource.RLIMIT_NOFILE, (n, n))
    return apply


# -------------------------------------------------------------------- /proc

def rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS"):
                return int(line.split()[1])
    return 0


def cpu_ticks(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])


def tcp_sockets_to(port):
    """Counts by TCP state of the sockets on this host whose remote port
    is `port` (the proxy's side of its upstream connections)."""
    states = {}
    for path in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(path) as f:
                next(f)
                for line in f:
                    parts = line.split()
                    rem_port = int(parts[2].rsplit(":", 1)[1], 16)
                    if rem_port == port:
                        states[parts[3]] = states.get(parts[3], 0) + 1
        except OSError:
            pass
    return {"established": states.get("01", 0), "close_wait": states.get("08", 0),
            "other": sum(n for s, n in states.items() if s not in ("01", "08"))}


# -------------------------------------------------------------------- ports

_taken = set()


def free_port():
    while True:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port not in _taken:
            _taken.add(port)
            return port


def port_accepts(port, timeout=0.2):
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout):
            return True
    except OSError:
        return False


# ------------------------------------------------------------------ metrics

LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


def metrics(admin, timeout=2):
    """The admin listener's /metrics as [(name, {label: value}, value)]."""
    text = urllib.request.urlopen(f"http://127.0.0.1:{admin}/metrics", timeout=timeout).read()
    out = []
    for line in text.decode().splitlines():
        if not line or line.startswith("#"):
            continue
        try:
            key, value = line.rsplit(" ", 1)
            value = float(value)
        except ValueError:
            continue
        if "{" in key:
            name, rest = key.split("{", 1)
            labels = dict(LABEL.findall(rest))
        else:
            name, labels = key, {}
        out.append((name, labels, value))
    return out


def mget(samples, name, **labels):
    """The sum of a metric's samples that carry `labels`; None when the
    server exposes no metric of that name."""
    vals = [v for n, l, v in samples if n == name and all(l.get(k) == x for k, x in labels.items())]
    return int(sum(vals)) if vals else None


def mnames(samples):
    return sorted({n for n, _, _ in samples})


# --------------------------------------------------------------------- HTTP

def http_get(port, path="/", host="a.test", timeout=2.0, method="GET", body=None):
    """(status, latency_s) or raises OSError / http.client exceptions."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        t = time.monotonic()
        headers = {"Host": host}
        conn.request(method, path, body=body, headers=headers)
        r = conn.getresponse()
        r.read()
        return r.status, time.monotonic() - t
    finally:
        conn.close()


# ------------------------------------------------------------------- gapura

class Server:
    def __init__(self, proc, port, admin, log_path):
        self.proc, self.port, self.admin, self.log_path = proc, port, admin, log_path

    @property
    def pid(self):
        return self.proc.pid

    def metrics(self):
        return metrics(self.admin)

    def log_tail(self, n=8):
        try:
            with open(self.log_path, errors="replace") as f:
                return " | ".join(f.read().splitlines()[-n:])
        except OSError:
            return ""

    def log_has(self, text):
        try:
            with open(self.log_path, errors="replace") as f:
                return text in f.read()
        except OSError:
            return False


def respond_host(names='"a.test"', extra=""):
    return f"""
[[host]]
names = [{names}]
default = true
kind = "respond"
status = 200
content_type = "text/plain"
body = "hello\\n"
{extra}"""


def server_block(port, admin, extra=""):
    return f"""[server]
listen = ["127.0.0.1:{port}"]
admin = "127.0.0.1:{admin}"
shards = 1
{extra}"""


def start_gapura(ctx, name, profile, port, admin, core=SERVER_CORE, preexec=None,
                 deadline_s=20):
    path = os.path.join(ctx.work, f"{name}.toml")
    with open(path, "w") as f:
        f.write(profile)
    log_path = os.path.join(ctx.work, f"{name}.log")
    log = open(log_path, "ab")
    try:
        proc = ctx.procs.start(pinned(core, [ctx.gapura, "run", "--allow-root", "--profile", path]),
                               stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                               preexec_fn=preexec)
    finally:
        log.close()
    srv = Server(proc, port, admin, log_path)
    deadline = time.monotonic() + deadline_s
    while True:
        if proc.poll() is not None:
            raise CouldNotRun(f"{name} exited with status {proc.returncode}: {srv.log_tail()}")
        if port_accepts(port):
            try:
                srv.metrics()
                return srv
            except OSError:
                pass
        if time.monotonic() > deadline:
            raise CouldNotRun(f"{name} did not listen on {port} and {admin} within {deadline_s} s: "
                              f"{srv.log_tail()}")
        time.sleep(0.05)


def wait_until(pred, deadline_s, step=0.1):
    """Polls pred() until it returns a true value or the deadline passes;
    returns the last value."""
    end = time.monotonic() + deadline_s
    while True:
        v = pred()
        if v or time.monotonic() > end:
            return v
        time.sleep(step)


def profile_default(key):
    """A [server] default from docs/profile.md, as documented."""
    try:
        with open(os.path.join(ROOT, "docs", "profile.md")) as f:
            m = re.search(r"^\| `" + re.escape(key) + r"` \| integer \| `(\d+)`", f.read(), re.M)
        return int(m.group(1)) if m else None
    except OSError:
        return None


# ---------------------------------------------------------------------- wrk

def ensure_tools(ctx, *tools):
    packages = {"wrk": "wrk", "slowhttptest": "slowhttptest"}
    missing = [t for t in tools if shutil.which(t) is None]
    if not missing:
        return
    if ctx.apt_tried or os.geteuid() != 0 or shutil.which("apt-get") is None:
        raise CouldNotRun(f"missing {', '.join(missing)} (install: apt-get install -y "
                          f"{' '.join(packages[t] for t in missing)})")
    ctx.apt_tried = True
    say(f"  installing {', '.join(missing)}: apt-get update && apt-get install -y wrk slowhttptest")
    r = subprocess.run("apt-get update && apt-get install -y wrk slowhttptest", shell=True,
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if r.returncode != 0 or any(shutil.which(t) is None for t in missing):
        raise CouldNotRun(f"apt-get could not install {', '.join(missing)}: {r.stdout[-300:]}")


def to_ms(num, unit):
    return float(num) * {"us": 0.001, "ms": 1.0, "s": 1000.0, "m": 60000.0}[unit]


def parse_wrk(out):
    r = {"rps": None, "p99_ms": None, "requests": None, "socket_errors": 0, "non2xx": 0}
    m = re.search(r"Requests/sec:\s+([\d.]+)", out)
    if m:
        r["rps"] = float(m.group(1))
    m = re.search(r"^\s+99%\s+([\d.]+)(us|ms|s|m)\s*$", out, re.M)
    if m:
        r["p99_ms"] = to_ms(m.group(1), m.group(2))
    m = re.search(r"(\d+) requests in", out)
    if m:
        r["requests"] = int(m.group(1))
    m = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", out)
    if m:
        r["socket_errors"] = sum(int(x) for x in m.groups())
        r["socket_detail"] = m.group(0)
    m = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    if m:
        r["non2xx"] = int(m.group(1))
    return r


def start_wrk(ctx, url, conns, secs, out_path):
    f = open(out_path, "w")
    try:
        return ctx.procs.start(pinned(LOAD_CORE, ["wrk", "-t1", f"-c{conns}", f"-d{secs}s",
                                                  "--latency", url]),
                               stdout=f, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    finally:
        f.close()


def finish_wrk(ctx, proc, secs, out_path):
    try:
        proc.wait(timeout=secs + 30)
    except subprocess.TimeoutExpired:
        ctx.procs.stop(proc)
        raise CouldNotRun("wrk did not finish in time")
    ctx.procs.stop(proc)
    with open(out_path) as f:
        out = f.read()
    r = parse_wrk(out)
    if r["rps"] is None:
        raise CouldNotRun(f"wrk printed no figures: {out[-300:]}")
    return r


def run_wrk(ctx, url, conns, secs, name):
    path = os.path.join(ctx.work, f"{name}.wrk")
    return finish_wrk(ctx, start_wrk(ctx, url, conns, secs, path), secs, path)


def fmt_wrk(r):
    return (f"{r['rps']:.0f} req/s, p99 {r['p99_ms']:.3f} ms, {r['requests']} requests, "
            f"socket errors {r['socket_errors']}, non-2xx/3xx {r['non2xx']}")


# ============================================================== scenarios

def attacked_run(ctx, name, target, attack_url, url, body, attack, d):
    """Runs slowhttptest with `attack` connections against `attack_url`
    (served by `target`), waits until `target` holds them (at most 15 s),
    then measures `url` with wrk -c16 for `d` s; stops the attacker.
    Returns (connections held when wrk started, wrk's summary)."""
    cmd = ["slowhttptest", "-B" if body else "-H", "-c", str(attack), "-r", "1000", "-i", "10",
           "-l", str(d + 120), "-x", "24", "-p", "3", "-u", attack_url]
    if body:
        # Big, and under the default max_body_bytes (100 MiB), which would
        # refuse the request with 413 at once.
        cmd += ["-s", str(64 << 20)]
    slow_out = os.path.join(ctx.work, f"{name}.slowhttptest")
    f = open(slow_out, "w")
    try:
        slow = ctx.procs.start(pinned(LOAD_CORE, cmd), stdout=f, stderr=subprocess.STDOUT,
                               stdin=subprocess.DEVNULL, cwd=ctx.work)
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
            hit = run_wrk(ctx, url, 16, d, f"{name}-attacked")
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
    profile = server_block(port, admin, "max_connections_per_shard = 20000\n") + respond_host() + \
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
    base = run_wrk(ctx, url, 16, d, f"{name}-baseline")
    figure("baseline (wrk -t1 -c16 alone)", fmt_wrk(base))

    held, hit = attacked_run(ctx, name, srv, url, url, body, attack, d)
    figure("attacked (same wrk, attack held)", fmt_wrk(hit))
    # The floor: the same attack on a decoy server on the load core, while
    # wrk measures this one. What wrk loses then is the attacker's share
    # of the load core, not this server's.
    dport, dadmin = free_port(), free_port()
    decoy_profile = server_block(dport, dadmin, "max_connections_per_shard = 20000\n") + \
        respond_host() + '\n[protection]\noff = ["all"]\n'
    decoy = start_gapura(ctx, f"{name}-decoy", decoy_profile, dport, dadmin, core=LOAD_CORE)
    try:
        _, floor = attacked_run(ctx, f"{name}-decoy", decoy, f"http://127.0.0.1:{dport}/", url,
                                body, attack, d)
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
                f"this server's share {hit['rps'] / floor['rps']:.2f}x")
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


def read_report(path):
    with open(path) as f:
        r = json.load(f)
    status = {int(k): v for k, v in r.get("status_counts", {}).items()}
    return {"status": status, "errors": r["errors"]["total"],
            "ok": sum(v for k, v in status.items() if 200 <= k < 300),
            "all": sum(status.values()) + r["errors"]["total"]}


def scenario_flood(ctx):
    if not os.access(ctx.loadtest, os.X_OK):
        raise CouldNotRun(f"no gapura-loadtest at {ctx.loadtest}")
    warm, measure = ctx.d(5, 3), ctx.d(20, 6)
    total = warm + measure
    chunk, flood_conns = 2, 256
    rate, burst, legit_rate = 20, 40, 10
    port, admin = free_port(), free_port()
    profile = server_block(port, admin, "max_connections_per_shard = 20000\n") + f"""
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
    srv = start_gapura(ctx, "flood", profile, port, admin)
    url = f"http://127.0.0.1:{port}/"
    legit_json = os.path.join(ctx.work, "flood-legit.json")
    samples = []
    stop = threading.Event()
    flood_reports = []
    flood_procs = []
    chunks_run = [0]

    def rss_sampler(t0):
        while not stop.is_set():
            try:
                samples.append((time.monotonic() - t0, rss_kib(srv.pid)))
            except OSError:
                return
            stop.wait(1.0)

    starting = threading.Lock()

    def flooder(t_end):
        k = 0
        while time.monotonic() < t_end - 0.5:
            left = max(1, min(chunk, int(t_end - time.monotonic())))
            path = os.path.join(ctx.work, f"flood-{k}.json")
            cidr = f"127.{64 + (k % 160)}.0.0/16"
            with starting:  # never starts one once the scenario is stopping
                if stop.is_set():
                    return
                p = ctx.procs.start(pinned(LOAD_CORE, [
                    ctx.loadtest, "-t1", f"-c{flood_conns}", f"-d{left}s", "--timeout", "2s",
                    "--no-progress", "-q", "--source-ips", cidr, "--json", path, url]),
                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                    stdin=subprocess.DEVNULL)
                flood_procs.append(p)
            try:
                p.wait(timeout=left + 10)
            except subprocess.TimeoutExpired:
                pass
            ctx.procs.stop(p)
            if os.path.exists(path):
                flood_reports.append(path)
            chunks_run[0] += 1
            k += 1

    t0 = time.monotonic()
    legit = ctx.procs.start(pinned(LOAD_CORE, [
        ctx.loadtest, "-t1", "-c2", "-R", str(legit_rate), f"-d{total}s", "--timeout", "2s",
        "--no-progress", "-q", "--source-ips", "127.0.0.1/32", "--json", legit_json, url]),
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL)
    th_rss = threading.Thread(target=rss_sampler, args=(t0,), daemon=True)
    th_flood = threading.Thread(target=flooder, args=(t0 + total,), daemon=True)
    th_rss.start()
    th_flood.start()
    try:
        try:
            legit.wait(timeout=total + 15)
        except subprocess.TimeoutExpired:
            pass
        ctx.procs.stop(legit)
        th_flood.join(timeout=chunk + 20)
    finally:
        with starting:
            stop.set()
        for p in flood_procs:
            ctx.procs.stop(p)
        th_rss.join(timeout=5)
        th_flood.join(timeout=5)
    alive = srv.proc.poll() is None
    m = srv.metrics() if alive else []
    ctx.procs.stop(srv.proc)
    if not os.path.exists(legit_json):
        raise CouldNotRun("the legitimate client wrote no report")
    lg = read_report(legit_json)
    fl = {"ok": 0, "all": 0, "errors": 0, "429": 0}
    for path in flood_reports:
        r = read_report(path)
        fl["ok"] += r["ok"]
        fl["all"] += r["all"]
        fl["errors"] += r["errors"]
        fl["429"] += r["status"].get(429, 0)
    figure("flood sent", f"{chunks_run[0]} runs, {chunks_run[0] * flood_conns} unique sources, "
           f"{fl['all']} requests: {fl['ok']} 2xx, {fl['429']} 429, {fl['errors']} socket errors")
    if m:
        figure("server refusals", f"per_client "
               f"{mget(m, 'gapura_rate_limit_total', limit='per_client', result='refused')} "
               f"(gapura_rate_limit_total), by quota level: source "
               f"{mget(m, 'gapura_quota_refused_total', level='source')}, rate "
               f"{mget(m, 'gapura_quota_refused_total', level='rate')}; untracked (a full table) "
               f"{mget(m, 'gapura_quota_untracked_total')}; gapura_quota_admitted_total "
               f"{mget(m, 'gapura_quota_admitted_total')}")
    success = lg["ok"] / lg["all"] if lg["all"] else 0.0
    figure("legitimate client", f"{lg['ok']} 2xx of {lg['all']} ({100 * success:.2f} %), "
           f"statuses {dict(sorted(lg['status'].items()))}, errors {lg['errors']}")
    after = [(t, r) for t, r in samples if t >= warm]
    ref = min((s for s in samples if s[0] >= warm), default=None, key=lambda s: s[0])
    if not after or ref is None:
        raise CouldNotRun(f"no VmRSS samples after the {warm} s warm-up")
    ref_kib = ref[1]
    lo, hi = min(r for _, r in after), max(r for _, r in after)
    figure("VmRSS (KiB), one a second",
           " ".join(f"{t:.0f}s:{r}" for t, r in samples))
    dev_lo, dev_hi = (lo - ref_kib) / ref_kib * 100, (hi - ref_kib) / ref_kib * 100
    ok = alive and abs(dev_lo) <= 5 and abs(dev_hi) <= 5 and success >= 0.99
    why = (f"VmRSS at the end of the {warm} s warm-up {ref_kib} KiB, after it min {lo} "
           f"({dev_lo:+.1f} %) max {hi} KiB ({dev_hi:+.1f} %) (need within +-5 %); legitimate "
           f"success {100 * success:.2f} % of {lg['all']} (need >= 99 %)")
    if not alive:
        why += "; the server died"
    return ok, why


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
    profile = server_block(port, admin) + f"""
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
    figure("profile", f"proxy host -> upstream group of one server 127.0.0.1:{up_port} (a second "
           f"gapura, respond host, on core {LOAD_CORE}); connect_timeout_ms = {connect_timeout_ms}")
    up = start_gapura(ctx, "upstream", up_profile, up_port, up_admin, core=LOAD_CORE)
    srv = start_gapura(ctx, "proxy", profile, port, admin)
    if http_get(port)[0] != 200:
        raise CouldNotRun("the proxy does not answer 200 through the upstream")
    records = []  # (t_send, latency or None, status or error string)
    stop = threading.Event()

    def client():
        while not stop.is_set():
            t = time.monotonic()
            try:
                status, lat = http_get(port, timeout=10)
                records.append((t, lat, status))
            except Exception as e:  # an answer that never came
                records.append((t, time.monotonic() - t, f"{type(e).__name__}: {e}"))
            stop.wait(0.01)

    th = threading.Thread(target=client, daemon=True)
    post_out = post_after = None
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
        up = start_gapura(ctx, "upstream", up_profile, up_port, up_admin, core=LOAD_CORE)
        t_back = time.monotonic()
        figure("upstream started again", f"pid {up.pid}, listening {t_back - t_restart:.3f} s "
               f"after the start (outage {t_back - t_kill:.2f} s)")
        time.sleep(after)
    finally:
        stop.set()
        th.join(timeout=15)
    # A POST now, with nothing else in flight: the upstream must count it once.
    try:
        before = mget(up.metrics(), "gapura_requests_total")
        st, lat = http_get(port, method="POST", body=b"y" * 100, timeout=10)
        n_after = wait_until(lambda: mget(up.metrics(), "gapura_requests_total") - before, 2)
        post_after = (st, n_after)
    except Exception as e:
        post_after = (f"{type(e).__name__}: {e}", None)
    alive = srv.proc.poll() is None
    m = srv.metrics() if alive else []
    ctx.procs.stop(srv.proc)
    ctx.procs.stop(up.proc)

    errors = [r for r in records if isinstance(r[2], str)]
    steady_recs = [r for r in records if r[0] + r[1] < t_kill]
    down = [r for r in records if t_kill <= r[0] and r[0] + r[1] < t_restart]
    gateway = (502, 503, 504)
    down_bad = [r for r in down if r[2] not in gateway or r[1] * 1000 > connect_timeout_ms]
    down_max_ms = max((r[1] * 1000 for r in down), default=0.0)
    first_200 = next((r for r in records if r[0] >= t_restart and r[2] == 200), None)
    first_200_s = None if first_200 is None else max(0.0, first_200[0] + first_200[1] - t_back)
    statuses = {}
    for r in records:
        key = r[2] if not isinstance(r[2], str) else "error"
        statuses[key] = statuses.get(key, 0) + 1
    figure("requests", f"{len(records)} sequential GETs, a new connection each: {statuses}")
    figure("steady phase", f"{len(steady_recs)} answered before the kill, "
           f"{sum(1 for r in steady_recs if r[2] == 200)} of them 200")
    figure("outage (sent after the kill, answered before the restart)",
           f"{len(down)} requests: {sorted({r[2] for r in down}, key=str)}, max latency "
           f"{down_max_ms:.1f} ms (connect timeout {connect_timeout_ms} ms)")
    figure("first 200 after the upstream listened again",
           "none" if first_200_s is None else f"{first_200_s * 1000:.1f} ms after its return")
    figure("POST during the outage", f"status {post_out[0]}" +
           (f", {post_out[1] * 1000:.1f} ms" if post_out[1] is not None else ""))
    figure("POST after the return", f"status {post_after[0]}, requests the upstream counted for it: "
           f"{post_after[1]} (gapura_requests_total of the upstream; more than 1 is a retry)")
    if m:
        figure("proxy counters", f"gapura_upstream_failures_total "
               f"{mget(m, 'gapura_upstream_failures_total')}, 5xx responses "
               f"{mget(m, 'gapura_responses_total', **{'class': '5xx'})}")
    for r in errors[:5]:
        figure("no answer", f"sent at +{r[0] - records[0][0]:.3f} s: {r[2]}")
    post_ok = post_out[0] in gateway and post_out[1] is not None \
        and post_out[1] * 1000 <= connect_timeout_ms and post_after[0] == 200 and post_after[1] == 1
    ok = (alive and not errors and not down_bad and len(down) > 0 and first_200_s is not None
          and first_200_s <= 1.0 and post_ok)
    why = (f"{len(down)} requests in the outage, {len(down_bad)} of them not a 502/503/504 within "
           f"{connect_timeout_ms} ms (max {down_max_ms:.1f} ms); first 200 "
           + ("never" if first_200_s is None else f"{first_200_s * 1000:.0f} ms")
           + f" after the return (need <= 1000); {len(errors)} requests without an answer; "
           f"POST in the outage {post_out[0]}, POST after counted {post_after[1]}x by the upstream")
    if not alive:
        why += "; the proxy died"
    return ok, why


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
        wait_until(lambda: parked() >= warm_n, 30)
        before = settled_rss(srv.pid)
        heap_before = mget(srv.metrics(), "gapura_heap_bytes")
        t = time.monotonic()
        idle = open_idle(port, n)
        opened_s = time.monotonic() - t
        waiting_rss = settled_rss(srv.pid)
        waiting_heap = mget(srv.metrics(), "gapura_heap_bytes")
        # A connection quiet for a second parks: it gives its read buffer
        # back and waits holding none.
        t = time.monotonic()
        all_parked = wait_until(lambda: parked() >= n + warm_n, 60)
        parked_s = time.monotonic() - t
        after = settled_rss(srv.pid)
        heap_after = mget(srv.metrics(), "gapura_heap_bytes")
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
        return False, "the server exposes no gapura_heap_bytes"
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
        why += f"; only {parked_now} of {n + warm_n} parked"
    if open_now != n + warm_n:
        why += f"; the server reported {open_now} open, not {n + warm_n}"
    if not alive:
        why += "; the server died"
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
    candidates = ("gapura_accept_errors_total", "gapura_connections_refused_total",
                  "gapura_connection_limit_refused_total")
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


def scenario_aborts(ctx):
    reps, workers = 50, 10
    up_port, port, admin = free_port(), free_port(), free_port()
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", up_port), UpstreamHandler)
    httpd.daemon_threads = True
    httpd.lock = threading.Lock()
    httpd.active = 0
    up_thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.1},
                                 daemon=True)
    up_thread.start()
    profile = server_block(port, admin, "max_connections_per_shard = 20000\n") + f"""
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
    figure("profile", f"proxy host -> a threaded Python upstream on 127.0.0.1:{up_port} in this "
           f"program (/slow answers after {UpstreamHandler.slow_s:.0f} s, /big is "
           f"{UpstreamHandler.big >> 20} MiB); [quota.source] concurrent = 64 (a concurrency lease "
           "per client prefix); [protection] off = global, connections, client_rate")
    try:
        srv = start_gapura(ctx, "aborts", profile, port, admin)
        if http_get(port, "/ok", host="p.test")[0] != 200:
            raise CouldNotRun("the proxy does not answer 200 through the upstream")

        def gauges():
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

        checked = ("connections_open", "leases_active", "lease_keys", "upstream_in_use",
                   "upstream_close_wait", "upstream_handlers")
        # Before: the warm request's connection is gone and the pool gauge
        # (published once a second) agrees with the sockets.
        wait_until(lambda: (lambda g: g["connections_open"] == 0 and g["upstream_in_use"] == 0)(
            gauges()), 5, step=0.2)
        pre = gauges()
        figure("gauges before", pre)

        def raw(req):
            s = socket.create_connection(("127.0.0.1", port), timeout=5)
            s.sendall(req)
            return s

        def mid_head():
            s = raw(b"GET /ok HTTP/1.1\r\nHost: p.test\r\nX-Partial: abc")
            s.close()
            return None

        def mid_body():
            s = raw(b"POST /upload HTTP/1.1\r\nHost: p.test\r\nContent-Length: 1048576\r\n\r\n"
                    + b"x" * 4096)
            r, _, _ = select.select([s], [], [], 0.05)
            early = s.recv(64) if r else b""
            s.close()
            return f"an answer before the body: {early[:20]!r}" if early else None

        def waiting():
            s = raw(b"GET /slow HTTP/1.1\r\nHost: p.test\r\n\r\n")
            r, _, _ = select.select([s], [], [], 0.3)
            early = s.recv(64) if r else b""
            s.close()
            return f"an answer before the upstream's: {early[:20]!r}" if early else None

        def relaying():
            s = raw(b"GET /big HTTP/1.1\r\nHost: p.test\r\n\r\n")
            got = b""
            while len(got) < 16384:
                chunk = s.recv(65536)
                if not chunk:
                    break
                got += chunk
            s.close()
            return None if got.startswith(b"HTTP/1.1 200") and len(got) >= 16384 else \
                f"got {len(got)} bytes: {got[:20]!r}"

        stages = (("mid request head", mid_head), ("mid request body", mid_body),
                  ("waiting for the upstream", waiting), ("mid response body", relaying))
        with concurrent.futures.ThreadPoolExecutor(max_workers=workers) as pool:
            for label, fn in stages:
                t = time.monotonic()
                results = list(pool.map(lambda _: _run_abort(fn), range(reps)))
                odd = [r for r in results if r]
                figure(f"aborted {label}", f"{reps} times, {workers} at once, in "
                       f"{time.monotonic() - t:.1f} s"
                       + (f"; {len(odd)} unexpected: {odd[0]}" if odd else ""))
        during = gauges()
        figure("gauges right after the aborts", during)
        # Sanity: the proxy still serves, a whole 4 MiB answer included.
        st_ok = http_get(port, "/ok", host="p.test", timeout=10)[0]
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=20)
        conn.request("GET", "/big", headers={"Host": "p.test"})
        rb = conn.getresponse()
        big_len = len(rb.read())
        conn.close()
        figure("whole requests afterwards", f"/ok {st_ok}, /big {rb.status} with {big_len} bytes")
        t = time.monotonic()
        last = [None]

        def back():
            last[0] = gauges()
            return all(last[0][k] == pre[k] for k in checked)

        returned = wait_until(back, 30, step=0.25)
        took = time.monotonic() - t
        post = last[0]
        figure("gauges after", f"{post} ({'back' if returned else 'NOT back'} after {took:.1f} s)")
        m = srv.metrics()
        figure("proxy counters", f"gapura_upstream_failures_total "
               f"{mget(m, 'gapura_upstream_failures_total')}, errors by kind "
               + ", ".join(f"{k} {mget(m, 'gapura_errors_total', kind=k)}"
                           for k in ("io", "header_timeout", "body_timeout", "bad_request")))
        alive = srv.proc.poll() is None
        ctx.procs.stop(srv.proc)
    finally:
        httpd.shutdown()
        httpd.server_close()
    ok = alive and returned and st_ok == 200 and rb.status == 200 and big_len == UpstreamHandler.big
    diff = [f"{k} {pre[k]} -> {post[k]}" for k in checked if post[k] != pre[k]]
    why = (("gauges back to their values before the test" if returned else
            "gauges NOT back after 30 s: " + ", ".join(diff))
           + f" (connections_open {post['connections_open']}, leases_active "
           f"{post['leases_active']}, lease_keys {post['lease_keys']}, upstream in use "
           f"{post['upstream_in_use']}, idle pooled {post['upstream_idle']}) after "
           f"{4 * reps} aborted requests")
    if not (st_ok == 200 and rb.status == 200 and big_len == UpstreamHandler.big):
        why += f"; whole requests afterwards failed (/ok {st_ok}, /big {rb.status} {big_len} B)"
    if not alive:
        why += "; the proxy died"
    return ok, why


def _run_abort(fn):
    try:
        return fn()
    except Exception as e:
        return f"{type(e).__name__}: {e}"


RUNNERS = {
    "slow-headers": scenario_slow_headers,
    "slow-body": scenario_slow_body,
    "flood": scenario_flood,
    "reloads": scenario_reloads,
    "upstream-kill": scenario_upstream_kill,
    "idle": scenario_idle,
    "fd-limit": scenario_fd_limit,
    "aborts": scenario_aborts,
}


# --------------------------------------------------------------------- main

class Ctx:
    def __init__(self, args, work, procs):
        self.args, self.work, self.procs = args, work, procs
        self.gapura, self.loadtest = args.gapura, args.loadtest
        self.quick = args.quick
        self.apt_tried = False

    def d(self, full, quick):
        return quick if self.quick else full


def build(args):
    default_g = os.path.join(ROOT, "target", "release", "gapura")
    default_l = os.path.join(ROOT, "target", "release", "gapura-loadtest")
    missing = [p for p in (args.gapura, args.loadtest) if not os.access(p, os.X_OK)]
    if not missing or args.no_build:
        return
    if not all(p in (default_g, default_l) for p in missing):
        return  # a path given by hand is not built here
    say("building: cargo build --release -p gapura -p gapura-loadtest")
    r = subprocess.run(["cargo", "build", "--release", "-p", "gapura", "-p", "gapura-loadtest"],
                       cwd=ROOT)
    if r.returncode != 0:
        say("hostile.py: cargo build failed")


def main():
    p = argparse.ArgumentParser(prog="bench/hostile.py",
                                description="Hostile traffic and fault scenarios against Gapura.")
    p.add_argument("--scenarios", default="all",
                   help="comma-separated subset of " + ",".join(SCENARIOS) + " (all)")
    p.add_argument("--gapura", default=os.path.join(ROOT, "target", "release", "gapura"))
    p.add_argument("--loadtest", default=os.path.join(ROOT, "target", "release", "gapura-loadtest"))
    p.add_argument("--no-build", action="store_true", help="never run cargo build")
    p.add_argument("--quick", action="store_true", help="shorter phases, for a smoke run")
    args = p.parse_args()
    if args.scenarios == "all":
        chosen = list(SCENARIOS)
    else:
        chosen = [s for s in args.scenarios.split(",") if s]
        for s in chosen:
            if s not in SCENARIOS:
                p.error(f"unknown scenario {s!r} (known: {', '.join(SCENARIOS)})")
    args.gapura = os.path.abspath(args.gapura)
    args.loadtest = os.path.abspath(args.loadtest)
    build(args)

    global LOAD_CORE
    cores = sorted(os.sched_getaffinity(0))
    if LOAD_CORE not in cores or SERVER_CORE not in cores:
        say(f"hostile.py: cores {SERVER_CORE} and {LOAD_CORE} are not both usable here "
            f"({cores}); everything shares core {SERVER_CORE}")
        LOAD_CORE = SERVER_CORE
    # This program's own client threads (and the aborts scenario's upstream)
    # are load too: they run on the load core.
    try:
        os.sched_setaffinity(0, {LOAD_CORE})
    except OSError:
        pass
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = min(hard, 20000) if hard != resource.RLIM_INFINITY else 20000
    if soft < want:
        resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
    nofile = resource.getrlimit(resource.RLIMIT_NOFILE)[0]

    def on_term(signum, frame):
        raise KeyboardInterrupt
    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, signal.default_int_handler)

    say(f"# hostile.py: {', '.join(chosen)}{' (--quick)' if args.quick else ''}")
    say(f"# gapura {args.gapura}, gapura-loadtest {args.loadtest}")
    say(f"# server on core {SERVER_CORE}, load and attackers on core {LOAD_CORE}, shards = 1, "
        f"RLIMIT_NOFILE {nofile} (inherited by every child unless a scenario says otherwise)")
    try:
        with open("/proc/loadavg") as f:
            say(f"# load average at start: {' '.join(f.read().split()[:3])}")
    except OSError:
        pass
    procs = Procs()
    results = []
    try:
        with tempfile.TemporaryDirectory(prefix="gapura-hostile-") as work:
            ctx = Ctx(args, work, procs)
            for name in chosen:
                say(f"\n== {name} ==")
                t = time.monotonic()
                try:
                    if not os.access(ctx.gapura, os.X_OK):
                        raise CouldNotRun(f"no gapura binary at {ctx.gapura}")
                    ok, why = RUNNERS[name](ctx)
                    line = f"{'PASS' if ok else 'FAIL'} {name}: {why}"
                except CouldNotRun as e:
                    ok, line = False, f"FAIL {name}: could not run: {e}"
                except KeyboardInterrupt:
                    raise
                except Exception as e:
                    traceback.print_exc(file=sys.stdout)
                    ok, line = False, f"FAIL {name}: could not run: {type(e).__name__}: {e}"
                finally:
                    procs.stop_all()
                say(line)
                results.append((name, ok, line.split(": ", 1)[1], time.monotonic() - t))
    except KeyboardInterrupt:
        say("\nhostile.py: interrupted; stopping what it started")
        procs.stop_all()
        sys.exit(130)
    finally:
        procs.stop_all()

    say("\n# Summary\n")
    say("| scenario | result | time | figures |")
    say("|---|---|---:|---|")
    for name, ok, why, secs in results:
        say(f"| {name} | {'PASS' if ok else 'FAIL'} | {secs:.0f} s | {why.replace('|', '/')} |")
    sys.exit(0 if all(ok for _, ok, _, _ in results) else 1)


if __name__ == "__main__":
    main()

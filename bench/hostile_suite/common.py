"""What every scenario shares: the cores, messages and figures, the child
processes (each started here and stopped by its own pid), /proc, loopback
ports, the admin listener's metrics, one HTTP request, polling."""
import http.client
import os
import re
import resource
import shutil
import signal
import socket
import subprocess
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TICKS = os.sysconf("SC_CLK_TCK")
SERVER_CORE = 0
# bench/hostile.py moves the load to SERVER_CORE when core 1 is not usable:
# read it as common.LOAD_CORE when it is used, never import its value.
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


def wait_until(pred, deadline_s, step=0.1):
    """Polls pred() until it returns a true value or the deadline passes;
    returns the last value."""
    end = time.monotonic() + deadline_s
    while True:
        v = pred()
        if v or time.monotonic() > end:
            return v
        time.sleep(step)

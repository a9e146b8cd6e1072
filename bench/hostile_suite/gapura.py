"""The server under test: its profile snippets, the documented defaults
they leave in effect, and a Gapura started, checked and logged."""
import os
import re
import subprocess
import time

from .common import ROOT, SERVER_CORE, CouldNotRun, metrics, pinned, port_accepts


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


# `hostile.py --ring`: every profile receives from the shard's own ring.
RING = {"on": False}


def server_block(port, admin, extra=""):
    ring = 'ring = "on"\n' if RING["on"] else ""
    return f"""[server]
listen = ["127.0.0.1:{port}"]
admin = "127.0.0.1:{admin}"
shards = 1
{ring}{extra}"""


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


def profile_default(key):
    """A [server] default from docs/profile.md, as documented."""
    try:
        with open(os.path.join(ROOT, "docs", "profile.md")) as f:
            m = re.search(r"^\| `" + re.escape(key) + r"` \| integer \| `(\d+)`", f.read(), re.M)
        return int(m.group(1)) if m else None
    except OSError:
        return None

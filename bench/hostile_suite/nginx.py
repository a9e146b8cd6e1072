"""nginx beside Gapura in the protocol-attack scenarios: installed on
demand (Debian's package), one worker pinned to the server core, a config
written to a private prefix, its master and workers counted together."""
import os
import re
import shutil
import subprocess
import time

from .common import ROOT, SERVER_CORE, CouldNotRun, pinned, port_accepts, say
from .attack import children

STREAM_MODULE = "/usr/lib/nginx/modules/ngx_stream_module.so"


def ensure_nginx(ctx, stream=False):
    """The nginx binary, installed with apt-get once per run when missing;
    None (with the reason printed) when it cannot be had."""
    def have():
        return shutil.which("nginx") and (not stream or os.path.exists(STREAM_MODULE))
    if have():
        return shutil.which("nginx")
    if ctx.apt_tried or os.geteuid() != 0 or shutil.which("apt-get") is None:
        say("  nginx: not installed (apt-get install -y nginx libnginx-mod-stream); "
            "its side is left out")
        return None
    ctx.apt_tried = True
    say("  installing nginx: apt-get update && apt-get install -y nginx libnginx-mod-stream")
    r = subprocess.run("apt-get update && apt-get install -y nginx libnginx-mod-stream",
                       shell=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                       env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"})
    if r.returncode != 0 or not have():
        say(f"  nginx: apt-get could not install it: {r.stdout[-300:]}")
        return None
    return shutil.which("nginx")


def version(binary):
    out = subprocess.run([binary, "-v"], stderr=subprocess.PIPE, text=True).stderr
    m = re.search(r"nginx/(\d+)\.(\d+)\.(\d+)", out)
    return tuple(int(x) for x in m.groups()) if m else (0, 0, 0)


def h2_listen(binary, port):
    """An h2c (prior knowledge) listener: `listen ... http2` before 1.25.1,
    `http2 on` after."""
    if version(binary) >= (1, 25, 1):
        return f"listen 127.0.0.1:{port};\n        http2 on;"
    return f"listen 127.0.0.1:{port} http2;"


class Nginx:
    def __init__(self, proc, prefix):
        self.proc, self.prefix = proc, prefix

    @property
    def pid(self):
        return self.proc.pid

    def pids(self):
        return [self.proc.pid, *children(self.proc.pid)]

    def alive(self):
        return self.proc.poll() is None

    def log_tail(self, n=5):
        try:
            with open(os.path.join(self.prefix, "error.log"), errors="replace") as f:
                return " | ".join(f.read().splitlines()[-n:])
        except OSError:
            return ""


def http_conf(prefix, servers):
    """An http {} config around `servers` (server blocks)."""
    temps = "\n".join(f"    {k}_temp_path {prefix}/{k};" for k in
                      ("client_body", "proxy", "fastcgi", "uwsgi", "scgi"))
    return f"""worker_processes 1;
daemon off;
master_process on;
user root;
pid {prefix}/nginx.pid;
error_log {prefix}/error.log warn;
worker_rlimit_nofile 20000;

events {{
    worker_connections 8192;
}}

http {{
    access_log off;
    default_type text/plain;
    server_tokens off;
{temps}

{servers}
}}
"""


def udp_conf(prefix, port, echo_port):
    """bench/peers/nginx-udp.conf.in, every response relayed (nginx's
    default for UDP: no `proxy_responses`)."""
    with open(os.path.join(ROOT, "bench", "peers", "nginx-udp.conf.in")) as f:
        text = f.read()
    for k, v in (("@PREFIX@", prefix), ("@PORT@", str(port)), ("@ECHO_PORT@", str(echo_port)),
                 ("@RESPONSES@", "")):
        text = text.replace(k, v)
    return text


def start_nginx(ctx, name, conf, wait_port=None, deadline_s=10):
    """nginx with `conf` (a function of its prefix), pinned to the server
    core; waits for `wait_port` (TCP) or, without one, for its worker."""
    binary = shutil.which("nginx")
    prefix = os.path.join(ctx.work, f"nginx-{name}")
    os.makedirs(prefix, exist_ok=True)
    path = os.path.join(prefix, "nginx.conf")
    with open(path, "w") as f:
        f.write(conf(prefix))
    log = open(os.path.join(prefix, "stdout.log"), "ab")
    try:
        proc = ctx.procs.start(pinned(SERVER_CORE, [binary, "-p", prefix, "-c", path, "-e",
                                                    os.path.join(prefix, "error.log")]),
                               stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    finally:
        log.close()
    srv = Nginx(proc, prefix)
    end = time.monotonic() + deadline_s
    while True:
        if proc.poll() is not None:
            raise CouldNotRun(f"nginx {name} exited with {proc.returncode}: {srv.log_tail()}")
        ready = port_accepts(wait_port) if wait_port else len(srv.pids()) > 1
        if ready:
            time.sleep(0.2)
            return srv
        if time.monotonic() > end:
            raise CouldNotRun(f"nginx {name} did not start within {deadline_s} s: {srv.log_tail()}")
        time.sleep(0.05)

"""The servers under test and the proxy upstream: their configs rendered from
the templates in bench/peers/, their start pinned to a core, and the check of
their answer before anything is measured."""
import os
import re
import subprocess
import sys

from .common import PEERS, die, indented, read_text
from .ports import wait_port
from .scenarios import floor_work

ANSWER_BODY = b"hello, world\n"


def render(template, out, values):
    """Writes TEMPLATE to OUT with every @KEY@ replaced by its value; a
    placeholder left over ends the program."""
    with open(template, encoding="utf-8") as f:
        text = f.read()
    for key, value in values.items():
        text = text.replace(f"@{key}@", str(value))
    with open(out, "w", encoding="utf-8") as f:
        f.write(text)
    if re.search(r"@[A-Z_]*@", text):
        die(f"placeholder left unrendered in {out}")


def show_log_tails(paths):
    parts = []
    for path in paths:
        if os.path.isfile(path):
            tail = read_text(path).splitlines()[-20:]
            parts.append("\n".join([f"==> {path} <==", *tail]))
    if parts:
        sys.stderr.write(indented("\n\n".join(parts)))


def start_server(b, name, kind, directory, core, port, admin, upstream):
    """Starts NAME (gapura|gapura-ring|gapura-protected|nginx|haproxy|floor-*) in its KIND (respond|proxy)
    configuration, pinned to CORE, and waits until PORT accepts.
    Returns (process, None), or (None, reason) with nothing left running."""
    os.makedirs(directory, exist_ok=True)
    values = {"PREFIX": directory, "PORT": port, "ADMIN_PORT": admin, "UPSTREAM_PORT": upstream}
    pin = ["taskset", "-c", str(core)]
    if name == "nginx":
        conf = os.path.join(directory, "nginx.conf")
        render(os.path.join(PEERS, f"nginx-{kind}.conf.in"), conf, values)
        cmd = [*pin, "nginx", "-p", directory + "/", "-c", conf,
               "-e", os.path.join(directory, "error.log")]
    elif name.startswith("floor-"):
        # The floor: the essential work only (bench/src/bin/floor-proxy.rs).
        engine, work_ns = floor_work(name) or (name[len("floor-"):], 0)
        # floor-monoio-dated: the fixed 200 with a Date line formatted once
        # a second (`floor-proxy --dated`); it has no proxy form.
        dated = engine.endswith("-dated")
        if dated:
            if kind == "proxy":
                return None, "skipped: the dated floor only answers"
            engine = engine[:-len("-dated")]
        mode = ["--upstream", str(upstream)] if kind == "proxy" else ["--respond"]
        if work_ns:
            mode += ["--work-ns", str(work_ns)]
        if dated:
            mode += ["--dated"]
        cmd = [*pin, b.floor_bin, "--listen", str(port), "--engine", engine, *mode]
    elif name == "haproxy":
        conf = os.path.join(directory, "haproxy.cfg")
        render(os.path.join(PEERS, f"haproxy-{kind}.cfg.in"), conf, values)
        cmd = [*pin, "haproxy", "-db", "-f", conf]
    else:
        conf = os.path.join(directory, "gapura.toml")
        # gapura-protected: the embedded default's protections written out,
        # sized so the load passes them (bench/peers/*-protected.toml.in).
        variant = "-protected" if name == "gapura-protected" else ""
        template = os.path.join(PEERS, f"gapura-{kind}{variant}.toml.in")
        if not os.path.exists(template):
            return None, f"skipped: no {kind} profile with the protections on"
        render(template, conf, values)
        if name == "gapura-ring":
            # The same profile, receiving from the shard's own ring.
            with open(conf, encoding="utf-8") as f:
                text = f.read()
            with open(conf, "w", encoding="utf-8") as f:
                f.write(text.replace("[server]\n", "[server]\nring = \"on\"\n", 1))
        # `gapura check` first: a profile it rejects is skipped, not a failure.
        with open(conf + ".check", "wb") as out:
            checked = subprocess.run([b.gapura_bin, "check", conf], stdin=subprocess.DEVNULL,
                                     stdout=out, stderr=subprocess.STDOUT)
        if checked.returncode != 0:
            sys.stderr.write(indented(read_text(conf + ".check")))
            return None, f"skipped: `gapura check` rejects the {kind} profile"
        cmd = [*pin, b.gapura_bin, "run", "--allow-root", "--profile", conf]
    proc = b.procs.start(cmd, os.path.join(directory, "server.log"))
    if not wait_port(port, proc.pid):
        show_log_tails([os.path.join(directory, "server.log"),
                        os.path.join(directory, "error.log")])
        b.procs.stop(proc)
        return None, f"failed: {name} did not accept connections on port {port}"
    return proc, None


def check_answer(b, port):
    """One request through curl: the answer must be 200, text/plain and
    "hello, world\\n". Returns (answer size in bytes, None) or (None, reason)."""
    hdr, body, err = (os.path.join(b.work, "answer." + ext) for ext in ("hdr", "body", "err"))
    for path in (hdr, body):
        if os.path.exists(path):
            os.remove(path)
    with open(err, "wb") as err_out:
        r = subprocess.run(["curl", "-sS", "--max-time", "5", "-o", body, "-D", hdr,
                            "-w", "%{http_code}", f"http://127.0.0.1:{port}/"],
                           stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=err_out)
    if r.returncode != 0:
        with open(err, "rb") as f:
            msg = f.read(200).decode("utf-8", "replace").rstrip("\n")
        return None, f"failed: request to the server failed ({msg})"
    code = r.stdout.decode("utf-8", "replace").rstrip("\n")
    if code != "200":
        return None, f"failed: answered status {code} instead of 200"
    headers = read_text(hdr).replace("\r", "").splitlines()
    if not any(re.match(r"content-type: text/plain", h, re.IGNORECASE) for h in headers):
        return None, "failed: answered without Content-Type text/plain"
    try:
        with open(body, "rb") as f:
            same = f.read() == ANSWER_BODY
    except OSError:
        same = False
    if not same:
        return None, 'failed: body differs from "hello, world\\n"'
    return os.path.getsize(hdr) + os.path.getsize(body), None

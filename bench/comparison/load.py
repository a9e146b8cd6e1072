"""The load generators, gapura-loadtest and wrk: their command lines, the
warm-up, and the key=value summary each run leaves in its output."""
import os
import re
import shutil
import subprocess
import sys

from .common import PEERS, ROOT, read_text


def prepare_wrk_scripts(work):
    """wrk takes one script, so the pipelining one gets the report hook appended."""
    shutil.copyfile(os.path.join(PEERS, "wrk-report.lua"), os.path.join(work, "wrk-respond.lua"))
    with open(os.path.join(work, "wrk-pipeline.lua"), "w", encoding="utf-8") as f:
        f.write(read_text(os.path.join(PEERS, "wrk-pipeline.lua")))
        f.write(read_text(os.path.join(PEERS, "wrk-report.lua")))


def load_command(b, conns, depth, secs, port, json_path, warmup=True):
    """The generator's command for one run of SECS measured seconds (JSON_PATH:
    gapura-loadtest's report). gapura-loadtest warms up inside the measured
    process (--warmup, unless WARMUP is false); wrk has no such option, so its
    warm-up is a separate run of the same command."""
    pin = ["taskset", "-c", str(b.opts.load_core)]
    url = f"http://127.0.0.1:{port}/"
    if b.generator == "wrk":
        script = os.path.join(b.work, "wrk-pipeline.lua" if depth > 1 else "wrk-respond.lua")
        cmd = [*pin, "wrk", "-t1", f"-c{conns}", f"-d{secs}s", "--latency", "-s", script, url]
        if depth > 1:
            cmd += ["--", str(depth)]
        return cmd
    cmd = [*pin, b.loadtest_bin, "-t1", f"-c{conns}", f"-d{secs}s"]
    if warmup and b.opts.warmup > 0:
        cmd += ["--warmup", f"{b.opts.warmup}s"]
    if depth > 1:
        cmd += ["--pipeline", str(depth)]
    return cmd + ["--no-progress", "--json", json_path, url]


def shown(b, cmd):
    """A command as the report prints it, without temp-dir and repository prefixes."""
    return " ".join(cmd).replace(b.work + "/", "").replace(ROOT + "/", "")


def warm_up(b, sc, port, directory):
    """Warms the server up before the measured window. Returns how long after
    gapura-loadtest computes its start its measured window opens, in µs; 0 when
    the window opens at the generator's launch (wrk, or no warm-up)."""
    if b.opts.warmup == 0:
        return 0
    if b.generator == "wrk":
        # A discarded run, tracked so that cleanup can stop it.
        cmd = load_command(b, sc.connections, sc.depth, b.opts.warmup, port, "")
        b.procs.wait(b.procs.start(cmd, os.path.join(directory, "warmup.out")))
        return 0
    # gapura-loadtest's measured window opens --warmup after its shards'
    # common start, which it sets 20 ms after computing it.
    return 20000 + b.opts.warmup * 1000000


def add_loadtest_summary(out_path, json_path, m):
    """Appends to gapura-loadtest's output the summary loadtest-report.py reads
    from its JSON report, and how the measurement M went (None: a run that
    measured no CPU)."""
    if os.path.isfile(json_path) and os.path.getsize(json_path) > 0:
        with open(out_path, "ab") as out:
            subprocess.run([sys.executable, os.path.join(PEERS, "loadtest-report.py"),
                            json_path], stdin=subprocess.DEVNULL, stdout=out,
                           stderr=subprocess.STDOUT)
    if m is None:
        return
    with open(out_path, "a", encoding="utf-8") as out:
        out.write(f"(server CPU read {int(m.late_us / 1000)} ms after the measured window "
                  f"opened; generator CPU by /proc: {m.gen_ticks} ticks)\n")


def last_summary(path):
    """The generator's key=value summary: the last WRKSTAT (wrk-report.lua) or
    LOADSTAT (loadtest-report.py) line of PATH, as a dict, or None."""
    line = None
    for text in read_text(path).splitlines():
        if re.match(r"(WRKSTAT|LOADSTAT) ", text):
            line = text
    if line is None:
        return None
    return dict(word.split("=", 1) for word in line.split()[1:] if "=" in word)

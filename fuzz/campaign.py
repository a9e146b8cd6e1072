#!/usr/bin/env python3
"""Runs every fuzz target (or those named) for a bounded time and prints
one line of figures per target: executions, executions per second, the
coverage libFuzzer reports (edges and features), the corpus size, and
the failing inputs found (written to fuzz/artifacts/TARGET/).

    fuzz/campaign.py --seconds 600 --jobs 2            # every target, 10 minutes each
    fuzz/campaign.py --seconds 30 request_head chunked

It builds the targets once (`cargo fuzz build --sanitizer none --release`,
the stable toolchain), then runs the binaries with the corpus of
fuzz/corpus/TARGET, which they grow. `--nice` lowers their priority.
Exit status 1 when a target found a failing input or did not run.
"""

import argparse
import os
import re
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

HERE = Path(__file__).resolve().parent
TARGETS = [
    "request_head", "chunked", "response_head", "canonical_path", "proxy_protocol",
    "basic_auth", "profile", "udp_envelope", "h2_front", "tls_front",
]


def run(target, seconds, nice, logs):
    binary = HERE / "libfuzzer/target/x86_64-unknown-linux-gnu/release" / target
    corpus = HERE / "corpus" / target
    artifacts = HERE / "artifacts" / target
    artifacts.mkdir(parents=True, exist_ok=True)
    before = {p.name for p in artifacts.iterdir()}
    cmd = [str(binary), str(corpus), f"-max_total_time={seconds}",
           f"-artifact_prefix={artifacts}/", "-print_final_stats=1", "-timeout=10",
           "-rss_limit_mb=2048"]
    if nice:
        cmd = ["nice", "-n", "19"] + cmd
    log = logs / f"{target}.log"
    start = time.monotonic()
    with open(log, "w") as out:
        rc = subprocess.call(cmd, stdout=out, stderr=subprocess.STDOUT)
    wall = time.monotonic() - start
    text = log.read_text(errors="replace")
    stat = dict(re.findall(r"stat::(\w+):\s+(\d+)", text))
    cov = re.findall(r"cov: (\d+) ft: (\d+) corp: (\d+)", text)
    found = sorted({p.name for p in artifacts.iterdir()} - before)
    return {
        "target": target, "rc": rc, "wall": wall,
        "execs": int(stat.get("number_of_executed_units", 0)),
        "per_sec": int(stat.get("average_exec_per_sec", 0)),
        "cov": cov[-1] if cov else ("?", "?", "?"),
        "corpus": len(list(corpus.iterdir())),
        "found": found, "log": log,
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("targets", nargs="*", default=TARGETS)
    ap.add_argument("--seconds", type=int, default=600)
    ap.add_argument("--jobs", type=int, default=1)
    ap.add_argument("--nice", action="store_true")
    ap.add_argument("--no-build", action="store_true")
    ap.add_argument("--logs", default="/tmp/gapura-fuzz-logs")
    args = ap.parse_args()
    unknown = [t for t in args.targets if t not in TARGETS]
    if unknown:
        sys.exit(f"unknown targets: {unknown}")
    if not args.no_build:
        subprocess.check_call(["cargo", "fuzz", "build", "--sanitizer", "none", "--release",
                               "--fuzz-dir", "."], cwd=HERE / "libfuzzer")
    logs = Path(args.logs)
    logs.mkdir(parents=True, exist_ok=True)
    with ThreadPoolExecutor(args.jobs) as pool:
        results = list(pool.map(lambda t: run(t, args.seconds, args.nice, logs), args.targets))
    print("| target | seconds | executions | per second | edges | features | corpus | failing inputs |")
    print("|---|---:|---:|---:|---:|---:|---:|---|")
    bad = False
    for r in results:
        cov, ft, _ = r["cov"]
        found = ", ".join(r["found"]) or "none"
        print(f"| {r['target']} | {r['wall']:.0f} | {r['execs']:,} | {r['per_sec']:,} | {cov} | {ft} "
              f"| {r['corpus']} | {found} |")
        if r["found"] or r["rc"] != 0:
            bad = True
            print(f"  {r['target']}: exit {r['rc']}, log {r['log']}", file=sys.stderr)
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()

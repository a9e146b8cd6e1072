#!/usr/bin/env python3
"""Reads a gapura-loadtest `--json` report (schema gapura-loadtest/v1,
loadtest/schema/report-v1.schema.json) and prints one line of key=value
pairs for bench/compare.py: the keys wrk-report.lua prints for wrk, plus
`parse` (a gapura-loadtest error kind), `warmup_requests` and the
generator's own CPU per response (`gen_cpu_us`, its `cpu.per_request_us`).
Latencies are in microseconds; `status` counts responses with status >= 400,
as wrk's `errors.status` does.

Usage: loadtest-report.py REPORT.json
"""
import json
import sys


def main() -> int:
    with open(sys.argv[1], encoding="utf-8") as f:
        r = json.load(f)
    if r.get("schema") != "gapura-loadtest/v1":
        print(f"unexpected report schema {r.get('schema')!r}", file=sys.stderr)
        return 1
    s, lat, err, cpu = r["summary"], r["latency_us"], r["errors"], r["cpu"]
    pct = lat["percentiles"]
    fields = {
        "requests": s["requests"],
        "warmup_requests": s["warmup_requests"],
        "duration_us": round(s["elapsed_s"] * 1e6),
        "bytes": s["bytes_read"],
        "connect": err["connect"],
        "read": err["read"],
        "write": err["write"],
        "status": sum(n for code, n in r["status_counts"].items() if int(code) >= 400),
        "timeout": err["timeout"],
        "parse": err["parse"],
        "p50_us": f"{pct['50']:.0f}",
        "p99_us": f"{pct['99']:.0f}",
        "mean_us": f"{lat['mean']:.1f}",
        "max_us": f"{lat['max']:.0f}",
        "gen_cpu_us": f"{cpu['per_request_us']:.2f}",
        "gen_user_s": f"{cpu['user_s']:.3f}",
        "gen_sys_s": f"{cpu['sys_s']:.3f}",
        "missing_shards": s["missing_shards"],
    }
    print("LOADSTAT " + " ".join(f"{k}={v}" for k, v in fields.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())

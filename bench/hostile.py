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

Automatic certificates (Gapura and Caddy, both ordering from a local pebble,
on-demand certificates allowed by the same `ask` endpoint for one name):

  acme-sni-flood   2,000 handshakes naming distinct unclaimed names: asks
                   reaching the endpoint (Gapura <= 40), orders reaching
                   the ACME server (0), RSS peak <= 16 MiB, a legitimate
                   verified client answered >= 99 %
  acme-token-probe 20,000 GETs of challenge tokens never in flight: every
                   one goes through the chain to the host's own answer

At the seams:

  xff-spoof        forwarding headers a client wrote (X-Forwarded-For,
                   X-Real-IP, Forwarded, CF-Connecting-IP) through a proxy
                   host to a recording origin, nginx beside it: no request
                   reaches the origin with the spoofed address where an
                   upstream reads the client
  udp-replay-cross-shard
                   a captured envelope replayed to another shard of a
                   two-shard relay: it reaches the upstream once, the
                   spoofed source gets nothing, one replayed drop

Protocol attacks: Gapura (one shard, protective defaults off) and, where it
has the feature, nginx (Debian's package, installed on demand; one worker
on the same core) side by side, each with the same attack. Every one
reports the server's VmRSS growth (nginx: master and workers summed), its
CPU seconds during the attack, and whether a legitimate client beside it
kept being answered.

  h2-rapid-reset   HEADERS + RST_STREAM pairs, 1, 20 and 100 a write, 3,000
                   streams a second for up to 5 s each, through a proxy host
                   to a counting origin: <= 200 requests reach it per
                   connection, and the connection is closed
  h2-continuation  HEADERS then CONTINUATION frames without end: cut off
                   before 64 MiB, VmRSS growth <= 16 MiB
  h2-control-flood PING and empty SETTINGS floods never read: GOAWAY
                   ENHANCE_YOUR_CALM or a close, VmRSS growth <= 16 MiB
  h2-zero-window   4 connections x 128 streams of 1,000,000-byte answers with
                   a zero initial window, built-in, proxied, and proxied to an
                   HTTP/2 upstream (nginx: grpc_pass; needs target/release/
                   grpc-echo): VmRSS growth after 5 s <= 32 MiB
  h2-hpack-bomb    one 4 KiB dynamic-table entry referenced thousands of times
                   a block: refused, VmRSS growth <= 16 MiB, the legitimate
                   client answered
  h2-streams       1,000 streams at once per connection, past
                   http2_max_streams: the excess refused, VmRSS <= 16 MiB
  h2-upstream-queue
                   8 connections from one address open 100 GET streams each
                   every 0.5 s for 6 s at an origin that answers in 0.5 s,
                   while another /24 asks through the same upstream server:
                   Gapura with max_connections_per_server = 32 alone, and
                   with [quota.source] concurrent = 16 too: the origin never
                   sees more than 32 at once, VmRSS growth <= 32 MiB, and
                   with the lease the other client is always answered
                   (nginx: its origin concurrency and the other client)
  tls-silent       1,000 connections to the TLS port that never send a byte:
                   VmRSS growth <= 4 MiB
  tls-slow         200 ClientHellos a byte per 200 ms against a 2 s handshake
                   timeout: each closed within 4 s, VmRSS growth <= 8 MiB,
                   HTTPS still answered
  h3-initial-flood client Initials (real ClientHellos) from thousands of
                   127/8 sources that never answer, beside a legitimate client
                   opening a new HTTP/3 connection every 100 ms (Caddy beside:
                   Debian's package, the local HTTP/3 peer): Retry engages,
                   VmRSS growth <= 32 MiB, the client answered >= 99 %
  h3-amplification Initials from sources that never answer, retry = "never":
                   bytes back <= 3.0x bytes sent for every source
  h3-slow-handshake
                   1,500 clients that answer a Retry and then stall: closed at
                   the TLS handshake timeout, at most 1,024 held (the oldest
                   closed past it), VmRSS growth <= 40 MiB
  h3-streams       every allowed request stream of 20 connections with a head
                   begun and never finished: VmRSS growth <= 16 MiB, refused at
                   the header timeout
  h3-zero-window   4 connections x 100 streams asking for 1,000,000-byte
                   answers with every client window 0: VmRSS growth <= 32 MiB
  h3-qpack-bomb    a QPACK encoder stream inserting 4 KiB entries, and a field
                   section referencing a dynamic entry 4,000 times: every
                   connection closed, VmRSS growth <= 16 MiB
  h3-cid-churn     connections switching connection IDs as fast as issued:
                   VmRSS growth <= 16 MiB, the client answered
  udp-spoof        a relay without auth before a 10x-amplifying server, one
                   spoofed source: bytes back <= 3.0x bytes sent
  udp-replay       a valid envelope, then its bytes from another address:
                   the first relayed, the replay dropped and counted
  udp-invalid      100,000 invalid datagrams from many 127/8 sources beside
                   a legitimate client: >= 99 % of its replies, VmRSS growth
                   <= 16 MiB, CPU per invalid datagram

All traffic goes to 127.0.0.0/8. Every process is started here and stopped
by its pid (SIGTERM, then SIGKILL after 10 s), also on Ctrl-C or an error.
Python 3.11, standard library only.

  bench/hostile.py [--scenarios a,b] [--quick] [--ring] [--gapura PATH]
                   [--loadtest PATH] [--no-build]

This file reads the command line, runs the chosen scenarios, prints the
summary and cleans up on exit; the package bench/hostile_suite/ does the rest.
"""
import argparse
import os
import resource
import signal
import subprocess
import sys
import tempfile
import time
import traceback

# Before the package is imported: its bytecode cache would otherwise be left
# in the tree, as bench/hostile_suite/__pycache__.
sys.dont_write_bytecode = True

from hostile_suite import common
from hostile_suite import gapura as gapura_profiles
from hostile_suite.aborts import scenario_aborts
from hostile_suite.common import ROOT, CouldNotRun, Procs, say
from hostile_suite.faults import scenario_fd_limit, scenario_reloads, scenario_upstream_kill
from hostile_suite.flood import scenario_flood
from hostile_suite.h2 import (scenario_h2_continuation, scenario_h2_control_flood,
                              scenario_h2_hpack_bomb, scenario_h2_rapid_reset,
                              scenario_h2_streams, scenario_h2_zero_window)
from hostile_suite.h3 import (scenario_h3_amplification, scenario_h3_cid_churn,
                              scenario_h3_initial_flood, scenario_h3_qpack_bomb,
                              scenario_h3_slow_handshake, scenario_h3_streams,
                              scenario_h3_zero_window)
from hostile_suite.acme import scenario_acme_sni_flood, scenario_acme_token_probe
from hostile_suite.idle import scenario_idle
from hostile_suite.seams import scenario_udp_replay_cross_shard, scenario_xff_spoof
from hostile_suite.queue import scenario_h2_upstream_queue
from hostile_suite.slow import scenario_slow_body, scenario_slow_headers
from hostile_suite.tls import scenario_tls_silent, scenario_tls_slow
from hostile_suite.udp import scenario_udp_invalid, scenario_udp_replay, scenario_udp_spoof

SCENARIOS = ("slow-headers", "slow-body", "flood", "reloads", "upstream-kill", "idle",
             "fd-limit", "aborts", "h2-rapid-reset", "h2-continuation", "h2-control-flood",
             "h2-zero-window", "h2-hpack-bomb", "h2-streams", "h2-upstream-queue", "tls-silent",
             "tls-slow", "h3-initial-flood", "h3-amplification", "h3-slow-handshake",
             "h3-streams", "h3-zero-window", "h3-qpack-bomb", "h3-cid-churn",
             "udp-spoof", "udp-replay", "udp-invalid", "acme-sni-flood", "acme-token-probe", "xff-spoof",
             "udp-replay-cross-shard")

RUNNERS = {
    "slow-headers": scenario_slow_headers,
    "slow-body": scenario_slow_body,
    "flood": scenario_flood,
    "reloads": scenario_reloads,
    "upstream-kill": scenario_upstream_kill,
    "idle": scenario_idle,
    "fd-limit": scenario_fd_limit,
    "aborts": scenario_aborts,
    "h2-rapid-reset": scenario_h2_rapid_reset,
    "h2-continuation": scenario_h2_continuation,
    "h2-control-flood": scenario_h2_control_flood,
    "h2-zero-window": scenario_h2_zero_window,
    "h2-hpack-bomb": scenario_h2_hpack_bomb,
    "h2-streams": scenario_h2_streams,
    "h2-upstream-queue": scenario_h2_upstream_queue,
    "tls-silent": scenario_tls_silent,
    "tls-slow": scenario_tls_slow,
    "h3-initial-flood": scenario_h3_initial_flood,
    "h3-amplification": scenario_h3_amplification,
    "h3-slow-handshake": scenario_h3_slow_handshake,
    "h3-streams": scenario_h3_streams,
    "h3-zero-window": scenario_h3_zero_window,
    "h3-qpack-bomb": scenario_h3_qpack_bomb,
    "h3-cid-churn": scenario_h3_cid_churn,
    "udp-spoof": scenario_udp_spoof,
    "udp-replay": scenario_udp_replay,
    "udp-invalid": scenario_udp_invalid,
    "acme-sni-flood": scenario_acme_sni_flood,
    "acme-token-probe": scenario_acme_token_probe,
    "xff-spoof": scenario_xff_spoof,
    "udp-replay-cross-shard": scenario_udp_replay_cross_shard,
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
    p.add_argument("--ring", action="store_true",
                   help="every profile with [server] ring = \"on\" (receives from the shard's own ring)")
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

    cores = sorted(os.sched_getaffinity(0))
    if common.LOAD_CORE not in cores or common.SERVER_CORE not in cores:
        say(f"hostile.py: cores {common.SERVER_CORE} and {common.LOAD_CORE} are not both usable "
            f"here ({cores}); everything shares core {common.SERVER_CORE}")
        common.LOAD_CORE = common.SERVER_CORE
    # This program's own client threads (and the aborts scenario's upstream)
    # are load too: they run on the load core.
    try:
        os.sched_setaffinity(0, {common.LOAD_CORE})
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

    gapura_profiles.RING["on"] = args.ring
    say(f"# hostile.py: {', '.join(chosen)}{' (--quick)' if args.quick else ''}"
        f"{' (--ring)' if args.ring else ''}")
    say(f"# gapura {args.gapura}, gapura-loadtest {args.loadtest}")
    say(f"# server on core {common.SERVER_CORE}, load and attackers on core "
        f"{common.LOAD_CORE}, shards = 1, "
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

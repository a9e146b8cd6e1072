"""What is compared: the scenarios, the servers, the load generators, and the
checked options that select among them."""
import dataclasses
import re
from collections import namedtuple

# kind `respond`: the server under test answers itself; kind `proxy`: it
# forwards to an upstream nginx that answers. Adding a scenario is one entry
# here; the order of this table is the order of `--scenarios all`.
Scenario = namedtuple("Scenario", "kind connections depth text")
SCENARIOS = {
    "respond-c64": Scenario(
        "respond", 64, 1,
        "fixed 200 answered by the server itself, 64 keep-alive connections, "
        "one request in flight per connection"),
    "respond-c256": Scenario(
        "respond", 256, 1,
        "fixed 200 answered by the server itself, 256 keep-alive connections, "
        "one request in flight per connection"),
    "pipelined16": Scenario(
        "respond", 64, 16,
        "fixed 200 answered by the server itself, 64 keep-alive connections, "
        "16 pipelined requests per write; latency counts from the batch's write "
        "(gapura-loadtest: a sample per response; wrk: one per batch, at its 16th response)"),
    "pipelined2": Scenario(
        "respond", 64, 2,
        "fixed 200 answered by the server itself, 64 keep-alive connections, "
        "2 pipelined requests per write: enough to saturate the server with either "
        "generator (one request in flight leaves wrk the bottleneck)"),
    "proxy-c64": Scenario(
        "proxy", 64, 1,
        "the server forwards to an upstream nginx that answers "
        "the fixed 200, 64 keep-alive connections"),
    "proxy-c256": Scenario(
        "proxy", 256, 1,
        "the server forwards to an upstream nginx that answers "
        "the fixed 200, 256 keep-alive connections"),
}
# The floors are opt-in: a minimal proxy/responder doing only the essential
# work (bench/src/bin/floor-proxy.rs), on monoio's stream API like Gapura,
# or on a ring driven directly (multishot receives, provided buffers,
# registered files). floor-monoio-dated answers with a Date line and keeps
# a timer pending, as any server does (respond scenarios only).
# floor-glommio: the same work on glommio's executor and streams (the floor
# built with `--features glommio`), to weigh glommio against monoio.
KNOWN_SERVERS = ("gapura", "gapura-ring", "gapura-protected", "nginx", "haproxy",
                 "floor-monoio", "floor-ring", "floor-monoio-dated", "floor-glommio")
KNOWN_GENERATORS = ("gapura-loadtest", "wrk")


def floor_work(name):
    """`floor-ENGINE+Nns`: (ENGINE, N), the floor with about N ns of work
    added to every request (`floor-proxy --work-ns`), to read what a ratio
    to the floor means in nanoseconds of a server's own work; else None."""
    m = re.fullmatch(r"floor-(monoio|ring)\+([0-9]{1,5})ns", name)
    return (m.group(1), int(m.group(2))) if m else None
# Where a proxy scenario's upstream runs. `saturated`: on the load core, so
# the server's core does only the server's work and is saturated by it, and
# every send to a peer wakes a task on the other core. `shared`: on the
# server's core, so the upstream's work shares that core (the server's figure
# is still its own CPU only) and the server and its upstream hand each other
# the core. The respond scenarios have no upstream and run once.
LAYOUTS = {
    "saturated": "upstream on the load core (the server's core runs the server alone, saturated)",
    "shared": "upstream on the server's core (server and upstream share it)",
}


@dataclasses.dataclass
class Options:
    servers: list
    scenarios: list
    duration: int
    warmup: int
    generators: list  # in the order the runs go
    generator_explicit: bool  # --generator was given: then no fallback to wrk
    layouts: list  # of the proxy scenarios
    counts_secs: int  # the counting run's length; 0: no counts
    build: bool
    server_core: int
    load_core: int
    port_base: int
    results_dir: str


def runs_of(opts, sc_name):
    """The layouts SC_NAME runs in: each asked for when it has an upstream,
    else one (None)."""
    return opts.layouts if SCENARIOS[sc_name].kind == "proxy" else [None]


def any_proxy_scenario(opts):
    return any(SCENARIOS[sc].kind == "proxy" for sc in opts.scenarios)


def needs_nginx(opts):
    """nginx runs as a server under test, or as the proxy scenarios' upstream."""
    return "nginx" in opts.servers or any_proxy_scenario(opts)

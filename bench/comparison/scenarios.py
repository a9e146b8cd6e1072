"""What is compared: the scenarios, the servers, the load generators, and the
checked options that select among them."""
import dataclasses
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
    "proxy-c64": Scenario(
        "proxy", 64, 1,
        "the server forwards to an upstream nginx (on the load core) that answers "
        "the fixed 200, 64 keep-alive connections"),
    "proxy-c256": Scenario(
        "proxy", 256, 1,
        "the server forwards to an upstream nginx (on the load core) that answers "
        "the fixed 200, 256 keep-alive connections"),
}
KNOWN_SERVERS = ("gapura", "nginx", "haproxy")
KNOWN_GENERATORS = ("gapura-loadtest", "wrk")


@dataclasses.dataclass
class Options:
    servers: list
    scenarios: list
    duration: int
    warmup: int
    generator: str
    generator_explicit: bool  # --generator was given: then no fallback to wrk
    build: bool
    server_core: int
    load_core: int
    port_base: int
    results_dir: str


def any_proxy_scenario(opts):
    return any(SCENARIOS[sc].kind == "proxy" for sc in opts.scenarios)


def needs_nginx(opts):
    """nginx runs as a server under test, or as the proxy scenarios' upstream."""
    return "nginx" in opts.servers or any_proxy_scenario(opts)

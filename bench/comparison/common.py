"""Paths and messages every part of the comparison shares."""
import os
import sys

BENCH = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ROOT = os.path.dirname(BENCH)
PEERS = os.path.join(BENCH, "peers")
PROG = "compare.py"


def say(msg):
    print(f"{PROG}: {msg}", file=sys.stderr, flush=True)


def die(msg):
    say(msg)
    sys.exit(1)


def read_text(path):
    """PATH's text, or "" when it cannot be read."""
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read()
    except OSError:
        return ""


def indented(text):
    return "".join("    " + line + "\n" for line in text.splitlines())


def online_cores():
    """The cores this process may run on, as `nproc` counts them."""
    return len(os.sched_getaffinity(0))

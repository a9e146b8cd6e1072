"""Loopback ports for the servers: only ports nothing listens on, each handed
out once, so a stale process cannot answer in place of the server under test."""
import socket
import time

from .common import die
from .procs import is_running

PORT_LAST = 18999


def listening_ports():
    """Every TCP port something listens on, on any address (/proc/net/tcp{,6})."""
    ports = set()
    for path in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(path) as f:
                lines = f.read().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if len(fields) > 3 and fields[3] == "0A":  # TCP_LISTEN
                ports.add(int(fields[1].rsplit(":", 1)[1], 16))
    return ports


def accepts(port, timeout=1.0):
    try:
        socket.create_connection(("127.0.0.1", port), timeout=timeout).close()
        return True
    except OSError:
        return False


class Ports:
    """Free loopback ports, from --port-base up to PORT_LAST."""

    def __init__(self, first):
        self.first = first
        self.cursor = first

    def next(self):
        while self.cursor <= PORT_LAST:
            port = self.cursor
            self.cursor += 1
            if port not in listening_ports() and not accepts(port):
                return port
        die(f"no free port left in {self.first}..{PORT_LAST}")


def wait_port(port, pid):
    """Up to 10 s for PORT to accept while PID lives."""
    for _ in range(200):
        if not is_running(pid):
            return False
        if accepts(port):
            return True
        time.sleep(0.05)
    return False

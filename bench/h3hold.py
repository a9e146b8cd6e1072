#!/usr/bin/env python3
"""aioquic clients for bench/h3.py and bench/hostile.py's HTTP/3 rows.

  --mode handshakes  opens --count connections one after another, each a
                     full handshake and one GET; prints how many answered
  --mode idle        opens --count connections and holds them idle (one GET
                     each first) until SIGTERM; prints how many are open
  --mode streams     opens --count connections with --streams streams each,
                     every stream's HEADERS frame begun and never finished
                     (a trickled head); holds them until SIGTERM
"""
import argparse
import asyncio
import signal
import ssl
import sys

from aioquic.asyncio.client import connect
from aioquic.asyncio.protocol import QuicConnectionProtocol
from aioquic.h3.connection import H3_ALPN, H3Connection
from aioquic.h3.events import DataReceived, HeadersReceived
from aioquic.quic.configuration import QuicConfiguration


class Client(QuicConnectionProtocol):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.h3 = H3Connection(self._quic)
        self.done = {}

    def quic_event_received(self, event):
        for e in self.h3.handle_event(event):
            if isinstance(e, (HeadersReceived, DataReceived)) and e.stream_ended:
                f = self.done.pop(e.stream_id, None)
                if f and not f.done():
                    f.set_result(True)

    def send(self, authority, method="GET", end=True, length=None):
        sid = self._quic.get_next_available_stream_id()
        fields = [(b":method", method.encode()), (b":scheme", b"https"),
                  (b":authority", authority.encode()), (b":path", b"/")]
        if length is not None:
            fields.append((b"content-length", str(length).encode()))
        self.h3.send_headers(sid, fields, end_stream=end)
        f = self._loop.create_future()
        self.done[sid] = f
        self.transmit()
        return f


def config(authority):
    c = QuicConfiguration(is_client=True, alpn_protocols=H3_ALPN)
    c.server_name = authority
    c.verify_mode = ssl.CERT_NONE
    c.idle_timeout = 120
    return c


async def main(a):
    host, port = a.connect.rsplit(":", 1)
    port = int(port)
    if a.mode == "handshakes":
        n = 0
        for _ in range(a.count):
            try:
                async with connect(host, port, configuration=config(a.authority),
                                   create_protocol=Client) as c:
                    await asyncio.wait_for(c.send(a.authority), 10)
                    n += 1
            except Exception:
                pass
        print(n, flush=True)
        return
    held = []
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    for _ in range(a.count):
        cm = connect(host, port, configuration=config(a.authority), create_protocol=Client)
        c = await cm.__aenter__()
        held.append((cm, c))
        if a.mode == "idle":
            await asyncio.wait_for(c.send(a.authority), 10)
        else:
            # Every connection pays its handshake first (one GET).
            await asyncio.wait_for(c.send(a.authority), 10)
            for _ in range(a.streams):
                sid = c._quic.get_next_available_stream_id()
                c._quic.send_stream_data(sid, b"\x01\x40\x64\x00\x00\xd1\xd7\xc1", False)
            c.transmit()
    print(f"{len(held)} connections held", flush=True)
    await stop.wait()


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("--connect", required=True)
    p.add_argument("--authority", required=True)
    p.add_argument("--mode", choices=["handshakes", "idle", "streams"], required=True)
    p.add_argument("--count", type=int, default=1)
    p.add_argument("--streams", type=int, default=0)
    asyncio.run(main(p.parse_args()))

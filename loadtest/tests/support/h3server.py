#!/usr/bin/env python3
"""An HTTP/3 server for the load tester's tests (aioquic): answers every
request `200 ok` 2 ms after reading it whole; prints its UDP port, then, on
stdin's end, how many requests it answered and the most it had open at
once, as `requests N max M`.

  h3server.py CERT KEY
"""
import asyncio
import sys

from aioquic.asyncio import serve
from aioquic.asyncio.protocol import QuicConnectionProtocol
from aioquic.h3.connection import H3_ALPN, H3Connection
from aioquic.h3.events import DataReceived, HeadersReceived
from aioquic.quic.configuration import QuicConfiguration

SEEN = {"requests": 0, "open": 0, "max": 0}


class Server(QuicConnectionProtocol):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.h3 = None

    def quic_event_received(self, event):
        if self.h3 is None:
            self.h3 = H3Connection(self._quic)
        for e in self.h3.handle_event(event):
            if isinstance(e, HeadersReceived):
                SEEN["open"] += 1
                SEEN["max"] = max(SEEN["max"], SEEN["open"])
            if isinstance(e, (HeadersReceived, DataReceived)) and e.stream_ended:
                self._loop.call_later(0.002, self.answer, e.stream_id)

    def answer(self, stream_id):
        SEEN["open"] -= 1
        SEEN["requests"] += 1
        self.h3.send_headers(stream_id, [(b":status", b"200"), (b"content-length", b"2")])
        self.h3.send_data(stream_id, b"ok", end_stream=True)
        self.transmit()


async def main(cert, key):
    config = QuicConfiguration(is_client=False, alpn_protocols=H3_ALPN)
    config.load_cert_chain(cert, key)
    server = await serve("127.0.0.1", 0, configuration=config, create_protocol=Server)
    port = server._transport.get_extra_info("sockname")[1]
    print(port, flush=True)
    loop = asyncio.get_running_loop()
    await loop.run_in_executor(None, sys.stdin.read)
    print(f"requests {SEEN['requests']} max {SEEN['max']}", flush=True)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2]))

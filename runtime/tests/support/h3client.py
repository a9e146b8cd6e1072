#!/usr/bin/env python3
"""An HTTP/3 client for Gapura's tests (aioquic): sends requests over one
QUIC connection and prints each answer as one JSON line:
{"status": 200, "headers": [[name, value], ...], "body": "..."}.

  h3client.py --connect 127.0.0.1:8443 --authority a.example \
      [--path /] [--method GET] [--data TEXT] [--header name:value]... \
      [--count N] [--ca FILE] [--rebind-after N] [--partial-head]
      [--ping-for SECONDS] [--early]

--partial-head then sends a request stream whose HEADERS frame never
completes and prints how it ended; --ping-for keeps the connection alive
with QUIC pings and prints the code it was closed with (null: open).
--early resumes a session from a first connection and sends the requests
at once on the second, in 0-RTT data where the server allows it;
--replay-early then sends that connection's first datagrams again from
127.0.0.4, as a recorded 0-RTT flight would be replayed.

With --rebind-after N the client talks through a relay in this process
that sends to the server from 127.0.0.2 and, after N answers, from
127.0.0.3 (a new address, as a NAT rebinding or a migrating client
gives the server).
"""

import argparse
import asyncio
import json
import socket
import ssl
import sys

from aioquic.asyncio.client import connect
from aioquic.asyncio.protocol import QuicConnectionProtocol
from aioquic.h3.connection import H3_ALPN, H3Connection
from aioquic.h3.events import DataReceived, HeadersReceived
from aioquic.quic.configuration import QuicConfiguration
from aioquic.quic.events import ConnectionTerminated, QuicEvent, StreamReset


class Client(QuicConnectionProtocol):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.h3 = H3Connection(self._quic)
        self.waiting = {}
        self.closed = None

    def quic_event_received(self, event: QuicEvent) -> None:
        if isinstance(event, ConnectionTerminated):
            self.closed = event.error_code
        if isinstance(event, StreamReset) and event.stream_id in self.waiting:
            answer, done = self.waiting.pop(event.stream_id)
            answer["reset"] = event.error_code
            done.set_result(answer)
            return
        for e in self.h3.handle_event(event):
            if e.stream_id not in self.waiting:
                continue
            answer, done = self.waiting[e.stream_id]
            if isinstance(e, HeadersReceived):
                for name, value in e.headers:
                    if name == b":status":
                        answer["status"] = int(value)
                    else:
                        answer["headers"].append([name.decode(), value.decode()])
            elif isinstance(e, DataReceived):
                answer["body"] += e.data.decode("utf-8", "replace")
            if e.stream_ended:
                del self.waiting[e.stream_id]
                done.set_result(answer)

    async def partial_head(self):
        """A HEADERS frame announcing 100 bytes, of which 5 come."""
        stream_id = self._quic.get_next_available_stream_id()
        self._quic.send_stream_data(stream_id, b"\x01\x40\x64\x00\x00\xd1\xd7\xc1", False)
        done = self._loop.create_future()
        self.waiting[stream_id] = ({"status": 0, "headers": [], "body": ""}, done)
        self.transmit()
        return await asyncio.wait_for(done, 30)

    async def ping_for(self, secs):
        """Keeps the connection alive with pings; the code it was closed
        with, or None."""
        end = self._loop.time() + secs
        while self._loop.time() < end and self.closed is None:
            self._quic.send_ping(0)
            self.transmit()
            await asyncio.sleep(0.2)
        return self.closed

    async def request(self, method, authority, path, headers, data):
        stream_id = self._quic.get_next_available_stream_id()
        fields = [
            (b":method", method.encode()),
            (b":scheme", b"https"),
            (b":authority", authority.encode()),
            (b":path", path.encode()),
        ] + [(n.encode(), v.encode()) for n, v in headers]
        self.h3.send_headers(stream_id, fields, end_stream=data is None)
        if data is not None:
            self.h3.send_data(stream_id, data.encode(), end_stream=True)
        done = self._loop.create_future()
        self.waiting[stream_id] = ({"status": 0, "headers": [], "body": ""}, done)
        self.transmit()
        return await asyncio.wait_for(done, 10)


class Relay(asyncio.DatagramProtocol):
    """Forwards the client's datagrams to the server from its current
    outer socket, and the server's answers (to any of them) back."""

    def __init__(self, server):
        self.server = server
        self.client = None
        self.outer = None
        # The client's first datagrams, kept to be replayed (--replay-early).
        self.captured = None

    def connection_made(self, transport):
        self.transport = transport

    def datagram_received(self, data, addr):
        self.client = addr
        if self.captured is not None and len(self.captured) < 8:
            self.captured.append(data)
        self.outer.sendto(data, self.server)

    async def bind_outer(self, host):
        loop = asyncio.get_running_loop()
        relay = self

        class Back(asyncio.DatagramProtocol):
            def datagram_received(self, data, addr):
                if relay.client:
                    relay.transport.sendto(data, relay.client)

        self.outer, _ = await loop.create_datagram_endpoint(Back, local_addr=(host, 0))


async def main(args):
    config = QuicConfiguration(is_client=True, alpn_protocols=H3_ALPN)
    config.server_name = args.authority
    if args.ca:
        config.load_verify_locations(args.ca)
    else:
        config.verify_mode = ssl.CERT_NONE
    host, port = args.connect.rsplit(":", 1)
    headers = [h.split(":", 1) for h in args.header]
    if args.early or args.replay_early:
        # A first connection for a session ticket; the requests then go
        # on a resumed connection at once, in 0-RTT data where the ticket
        # allows it.
        tickets = []
        async with connect(host, int(port), configuration=config, create_protocol=Client,
                           session_ticket_handler=tickets.append) as c:
            await c.request("GET", args.authority, "/", headers, None)
            for _ in range(50):
                if tickets:
                    break
                await asyncio.sleep(0.02)
        config.session_ticket = tickets[-1] if tickets else None
        target = (host, int(port))
        relay = None
        if args.replay_early:
            loop = asyncio.get_running_loop()
            relay = Relay(target)
            relay.captured = []
            transport, _ = await loop.create_datagram_endpoint(
                lambda: relay, local_addr=("127.0.0.1", 0))
            await relay.bind_outer("127.0.0.2")
            target = transport.get_extra_info("sockname")[:2]
        async with connect(target[0], int(target[1]), configuration=config,
                           create_protocol=Client, wait_connected=False) as c:
            pending = [c.request(args.method, args.authority, args.path, headers, args.data)
                       for _ in range(args.count)]
            for answer in await asyncio.gather(*pending):
                print(json.dumps(answer), flush=True)
        if relay is not None:
            # The same first flight (Initial and 0-RTT) again, from
            # another address, as an attacker who recorded it would send.
            replay = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            replay.bind(("127.0.0.4", 0))
            for d in relay.captured:
                replay.sendto(d, (host, int(port)))
            await asyncio.sleep(1.0)
            print(json.dumps({"replayed": len(relay.captured)}), flush=True)
        return
    relay = None
    if args.rebind_after is not None:
        loop = asyncio.get_running_loop()
        relay = Relay((host, int(port)))
        transport, _ = await loop.create_datagram_endpoint(
            lambda: relay, local_addr=("127.0.0.1", 0)
        )
        await relay.bind_outer("127.0.0.2")
        host, port = transport.get_extra_info("sockname")[:2]
    async with connect(host, int(port), configuration=config, create_protocol=Client) as client:
        for i in range(args.count):
            if relay is not None and i == args.rebind_after:
                await relay.bind_outer("127.0.0.3")
            answer = await client.request(
                args.method, args.authority, args.path, headers, args.data
            )
            print(json.dumps(answer), flush=True)
        if args.partial_head:
            print(json.dumps(await client.partial_head()), flush=True)
        if args.ping_for:
            print(json.dumps({"closed": await client.ping_for(args.ping_for)}), flush=True)


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("--connect", required=True)
    p.add_argument("--authority", required=True)
    p.add_argument("--path", default="/")
    p.add_argument("--method", default="GET")
    p.add_argument("--data")
    p.add_argument("--header", action="append", default=[])
    p.add_argument("--count", type=int, default=1)
    p.add_argument("--ca")
    p.add_argument("--rebind-after", type=int)
    p.add_argument("--partial-head", action="store_true")
    p.add_argument("--early", action="store_true")
    p.add_argument("--replay-early", action="store_true")
    p.add_argument("--ping-for", type=float)
    try:
        asyncio.run(main(p.parse_args()))
    except Exception as e:  # the test reads the exit status and this line
        print(json.dumps({"error": repr(e)}), flush=True)
        sys.exit(1)

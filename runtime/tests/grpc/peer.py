"""A real gRPC server and client (grpcio) for the proxy's gRPC tests.

    peer.py server            serves gapura.test.Echo on 127.0.0.1 (h2c) and
                              prints its port, then runs until killed
    peer.py client HOST:PORT  makes every call through HOST:PORT and prints
                              one JSON line per call

The messages are raw bytes (no protobuf): the methods are generic handlers.
"""

import json
import sys
import threading
from concurrent import futures

import grpc

SERVICE = "gapura.test.Echo"


def unary(request, context):
    return b"echo:" + request


def stream(request, context):
    for i in range(3):
        yield b"part-%d:" % i + request


def fail(request, context):
    context.abort(grpc.StatusCode.NOT_FOUND, "no such thing")


def slow(request, context):
    # Until the caller's deadline cancels the call.
    done = threading.Event()
    context.add_callback(done.set)
    done.wait(30)
    return b"late"


def serve():
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=8))
    handlers = {
        "Unary": grpc.unary_unary_rpc_method_handler(unary),
        "Limited": grpc.unary_unary_rpc_method_handler(unary),
        "Stream": grpc.unary_stream_rpc_method_handler(stream),
        "Fail": grpc.unary_unary_rpc_method_handler(fail),
        "Slow": grpc.unary_unary_rpc_method_handler(slow),
    }
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SERVICE, handlers),))
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    print(port, flush=True)
    server.wait_for_termination()


def outcome(name, call):
    try:
        reply = call()
        if isinstance(reply, list):
            reply = [r.decode() for r in reply]
        else:
            reply = reply.decode()
        out = {"call": name, "code": "OK", "reply": reply}
    except grpc.RpcError as e:
        out = {"call": name, "code": e.code().name, "details": e.details()}
    print(json.dumps(out), flush=True)


def client(target):
    with grpc.insecure_channel(target) as channel:
        path = lambda m: "/%s/%s" % (SERVICE, m)
        u = channel.unary_unary(path("Unary"))
        s = channel.unary_stream(path("Stream"))
        f = channel.unary_unary(path("Fail"))
        slow_call = channel.unary_unary(path("Slow"))
        limited = channel.unary_unary(path("Limited"))
        outcome("unary", lambda: u(b"hello", timeout=10))
        outcome("stream", lambda: list(s(b"x", timeout=10)))
        outcome("fail", lambda: f(b"x", timeout=10))
        outcome("deadline", lambda: slow_call(b"x", timeout=0.3))
        outcome("limited-1", lambda: limited(b"a", timeout=10))
        outcome("limited-2", lambda: limited(b"b", timeout=10))


if __name__ == "__main__":
    if sys.argv[1] == "server":
        serve()
    else:
        client(sys.argv[2])

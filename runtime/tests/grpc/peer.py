"""A real gRPC server and client (grpcio) for the proxy's gRPC tests.

    peer.py server            serves gapura.test.Echo on 127.0.0.1 (h2c) and
                              prints its port, then runs until killed
    peer.py client HOST:PORT  makes every call through HOST:PORT and prints
                              one JSON line per call
    peer.py pingpong HOST:PORT ROUNDS [CA NAME]
                              one bidirectional call through HOST:PORT (over
                              TLS trusting CA, the server named NAME, when
                              given): each message sent only once the reply
                              to the one before came; prints one JSON line

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


def chat(requests, context):
    for message in requests:
        yield b"echo:" + message


def serve():
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=8))
    handlers = {
        "Unary": grpc.unary_unary_rpc_method_handler(unary),
        "Limited": grpc.unary_unary_rpc_method_handler(unary),
        "Stream": grpc.unary_stream_rpc_method_handler(stream),
        "Fail": grpc.unary_unary_rpc_method_handler(fail),
        "Slow": grpc.unary_unary_rpc_method_handler(slow),
        "Chat": grpc.stream_stream_rpc_method_handler(chat),
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


def pingpong(target, rounds, ca=None, name=None):
    import queue

    outbox = queue.Queue()

    def requests():
        while True:
            message = outbox.get()
            if message is None:
                return
            yield message

    if ca:
        with open(ca, "rb") as f:
            creds = grpc.ssl_channel_credentials(root_certificates=f.read())
        options = [("grpc.ssl_target_name_override", name)]
        channel = grpc.secure_channel(target, creds, options=options)
    else:
        channel = grpc.insecure_channel(target)
    done = 0
    try:
        with channel:
            chat = channel.stream_stream("/%s/Chat" % SERVICE)
            outbox.put(b"ping-0")
            for reply in chat(requests(), timeout=60):
                if reply != b"echo:ping-%d" % done:
                    raise SystemExit("round %d: %r" % (done, reply))
                done += 1
                outbox.put(None if done == rounds else b"ping-%d" % done)
        out = {"call": "pingpong", "code": "OK", "rounds": done}
    except grpc.RpcError as e:
        outbox.put(None)
        out = {"call": "pingpong", "code": e.code().name, "rounds": done}
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    if sys.argv[1] == "server":
        serve()
    elif sys.argv[1] == "pingpong":
        pingpong(sys.argv[2], int(sys.argv[3]), *sys.argv[4:6])
    else:
        client(sys.argv[2])

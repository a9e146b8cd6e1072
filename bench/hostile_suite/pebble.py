"""A local ACME server for the benchmarks: Debian's pebble, with
pebble-challtestsrv answering every name with 127.0.0.1, its HTTPS
certificate from a CA made for the run (openssl), validating HTTP-01 and
TLS-ALPN-01 on the ports it is given; and `Refuser`, the ACME server down
(a listener that accepts and closes, counting). Every process is stopped
by its pid; all traffic stays on 127.0.0.1."""
import os
import re
import signal
import socket
import ssl
import subprocess
import threading
import time


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def free_udp_port():
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def openssl(*args):
    subprocess.run(["openssl", *args], check=True, capture_output=True)


def pebble_files(work):
    """A CA of this run's and pebble's leaf for 127.0.0.1."""
    ca_key, ca = os.path.join(work, "ca.key"), os.path.join(work, "ca.pem")
    key, csr, cert = (os.path.join(work, n) for n in ("pebble.key", "pebble.csr", "pebble.pem"))
    openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
            "-keyout", ca_key, "-out", ca, "-days", "2", "-subj", "/CN=bench pebble root")
    openssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
            "-keyout", key, "-out", csr, "-subj", "/CN=127.0.0.1")
    ext = os.path.join(work, "ext.cnf")
    with open(ext, "w") as f:
        f.write("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    openssl("x509", "-req", "-in", csr, "-CA", ca, "-CAkey", ca_key, "-CAcreateserial",
            "-out", cert, "-days", "2", "-extfile", ext)
    return ca, cert, key


class Pebble:
    def __init__(self, work, files, port, mgmt, http, tls):
        ca, cert, key = files
        self.port, self.mgmt = port, mgmt
        self.dns_port = free_udp_port()
        conf = os.path.join(work, f"pebble-{port}.json")
        with open(conf, "w") as f:
            f.write('{"pebble": {"listenAddress": "127.0.0.1:%d", "managementListenAddress": '
                    '"127.0.0.1:%d", "certificate": "%s", "privateKey": "%s", "httpPort": %d, '
                    '"tlsPort": %d, "ocspResponderURL": "", "externalAccountBindingRequired": false}}'
                    % (port, mgmt, cert, key, http, tls))
        self.log_path = os.path.join(work, f"pebble-{port}-{time.time_ns()}.log")
        self.log = open(self.log_path, "w")
        self.dns = subprocess.Popen(
            ["pebble-challtestsrv", "-dns01", f"127.0.0.1:{self.dns_port}", "-http01", "",
             "-https01", "", "-tlsalpn01", "", "-management", f"127.0.0.1:{free_port()}",
             "-defaultIPv4", "127.0.0.1", "-defaultIPv6", ""],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        env = dict(os.environ, PEBBLE_VA_NOSLEEP="1", PEBBLE_WFE_NONCEREJECT="0")
        self.proc = subprocess.Popen(["pebble", "-config", conf, "-dnsserver",
                                      f"127.0.0.1:{self.dns_port}"],
                                     stdout=self.log, stderr=self.log, env=env)
        ctx = ssl.create_default_context(cafile=ca)
        deadline = time.time() + 20
        while time.time() < deadline:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=1) as s:
                    with ctx.wrap_socket(s, server_hostname="127.0.0.1"):
                        return
            except OSError:
                time.sleep(0.05)
        raise RuntimeError("pebble did not start")

    def root(self, ca):
        ctx = ssl.create_default_context(cafile=ca)
        with socket.create_connection(("127.0.0.1", self.mgmt), timeout=5) as s:
            with ctx.wrap_socket(s, server_hostname="127.0.0.1") as t:
                t.sendall(b"GET /roots/0 HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
                data = b""
                while True:
                    chunk = t.recv(65536)
                    if not chunk:
                        break
                    data += chunk
        body = data.split(b"\r\n\r\n", 1)[1]
        start = body.index(b"-----BEGIN CERTIFICATE-----")
        end = body.index(b"-----END CERTIFICATE-----") + len(b"-----END CERTIFICATE-----")
        return body[start:end].decode() + "\n"

    def requests(self, path=""):
        """ACME requests pebble logged (one line each, `METHOD /path`),
        those to `path` only when given."""
        self.log.flush()
        with open(self.log_path) as f:
            return sum(1 for line in f
                       if re.search(r"\b(GET|HEAD|POST) /" + re.escape(path.lstrip("/")), line))

    def stop(self):
        for p in (self.proc, self.dns):
            p.send_signal(signal.SIGTERM)
            try:
                p.wait(timeout=5)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


class Refuser:
    """The ACME server down: a listener that accepts and closes, counting."""

    def __init__(self, port):
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", port))
        self.sock.listen(64)
        self.count = 0
        self.stopped = False
        threading.Thread(target=self.run, daemon=True).start()

    def run(self):
        while not self.stopped:
            try:
                c, _ = self.sock.accept()
            except OSError:
                return
            if self.stopped:
                c.close()
                return
            self.count += 1
            c.close()

    def stop(self):
        self.stopped = True
        try:
            socket.create_connection(self.sock.getsockname(), timeout=1).close()
        except OSError:
            pass
        self.sock.close()


def acme_tables(acme_port, ca, state, extra=""):
    """A Gapura profile's `a.test` host answering `hello`, `[acme]` on the
    local pebble at `acme_port` (`extra` lines added to it), and `a.test`'s
    certificate ordered through it."""
    return f"""
[[host]]
names = ["a.test"]
default = true
kind = "respond"
status = 200
body = "hello\\n"

[acme]
directory = "https://127.0.0.1:{acme_port}/dir"
contact = ["mailto:ops@a.test"]
state_dir = "{state}"
ca_file = "{ca}"
{extra}
[[certificate]]
names = ["a.test"]
acme = true
"""


def caddyfile(d, acme_port, ca, http, tls, ask_port=None):
    """Caddy serving `a.test` (`hello`) with its certificate from the local
    pebble at `acme_port`, state under `d`; with `ask_port`, on-demand
    certificates for any other name, asked of that endpoint. Written to
    `d`/Caddyfile; returns its path."""
    on_demand = "" if ask_port is None else f"""
	on_demand_tls {{
		ask http://127.0.0.1:{ask_port}/check
	}}"""
    any_name = "" if ask_port is None else """https:// {
	bind 127.0.0.1
	tls {
		on_demand
	}
	respond "hello
" 200
}
"""
    path = os.path.join(d, "Caddyfile")
    with open(path, "w") as f:
        f.write(f"""{{
	admin off
	acme_ca https://127.0.0.1:{acme_port}/dir
	acme_ca_root {ca}
	email ops@a.test
	http_port {http}
	https_port {tls}
	storage file_system {d}/caddy-state
	ocsp_stapling off{on_demand}
}}
a.test {{
	bind 127.0.0.1
	respond "hello
" 200
}}
{any_name}""")
    return path

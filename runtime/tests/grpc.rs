//! gRPC end to end through the real binary with a real gRPC server and
//! client (Python's grpcio, `tests/grpc/peer.py`; `.ci/run` installs it):
//! unary, server streaming, an error status, a deadline, and a call the
//! gate refuses arriving as `RESOURCE_EXHAUSTED`.

mod common;

use common::*;
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};

fn peer_script() -> String {
    format!("{}/tests/grpc/peer.py", env!("CARGO_MANIFEST_DIR"))
}

/// The gRPC server, killed when dropped.
struct GrpcServer {
    child: Child,
    port: u16,
}

impl Drop for GrpcServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn grpc_server() -> GrpcServer {
    let mut child = Command::new("python3")
        .arg(peer_script())
        .arg("server")
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("python3 (with grpcio: python3 -m pip install grpcio) runs the gRPC peer");
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let port = line.trim().parse().unwrap_or_else(|_| {
        panic!("the gRPC server did not start (is grpcio installed?): {line:?}")
    });
    GrpcServer { child, port }
}

#[test]
fn a_grpc_client_reaches_a_grpc_server_through_gapura() {
    let server = grpc_server();
    let rest = format!(
        "[[rate_limit]]\nname = \"one\"\nrequests = 1\nper = \"minute\"\nburst = 1\n\n\
         [[upstream]]\nname = \"grpc\"\nservers = [\"127.0.0.1:{}\"]\nprotocol = \"h2\"\n\n\
         [[host]]\nnames = [\"grpc.test\"]\ndefault = true\nkind = \"proxy\"\n\
         [[host.route]]\npath = \"/gapura.test.echo/limited\"\nupstream = \"grpc\"\nrate_limit = \"one\"\n\
         [[host.route]]\npath = \"/\"\nupstream = \"grpc\"\n",
        server.port
    );
    let g = Gapura::start(&profile("", &rest));
    let out = Command::new("python3")
        .arg(peer_script())
        .arg("client")
        .arg(g.addr.to_string())
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let calls: Vec<serde_json::Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let call = |name: &str| {
        calls
            .iter()
            .find(|c| c["call"] == name)
            .unwrap_or_else(|| panic!("no {name} in {calls:?}"))
            .clone()
    };
    let unary = call("unary");
    assert_eq!(
        (&unary["code"], &unary["reply"]),
        (&"OK".into(), &"echo:hello".into())
    );
    let stream = call("stream");
    assert_eq!(stream["code"], "OK");
    assert_eq!(
        stream["reply"],
        serde_json::json!(["part-0:x", "part-1:x", "part-2:x"])
    );
    // The server's error status arrives as it is.
    let fail = call("fail");
    assert_eq!(
        (&fail["code"], &fail["details"]),
        (&"NOT_FOUND".into(), &"no such thing".into())
    );
    assert_eq!(call("deadline")["code"], "DEADLINE_EXCEEDED");
    // The gate's refusal is a status the client's library understands.
    assert_eq!(call("limited-1")["code"], "OK");
    let refused = call("limited-2");
    assert_eq!(refused["code"], "RESOURCE_EXHAUSTED", "{refused}");
    let details = refused["details"].as_str().unwrap();
    assert!(
        details.starts_with("429 Too Many Requests (request "),
        "{details}"
    );
}

/// One bidirectional call through `addr` (over TLS when `tls` names the
/// CA file and server name): each message sent only once the reply to
/// the one before came back.
fn ping_pong(addr: std::net::SocketAddr, rounds: u32, tls: Option<(&std::path::Path, &str)>) {
    let mut c = Command::new("python3");
    c.arg(peer_script())
        .arg("pingpong")
        .arg(addr.to_string())
        .arg(rounds.to_string());
    if let Some((ca, name)) = tls {
        c.arg(ca).arg(name);
    }
    let out = c.output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let said: serde_json::Value = serde_json::from_str(text.trim()).unwrap();
    assert_eq!(
        (&said["code"], &said["rounds"]),
        (&"OK".into(), &rounds.into()),
        "{said}"
    );
}

#[test]
fn a_bidirectional_call_ping_pongs_500_rounds_over_h2c_and_tls() {
    let server = grpc_server();
    let dir = TempDir::new();
    let (cert, key, _) = common::tls::write_cert(&dir.0, "grpc", &["grpc.test"]);
    let rest = format!(
        "[[upstream]]\nname = \"grpc\"\nservers = [\"127.0.0.1:{}\"]\nprotocol = \"h2\"\n\n\
         [[certificate]]\nnames = [\"grpc.test\"]\ncert = {cert:?}\nkey = {key:?}\n\n\
         [[host]]\nnames = [\"grpc.test\"]\ndefault = true\nkind = \"proxy\"\n\
         [[host.route]]\npath = \"/\"\nupstream = \"grpc\"\n",
        server.port
    );
    let text = profile("", &rest).replace(
        "listen = [\"127.0.0.1:0\"]",
        "listen = [\"127.0.0.1:0\", { addr = \"127.0.0.1:0\", tls = true }]",
    );
    let g = Gapura::start(&text);
    // Each reply reaches the client while its request is still open.
    ping_pong(g.addr, 500, None);
    ping_pong(g.tls_addr.unwrap(), 500, Some((&cert, "grpc.test")));
}

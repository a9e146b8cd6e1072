//! nginx as the upstream (Debian's package; `.ci/run` installs it when
//! missing): over TLS demanding a client certificate (`ssl_verify_client
//! on`), and `listen ... ssl http2` spoken to in HTTP/2.

mod common;

use common::pki::{files, Authority};
use common::*;
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// An nginx of the test's own, stopped (by its pid) when dropped.
struct Nginx {
    child: Child,
    addr: SocketAddr,
    dir: TempDir,
}

impl Drop for Nginx {
    /// A fast shutdown (SIGTERM): the master ends its workers, then
    /// itself; killed outright only if it has not within 10 s.
    fn drop(&mut self) {
        // SAFETY: a signal to the child this test started, by its pid.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        let ended = wait_until(Duration::from_secs(10), || {
            matches!(self.child.try_wait(), Ok(Some(_)))
        });
        if !ended {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

impl Nginx {
    /// Its access log: one line per request, `$server_protocol
    /// $ssl_client_verify $request_uri`.
    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.0.join("access.log")).unwrap_or_default()
    }

    /// Its access log once `ready` holds of it, or as it is after 10 s:
    /// nginx writes a request's line after it has sent the response, so
    /// the client can have its answer before the line is there.
    fn log_when(&self, ready: impl Fn(&str) -> bool) -> String {
        wait_until(Duration::from_secs(10), || ready(&self.log()));
        self.log()
    }
}

fn nginx_bin() -> &'static str {
    for b in ["/usr/sbin/nginx", "/usr/bin/nginx"] {
        if std::path::Path::new(b).exists() {
            return b;
        }
    }
    panic!("nginx is needed (Debian's nginx package; .ci/run installs it)")
}

/// nginx on a free port with a TLS server for `api.internal` (a leaf of
/// `ca`), demanding a client certificate of `ca`; `http2` with `listen ...
/// ssl http2`.
fn nginx(ca: &Authority, http2: bool) -> Nginx {
    let dir = TempDir::new();
    let (_, _, cert, key) = ca.issue(&["api.internal"]);
    std::fs::write(dir.0.join("server.pem"), cert).unwrap();
    std::fs::write(dir.0.join("server.key"), key).unwrap();
    std::fs::write(dir.0.join("ca.pem"), ca.cert.pem()).unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let d = dir.0.display();
    let h2 = if http2 { " http2" } else { "" };
    let conf = format!(
        "worker_processes 1;\ndaemon off;\npid {d}/nginx.pid;\nerror_log {d}/error.log;\n\
         events {{ worker_connections 256; }}\n\
         http {{\n\
           log_format t '$server_protocol $ssl_client_verify $request_uri';\n\
           access_log {d}/access.log t;\n\
           client_body_temp_path {d}/body;\n proxy_temp_path {d}/proxy;\n\
           fastcgi_temp_path {d}/fastcgi;\n uwsgi_temp_path {d}/uwsgi;\n scgi_temp_path {d}/scgi;\n\
           server {{\n\
             listen 127.0.0.1:{port} ssl{h2};\n\
             ssl_certificate {d}/server.pem;\n ssl_certificate_key {d}/server.key;\n\
             ssl_client_certificate {d}/ca.pem;\n ssl_verify_client on;\n\
             location / {{ return 200 \"nginx saw $request_uri over $server_protocol\"; }}\n\
           }}\n\
         }}\n"
    );
    std::fs::write(dir.0.join("nginx.conf"), conf).unwrap();
    let child = Command::new(nginx_bin())
        .arg("-c")
        .arg(dir.0.join("nginx.conf"))
        .arg("-p")
        .arg(&dir.0)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    assert!(
        wait_until(Duration::from_secs(10), || std::net::TcpStream::connect(
            addr
        )
        .is_ok()),
        "nginx did not start: {}",
        std::fs::read_to_string(dir.0.join("error.log")).unwrap_or_default()
    );
    Nginx { child, addr, dir }
}

/// A proxy host routing to `addr` over TLS with `tls` and `protocol`.
fn proxy_to(addr: SocketAddr, protocol: &str, tls: &str) -> String {
    profile(
        "",
        &format!(
            "[[upstream]]\nname = \"app\"\nservers = [\"{addr}\"]\nprotocol = \"{protocol}\"\n{tls}\n\n\
             [[host]]\nnames = [\"app.test\"]\ndefault = true\nkind = \"proxy\"\n\
             [[host.route]]\npath = \"/\"\nupstream = \"app\"\n"
        ),
    )
}

fn get(g: &Gapura, path: &str) -> Response {
    request(
        g.addr,
        format!("GET {path} HTTP/1.1\r\nHost: app.test\r\n\r\n").as_bytes(),
    )
}

#[test]
fn nginx_demanding_a_client_certificate_answers_only_with_it() {
    let ca = Authority::new("nginx-ca");
    let f = files(&ca);
    let up = nginx(&ca, false);
    let with = format!(
        "tls = {{ server_name = \"api.internal\", ca_file = \"{}\", client_cert = \"{}\", client_key = \"{}\" }}",
        f.ca.display(),
        f.client_cert.display(),
        f.client_key.display()
    );
    let g = Gapura::start(&proxy_to(up.addr, "http1", &with));
    let r = get(&g, "/mtls");
    assert_eq!(r.status, 200);
    assert_eq!(r.body, b"nginx saw /mtls over HTTP/1.1");
    // Without the client certificate nginx does not serve the request
    // (its own 400, "No required SSL certificate was sent").
    let without = format!(
        "tls = {{ server_name = \"api.internal\", ca_file = \"{}\" }}",
        f.ca.display()
    );
    let g = Gapura::start(&proxy_to(up.addr, "http1", &without));
    let r = get(&g, "/no-cert");
    assert_eq!(r.status, 400, "{}", String::from_utf8_lossy(&r.body));
    let log = up.log_when(|l| l.contains("/mtls") && l.contains("/no-cert"));
    assert!(log.contains("HTTP/1.1 SUCCESS /mtls"), "{log}");
    assert!(log.contains("NONE /no-cert"), "{log}");
    // An authority that did not sign nginx's certificate: 502, nothing
    // reaches nginx.
    let other = Authority::new("someone-else");
    let o = files(&other);
    let unverified = format!(
        "tls = {{ server_name = \"api.internal\", ca_file = \"{}\", client_cert = \"{}\", client_key = \"{}\" }}",
        o.ca.display(),
        f.client_cert.display(),
        f.client_key.display()
    );
    let g = Gapura::start(&proxy_to(up.addr, "http1", &unverified));
    assert_eq!(get(&g, "/unverified").status, 502);
    assert!(!up.log().contains("/unverified"));
}

#[test]
fn nginx_listening_ssl_http2_is_spoken_to_in_http2() {
    let ca = Authority::new("nginx-ca");
    let f = files(&ca);
    let up = nginx(&ca, true);
    let tls = format!(
        "tls = {{ server_name = \"api.internal\", ca_file = \"{}\", client_cert = \"{}\", client_key = \"{}\" }}",
        f.ca.display(),
        f.client_cert.display(),
        f.client_key.display()
    );
    for protocol in ["h2", "auto"] {
        let g = Gapura::start(&proxy_to(up.addr, protocol, &tls));
        for i in 0..3 {
            let r = get(&g, &format!("/{protocol}/{i}"));
            assert_eq!(r.status, 200, "{protocol}");
            assert_eq!(
                r.body,
                format!("nginx saw /{protocol}/{i} over HTTP/2.0").as_bytes()
            );
        }
    }
    let log = up.log_when(|l| l.lines().count() >= 6);
    assert_eq!(log.matches("HTTP/2.0 SUCCESS").count(), 6, "{log}");
}

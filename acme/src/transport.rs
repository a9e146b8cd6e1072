//! HTTPS to the ACME server: one blocking request a connection (RFC 8555
//! servers are asked a few dozen times a certificate), bounded in time and
//! size, over rustls with the server's own trust roots or the public ones;
//! plain HTTP too, for an on-demand `ask` endpoint on the operator's own
//! network.

use rustls::pki_types::{CertificateDer, ServerName};
use rustls::{ClientConfig, ClientConnection, RootCertStore, StreamOwned};
use std::io::{Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::sync::Arc;
use std::time::Duration;

/// The most an answer may hold (a certificate chain is a few KiB).
pub const MAX_ANSWER: usize = 1 << 20;

/// An answer: status, fields (names lowercase) and body.
#[derive(Debug)]
pub struct Answer {
    pub status: u16,
    pub fields: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Answer {
    /// The first value of field `name` (lowercase).
    pub fn field(&self, name: &str) -> Option<&str> {
        self.fields
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

/// Where requests go and how they are trusted.
pub struct Transport {
    tls: Arc<ClientConfig>,
    timeout: Duration,
}

/// An `https://host[:port]/path` (or `http://`) split.
#[derive(Debug, PartialEq, Eq)]
pub struct Url<'a> {
    pub host: &'a str,
    pub port: u16,
    pub path: &'a str,
    pub tls: bool,
}

/// Splits an `https` or `http` URL; `None` for any other.
pub fn split(url: &str) -> Option<Url<'_>> {
    let (rest, tls) = match url.strip_prefix("https://") {
        Some(r) => (r, true),
        None => (url.strip_prefix("http://")?, false),
    };
    let (authority, path) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, "/"),
    };
    let (host, port) = if let Some(v6) = authority.strip_prefix('[') {
        let end = v6.find(']')?;
        let port = v6[end + 1..].strip_prefix(':');
        (&v6[..end], port)
    } else {
        match authority.rsplit_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (authority, None),
        }
    };
    let port = match port {
        Some(p) => p.parse().ok()?,
        None if tls => 443,
        None => 80,
    };
    if host.is_empty() {
        return None;
    }
    Some(Url {
        host,
        port,
        path,
        tls,
    })
}

impl Transport {
    /// Trusting `roots` (DER) when given, else the public roots.
    pub fn new(roots: Option<&[Vec<u8>]>, timeout: Duration) -> Result<Transport, String> {
        let mut store = RootCertStore::empty();
        match roots {
            Some(list) => {
                for der in list {
                    store
                        .add(CertificateDer::from(der.clone()))
                        .map_err(|e| format!("ca_file: {e}"))?;
                }
            }
            None => store.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned()),
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let tls = ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| e.to_string())?
            .with_root_certificates(store)
            .with_no_client_auth();
        Ok(Transport {
            tls: Arc::new(tls),
            timeout,
        })
    }

    /// One request; `body` with its content type for a POST.
    pub fn request(
        &self,
        method: &str,
        url: &str,
        body: Option<(&str, &[u8])>,
    ) -> Result<Answer, String> {
        let u = split(url).ok_or_else(|| format!("not an http(s) URL: {url}"))?;
        let addr = (u.host, u.port)
            .to_socket_addrs()
            .map_err(|e| format!("{}: {e}", u.host))?
            .next()
            .ok_or_else(|| format!("{}: no address", u.host))?;
        let tcp = TcpStream::connect_timeout(&addr, self.timeout)
            .map_err(|e| format!("{}:{}: {e}", u.host, u.port))?;
        tcp.set_read_timeout(Some(self.timeout))
            .and_then(|_| tcp.set_write_timeout(Some(self.timeout)))
            .map_err(|e| e.to_string())?;
        let out = request_bytes(method, &u, body);
        let raw = if u.tls {
            let name = ServerName::try_from(u.host.to_string()).map_err(|e| e.to_string())?;
            let conn = ClientConnection::new(self.tls.clone(), name).map_err(|e| e.to_string())?;
            exchange(&mut StreamOwned::new(conn, tcp), &out)
        } else {
            exchange(&mut { tcp }, &out)
        };
        let raw = raw.map_err(|e| format!("{url}: {e}"))?;
        parse(&raw, method == "HEAD").map_err(|e| format!("{url}: {e}"))
    }
}

/// A request's bytes.
fn request_bytes(method: &str, u: &Url<'_>, body: Option<(&str, &[u8])>) -> Vec<u8> {
    let default = if u.tls { 443 } else { 80 };
    let host = if u.port == default {
        u.host.to_string()
    } else {
        format!("{}:{}", u.host, u.port)
    };
    let mut head = format!(
        "{method} {} HTTP/1.1\r\nHost: {host}\r\nUser-Agent: gapura-acme\r\nAccept: */*\r\nConnection: close\r\n",
        u.path
    );
    if let Some((ctype, b)) = body {
        head.push_str(&format!(
            "Content-Type: {ctype}\r\nContent-Length: {}\r\n",
            b.len()
        ));
    }
    head.push_str("\r\n");
    let mut out = head.into_bytes();
    if let Some((_, b)) = body {
        out.extend_from_slice(b);
    }
    out
}

/// Writes the request and reads the whole answer.
fn exchange(io: &mut (impl Read + Write), out: &[u8]) -> Result<Vec<u8>, String> {
    io.write_all(out).map_err(|e| e.to_string())?;
    read_all(io)
}

/// Reads until the server closes (an abrupt close after a whole answer is
/// taken as the end), at most [`MAX_ANSWER`] bytes.
fn read_all(r: &mut impl Read) -> Result<Vec<u8>, String> {
    let mut raw = Vec::new();
    let mut buf = [0u8; 8192];
    loop {
        match r.read(&mut buf) {
            Ok(0) => return Ok(raw),
            Ok(n) => {
                raw.extend_from_slice(&buf[..n]);
                if raw.len() > MAX_ANSWER {
                    return Err("answer over 1 MiB".into());
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof && !raw.is_empty() => {
                return Ok(raw)
            }
            Err(e) => return Err(e.to_string()),
        }
    }
}

/// An answer's head and body (length-delimited, chunked, or to the close).
pub fn parse(raw: &[u8], head_only: bool) -> Result<Answer, String> {
    let mut fields = [httparse::EMPTY_HEADER; 64];
    let mut resp = httparse::Response::new(&mut fields);
    let at = match resp.parse(raw) {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) => return Err("answer ended in its head".into()),
        Err(e) => return Err(format!("malformed answer: {e}")),
    };
    let status = resp.code.unwrap_or(0);
    let fields: Vec<(String, String)> = resp
        .headers
        .iter()
        .map(|h| {
            (
                h.name.to_ascii_lowercase(),
                String::from_utf8_lossy(h.value).trim().to_string(),
            )
        })
        .collect();
    let rest = &raw[at..];
    let find = |n: &str| fields.iter().find(|(k, _)| k == n).map(|(_, v)| v.as_str());
    let body = if head_only {
        Vec::new()
    } else if find("transfer-encoding").is_some_and(|v| v.eq_ignore_ascii_case("chunked")) {
        dechunk(rest)?
    } else if let Some(len) = find("content-length") {
        let len: usize = len.parse().map_err(|_| "bad Content-Length")?;
        rest.get(..len)
            .ok_or("answer shorter than its length")?
            .to_vec()
    } else {
        rest.to_vec()
    };
    Ok(Answer {
        status,
        fields,
        body,
    })
}

/// A chunked body, whole.
fn dechunk(mut rest: &[u8]) -> Result<Vec<u8>, String> {
    let mut body = Vec::new();
    loop {
        let line_end = rest
            .windows(2)
            .position(|w| w == b"\r\n")
            .ok_or("chunk size line cut")?;
        let line = std::str::from_utf8(&rest[..line_end]).map_err(|_| "bad chunk size")?;
        let hex = line.split(';').next().unwrap_or("").trim();
        let size = usize::from_str_radix(hex, 16).map_err(|_| "bad chunk size")?;
        rest = &rest[line_end + 2..];
        if size == 0 {
            return Ok(body);
        }
        let chunk = rest.get(..size).ok_or("chunk cut")?;
        body.extend_from_slice(chunk);
        rest = rest.get(size + 2..).ok_or("chunk cut")?;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_split_into_host_port_and_path() {
        assert_eq!(
            split("https://ca.example/dir"),
            Some(Url {
                host: "ca.example",
                port: 443,
                path: "/dir",
                tls: true
            })
        );
        assert_eq!(
            split("https://127.0.0.1:14000"),
            Some(Url {
                host: "127.0.0.1",
                port: 14000,
                path: "/",
                tls: true
            })
        );
        assert_eq!(
            split("https://[::1]:8443/a/b"),
            Some(Url {
                host: "::1",
                port: 8443,
                path: "/a/b",
                tls: true
            })
        );
        assert_eq!(
            split("http://ask.internal/check?x=1"),
            Some(Url {
                host: "ask.internal",
                port: 80,
                path: "/check?x=1",
                tls: false
            })
        );
        assert_eq!(split("ftp://ca.example/dir"), None);
        assert_eq!(split("https://:1/"), None);
        assert_eq!(split("https://h:99999/"), None);
    }

    #[test]
    fn answers_parse_by_length_chunks_or_close() {
        let a = parse(b"HTTP/1.1 201 Created\r\nLocation: /o/1\r\nReplay-Nonce: abc\r\nContent-Length: 2\r\n\r\n{}junk", false).unwrap();
        assert_eq!(a.status, 201);
        assert_eq!(a.field("location"), Some("/o/1"));
        assert_eq!(a.field("replay-nonce"), Some("abc"));
        assert_eq!(a.body, b"{}");
        let c = parse(
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3;x=y\r\nabc\r\n2\r\nde\r\n0\r\n\r\n",
            false,
        )
        .unwrap();
        assert_eq!(c.body, b"abcde");
        let d = parse(b"HTTP/1.1 200 OK\r\n\r\nto the end", false).unwrap();
        assert_eq!(d.body, b"to the end");
        let h = parse(b"HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\n", true).unwrap();
        assert!(h.body.is_empty());
        assert!(parse(b"HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\nab", false).is_err());
        assert!(parse(
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
            false
        )
        .is_err());
        assert!(parse(b"HTTP/1.1 200", false).is_err());
        assert!(parse(b"garbage\r\n\r\n", false).is_err());
    }
}

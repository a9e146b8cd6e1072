//! Targets (parsed URLs) and the request bytes built from them once, before a run.

use std::net::{SocketAddr, ToSocketAddrs};

use bytes::Bytes;

use crate::cli::Config;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scheme {
    Http,
    Https,
    Udp,
}

/// One URL: scheme, authority and path (with query).
#[derive(Clone, Debug)]
pub struct Target {
    pub scheme: Scheme,
    pub host: String,
    pub port: u16,
    pub path: String,
}

impl Target {
    /// Parses `scheme://host[:port][/path]`; IPv6 hosts go in brackets.
    pub fn parse(url: &str) -> Result<Target, String> {
        let (scheme, rest) = if let Some(r) = url.strip_prefix("http://") {
            (Scheme::Http, r)
        } else if let Some(r) = url.strip_prefix("https://") {
            (Scheme::Https, r)
        } else if let Some(r) = url.strip_prefix("udp://") {
            (Scheme::Udp, r)
        } else {
            return Err(format!(
                "{url}: expected an http://, https:// or udp:// URL"
            ));
        };
        let (authority, path) = match rest.find(['/', '?']) {
            Some(i) => (&rest[..i], &rest[i..]),
            None => (rest, "/"),
        };
        let path = if path.starts_with('?') {
            format!("/{path}")
        } else {
            path.to_string()
        };
        let default_port = match scheme {
            Scheme::Http => 80,
            Scheme::Https => 443,
            Scheme::Udp => 0,
        };
        let (host, port) = if let Some(h) = authority.strip_prefix('[') {
            let (h, after) = h
                .split_once(']')
                .ok_or_else(|| format!("{url}: unclosed '[' in host"))?;
            let port = match after.strip_prefix(':') {
                Some(p) => p.parse().map_err(|_| format!("{url}: bad port"))?,
                None => default_port,
            };
            (h.to_string(), port)
        } else {
            match authority.rsplit_once(':') {
                Some((h, p)) => (
                    h.to_string(),
                    p.parse().map_err(|_| format!("{url}: bad port"))?,
                ),
                None => (authority.to_string(), default_port),
            }
        };
        if host.is_empty() {
            return Err(format!("{url}: no host"));
        }
        if port == 0 {
            return Err(format!("{url}: a port is needed"));
        }
        if path.bytes().any(|b| b <= b' ' || b == 0x7f) {
            return Err(format!(
                "{url}: the path may not hold spaces or control bytes"
            ));
        }
        Ok(Target {
            scheme,
            host,
            port,
            path,
        })
    }

    /// The same origin with another path.
    pub fn with_path(&self, path: &str) -> Target {
        Target {
            path: path.to_string(),
            ..self.clone()
        }
    }

    /// Resolves the host once (the first address wins).
    pub fn resolve(&self) -> Result<SocketAddr, String> {
        let host = if self.host.contains(':') {
            format!("[{}]", self.host)
        } else {
            self.host.clone()
        };
        (host.as_str(), self.port)
            .to_socket_addrs()
            .map_err(|e| format!("{}: cannot resolve: {e}", self.host))?
            .next()
            .ok_or_else(|| format!("{}: no address", self.host))
    }

    /// The Host header value.
    pub fn authority(&self) -> String {
        let default = matches!(
            (self.scheme, self.port),
            (Scheme::Http, 80) | (Scheme::Https, 443)
        );
        let host = if self.host.contains(':') {
            format!("[{}]", self.host)
        } else {
            self.host.clone()
        };
        if default {
            host
        } else {
            format!("{host}:{}", self.port)
        }
    }

    pub fn url(&self) -> String {
        let s = match self.scheme {
            Scheme::Http => "http",
            Scheme::Https => "https",
            Scheme::Udp => "udp",
        };
        format!(
            "{s}://{}{}",
            self.authority(),
            if self.scheme == Scheme::Udp {
                ""
            } else {
                &self.path
            }
        )
    }
}

/// HTTP/1.1 request bytes for every target, and a contiguous strip that holds
/// any run of `depth` consecutive requests in rotation order as one slice.
pub struct RequestSet {
    /// `strip[offsets[i]..offsets[i + depth]]` is the batch starting at target `i`.
    pub strip: Bytes,
    pub offsets: Vec<usize>,
    pub count: usize,
    pub head_only: bool,
}

impl RequestSet {
    /// Builds the bytes once. Cost: O(targets × depth) bytes.
    pub fn build(cfg: &Config, depth: usize) -> RequestSet {
        let one: Vec<Vec<u8>> = cfg.targets.iter().map(|t| http1_request(cfg, t)).collect();
        let n = one.len();
        let mut strip = Vec::new();
        let mut offsets = Vec::with_capacity(n + depth + 1);
        for i in 0..n + depth {
            offsets.push(strip.len());
            strip.extend_from_slice(&one[i % n]);
        }
        offsets.push(strip.len());
        RequestSet {
            strip: Bytes::from(strip),
            offsets,
            count: n,
            head_only: cfg.method.eq_ignore_ascii_case("HEAD"),
        }
    }

    /// The batch of `depth` requests starting at rotation index `i`.
    pub fn batch(&self, i: usize, depth: usize) -> Bytes {
        let i = i % self.count;
        self.strip.slice(self.offsets[i]..self.offsets[i + depth])
    }
}

fn http1_request(cfg: &Config, t: &Target) -> Vec<u8> {
    let mut r = Vec::with_capacity(128 + cfg.body.len());
    r.extend_from_slice(cfg.method.as_bytes());
    r.push(b' ');
    r.extend_from_slice(t.path.as_bytes());
    r.extend_from_slice(b" HTTP/1.1\r\n");
    let has = |name: &str| {
        cfg.headers
            .iter()
            .any(|(k, _)| k.eq_ignore_ascii_case(name))
    };
    if !has("host") {
        r.extend_from_slice(format!("Host: {}\r\n", t.authority()).as_bytes());
    }
    for (k, v) in &cfg.headers {
        r.extend_from_slice(format!("{k}: {v}\r\n").as_bytes());
    }
    if !cfg.body.is_empty() && !has("content-length") {
        r.extend_from_slice(format!("Content-Length: {}\r\n", cfg.body.len()).as_bytes());
    }
    r.extend_from_slice(b"\r\n");
    r.extend_from_slice(&cfg.body);
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_parse_with_defaults_and_brackets() {
        let t = Target::parse("http://example.test").unwrap();
        assert_eq!(
            (t.port, t.path.as_str(), t.authority()),
            (80, "/", "example.test".to_string())
        );
        let t = Target::parse("https://[::1]:8443/a?b=1").unwrap();
        assert_eq!(
            (t.host.as_str(), t.port, t.path.as_str()),
            ("::1", 8443, "/a?b=1")
        );
        assert_eq!(t.authority(), "[::1]:8443");
        assert!(Target::parse("udp://127.0.0.1").is_err());
        assert!(Target::parse("ftp://x/").is_err());
    }
}

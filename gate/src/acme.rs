//! The ACME challenges in flight, as a snapshot carries them: HTTP-01
//! answers ([`Challenges`], the snapshot's), each a precomputed 200 with
//! its key authorization, found by the request's raw path under
//! `/.well-known/acme-challenge/`, and TLS-ALPN-01 certificates
//! ([`AlpnChallenge`], the TLS settings', served on `acme-tls/1`
//! handshakes).
//!
//! A challenge is answered before every block of the chain and only for a
//! token of an order in flight; any other path under the prefix goes
//! through the chain as usual. No allocation when asked.

use crate::answer::Answer;
use crate::tls::Secret;

/// The path prefix of HTTP-01 answers (RFC 8555 §8.3).
pub const HTTP_PREFIX: &[u8] = b"/.well-known/acme-challenge/";

/// A TLS-ALPN-01 certificate for one name.
#[derive(Clone, Debug)]
pub struct AlpnChallenge {
    pub name: String,
    pub cert: Vec<u8>,
    pub key: Secret,
}

/// The HTTP-01 answers in flight.
#[derive(Clone, Debug, Default)]
pub struct Challenges {
    http: Vec<(Box<[u8]>, Answer)>,
}

impl Challenges {
    /// HTTP-01 answers for (token, key authorization) pairs. Allocates
    /// (off the request path).
    pub fn new(http: &[(String, String)]) -> Challenges {
        Challenges {
            http: http
                .iter()
                .map(|(token, ka)| {
                    let answer = Answer::new(
                        200,
                        &[("Content-Type", "application/octet-stream")],
                        ka.as_bytes(),
                    );
                    (token.as_bytes().into(), answer)
                })
                .collect(),
        }
    }

    /// Whether HTTP-01 answers are in flight.
    #[inline]
    pub fn has_http(&self) -> bool {
        !self.http.is_empty()
    }

    /// The answer for a `GET` or `HEAD` of `path` (the raw target, query
    /// and all), when it names a token in flight exactly.
    #[inline]
    pub fn http_answer(&self, method: &[u8], path: &[u8]) -> Option<&Answer> {
        if self.http.is_empty() || !(method == b"GET" || method == b"HEAD") {
            return None;
        }
        let token = path.strip_prefix(HTTP_PREFIX)?;
        self.http
            .iter()
            .find(|(t, _)| t.as_ref() == token)
            .map(|(_, a)| a)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_token_in_flight_is_answered_and_only_to_get_or_head() {
        let c = Challenges::new(&[("tok-1".into(), "tok-1.thumb".into())]);
        assert!(c.has_http());
        let a = c
            .http_answer(b"GET", b"/.well-known/acme-challenge/tok-1")
            .unwrap();
        assert_eq!(a.status, 200);
        assert_eq!(a.body(), b"tok-1.thumb");
        assert!(c
            .http_answer(b"HEAD", b"/.well-known/acme-challenge/tok-1")
            .is_some());
        assert!(c
            .http_answer(b"POST", b"/.well-known/acme-challenge/tok-1")
            .is_none());
        assert!(c
            .http_answer(b"GET", b"/.well-known/acme-challenge/tok-2")
            .is_none());
        assert!(c
            .http_answer(b"GET", b"/.well-known/acme-challenge/tok-1?x")
            .is_none());
        assert!(c
            .http_answer(b"GET", b"/.well-known/acme-challenge/")
            .is_none());
        assert!(c
            .http_answer(b"GET", b"/.well-known/acme-challenge/tok")
            .is_none());
        assert!(c
            .http_answer(b"GET", b"/x/.well-known/acme-challenge/tok-1")
            .is_none());
        let none = Challenges::default();
        assert!(!none.has_http());
        assert!(none
            .http_answer(b"GET", b"/.well-known/acme-challenge/tok-1")
            .is_none());
    }
}

//! A host's HTTPS policy: plaintext requests redirected to https (the
//! chain's HTTPS redirect step) and the HSTS line added to answers over
//! TLS. A value only, below `policy` and everything that reads a host's
//! extras; the redirect's head is written by `tls`
//! ([`crate::tls::write_https_redirect`]).

/// A host's HTTPS policy: plaintext requests redirected, HSTS over TLS.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HttpsPolicy {
    /// Answer plaintext requests with a 308 to the https URL on this port.
    pub redirect_port: Option<u16>,
    /// The `Strict-Transport-Security` field added to answers over TLS,
    /// or none (empty).
    pub hsts: crate::sink::Lines,
}

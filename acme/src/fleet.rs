//! ACME across a fleet: one node orders a certificate at a time (a lock in
//! the fleet's engine with a fencing token and a lease), every node serves
//! every node's challenge answers, and an issued certificate is shared,
//! sealed under a key every node has, so a node that starts or comes to
//! renew finds the fleet's certificate instead of ordering one.
//!
//! The engine is reached through [`FleetState`] (Redis in the server, the
//! `gapura-fleet` crate's `AcmeStore`). Sealing is AES-256-GCM under the
//! SHA-256 of the shared secret, with the record's name as associated
//! data, so a record cannot be moved to another name.

use crate::jws::b64;
use crate::order::{AlpnCert, Answers};
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use ring::aead::{Aad, LessSafeKey, Nonce, UnboundKey, AES_256_GCM, NONCE_LEN};
use ring::digest::{digest, SHA256};
use ring::rand::{SecureRandom, SystemRandom};
use serde_json::{json, Value};

/// How long an order's lock holds if its holder dies: longer than an
/// order may take.
pub const LOCK_LEASE_MS: u64 = 300_000;
/// How long answers in flight are kept in the engine at most.
pub const ANSWERS_TTL_MS: u64 = 300_000;
/// How often a node looks at the fleet's answers in flight.
pub const SYNC_MS: u64 = 250;
/// How long the orderer waits for every node to serve its answers before
/// it asks for validation anyway.
pub const SERVED_WAIT_MS: u64 = 10_000;

/// What the ACME thread asks of the fleet's engine.
pub trait FleetState: Send {
    fn lock(&mut self, cert: &str, lease_ms: u64) -> Result<Option<u64>, String>;
    fn unlock(&mut self, cert: &str, fence: u64) -> Result<(), String>;
    fn put_certificate(&mut self, cert: &str, fence: u64, sealed: &[u8]) -> Result<bool, String>;
    fn certificate(&mut self, cert: &str) -> Result<Option<Vec<u8>>, String>;
    fn set_answers(&mut self, node: &str, blob: Option<&[u8]>, ttl_ms: u64) -> Result<(), String>;
    fn answers(&mut self) -> Result<Vec<(String, Vec<u8>)>, String>;
    fn serving(&mut self, node: &str, names: &str, ttl_ms: u64) -> Result<(), String>;
    fn served_by(&mut self, names: &[String]) -> Result<usize, String>;
}

/// A fleet as the ACME thread sees it.
pub struct Fleet {
    pub state: Box<dyn FleetState>,
    /// This node's name.
    pub node: String,
    pub key: SealKey,
    /// The nodes that should serve an answer before validation.
    pub nodes: u32,
}

/// The sealing key.
pub struct SealKey(LessSafeKey);

impl SealKey {
    /// The key of a shared secret (a file's first line).
    pub fn from_secret(secret: &[u8]) -> SealKey {
        let k = digest(&SHA256, secret);
        let unbound = UnboundKey::new(&AES_256_GCM, k.as_ref()).expect("a 32-byte key");
        SealKey(LessSafeKey::new(unbound))
    }

    /// `plain` sealed for the record `name`: nonce, then ciphertext and tag.
    pub fn seal(&self, name: &str, plain: &[u8]) -> Vec<u8> {
        let mut nonce = [0u8; NONCE_LEN];
        let _ = SystemRandom::new().fill(&mut nonce);
        let mut out = plain.to_vec();
        self.0
            .seal_in_place_append_tag(
                Nonce::assume_unique_for_key(nonce),
                Aad::from(name.as_bytes()),
                &mut out,
            )
            .expect("sealing fits");
        let mut sealed = nonce.to_vec();
        sealed.extend_from_slice(&out);
        sealed
    }

    /// The plain text of a record sealed for `name`; `None` when it was
    /// sealed under another key or for another name, or altered.
    pub fn open(&self, name: &str, sealed: &[u8]) -> Option<Vec<u8>> {
        if sealed.len() < NONCE_LEN {
            return None;
        }
        let (nonce, rest) = sealed.split_at(NONCE_LEN);
        let nonce = Nonce::try_assume_unique_for_key(nonce).ok()?;
        let mut buf = rest.to_vec();
        let plain = self
            .0
            .open_in_place(nonce, Aad::from(name.as_bytes()), &mut buf)
            .ok()?;
        Some(plain.to_vec())
    }
}

/// A certificate's name in the engine: its names, joined.
pub fn cert_id(names: &[String]) -> String {
    names.join(",")
}

/// A certificate record: its names, PEM chain and PEM key.
pub fn certificate_record(names: &[String], chain_pem: &str, key_pem: &str) -> Vec<u8> {
    json!({"names": names, "chain": chain_pem, "key": key_pem})
        .to_string()
        .into_bytes()
}

/// A record's (chain PEM, key PEM), when it is for exactly `names`.
pub fn read_certificate_record(names: &[String], plain: &[u8]) -> Option<(String, String)> {
    let v: Value = serde_json::from_slice(plain).ok()?;
    let got: Vec<&str> = v["names"]
        .as_array()?
        .iter()
        .filter_map(Value::as_str)
        .collect();
    if got != names.iter().map(String::as_str).collect::<Vec<_>>() {
        return None;
    }
    Some((
        v["chain"].as_str()?.to_string(),
        v["key"].as_str()?.to_string(),
    ))
}

/// Answers as a record.
pub fn answers_record(a: &Answers) -> Vec<u8> {
    json!({
        "http": a.http,
        "alpn": a.alpn.iter().map(|c| json!({
            "name": c.name, "cert": b64(&c.cert_der), "key": b64(&c.key_der),
        })).collect::<Vec<_>>(),
    })
    .to_string()
    .into_bytes()
}

/// A record's answers; `None` when it is not one.
pub fn read_answers_record(plain: &[u8]) -> Option<Answers> {
    let v: Value = serde_json::from_slice(plain).ok()?;
    let mut a = Answers::default();
    for pair in v["http"].as_array()? {
        a.http
            .push((pair[0].as_str()?.to_string(), pair[1].as_str()?.to_string()));
    }
    for c in v["alpn"].as_array()? {
        a.alpn.push(AlpnCert {
            name: c["name"].as_str()?.to_string(),
            cert_der: URL_SAFE_NO_PAD.decode(c["cert"].as_str()?).ok()?,
            key_der: URL_SAFE_NO_PAD.decode(c["key"].as_str()?).ok()?,
        });
    }
    Some(a)
}

/// The names of answers, as nodes report what they serve.
pub fn answer_names(a: &Answers) -> Vec<String> {
    let http = a.http.iter().map(|(t, _)| format!("http:{t}"));
    let alpn = a.alpn.iter().map(|c| format!("alpn:{}", c.name));
    http.chain(alpn).collect()
}

/// `a` and `b` together (each answer once).
pub fn merge(a: &Answers, b: &Answers) -> Answers {
    let mut out = a.clone();
    for h in &b.http {
        if !out.http.iter().any(|(t, _)| *t == h.0) {
            out.http.push(h.clone());
        }
    }
    for c in &b.alpn {
        if !out.alpn.iter().any(|x| x.name == c.name) {
            out.alpn.push(c.clone());
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sealed_record_opens_only_under_its_key_and_name() {
        let k = SealKey::from_secret(b"the fleet's secret");
        let sealed = k.seal("a.test", b"chain and key");
        assert!(!sealed.windows(5).any(|w| w == b"chain"));
        assert_eq!(k.open("a.test", &sealed).unwrap(), b"chain and key");
        assert!(k.open("b.test", &sealed).is_none(), "moved to another name");
        let other = SealKey::from_secret(b"another secret");
        assert!(other.open("a.test", &sealed).is_none());
        let mut bent = sealed.clone();
        bent[20] ^= 1;
        assert!(k.open("a.test", &bent).is_none());
        assert!(k.open("a.test", &sealed[..5]).is_none());
        // Two seals of the same text differ (fresh nonces).
        assert_ne!(k.seal("a.test", b"x"), k.seal("a.test", b"x"));
    }

    #[test]
    fn records_round_trip_and_a_certificate_record_is_for_its_names_only() {
        let names = vec!["a.test".to_string(), "www.a.test".to_string()];
        let r = certificate_record(&names, "CHAIN", "KEY");
        assert_eq!(
            read_certificate_record(&names, &r),
            Some(("CHAIN".into(), "KEY".into()))
        );
        assert_eq!(read_certificate_record(&names[..1], &r), None);
        let a = Answers {
            http: vec![("t1".into(), "t1.k".into())],
            alpn: vec![AlpnCert {
                name: "a.test".into(),
                cert_der: vec![1, 2],
                key_der: vec![3],
            }],
        };
        let back = read_answers_record(&answers_record(&a)).unwrap();
        assert_eq!(back.http, a.http);
        assert_eq!(back.alpn[0].cert_der, vec![1, 2]);
        assert_eq!(answer_names(&back), ["http:t1", "alpn:a.test"]);
        assert!(read_answers_record(b"{}").is_none());
        let b = Answers {
            http: vec![("t1".into(), "t1.k".into()), ("t2".into(), "t2.k".into())],
            alpn: Vec::new(),
        };
        let m = merge(&a, &b);
        assert_eq!(answer_names(&m), ["http:t1", "http:t2", "alpn:a.test"]);
    }
}

//! One certificate ordered (RFC 8555 §7.4): the order, its
//! authorizations and their challenges (HTTP-01 or TLS-ALPN-01, RFC 8737),
//! the key and CSR, finalization and the download.
//!
//! The challenges' answers are handed to the caller ([`Publish`]), which
//! makes them live on every shard before the server is told to validate;
//! they are taken away again however the order ends.

use crate::client::{json, Client, Failure};
use crate::jws::b64;
use crate::validity::{self, Validity};
use ring::digest::{digest, SHA256};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::CertificateDer;
use serde_json::Value;
use std::time::{Duration, Instant};

/// How long an authorization or an order may take to become valid.
pub const VALIDATION_DEADLINE: Duration = Duration::from_secs(120);

/// A challenge type Gapura answers itself.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Http01,
    TlsAlpn01,
}

impl Kind {
    pub fn name(self) -> &'static str {
        match self {
            Kind::Http01 => "http-01",
            Kind::TlsAlpn01 => "tls-alpn-01",
        }
    }
}

/// A TLS-ALPN-01 answer: a self-signed certificate for `name` carrying
/// the key authorization's digest (RFC 8737 §3), and its key.
#[derive(Clone, Debug)]
pub struct AlpnCert {
    pub name: String,
    pub cert_der: Vec<u8>,
    pub key_der: Vec<u8>,
}

/// The answers in flight: HTTP-01 tokens with their key authorizations,
/// and TLS-ALPN-01 certificates.
#[derive(Clone, Debug, Default)]
pub struct Answers {
    pub http: Vec<(String, String)>,
    pub alpn: Vec<AlpnCert>,
}

/// Makes answers live (returning once every shard will see them), or
/// takes them away (empty answers).
pub trait Publish {
    fn answers(&mut self, answers: &Answers);
}

/// What an order brought: the chain (PEM and DER) and its key.
#[derive(Clone, Debug)]
pub struct Issued {
    pub chain_pem: String,
    pub key_pem: String,
    pub chain_der: Vec<Vec<u8>>,
    pub key_der: Vec<u8>,
    pub validity: Validity,
}

/// Orders a certificate for `names`, answering with the first of `kinds`
/// each authorization offers; `replaces` names the certificate it renews
/// (RFC 9773), when the server offers renewal information.
pub fn issue(
    client: &mut Client,
    (names, replaces): (&[String], Option<&str>),
    kinds: &[Kind],
    publish: &mut dyn Publish,
) -> Result<Issued, Failure> {
    let ids: Vec<Value> = names
        .iter()
        .map(|n| serde_json::json!({"type": "dns", "value": n}))
        .collect();
    let mut payload = serde_json::json!({ "identifiers": ids });
    if let Some(id) = replaces.filter(|_| client.directory().renewal_info.is_some()) {
        payload["replaces"] = Value::String(id.to_string());
    }
    let payload = payload.to_string();
    let new_order = client.directory().new_order.clone();
    let a = client.post("newOrder", &new_order, Some(&payload))?;
    let order_url = a
        .field("location")
        .ok_or_else(|| Failure::new("newOrder: no Location"))?
        .to_string();
    let order = json("newOrder", &a)?;
    let (answers, pending) = authorize(client, &order, kinds)?;
    if !answers.http.is_empty() || !answers.alpn.is_empty() {
        publish.answers(&answers);
    }
    let result = validate_and_finalize(client, &pending, (&order, &order_url), names);
    if !answers.http.is_empty() || !answers.alpn.is_empty() {
        publish.answers(&Answers::default());
    }
    result
}

/// A challenge to answer: its URL and its authorization's URL.
struct ToAnswer {
    challenge: String,
    authz: String,
}

/// Reads the order's authorizations and picks each pending one's
/// challenge: the answers to publish and the challenges to answer.
fn authorize(
    client: &mut Client,
    order: &Value,
    kinds: &[Kind],
) -> Result<(Answers, Vec<ToAnswer>), Failure> {
    let mut answers = Answers::default();
    let list = order["authorizations"]
        .as_array()
        .ok_or_else(|| Failure::new("order: no authorizations"))?;
    let mut pending = Vec::new();
    for url in list.iter().filter_map(Value::as_str) {
        let authz = json("authorization", &client.post("authorization", url, None)?)?;
        match authz["status"].as_str() {
            Some("valid") => continue,
            Some("pending") => {}
            other => {
                return Err(Failure::new(format!(
                    "authorization {url}: status {other:?}"
                )))
            }
        }
        let name = authz["identifier"]["value"]
            .as_str()
            .unwrap_or("")
            .to_string();
        let offered = authz["challenges"].as_array().cloned().unwrap_or_default();
        let pick = kinds.iter().find_map(|k| {
            offered
                .iter()
                .find(|c| c["type"] == k.name())
                .map(|c| (*k, c.clone()))
        });
        let Some((kind, c)) = pick else {
            return Err(Failure::new(format!(
                "authorization for {name}: none of the challenges offered is one of ours"
            )));
        };
        let token = c["token"].as_str().unwrap_or("");
        if token.is_empty()
            || !token
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        {
            return Err(Failure::new(format!(
                "authorization for {name}: a bad token"
            )));
        }
        let ka = client.key.key_authorization(token);
        match kind {
            Kind::Http01 => answers.http.push((token.to_string(), ka)),
            Kind::TlsAlpn01 => answers.alpn.push(alpn_cert(&name, &ka)?),
        }
        pending.push(ToAnswer {
            challenge: c["url"].as_str().unwrap_or("").to_string(),
            authz: url.to_string(),
        });
    }
    Ok((answers, pending))
}

/// The TLS-ALPN-01 certificate for `name`.
fn alpn_cert(name: &str, key_authorization: &str) -> Result<AlpnCert, Failure> {
    let fail = |e: rcgen::Error| Failure::new(format!("tls-alpn-01 certificate: {e}"));
    let mut params = rcgen::CertificateParams::new(vec![name.to_string()]).map_err(fail)?;
    let hash = digest(&SHA256, key_authorization.as_bytes());
    params
        .custom_extensions
        .push(rcgen::CustomExtension::new_acme_identifier(hash.as_ref()));
    let key = rcgen::KeyPair::generate().map_err(fail)?;
    let cert = params.self_signed(&key).map_err(fail)?;
    Ok(AlpnCert {
        name: name.to_string(),
        cert_der: cert.der().to_vec(),
        key_der: key.serialize_der(),
    })
}

/// Tells the server to validate, waits for the authorizations, finalizes
/// with a fresh key and downloads the chain.
fn validate_and_finalize(
    client: &mut Client,
    pending: &[ToAnswer],
    (order, order_url): (&Value, &str),
    names: &[String],
) -> Result<Issued, Failure> {
    for p in pending {
        client.post("challenge", &p.challenge, Some("{}"))?;
    }
    for p in pending {
        wait_for(client, "authorization", &p.authz, &["valid"])?;
    }
    let fail = |e: rcgen::Error| Failure::new(format!("key and CSR: {e}"));
    let key = rcgen::KeyPair::generate().map_err(fail)?;
    let params = rcgen::CertificateParams::new(names.to_vec()).map_err(fail)?;
    let csr = params.serialize_request(&key).map_err(fail)?;
    let finalize = order["finalize"]
        .as_str()
        .ok_or_else(|| Failure::new("order: no finalize"))?;
    let payload = serde_json::json!({ "csr": b64(csr.der()) }).to_string();
    client.post("finalize", finalize, Some(&payload))?;
    let done = wait_for(client, "order", order_url, &["valid"])?;
    let cert_url = done["certificate"]
        .as_str()
        .ok_or_else(|| Failure::new("order: valid without a certificate"))?;
    let a = client.post("certificate", cert_url, None)?;
    let chain_pem = String::from_utf8(a.body).map_err(|_| Failure::new("certificate: not PEM"))?;
    let chain_der: Vec<Vec<u8>> = CertificateDer::pem_slice_iter(chain_pem.as_bytes())
        .filter_map(Result::ok)
        .map(|c| c.to_vec())
        .collect();
    let validity = chain_der
        .first()
        .and_then(|leaf| validity::of(leaf))
        .ok_or_else(|| Failure::new("certificate: no readable leaf"))?;
    Ok(Issued {
        chain_pem,
        key_pem: key.serialize_pem(),
        chain_der,
        key_der: key.serialize_der(),
        validity,
    })
}

/// Polls `url` (POST-as-GET) until its status is one of `want`; `invalid`
/// ends it with the server's reason. Waits as the server's `Retry-After`
/// says, else a second, up to [`VALIDATION_DEADLINE`].
fn wait_for(client: &mut Client, what: &str, url: &str, want: &[&str]) -> Result<Value, Failure> {
    let deadline = Instant::now() + VALIDATION_DEADLINE;
    loop {
        let a = client.post(what, url, None)?;
        let v = json(what, &a)?;
        let status = v["status"].as_str().unwrap_or("");
        if want.contains(&status) {
            return Ok(v);
        }
        if status == "invalid" {
            let reason = v["challenges"]
                .as_array()
                .and_then(|cs| cs.iter().find_map(|c| c["error"]["detail"].as_str()))
                .or_else(|| v["error"]["detail"].as_str())
                .unwrap_or("no reason given");
            return Err(Failure::new(format!("{what} {url} is invalid: {reason}")));
        }
        let wait = a
            .field("retry-after")
            .and_then(|r| crate::schedule::retry_after_ms(r, crate::client::now_s()))
            .unwrap_or(1000)
            .clamp(200, 10_000);
        if Instant::now() + Duration::from_millis(wait) > deadline {
            return Err(Failure::new(format!(
                "{what} {url} still {status:?} after {} s",
                VALIDATION_DEADLINE.as_secs()
            )));
        }
        std::thread::sleep(Duration::from_millis(wait));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_alpn_certificate_names_the_host_and_carries_the_digest_critically() {
        let c = alpn_cert("a.test", "tok.thumb").unwrap();
        let hash = digest(&SHA256, b"tok.thumb");
        // id-pe-acmeIdentifier 1.3.6.1.5.5.7.1.31, critical, an OCTET
        // STRING of the 32-byte digest.
        let oid = [0x06, 0x08, 0x2b, 0x06, 0x01, 0x05, 0x05, 0x07, 0x01, 0x1f];
        let at = c
            .cert_der
            .windows(oid.len())
            .position(|w| w == oid)
            .expect("the acmeIdentifier extension");
        let after = &c.cert_der[at + oid.len()..];
        assert_eq!(&after[..3], &[0x01, 0x01, 0xff], "critical");
        let mut value = vec![0x04, 0x22, 0x04, 0x20];
        value.extend_from_slice(hash.as_ref());
        assert_eq!(&after[3..3 + value.len()], value.as_slice());
        assert!(c.cert_der.windows(6).any(|w| w == b"a.test"));
        assert!(!c.key_der.is_empty());
    }
}

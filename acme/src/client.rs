//! The ACME conversation (RFC 8555 §7): the directory, nonces, the
//! account, and signed POSTs whose `badNonce` answers are retried with the
//! nonce they carry. Problem documents become [`Failure`]s with the wait
//! the server asked for.

use crate::jws::{AccountKey, Signer};
use crate::schedule;
use crate::transport::{Answer, Transport};
use serde_json::Value;

/// How often a POST is sent again after `badNonce` before giving up.
const NONCE_RETRIES: u32 = 8;

/// Why a step failed, and how long the server asked to wait.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    pub why: String,
    /// From `Retry-After` (rate limits, busy servers), milliseconds.
    pub retry_after_ms: Option<u64>,
}

impl Failure {
    pub fn new(why: impl Into<String>) -> Failure {
        Failure {
            why: why.into(),
            retry_after_ms: None,
        }
    }
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.why)?;
        if let Some(ms) = self.retry_after_ms {
            write!(f, " (the server asks to wait {} s)", ms / 1000)?;
        }
        Ok(())
    }
}

/// A suggested renewal window (start, end, Unix seconds) and how long
/// until it may be asked again (milliseconds, when the server says).
pub type Window = ((i64, i64), Option<u64>);

/// The directory's URLs this client uses.
#[derive(Debug, Clone)]
pub struct Directory {
    pub new_nonce: String,
    pub new_account: String,
    pub new_order: String,
    /// ACME Renewal Information (RFC 9773), when the server offers it.
    pub renewal_info: Option<String>,
}

/// A client of one ACME server, with one account.
pub struct Client {
    transport: Transport,
    pub key: AccountKey,
    directory: Directory,
    kid: Option<String>,
    nonce: Option<String>,
    /// Requests sent to the server (all kinds), for the counters.
    pub requests: u64,
}

/// The current Unix time in seconds.
pub fn now_s() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64)
}

/// A failure from an answer of status 400 or more: its problem document's
/// type and detail, and its `Retry-After`.
fn problem(what: &str, a: &Answer) -> Failure {
    let doc: Value = serde_json::from_slice(&a.body).unwrap_or(Value::Null);
    let kind = doc["type"].as_str().unwrap_or("");
    let kind = kind
        .strip_prefix("urn:ietf:params:acme:error:")
        .unwrap_or(kind);
    let detail = doc["detail"].as_str().unwrap_or("");
    Failure {
        why: format!("{what}: {} {kind}: {detail}", a.status),
        retry_after_ms: a
            .field("retry-after")
            .and_then(|v| schedule::retry_after_ms(v, now_s())),
    }
}

fn is_bad_nonce(a: &Answer) -> bool {
    let doc: Value = serde_json::from_slice(&a.body).unwrap_or(Value::Null);
    doc["type"] == "urn:ietf:params:acme:error:badNonce"
}

/// A JSON body, or a failure naming `what`.
pub fn json(what: &str, a: &Answer) -> Result<Value, Failure> {
    serde_json::from_slice(&a.body).map_err(|e| Failure::new(format!("{what}: not JSON: {e}")))
}

impl Client {
    /// Reads the directory at `url`.
    pub fn connect(transport: Transport, key: AccountKey, url: &str) -> Result<Client, Failure> {
        let a = transport
            .request("GET", url, None)
            .map_err(|e| Failure::new(format!("directory: {e}")))?;
        if a.status != 200 {
            return Err(problem("directory", &a));
        }
        let d = json("directory", &a)?;
        let get = |k: &str| {
            d[k].as_str()
                .map(str::to_string)
                .ok_or_else(|| Failure::new(format!("directory: no {k}")))
        };
        let directory = Directory {
            new_nonce: get("newNonce")?,
            new_account: get("newAccount")?,
            new_order: get("newOrder")?,
            renewal_info: d["renewalInfo"].as_str().map(str::to_string),
        };
        Ok(Client {
            transport,
            key,
            directory,
            kid: None,
            nonce: None,
            requests: 0,
        })
    }

    /// Whether the account is known (its URL signs requests).
    pub fn has_account(&self) -> bool {
        self.kid.is_some()
    }

    pub fn directory(&self) -> &Directory {
        &self.directory
    }

    /// A fresh nonce from `newNonce`.
    fn fresh_nonce(&mut self) -> Result<String, Failure> {
        self.requests += 1;
        let a = self
            .transport
            .request("HEAD", &self.directory.new_nonce, None)
            .map_err(|e| Failure::new(format!("newNonce: {e}")))?;
        a.field("replay-nonce")
            .map(str::to_string)
            .ok_or_else(|| problem("newNonce", &a))
    }

    /// A signed POST of `payload` (`None`: POST-as-GET) to `url`; an
    /// answer of 400 or more is a failure, `badNonce` is sent again.
    pub fn post(
        &mut self,
        what: &str,
        url: &str,
        payload: Option<&str>,
    ) -> Result<Answer, Failure> {
        for _ in 0..NONCE_RETRIES {
            let nonce = match self.nonce.take() {
                Some(n) => n,
                None => self.fresh_nonce()?,
            };
            let signer = match &self.kid {
                Some(k) => Signer::Kid(k),
                None => Signer::Jwk,
            };
            let body = self
                .key
                .sign(signer, &nonce, url, payload)
                .map_err(Failure::new)?;
            self.requests += 1;
            let a = self
                .transport
                .request(
                    "POST",
                    url,
                    Some(("application/jose+json", body.as_bytes())),
                )
                .map_err(|e| Failure::new(format!("{what}: {e}")))?;
            self.nonce = a.field("replay-nonce").map(str::to_string);
            if a.status >= 400 {
                if is_bad_nonce(&a) {
                    continue;
                }
                return Err(problem(what, &a));
            }
            return Ok(a);
        }
        Err(Failure::new(format!(
            "{what}: the server refused {NONCE_RETRIES} nonces in a row"
        )))
    }

    /// The renewal window the server suggests for the DER certificate
    /// `leaf` (RFC 9773), and how long until it may be asked again; `None`
    /// when the server offers no renewal information or the certificate
    /// has no certificate ID.
    pub fn renewal_window(&mut self, leaf: &[u8]) -> Result<Option<Window>, Failure> {
        let (Some(base), Some(id)) = (
            self.directory.renewal_info.clone(),
            crate::ari::cert_id(leaf),
        ) else {
            return Ok(None);
        };
        self.requests += 1;
        let url = format!("{}/{id}", base.trim_end_matches('/'));
        let a = self
            .transport
            .request("GET", &url, None)
            .map_err(|e| Failure::new(format!("renewalInfo: {e}")))?;
        if a.status != 200 {
            return Err(problem("renewalInfo", &a));
        }
        let window = crate::ari::parse_window(&a.body)
            .ok_or_else(|| Failure::new("renewalInfo: no suggestedWindow"))?;
        let again = a
            .field("retry-after")
            .and_then(|v| schedule::retry_after_ms(v, now_s()));
        Ok(Some((window, again)))
    }

    /// Finds or creates the account of this key (RFC 8555 §7.3: a key
    /// already registered answers with its account's URL).
    pub fn account(&mut self, contact: &[String]) -> Result<(), Failure> {
        let payload = serde_json::json!({
            "termsOfServiceAgreed": true,
            "contact": contact,
        })
        .to_string();
        let url = self.directory.new_account.clone();
        let a = self.post("newAccount", &url, Some(&payload))?;
        let kid = a
            .field("location")
            .ok_or_else(|| Failure::new("newAccount: no Location"))?;
        self.kid = Some(kid.to_string());
        Ok(())
    }
}

//! The account key and the JSON Web Signatures every ACME request carries
//! (RFC 8555 §6.2, RFC 7515): ES256 over P-256, the key's JWK (RFC 7517)
//! and its thumbprint (RFC 7638), which makes the challenges' key
//! authorizations.

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use ring::digest::{digest, SHA256};
use ring::rand::SystemRandom;
use ring::signature::{EcdsaKeyPair, KeyPair, ECDSA_P256_SHA256_FIXED_SIGNING};

/// Base64url without padding, as JOSE writes every binary value.
pub fn b64(bytes: &[u8]) -> String {
    URL_SAFE_NO_PAD.encode(bytes)
}

/// An account's P-256 key.
pub struct AccountKey {
    pair: EcdsaKeyPair,
    pkcs8: Vec<u8>,
    rng: SystemRandom,
}

impl std::fmt::Debug for AccountKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("AccountKey(..)")
    }
}

/// Who signs a request: a new account by its key, a known one by its URL.
pub enum Signer<'a> {
    Jwk,
    Kid(&'a str),
}

impl AccountKey {
    /// A fresh key from the system's randomness.
    pub fn generate() -> Result<AccountKey, String> {
        let rng = SystemRandom::new();
        let doc = EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, &rng)
            .map_err(|_| "no randomness for an account key".to_string())?;
        AccountKey::from_pkcs8(doc.as_ref())
    }

    /// The key stored as PKCS#8 DER.
    pub fn from_pkcs8(pkcs8: &[u8]) -> Result<AccountKey, String> {
        let rng = SystemRandom::new();
        let pair = EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, pkcs8, &rng)
            .map_err(|e| format!("not a P-256 PKCS#8 key: {e}"))?;
        Ok(AccountKey {
            pair,
            pkcs8: pkcs8.to_vec(),
            rng,
        })
    }

    pub fn pkcs8(&self) -> &[u8] {
        &self.pkcs8
    }

    /// The public key's JWK members in RFC 7638's order (crv, kty, x, y),
    /// with no whitespace: the JWK itself and the thumbprint's input.
    pub fn jwk(&self) -> String {
        // An uncompressed point: 0x04, x (32 bytes), y (32 bytes).
        let point = self.pair.public_key().as_ref();
        format!(
            r#"{{"crv":"P-256","kty":"EC","x":"{}","y":"{}"}}"#,
            b64(&point[1..33]),
            b64(&point[33..65])
        )
    }

    /// The JWK thumbprint, base64url.
    pub fn thumbprint(&self) -> String {
        b64(digest(&SHA256, self.jwk().as_bytes()).as_ref())
    }

    /// A challenge token's key authorization (RFC 8555 §8.1).
    pub fn key_authorization(&self, token: &str) -> String {
        format!("{token}.{}", self.thumbprint())
    }

    /// The flattened JWS of `payload` (`None`: POST-as-GET's empty
    /// payload) for `url` with `nonce`.
    pub fn sign(
        &self,
        signer: Signer<'_>,
        nonce: &str,
        url: &str,
        payload: Option<&str>,
    ) -> Result<String, String> {
        let who = match signer {
            Signer::Jwk => format!(r#""jwk":{}"#, self.jwk()),
            Signer::Kid(kid) => format!(r#""kid":{}"#, json_string(kid)),
        };
        let protected = format!(
            r#"{{"alg":"ES256",{who},"nonce":{},"url":{}}}"#,
            json_string(nonce),
            json_string(url)
        );
        let protected = b64(protected.as_bytes());
        let payload = payload.map(|p| b64(p.as_bytes())).unwrap_or_default();
        let input = format!("{protected}.{payload}");
        let sig = self
            .pair
            .sign(&self.rng, input.as_bytes())
            .map_err(|_| "signing failed".to_string())?;
        Ok(format!(
            r#"{{"protected":"{protected}","payload":"{payload}","signature":"{}"}}"#,
            b64(sig.as_ref())
        ))
    }
}

/// A JSON string literal.
pub fn json_string(s: &str) -> String {
    serde_json::Value::String(s.to_string()).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use ring::signature::{UnparsedPublicKey, ECDSA_P256_SHA256_FIXED};

    #[test]
    fn a_signature_verifies_under_the_jwk_and_carries_the_header() {
        let key = AccountKey::generate().unwrap();
        let jws = key
            .sign(
                Signer::Kid("https://ca/acct/1"),
                "n0nce",
                "https://ca/x",
                Some("{}"),
            )
            .unwrap();
        let v: serde_json::Value = serde_json::from_str(&jws).unwrap();
        let protected = URL_SAFE_NO_PAD
            .decode(v["protected"].as_str().unwrap())
            .unwrap();
        let header: serde_json::Value = serde_json::from_slice(&protected).unwrap();
        assert_eq!(header["alg"], "ES256");
        assert_eq!(header["kid"], "https://ca/acct/1");
        assert_eq!(header["nonce"], "n0nce");
        assert_eq!(header["url"], "https://ca/x");
        assert!(header.get("jwk").is_none());
        let input = format!(
            "{}.{}",
            v["protected"].as_str().unwrap(),
            v["payload"].as_str().unwrap()
        );
        let sig = URL_SAFE_NO_PAD
            .decode(v["signature"].as_str().unwrap())
            .unwrap();
        assert_eq!(sig.len(), 64);
        let public = UnparsedPublicKey::new(&ECDSA_P256_SHA256_FIXED, key.pair.public_key());
        public.verify(input.as_bytes(), &sig).unwrap();
    }

    #[test]
    fn post_as_get_has_an_empty_payload_and_a_new_account_its_jwk() {
        let key = AccountKey::generate().unwrap();
        let jws = key.sign(Signer::Jwk, "n", "u", None).unwrap();
        let v: serde_json::Value = serde_json::from_str(&jws).unwrap();
        assert_eq!(v["payload"], "");
        let protected = URL_SAFE_NO_PAD
            .decode(v["protected"].as_str().unwrap())
            .unwrap();
        let header: serde_json::Value = serde_json::from_slice(&protected).unwrap();
        assert_eq!(header["jwk"]["kty"], "EC");
        assert_eq!(header["jwk"]["crv"], "P-256");
    }

    #[test]
    fn the_key_survives_its_pkcs8_and_the_thumbprint_is_stable() {
        let key = AccountKey::generate().unwrap();
        let again = AccountKey::from_pkcs8(key.pkcs8()).unwrap();
        assert_eq!(key.thumbprint(), again.thumbprint());
        assert_eq!(key.thumbprint().len(), 43);
        let ka = key.key_authorization("tok");
        assert_eq!(ka, format!("tok.{}", key.thumbprint()));
        assert!(AccountKey::from_pkcs8(b"junk").is_err());
    }

    /// RFC 7638 §3.1's member order and encoding, checked on a known point:
    /// the thumbprint is SHA-256 over exactly `{"crv":..,"kty":..,"x":..,"y":..}`.
    #[test]
    fn the_jwk_is_written_in_the_thumbprints_canonical_form() {
        let key = AccountKey::generate().unwrap();
        let jwk = key.jwk();
        assert!(jwk.starts_with(r#"{"crv":"P-256","kty":"EC","x":""#));
        assert!(!jwk.contains(' '));
        let v: serde_json::Value = serde_json::from_str(&jwk).unwrap();
        assert_eq!(
            URL_SAFE_NO_PAD
                .decode(v["x"].as_str().unwrap())
                .unwrap()
                .len(),
            32
        );
        assert_eq!(
            key.thumbprint(),
            b64(digest(&SHA256, jwk.as_bytes()).as_ref())
        );
    }
}

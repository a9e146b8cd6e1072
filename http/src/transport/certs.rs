//! Certificates and keys: PEM files read into DER (for the snapshot) and
//! DER made into rustls' signing keys. The crypto provider is `ring`.

use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::sign::CertifiedKey;
use std::sync::Arc;

/// Why a certificate and key pair cannot be used, naming the file at fault.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PairError {
    /// The certificate file holds no certificate, or a malformed one.
    Cert(String),
    /// The key file holds no private key, or one the provider refuses.
    Key(String),
    /// The key is not the certificate's.
    Mismatch(String),
}

/// The provider every TLS listener uses.
pub fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// Reads a PEM certificate chain (leaf first) and a PEM private key, and
/// checks that the key is the leaf's. Returns the chain and key as DER.
pub fn load_pair(cert_pem: &[u8], key_pem: &[u8]) -> Result<(Vec<Vec<u8>>, Vec<u8>), PairError> {
    let mut chain = Vec::new();
    for cert in CertificateDer::pem_slice_iter(cert_pem) {
        let cert = cert.map_err(|e| PairError::Cert(format!("not a PEM certificate: {e}")))?;
        chain.push(cert.to_vec());
    }
    if chain.is_empty() {
        return Err(PairError::Cert("holds no PEM certificate".into()));
    }
    let key = PrivateKeyDer::from_pem_slice(key_pem)
        .map_err(|e| PairError::Key(format!("holds no PEM private key: {e}")))?;
    let key_der = key.secret_der().to_vec();
    certified_key(&chain, &key_der, None)?;
    Ok((chain, key_der))
}

/// Reads PEM certificates (an upstream's certificate authorities) as DER;
/// at least one, each one that a verifier would take as a root.
pub fn load_cas(pem: &[u8]) -> Result<Vec<Vec<u8>>, String> {
    let mut cas = Vec::new();
    for cert in CertificateDer::pem_slice_iter(pem) {
        let cert = cert.map_err(|e| format!("not a PEM certificate: {e}"))?;
        let mut roots = rustls::RootCertStore::empty();
        roots
            .add(cert.clone())
            .map_err(|e| format!("a certificate that cannot be a root: {e}"))?;
        cas.push(cert.to_vec());
    }
    if cas.is_empty() {
        return Err("holds no PEM certificate".into());
    }
    Ok(cas)
}

/// A signing key with its chain and optional OCSP staple.
pub fn certified_key(
    chain: &[Vec<u8>],
    key_der: &[u8],
    ocsp: Option<&[u8]>,
) -> Result<CertifiedKey, PairError> {
    let key = PrivateKeyDer::try_from(key_der.to_vec())
        .map_err(|e| PairError::Key(format!("not a private key: {e}")))?;
    let provider = provider();
    let signing = provider
        .key_provider
        .load_private_key(key)
        .map_err(|e| PairError::Key(format!("unusable private key: {e}")))?;
    let certs = chain
        .iter()
        .map(|c| CertificateDer::from(c.clone()))
        .collect();
    let mut ck = CertifiedKey::new(certs, signing);
    match ck.keys_match() {
        Ok(()) => {}
        Err(rustls::Error::InconsistentKeys(rustls::InconsistentKeys::KeyMismatch)) => {
            return Err(PairError::Mismatch(
                "the private key does not belong to the certificate".into(),
            ))
        }
        Err(rustls::Error::InconsistentKeys(rustls::InconsistentKeys::Unknown)) => {}
        Err(e) => return Err(PairError::Cert(format!("unusable certificate: {e}"))),
    }
    ck.ocsp = ocsp.map(<[u8]>::to_vec);
    Ok(ck)
}

/// A TLS-ALPN-01 certificate and its key, made by the ACME thread: its
/// critical `acmeIdentifier` extension is one no certificate parser here
/// knows, so the pair is not parsed back (the key is loaded, no more).
pub fn challenge_key(cert: &[u8], key_der: &[u8]) -> Result<CertifiedKey, PairError> {
    let key = PrivateKeyDer::try_from(key_der.to_vec())
        .map_err(|e| PairError::Key(format!("not a private key: {e}")))?;
    let signing = provider()
        .key_provider
        .load_private_key(key)
        .map_err(|e| PairError::Key(format!("unusable private key: {e}")))?;
    Ok(CertifiedKey::new(
        vec![CertificateDer::from(cert.to_vec())],
        signing,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pair(name: &str) -> (String, String) {
        let c = rcgen::generate_simple_self_signed(vec![name.to_string()]).unwrap();
        (c.cert.pem(), c.key_pair.serialize_pem())
    }

    #[test]
    fn a_matching_pair_loads_and_others_name_the_file_at_fault() {
        let (cert, key) = pair("a.example");
        let (_, other_key) = pair("b.example");
        let (chain, der) = load_pair(cert.as_bytes(), key.as_bytes()).unwrap();
        assert_eq!(chain.len(), 1);
        assert!(!der.is_empty());
        assert!(matches!(
            load_pair(cert.as_bytes(), other_key.as_bytes()),
            Err(PairError::Mismatch(_))
        ));
        assert!(matches!(
            load_pair(b"not pem", key.as_bytes()),
            Err(PairError::Cert(_))
        ));
        assert!(matches!(
            load_pair(cert.as_bytes(), b"-----BEGIN NOTHING-----\n"),
            Err(PairError::Key(_))
        ));
        // A key file given as the certificate: no certificate in it.
        assert!(matches!(
            load_pair(key.as_bytes(), key.as_bytes()),
            Err(PairError::Cert(_))
        ));
    }
}

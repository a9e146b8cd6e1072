//! TLS on a shard: the rustls configuration built from the snapshot's
//! [`TlsSettings`] (once per shard and snapshot: shards share no rustls
//! state) and the certificate picked by SNI. The handshake and its
//! counters are the connection's opening (`opening`).
//!
//! A reload that changes certificates publishes a new snapshot: the next
//! handshake on each shard builds the new configuration, and connections
//! already open keep the keys they agreed.

use super::stats::ShardStats;
use crate::transport::certs;
use crate::transport::tickets::Tickets;
use gapura_gate::tls::{TlsSettings, TlsVersion};
use rustls::server::{ClientHello, NoServerSessionStorage, ResolvesServerCert, ServerConfig};
use rustls::sign::CertifiedKey;
use std::sync::Arc;

/// The ALPN names served over HTTP/1.1.
const HTTP11: &[u8] = b"http/1.1";

/// The configuration a shard built (`None`: it could not be), and the
/// settings it was built from.
pub(super) type Built = Option<(Arc<TlsSettings>, Option<Arc<ServerConfig>>)>;

/// Picks the certificate for a client's SNI name, counting the names no
/// certificate claims (they get the default).
#[derive(Debug)]
struct ByName {
    settings: Arc<TlsSettings>,
    keys: Vec<Arc<CertifiedKey>>,
    stats: Arc<ShardStats>,
}

impl ResolvesServerCert for ByName {
    fn resolve(&self, hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        let sni = hello.server_name();
        match sni {
            Some(name) if !self.settings.claims(name) => self.stats.tls_sni_default.inc(),
            None => self.stats.tls_no_sni.inc(),
            Some(_) => {}
        }
        self.keys.get(self.settings.certificate_for(sni)).cloned()
    }
}

/// Builds a shard's rustls configuration.
pub fn build_config(
    settings: &Arc<TlsSettings>,
    stats: Arc<ShardStats>,
) -> Result<Arc<ServerConfig>, String> {
    let mut keys = Vec::with_capacity(settings.certificates.len());
    for c in &settings.certificates {
        let key = certs::certified_key(&c.chain, &c.key.0, c.ocsp.as_deref())
            .map_err(|e| format!("{}: {e:?}", c.label))?;
        keys.push(Arc::new(key));
    }
    if keys.is_empty() {
        return Err("no certificate".into());
    }
    let versions: &[&rustls::SupportedProtocolVersion] = match settings.min_version {
        TlsVersion::V12 => &[&rustls::version::TLS13, &rustls::version::TLS12],
        TlsVersion::V13 => &[&rustls::version::TLS13],
    };
    let mut config = ServerConfig::builder_with_provider(certs::provider())
        .with_protocol_versions(versions)
        .map_err(|e| e.to_string())?
        .with_no_client_auth()
        .with_cert_resolver(Arc::new(ByName {
            settings: settings.clone(),
            keys,
            stats,
        }));
    config.alpn_protocols = if settings.h2 {
        vec![b"h2".to_vec(), HTTP11.to_vec()]
    } else {
        vec![HTTP11.to_vec()]
    };
    // Resumption is by tickets only: no per-shard session cache.
    config.session_storage = Arc::new(NoServerSessionStorage {});
    if settings.ticket_secret.0.is_empty() {
        config.send_tls13_tickets = 0;
    } else {
        config.ticketer = Arc::new(Tickets::new(
            &settings.ticket_secret.0,
            settings.ticket_rotation_s,
        ));
    }
    Ok(Arc::new(config))
}

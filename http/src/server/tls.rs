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

/// The ALPN name of ACME's TLS-ALPN-01 validation (RFC 8737): such a
/// handshake gets the challenge's certificate and nothing else.
pub const ACME_TLS: &[u8] = b"acme-tls/1";

/// The configuration a shard built (`None`: it could not be), and the
/// settings it was built from.
pub(super) type Built = Option<(Arc<TlsSettings>, Option<Arc<ServerConfig>>)>;

/// Picks the certificate for a client's SNI name, counting the names no
/// certificate claims (they get the default). An ACME certificate not yet
/// issued has no key: its handshakes fail. An `acme-tls/1` handshake gets
/// the TLS-ALPN-01 certificate for its name, if one is in flight, and
/// nothing otherwise.
#[derive(Debug)]
struct ByName {
    settings: Arc<TlsSettings>,
    keys: Vec<Option<Arc<CertifiedKey>>>,
    acme: Vec<(String, Arc<CertifiedKey>)>,
    stats: Arc<ShardStats>,
    /// On-demand certificates: an unclaimed name is handed here, never
    /// waited on (a full queue drops it).
    on_demand: Option<std::sync::mpsc::SyncSender<String>>,
}

impl ResolvesServerCert for ByName {
    fn resolve(&self, hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        let sni = hello.server_name();
        if hello
            .alpn()
            .is_some_and(|mut names| names.any(|n| n == ACME_TLS))
        {
            let name = sni?;
            return (self.acme.iter())
                .find(|(n, _)| n.eq_ignore_ascii_case(name))
                .map(|(_, k)| k.clone());
        }
        match sni {
            Some(name) if !self.settings.claims(name) => {
                self.stats.tls_sni_default.inc();
                if let Some(asks) = &self.on_demand {
                    let _ = asks.try_send(name.to_ascii_lowercase());
                }
            }
            None => self.stats.tls_no_sni.inc(),
            Some(_) => {}
        }
        self.keys.get(self.settings.certificate_for(sni))?.clone()
    }
}

/// Builds a shard's rustls configuration.
pub fn build_config(
    settings: &Arc<TlsSettings>,
    stats: Arc<ShardStats>,
    on_demand: Option<std::sync::mpsc::SyncSender<String>>,
) -> Result<Arc<ServerConfig>, String> {
    let mut keys = Vec::with_capacity(settings.certificates.len());
    for c in &settings.certificates {
        if c.chain.is_empty() && !c.acme.is_empty() {
            keys.push(None);
            continue;
        }
        let key = certs::certified_key(&c.chain, &c.key.0, c.ocsp.as_deref())
            .map_err(|e| format!("{}: {e:?}", c.label))?;
        keys.push(Some(Arc::new(key)));
    }
    if keys.is_empty() {
        return Err("no certificate".into());
    }
    let mut acme = Vec::with_capacity(settings.acme_alpn.len());
    for c in &settings.acme_alpn {
        let key = certs::challenge_key(&c.cert, &c.key.0)
            .map_err(|e| format!("acme-tls/1 {}: {e:?}", c.name))?;
        acme.push((c.name.clone(), Arc::new(key)));
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
            acme,
            stats,
            on_demand,
        }));
    config.alpn_protocols = if settings.h2 {
        vec![b"h2".to_vec(), HTTP11.to_vec()]
    } else {
        vec![HTTP11.to_vec()]
    };
    if !settings.acme_alpn.is_empty() {
        config.alpn_protocols.push(ACME_TLS.to_vec());
    }
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

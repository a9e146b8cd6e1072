//! An upstream's `tls` (an `[[auth_provider]]`'s too): `true` (the public
//! roots, each server's own name) or a table naming who vouches for the
//! servers (`ca_file`), the name their certificates must hold
//! (`server_name`), a client certificate for servers that ask for one
//! (`client_cert` with `client_key`), and `verify = false` for a lab (a
//! warning). Every file is read as `run` reads it.

use crate::env::{CertificateLoader, PairProblem};
use crate::error::Errors;
use crate::schema::{RawUpstreamTls, RawUpstreamTlsTable};
use gapura_gate::host::valid_name;
use gapura_gate::upstream::{ClientCertificate, UpstreamRoots, UpstreamTls};
use std::sync::Arc;
use toml::Spanned;

/// The group's TLS, `None` for plaintext (or on errors, which are pushed).
pub(crate) fn check_upstream_tls(
    raw: Option<&Spanned<RawUpstreamTls>>,
    base: &str,
    loader: &dyn CertificateLoader,
    e: &mut Errors<'_>,
) -> Option<Arc<UpstreamTls>> {
    let raw = raw?;
    let path = format!("{base}.tls");
    let table = match raw.get_ref() {
        RawUpstreamTls::Flag(false) => return None,
        RawUpstreamTls::Flag(true) => &RawUpstreamTlsTable::default(),
        RawUpstreamTls::Table(t) => t,
    };
    let before = e.error_count();
    let server_name = table.server_name.as_ref().and_then(|n| {
        let name = n.get_ref();
        let ok = name.parse::<std::net::IpAddr>().is_ok() || valid_name(name);
        if !ok {
            e.push(
                "upstream.tls.server_name.invalid",
                format!("{path}.server_name"),
                n.span(),
                format!("{name:?} is neither a host name nor an IP address"),
            );
        }
        ok.then(|| name.to_ascii_lowercase())
    });
    let roots = match &table.ca_file {
        None => UpstreamRoots::Public,
        Some(f) => match loader.load_cas(f.get_ref()) {
            Ok(cas) => UpstreamRoots::Own(cas),
            Err(why) => {
                e.push(
                    "upstream.tls.ca_file.unreadable",
                    format!("{path}.ca_file"),
                    f.span(),
                    why,
                );
                UpstreamRoots::Own(Vec::new())
            }
        },
    };
    let client = client_certificate(table, &path, raw, loader, e);
    let verify = table.verify.as_ref().is_none_or(|v| *v.get_ref());
    if !verify {
        let span = table.verify.as_ref().map_or(raw.span(), Spanned::span);
        e.warn(
            "upstream.tls.verify_off",
            format!("{path}.verify"),
            span,
            "the certificates of the servers it connects to are not verified: anyone on \
             the path can read and change the traffic (for a lab only)",
        );
    }
    if e.error_count() > before {
        return None;
    }
    let label = [&table.ca_file, &table.client_cert]
        .iter()
        .filter_map(|f| f.as_ref().map(|f| f.get_ref().as_str()))
        .collect::<Vec<_>>()
        .join(", ");
    Some(Arc::new(UpstreamTls {
        server_name,
        roots,
        client,
        verify,
        label,
    }))
}

/// `client_cert` and `client_key`, both or neither.
fn client_certificate(
    table: &RawUpstreamTlsTable,
    path: &str,
    raw: &Spanned<RawUpstreamTls>,
    loader: &dyn CertificateLoader,
    e: &mut Errors<'_>,
) -> Option<ClientCertificate> {
    let (cert, key) = match (&table.client_cert, &table.client_key) {
        (None, None) => return None,
        (Some(c), Some(k)) => (c, k),
        (c, _) => {
            let (which, other) = if c.is_some() {
                ("client_cert", "client_key")
            } else {
                ("client_key", "client_cert")
            };
            e.push(
                "upstream.tls.client_cert.incomplete",
                format!("{path}.{which}"),
                raw.span(),
                format!("{which} needs {other} beside it"),
            );
            return None;
        }
    };
    match loader.load_pair(cert.get_ref(), key.get_ref()) {
        Ok(pair) => Some(ClientCertificate {
            chain: pair.chain,
            key: pair.key,
        }),
        Err(problem) => {
            let (code, which, span, why) = match problem {
                PairProblem::Cert(why) => (
                    "upstream.tls.client_cert.unreadable",
                    "client_cert",
                    cert.span(),
                    why,
                ),
                PairProblem::Key(why) => (
                    "upstream.tls.client_key.unreadable",
                    "client_key",
                    key.span(),
                    why,
                ),
                PairProblem::Mismatch(why) => (
                    "upstream.tls.client_key.mismatch",
                    "client_key",
                    key.span(),
                    why,
                ),
            };
            e.push(code, format!("{path}.{which}"), span, why);
            None
        }
    }
}

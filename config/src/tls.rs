//! `[[certificate]]` and `[tls]`: the certificates TLS listeners serve and
//! their settings, checked and compiled into the snapshot's
//! `gapura_gate::tls::TlsSettings`.
//!
//! The files are read by the environment's [`CertificateLoader`] (config
//! reads no file but the profile); a file that cannot be read, holds no
//! certificate or key, or a key that is not the certificate's, is an error
//! at the key that names the file.

use crate::env::{CertificateLoader, PairProblem};
use crate::error::Errors;
use crate::rawblocks::RawHsts;
use crate::schema::{RawCertificate, RawTls};
use crate::values::{choice, int_in, Opt};
use gapura_gate::host::{valid_name, HostNameError, HostTable};
use gapura_gate::tls::{Certificate, Secret, TlsSettings, TlsVersion};
use std::ops::Range;
use std::sync::Arc;
use toml::Spanned;

/// Defaults of `[tls]`.
pub const HANDSHAKE_TIMEOUT_MS: u64 = 10_000;
pub const TICKET_ROTATION_S: u64 = 12 * 3600;

/// Default HSTS max-age: one year.
pub const HSTS_MAX_AGE_S: i64 = 365 * 24 * 3600;

/// One layer's HTTPS settings.
#[derive(Clone, Debug, Default)]
pub(crate) struct HttpsLayer {
    pub redirect: Option<bool>,
    pub port: Option<u16>,
    /// The `Strict-Transport-Security` value.
    pub hsts: Option<String>,
}

impl crate::layer::Fields for HttpsLayer {
    fn merge_fields(base: &HttpsLayer, over: &HttpsLayer) -> HttpsLayer {
        HttpsLayer {
            redirect: over.redirect.or(base.redirect),
            port: over.port.or(base.port),
            hsts: over.hsts.clone().or_else(|| base.hsts.clone()),
        }
    }
}

impl HttpsLayer {
    pub(crate) fn compile(&self) -> gapura_gate::https::HttpsPolicy {
        gapura_gate::https::HttpsPolicy {
            redirect_port: self
                .redirect
                .unwrap_or(false)
                .then_some(self.port.unwrap_or(443)),
            hsts: self.hsts.as_ref().map_or_else(Default::default, |v| {
                gapura_gate::sink::Lines::new(None, &[("Strict-Transport-Security", v)])
            }),
        }
    }
}

/// A layer's `https_redirect`, `https_port` and `hsts`.
pub(crate) fn check_https(
    redirect: &Opt<bool>,
    port: &Opt<i64>,
    hsts: Option<&Spanned<RawHsts>>,
    base: &str,
    e: &mut Errors<'_>,
) -> HttpsLayer {
    let port = int_in(
        e,
        port,
        &format!("{base}.https_port"),
        "host.https_port.range",
        (1, 65535),
    )
    .map(|p| p as u16);
    let hsts = hsts.map(|h| {
        let h = h.get_ref();
        let age = int_in(
            e,
            &h.max_age_s,
            &format!("{base}.hsts.max_age_s"),
            "host.hsts.max_age_s.range",
            (0, 2 * HSTS_MAX_AGE_S),
        )
        .unwrap_or(HSTS_MAX_AGE_S);
        let mut line = format!("max-age={age}");
        if h.include_subdomains.as_ref().is_some_and(|v| *v.get_ref()) {
            line.push_str("; includeSubDomains");
        }
        if h.preload.as_ref().is_some_and(|v| *v.get_ref()) {
            line.push_str("; preload");
        }
        line
    });
    HttpsLayer {
        redirect: redirect.as_ref().map(|r| *r.get_ref()),
        port,
        hsts,
    }
}

/// The first TLS listener's key path and flag span.
pub(crate) type TlsListener = (String, Range<usize>);

/// Checks the certificates and `[tls]`; `None` when no listener is TLS (a
/// certificate is then a warning) or on errors.
pub(crate) fn check_tls(
    certs: &[Spanned<RawCertificate>],
    raw: Option<&RawTls>,
    listener: Option<&TlsListener>,
    loader: &dyn CertificateLoader,
    e: &mut Errors<'_>,
) -> Option<Arc<TlsSettings>> {
    let settings = check_settings(raw.unwrap_or(&RawTls::default()), e);
    let Some((path, span)) = listener else {
        if let Some(first) = certs.first() {
            e.warn(
                "certificate.unused",
                "certificate[0]",
                first.span(),
                "no listener has tls = true: the certificates are not served",
            );
        }
        return None;
    };
    if certs.is_empty() {
        e.push(
            "server.listen.tls.no_certificate",
            path.as_str(),
            span.clone(),
            "a TLS listener needs a [[certificate]] with cert and key files, or acme = true",
        );
        return None;
    }
    let mut names = HostTable::default();
    let mut default: Option<(usize, Range<usize>)> = None;
    let mut certificates = Vec::with_capacity(certs.len());
    for (i, c) in certs.iter().enumerate() {
        let base = format!("certificate[{i}]");
        let raw = c.get_ref();
        check_names(raw, i, &base, c.span(), &mut names, e);
        if let Some(d) = raw.default.as_ref().filter(|d| *d.get_ref()) {
            match &default {
                Some((first, _)) => e.push(
                    "certificate.default.duplicate",
                    format!("{base}.default"),
                    d.span(),
                    format!("certificate[{first}] is already the default"),
                ),
                None => default = Some((i, d.span())),
            }
        }
        if let Some(cert) = load(raw, &base, c.span(), loader, e) {
            certificates.push(cert);
        }
    }
    names.set_default(default.map_or(0, |(i, _)| i as u32));
    if certificates.len() != certs.len() {
        return None;
    }
    let (min_version, handshake_timeout_ms, tickets, rotation) = settings;
    Some(Arc::new(TlsSettings {
        certificates,
        names,
        min_version,
        handshake_timeout_ms,
        ticket_secret: Secret(if tickets {
            loader.ticket_secret()
        } else {
            Vec::new()
        }),
        ticket_rotation_s: rotation,
        h2: false,
        acme_alpn: Vec::new(),
    }))
}

/// `[tls]`: (minimum version, handshake timeout, tickets on, rotation).
fn check_settings(t: &RawTls, e: &mut Errors<'_>) -> (TlsVersion, u64, bool, u64) {
    let min = choice(
        e,
        &t.min_version,
        "tls.min_version",
        "tls.min_version.invalid",
        &[("1.2", TlsVersion::V12), ("1.3", TlsVersion::V13)],
        TlsVersion::V12,
    );
    let timeout = int_in(
        e,
        &t.handshake_timeout_ms,
        "tls.handshake_timeout_ms",
        "tls.handshake_timeout_ms.range",
        (100, 600_000),
    )
    .map_or(HANDSHAKE_TIMEOUT_MS, |n| n as u64);
    let rotation = int_in(
        e,
        &t.ticket_rotation_s,
        "tls.ticket_rotation_s",
        "tls.ticket_rotation_s.range",
        (60, 7 * 24 * 3600),
    )
    .map_or(TICKET_ROTATION_S, |n| n as u64);
    let tickets = t.session_tickets.as_ref().is_none_or(|v| *v.get_ref());
    (min, timeout, tickets, rotation)
}

/// `names`: present, valid host names or `*.` wildcards, each claimed once.
fn check_names(
    raw: &RawCertificate,
    index: usize,
    base: &str,
    whole: Range<usize>,
    names: &mut HostTable,
    e: &mut Errors<'_>,
) {
    let Some(list) = raw.names.as_ref().filter(|l| !l.get_ref().is_empty()) else {
        let span = raw.names.as_ref().map_or(whole, Spanned::span);
        e.push(
            "certificate.names.empty",
            format!("{base}.names"),
            span,
            "needs at least one name (exact, or *.suffix)",
        );
        return;
    };
    for (j, n) in list.get_ref().iter().enumerate() {
        let path = format!("{base}.names[{j}]");
        let name = n.get_ref();
        let bare = name.strip_prefix("*.").unwrap_or(name);
        if !valid_name(bare) {
            e.push(
                "certificate.names.invalid",
                path,
                n.span(),
                format!("{name:?} is not a host name or *.suffix wildcard"),
            );
            continue;
        }
        match names.insert(name, index as u32) {
            Ok(()) => {}
            Err(HostNameError::Duplicate) => e.push(
                "certificate.names.duplicate",
                path,
                n.span(),
                format!("{name:?} is claimed by an earlier certificate"),
            ),
            Err(HostNameError::Invalid) => e.push(
                "certificate.names.invalid",
                path,
                n.span(),
                format!("{name:?} is not a host name or *.suffix wildcard"),
            ),
        }
    }
}

/// Reads a certificate's files; errors at the key naming the file at fault.
fn load(
    raw: &RawCertificate,
    base: &str,
    whole: Range<usize>,
    loader: &dyn CertificateLoader,
    e: &mut Errors<'_>,
) -> Option<Certificate> {
    if raw.acme.as_ref().is_some_and(|a| *a.get_ref()) {
        // Ordered by the ACME thread (`acme::check_acme` checks the rest);
        // the runtime fills in what the state directory holds.
        let names: Vec<String> = (raw.names.iter())
            .flat_map(|l| l.get_ref().iter().map(|n| n.get_ref().to_ascii_lowercase()))
            .collect();
        return Some(Certificate {
            label: format!("acme:{}", names.first().map_or("", String::as_str)),
            chain: Vec::new(),
            key: Secret(Vec::new()),
            ocsp: None,
            acme: names,
        });
    }
    let (Some(cert), Some(key)) = (&raw.cert, &raw.key) else {
        let which = if raw.cert.is_none() { "cert" } else { "key" };
        e.push(
            "certificate.file.missing",
            format!("{base}.{which}"),
            whole,
            format!("needs {which} = \"FILE.pem\""),
        );
        return None;
    };
    let pair = match loader.load_pair(cert.get_ref(), key.get_ref()) {
        Ok(p) => p,
        Err(problem) => {
            let (code, which, span, why) = match problem {
                PairProblem::Cert(why) => ("certificate.cert.unreadable", "cert", cert.span(), why),
                PairProblem::Key(why) => ("certificate.key.unreadable", "key", key.span(), why),
                PairProblem::Mismatch(why) => ("certificate.key.mismatch", "key", key.span(), why),
            };
            e.push(code, format!("{base}.{which}"), span, why);
            return None;
        }
    };
    let ocsp = match &raw.ocsp {
        None => None,
        Some(o) => match loader.load_ocsp(o.get_ref()) {
            Ok(bytes) => Some(bytes),
            Err(why) => {
                e.push(
                    "certificate.ocsp.unreadable",
                    format!("{base}.ocsp"),
                    o.span(),
                    why,
                );
                return None;
            }
        },
    };
    Some(Certificate {
        label: cert.get_ref().clone(),
        chain: pair.chain,
        key: Secret(pair.key),
        ocsp,
        acme: Vec::new(),
    })
}

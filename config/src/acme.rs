//! Checks of `[acme]` and of the certificates it obtains (`acme = true` on
//! a `[[certificate]]`, docs/tls.md "Automatic certificates"): the
//! directory's URL, the contacts, the state directory, the challenge
//! types, the server's own trust (`ca_file`, read by the environment).
//! Nothing connects: the runtime's ACME thread does, and `check` never
//! asks the certificate authority anything.

use crate::env::CertificateLoader;
use crate::error::Errors;
use crate::schema::{RawAcme, RawCertificate, RawOnDemand};
use crate::settings::{AcmeChallenge, AcmeSettings, OnDemand};
use toml::Spanned;

/// [`check_acme`] of a whole profile.
pub(crate) fn check_profile(
    raw: &crate::schema::RawProfile,
    loader: &dyn CertificateLoader,
    e: &mut Errors<'_>,
) -> Option<AcmeSettings> {
    check_acme(
        (raw.acme.as_ref(), raw.fleet.is_some()),
        &raw.certificate,
        loader,
        e,
    )
}

/// Checks `[acme]` and every certificate's `acme` key; `None` when no
/// certificate is obtained through ACME or on errors (recorded).
pub(crate) fn check_acme(
    (raw, fleet): (Option<&Spanned<RawAcme>>, bool),
    certs: &[Spanned<RawCertificate>],
    loader: &dyn CertificateLoader,
    e: &mut Errors<'_>,
) -> Option<AcmeSettings> {
    let before = e.error_count();
    let mut ordered = Vec::new();
    for (i, c) in certs.iter().enumerate() {
        let rc = c.get_ref();
        let Some(flag) = rc.acme.as_ref().filter(|f| *f.get_ref()) else {
            continue;
        };
        let base = format!("certificate[{i}]");
        if rc.cert.is_some() || rc.key.is_some() || rc.ocsp.is_some() {
            e.push(
                "certificate.acme.with_files",
                format!("{base}.acme"),
                flag.span(),
                "acme = true obtains the certificate and its key: remove cert, key and ocsp, or acme",
            );
        }
        if raw.is_none() {
            e.push(
                "certificate.acme.no_acme",
                format!("{base}.acme"),
                flag.span(),
                "acme = true needs an [acme] section (directory, contact, state_dir)",
            );
        }
        let names: Vec<String> = rc
            .names
            .as_ref()
            .map(|l| {
                l.get_ref()
                    .iter()
                    .map(|n| n.get_ref().to_ascii_lowercase())
                    .collect()
            })
            .unwrap_or_default();
        if let Some((j, n)) = (rc.names.as_ref().into_iter())
            .flat_map(|l| l.get_ref().iter().enumerate())
            .find(|(_, n)| n.get_ref().starts_with("*."))
        {
            e.push(
                "certificate.acme.wildcard",
                format!("{base}.names[{j}]"),
                n.span(),
                "a wildcard needs the DNS-01 challenge, which Gapura does not answer: list the names",
            );
        }
        ordered.push(names);
    }
    let raw = raw?;
    if ordered.is_empty() && raw.get_ref().on_demand.is_none() {
        e.warn(
            "acme.unused",
            "acme",
            raw.span(),
            "no [[certificate]] has acme = true: nothing is ordered",
        );
        return None;
    }
    let settings = check_section(raw, loader, e, ordered);
    let shared = raw.get_ref().shared_key_file.as_ref();
    if fleet && shared.is_none() {
        e.push(
            "acme.shared_key_file.required",
            "acme.shared_key_file",
            raw.span(),
            "with [fleet], the nodes share their certificates through the engine, sealed under \
             a key every node has: shared_key_file = \"/etc/gapura/acme.key\" (a file whose \
             first line is at least 32 characters)",
        );
    }
    (e.error_count() == before).then_some(settings).flatten()
}

/// `[acme]`'s keys.
fn check_section(
    raw: &Spanned<RawAcme>,
    loader: &dyn CertificateLoader,
    e: &mut Errors<'_>,
    certificates: Vec<Vec<String>>,
) -> Option<AcmeSettings> {
    let a = raw.get_ref();
    let directory = match &a.directory {
        None => {
            e.push(
                "acme.directory.required",
                "acme.directory",
                raw.span(),
                "needs directory = \"https://...\", the ACME server's directory URL",
            );
            None
        }
        Some(d) if !valid_https(d.get_ref()) => {
            e.push(
                "acme.directory.invalid",
                "acme.directory",
                d.span(),
                format!(
                    "{:?} is not an https:// URL (RFC 8555 asks for HTTPS)",
                    d.get_ref()
                ),
            );
            None
        }
        Some(d) => Some(d.get_ref().clone()),
    };
    let mut contact = Vec::new();
    for (i, c) in a
        .contact
        .iter()
        .flat_map(|l| l.get_ref().iter())
        .enumerate()
    {
        let v = c.get_ref();
        let ok = v.strip_prefix("mailto:").is_some_and(|m| {
            m.split_once('@')
                .is_some_and(|(u, d)| !u.is_empty() && d.contains('.'))
                && !m.contains([',', ' ', '\n'])
        });
        if ok {
            contact.push(v.clone());
        } else {
            e.push(
                "acme.contact.invalid",
                format!("acme.contact[{i}]"),
                c.span(),
                format!("{v:?} is not a mailto: address"),
            );
        }
    }
    let state_dir = match &a.state_dir {
        None => {
            e.push(
                "acme.state_dir.required",
                "acme.state_dir",
                raw.span(),
                "needs state_dir = \"/var/lib/gapura/acme\": where the account key and the certificates are kept",
            );
            None
        }
        Some(d) if !d.get_ref().starts_with('/') => {
            e.push(
                "acme.state_dir.relative",
                "acme.state_dir",
                d.span(),
                "must be an absolute path",
            );
            None
        }
        Some(d) => Some(d.get_ref().clone()),
    };
    let challenges = check_challenges(a, e);
    let roots = a
        .ca_file
        .as_ref()
        .and_then(|f| match loader.load_cas(f.get_ref()) {
            Ok(r) => Some(r),
            Err(why) => {
                e.push("acme.ca_file.unreadable", "acme.ca_file", f.span(), why);
                None
            }
        });
    Some(AcmeSettings {
        directory: directory?,
        contact,
        state_dir: state_dir?,
        challenges: challenges?,
        roots,
        certificates,
        shared_key_file: a.shared_key_file.as_ref().map(|f| f.get_ref().clone()),
        on_demand: a.on_demand.as_ref().and_then(|o| check_on_demand(o, e)),
    })
}

/// `challenges`: known types, each once, at least one; both when absent
/// (TLS-ALPN-01 first).
fn check_challenges(a: &RawAcme, e: &mut Errors<'_>) -> Option<Vec<AcmeChallenge>> {
    let Some(list) = &a.challenges else {
        return Some(vec![AcmeChallenge::TlsAlpn01, AcmeChallenge::Http01]);
    };
    if list.get_ref().is_empty() {
        e.push(
            "acme.challenges.empty",
            "acme.challenges",
            list.span(),
            "needs at least one of \"tls-alpn-01\" and \"http-01\"",
        );
        return None;
    }
    let mut out = Vec::new();
    for (i, c) in list.get_ref().iter().enumerate() {
        let kind = match c.get_ref().as_str() {
            "tls-alpn-01" => AcmeChallenge::TlsAlpn01,
            "http-01" => AcmeChallenge::Http01,
            other => {
                e.push(
                    "acme.challenges.invalid",
                    format!("acme.challenges[{i}]"),
                    c.span(),
                    format!(
                        "{other:?} is not \"tls-alpn-01\" or \"http-01\" (DNS-01 is not answered)"
                    ),
                );
                continue;
            }
        };
        if !out.contains(&kind) {
            out.push(kind);
        }
    }
    (!out.is_empty()).then_some(out)
}

/// `https://` and a host.
fn valid_https(url: &str) -> bool {
    url.strip_prefix("https://").is_some_and(|rest| {
        !rest.is_empty() && !rest.starts_with('/') && !rest.contains(char::is_whitespace)
    })
}

/// `on_demand`: an `ask` URL and a `rate` of `"N/second"`, `"N/minute"`
/// or `"N/hour"` (N in 1..=1000).
fn check_on_demand(raw: &Spanned<RawOnDemand>, e: &mut Errors<'_>) -> Option<OnDemand> {
    let o = raw.get_ref();
    let ask = match &o.ask {
        None => {
            e.push(
                "acme.on_demand.ask.required",
                "acme.on_demand.ask",
                raw.span(),
                "on-demand certificates need ask = \"http://...\": the endpoint that says which names may have one",
            );
            None
        }
        Some(a) => {
            let v = a.get_ref();
            let ok = ["http://", "https://"].iter().any(|p| {
                v.strip_prefix(p)
                    .is_some_and(|r| !r.is_empty() && !r.starts_with('/'))
            }) && !v.contains(char::is_whitespace);
            if !ok {
                e.push(
                    "acme.on_demand.ask.invalid",
                    "acme.on_demand.ask",
                    a.span(),
                    format!("{v:?} is not an http:// or https:// URL"),
                );
            }
            ok.then(|| v.clone())
        }
    };
    let rate = match &o.rate {
        None => Some((10, 60)),
        Some(r) => {
            let parsed = r.get_ref().split_once('/').and_then(|(n, per)| {
                let n: u32 = n.trim().parse().ok().filter(|n| (1..=1000).contains(n))?;
                let per = match per.trim() {
                    "second" => 1,
                    "minute" => 60,
                    "hour" => 3600,
                    _ => return None,
                };
                Some((n, per))
            });
            if parsed.is_none() {
                e.push(
                    "acme.on_demand.rate.invalid",
                    "acme.on_demand.rate",
                    r.span(),
                    format!(
                        "{:?} is not \"N/second\", \"N/minute\" or \"N/hour\" with N in 1..=1000",
                        r.get_ref()
                    ),
                );
            }
            parsed
        }
    };
    let (count, per_s) = rate?;
    Some(OnDemand {
        ask: ask?,
        count,
        per_s,
    })
}

//! With `[acme]`: whether the certificate authority can be reached and
//! read, whether this host's clock agrees with it, and whether the
//! listeners are on the ports its challenges are validated on. One
//! directory request (a `GET`, no account, no order); nothing is written.

use crate::finding::{Finding, Level};
use gapura_config::{AcmeChallenge, AcmeSettings, RuntimeSettings};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// The clock skew past which a warning is given.
pub const SKEW_WARN_S: i64 = 60;

/// `acme.directory` and `acme.ports`.
pub fn findings(a: &AcmeSettings, runtime: &RuntimeSettings) -> Vec<Finding> {
    vec![directory(a), ports(a, runtime)]
}

fn directory(a: &AcmeSettings) -> Finding {
    let id = "acme.directory";
    let t = match gapura_acme::transport::Transport::new(a.roots.as_deref(), Duration::from_secs(5))
    {
        Ok(t) => t,
        Err(e) => return Finding::new(id, Level::Fail, e),
    };
    let answer = match t.request("GET", &a.directory, None) {
        Ok(ans) => ans,
        Err(e) => {
            return Finding::new(id, Level::Fail, e)
                .why("no certificate is ordered or renewed without the authority")
                .fix("check [acme] directory, this host's route to it, and ca_file for a private authority")
        }
    };
    let v: serde_json::Value = serde_json::from_slice(&answer.body).unwrap_or_default();
    let missing: Vec<&str> = ["newNonce", "newAccount", "newOrder"]
        .into_iter()
        .filter(|k| v[*k].as_str().is_none())
        .collect();
    if answer.status != 200 || !missing.is_empty() {
        return Finding::new(
            id,
            Level::Fail,
            format!(
                "{}: status {}, not an ACME directory (no {})",
                a.directory,
                answer.status,
                missing.join(", ")
            ),
        )
        .fix("[acme] directory must be the server's directory URL");
    }
    let found = format!("{}: an ACME directory", a.directory);
    match answer.field("date").and_then(http_date_s) {
        Some(theirs) => {
            let ours = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| d.as_secs() as i64);
            let skew = ours - theirs;
            if skew.abs() > SKEW_WARN_S {
                Finding::new(id, Level::Warn, format!("{found}; this clock is {skew} s off the authority's"))
                    .why("renewal is timed by this clock, and certificates are valid from the authority's")
                    .fix("keep the clock in time (chrony or systemd-timesyncd)")
            } else {
                Finding::new(
                    id,
                    Level::Ok,
                    format!("{found}; clocks agree within {} s", skew.abs()),
                )
            }
        }
        None => Finding::new(
            id,
            Level::Ok,
            format!("{found} (it sent no Date to compare clocks)"),
        ),
    }
}

/// Unix seconds of an IMF-fixdate.
fn http_date_s(v: &str) -> Option<i64> {
    gapura_acme::schedule::http_date(v)
}

fn ports(a: &AcmeSettings, r: &RuntimeSettings) -> Finding {
    let id = "acme.ports";
    let tls_on = |port: u16| {
        r.tls
            .iter()
            .any(|&i| r.listen.get(i).is_some_and(|s| s.port() == port))
    };
    let plain_on =
        |port: u16| (0..r.listen.len()).any(|i| !r.tls.contains(&i) && r.listen[i].port() == port);
    let mut missing = Vec::new();
    for c in &a.challenges {
        match c {
            AcmeChallenge::TlsAlpn01 if !tls_on(443) => {
                missing.push("tls-alpn-01 is validated on port 443, and no TLS listener is on it")
            }
            AcmeChallenge::Http01 if !plain_on(80) => {
                missing.push("http-01 is validated on port 80, and no plain listener is on it")
            }
            _ => {}
        }
    }
    if missing.len() == a.challenges.len() {
        Finding::new(id, Level::Warn, missing.join("; "))
            .why("the authority comes to ports 80 and 443 only: a validation reaches Gapura only through something forwarding those ports")
            .fix("listen on 443 with tls = true, or on 80, or forward those ports to Gapura's")
    } else if !missing.is_empty() {
        Finding::new(
            id,
            Level::Info,
            format!("{} (another challenge type is served)", missing.join("; ")),
        )
    } else {
        Finding::new(
            id,
            Level::Ok,
            "every challenge type is served on the port it is validated on",
        )
    }
}

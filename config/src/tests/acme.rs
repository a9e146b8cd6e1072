//! `[acme]` and `acme = true` certificates: what compiles, and every error
//! with its code, path and position.

use super::*;
use crate::{AcmeChallenge, AcmeSettings};

const TLS: &str =
    "[server]\nlisten = [\"127.0.0.1:8080\", { addr = \"127.0.0.1:8443\", tls = true }]\n";
const ACME: &str = "[acme]\ndirectory = \"https://ca.example/dir\"\ncontact = [\"mailto:ops@a.example\"]\nstate_dir = \"/var/lib/gapura/acme\"\n";
const CERT: &str = "[[certificate]]\nnames = [\"a.example\", \"WWW.a.example\"]\nacme = true\n";

#[test]
fn an_acme_certificate_compiles_pending_with_its_names_and_the_settings() {
    let c = ok(&format!("{TLS}{ACME}{CERT}"));
    assert_eq!(
        c.runtime.acme,
        Some(AcmeSettings {
            directory: "https://ca.example/dir".into(),
            contact: vec!["mailto:ops@a.example".into()],
            state_dir: "/var/lib/gapura/acme".into(),
            challenges: vec![AcmeChallenge::TlsAlpn01, AcmeChallenge::Http01],
            roots: None,
            certificates: vec![vec!["a.example".into(), "www.a.example".into()]],
            shared_key_file: None,
            on_demand: None,
        })
    );
    let tls = c.snapshot.tls.as_ref().unwrap();
    let cert = &tls.certificates[0];
    assert!(cert.chain.is_empty(), "no certificate until one is issued");
    assert_eq!(cert.acme, ["a.example", "www.a.example"]);
    assert_eq!(tls.certificate_for(Some("www.a.example")), 0);
    assert!(!c.snapshot.acme.has_http());
    let c = ok(&format!("{TLS}{ACME}challenges = [\"http-01\"]\n{CERT}"));
    assert_eq!(
        c.runtime.acme.unwrap().challenges,
        vec![AcmeChallenge::Http01]
    );
}

#[test]
fn every_acme_error_has_its_code_and_place() {
    assert_eq!(
        one(&format!("{TLS}{CERT}")),
        at("certificate.acme.no_acme", "certificate[0].acme", 5, 8)
    );
    assert_eq!(
        one(&format!(
            "{TLS}{ACME}[[certificate]]\nnames = [\"*.a.example\"]\nacme = true\n"
        )),
        at(
            "certificate.acme.wildcard",
            "certificate[0].names[0]",
            8,
            10
        )
    );
    let with_files = codes(&format!(
        "{TLS}{ACME}[[certificate]]\nnames = [\"a.example\"]\nacme = true\ncert = \"a.pem\"\nkey = \"a.key\"\n"
    ));
    assert!(
        with_files.contains(&("certificate.acme.with_files", "certificate[0].acme".into())),
        "{with_files:?}"
    );
    assert_eq!(
        one(&format!(
            "{TLS}[acme]\ndirectory = \"http://ca.example/dir\"\nstate_dir = \"/s\"\n{CERT}"
        )),
        at("acme.directory.invalid", "acme.directory", 4, 13)
    );
    assert_eq!(
        one(&format!("{TLS}[acme]\nstate_dir = \"/s\"\n{CERT}")).0,
        "acme.directory.required"
    );
    assert_eq!(
        one(&format!(
            "{TLS}[acme]\ndirectory = \"https://ca/d\"\nstate_dir = \"rel/dir\"\n{CERT}"
        )),
        at("acme.state_dir.relative", "acme.state_dir", 5, 13)
    );
    assert_eq!(
        one(&format!(
            "{TLS}[acme]\ndirectory = \"https://ca/d\"\n{CERT}"
        ))
        .0,
        "acme.state_dir.required"
    );
    assert_eq!(
        one(&format!("{TLS}{ACME}challenges = [\"dns-01\"]\n{CERT}")),
        at("acme.challenges.invalid", "acme.challenges[0]", 7, 15)
    );
    assert_eq!(
        one(&format!("{TLS}{ACME}challenges = []\n{CERT}")).0,
        "acme.challenges.empty"
    );
    assert_eq!(
        one(&format!("{TLS}[acme]\ndirectory = \"https://ca/d\"\nstate_dir = \"/s\"\ncontact = [\"ops@a.example\"]\n{CERT}")),
        at("acme.contact.invalid", "acme.contact[0]", 6, 12)
    );
    let unread = codes(&format!("{TLS}{ACME}ca_file = \"missing.pem\"\n{CERT}"));
    assert_eq!(
        unread,
        vec![("acme.ca_file.unreadable", "acme.ca_file".into())]
    );
}

#[test]
fn a_fleet_shares_certificates_under_a_key_file() {
    let fleet =
        "[fleet]\nredis = \"redis://127.0.0.1:6379\"\nnodes_expected = 3\nkey_file = \"/k\"\n";
    assert_eq!(
        one(&format!("{TLS}{fleet}{ACME}{CERT}")),
        at(
            "acme.shared_key_file.required",
            "acme.shared_key_file",
            7,
            1
        )
    );
    let c = ok(&format!(
        "{TLS}{fleet}{ACME}shared_key_file = \"/etc/gapura/acme.key\"\n{CERT}"
    ));
    assert_eq!(
        c.runtime.acme.unwrap().shared_key_file.as_deref(),
        Some("/etc/gapura/acme.key")
    );
}

#[test]
fn on_demand_takes_an_ask_url_and_a_rate() {
    let c = ok(&format!(
        "{TLS}{ACME}on_demand = {{ ask = \"http://127.0.0.1:9000/ok\", rate = \"3/hour\" }}\n{CERT}"
    ));
    assert_eq!(
        c.runtime.acme.unwrap().on_demand,
        Some(crate::OnDemand {
            ask: "http://127.0.0.1:9000/ok".into(),
            count: 3,
            per_s: 3600,
        })
    );
    let c = ok(&format!(
        "{TLS}{ACME}on_demand = {{ ask = \"https://ask.example/ok\" }}\n{CERT}"
    ));
    let od = c.runtime.acme.unwrap().on_demand.unwrap();
    assert_eq!((od.count, od.per_s), (10, 60));
    assert_eq!(
        one(&format!(
            "{TLS}{ACME}on_demand = {{ ask = \"ftp://x\" }}\n{CERT}"
        )),
        at("acme.on_demand.ask.invalid", "acme.on_demand.ask", 7, 21)
    );
    assert_eq!(
        one(&format!(
            "{TLS}{ACME}on_demand = {{ rate = \"1/minute\" }}\n{CERT}"
        ))
        .0,
        "acme.on_demand.ask.required"
    );
    for bad in ["0/minute", "10/day", "ten/minute", "1001/second"] {
        assert_eq!(
            one(&format!(
                "{TLS}{ACME}on_demand = {{ ask = \"http://a.example/\", rate = \"{bad}\" }}\n{CERT}"
            ))
            .0,
            "acme.on_demand.rate.invalid"
        );
    }
}

#[test]
fn acme_without_acme_certificates_warns() {
    let cert = "[[certificate]]\nnames = [\"a.example\"]\ncert = \"a.pem\"\nkey = \"a.key\"\n";
    let c = compile_str(&format!("{TLS}{ACME}{cert}"));
    let warnings = match c {
        Ok(c) => c.warnings,
        Err(e) => panic!("{e:#?}"),
    };
    assert!(
        warnings.iter().any(|w| w.code == "acme.unused"),
        "{warnings:#?}"
    );
}

//! An upstream's `tls`: its forms, the files it reads, and its refusals
//! with their codes and positions.

use super::*;
use gapura_gate::upstream::{ClientCertificate, UpstreamRoots, UpstreamTls};

/// A group on lines 1 to 3; tests append its `tls` from line 4.
const U: &str =
    "[[upstream]]\nname = \"app\"\nservers = [\"127.0.0.1:9001\", \"localhost:9002\"]\n";

fn tls_of(extra: &str) -> Option<UpstreamTls> {
    let c = ok(&format!("{U}{extra}"));
    c.snapshot.upstreams[0].tls.as_deref().cloned()
}

#[test]
fn without_tls_an_upstream_is_plaintext() {
    assert_eq!(tls_of(""), None);
    assert_eq!(tls_of("tls = false\n"), None);
}

#[test]
fn tls_true_verifies_against_the_public_roots_by_each_servers_name() {
    let t = tls_of("tls = true\n").expect("tls");
    assert_eq!(
        t,
        UpstreamTls {
            server_name: None,
            roots: UpstreamRoots::Public,
            client: None,
            verify: true,
            label: String::new(),
        }
    );
    // A server written by name keeps it for verification; an address has none.
    let c = ok(&format!("{U}tls = true\n"));
    let names: Vec<_> = c.snapshot.upstreams[0]
        .servers
        .iter()
        .map(|s| s.name.clone())
        .collect();
    assert_eq!(
        names,
        [None, Some("localhost".into()), Some("localhost".into())]
    );
}

#[test]
fn the_table_reads_its_files_and_names() {
    let t = tls_of(
        "tls = { server_name = \"API.internal\", ca_file = \"ca.pem\", client_cert = \"edge.pem\", client_key = \"edge.key\" }\n",
    )
    .expect("tls");
    assert_eq!(
        t,
        UpstreamTls {
            server_name: Some("api.internal".into()),
            roots: UpstreamRoots::Own(vec![b"ca.pem".to_vec()]),
            client: Some(ClientCertificate {
                chain: vec![b"edge.pem".to_vec()],
                key: b"edge.key".to_vec(),
            }),
            verify: true,
            label: "ca.pem, edge.pem".into(),
        }
    );
    let ip = tls_of("tls = { server_name = \"10.0.0.5\" }\n").expect("tls");
    assert_eq!(ip.server_name.as_deref(), Some("10.0.0.5"));
}

#[test]
fn verify_off_loads_with_a_warning() {
    let c = ok(&format!("{U}tls = {{ verify = false }}\n"));
    assert!(!c.snapshot.upstreams[0].tls.as_ref().expect("tls").verify);
    let w: Vec<_> = other_warnings(&c).iter().map(|w| key(w)).collect();
    assert_eq!(
        w,
        [at(
            "upstream.tls.verify_off",
            "upstream[0].tls.verify",
            4,
            18
        )]
    );
}

#[test]
fn refusals_name_the_key_at_fault() {
    let one_of = |extra: &str| one(&format!("{U}{extra}"));
    assert_eq!(
        one_of("tls = { ca_file = \"missing.pem\" }\n"),
        at(
            "upstream.tls.ca_file.unreadable",
            "upstream[0].tls.ca_file",
            4,
            19
        )
    );
    assert_eq!(
        one_of("tls = { client_cert = \"edge.pem\" }\n"),
        at(
            "upstream.tls.client_cert.incomplete",
            "upstream[0].tls.client_cert",
            4,
            7
        )
    );
    assert_eq!(
        one_of("tls = { client_key = \"edge.key\" }\n"),
        at(
            "upstream.tls.client_cert.incomplete",
            "upstream[0].tls.client_key",
            4,
            7
        )
    );
    assert_eq!(
        one_of("tls = { client_cert = \"missing.pem\", client_key = \"k\" }\n"),
        at(
            "upstream.tls.client_cert.unreadable",
            "upstream[0].tls.client_cert",
            4,
            23
        )
    );
    assert_eq!(
        one_of("tls = { client_cert = \"c.pem\", client_key = \"missing.key\" }\n"),
        at(
            "upstream.tls.client_key.unreadable",
            "upstream[0].tls.client_key",
            4,
            45
        )
    );
    assert_eq!(
        one_of("tls = { client_cert = \"c.pem\", client_key = \"other.key\" }\n"),
        at(
            "upstream.tls.client_key.mismatch",
            "upstream[0].tls.client_key",
            4,
            45
        )
    );
    assert_eq!(
        one_of("tls = { server_name = \"bad name\" }\n"),
        at(
            "upstream.tls.server_name.invalid",
            "upstream[0].tls.server_name",
            4,
            23
        )
    );
    let unknown = errors(&format!("{U}tls = {{ ca = \"x\" }}\n"));
    assert_eq!(unknown.len(), 1, "{unknown:#?}");
}

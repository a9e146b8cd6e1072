//! `http3 = true` on a listener and `[http3]`: what compiles, and every
//! error with its code, path and position.

use super::*;
use gapura_gate::snapshot::{Http3Settings, RetryMode};

const CERT: &str = "[[certificate]]\nnames = [\"a.example\"]\ncert = \"a.pem\"\nkey = \"a.key\"\n";

#[test]
fn a_tls_listener_serves_http3_with_the_defaults() {
    let c = ok(&format!(
        "[server]\nlisten = [\"127.0.0.1:8080\", {{ addr = \"127.0.0.1:8443\", tls = true, http3 = true }}]\n{CERT}"
    ));
    assert_eq!(c.runtime.tls, vec![1]);
    assert_eq!(c.runtime.http3, vec![1]);
    assert_eq!(c.snapshot.server.http3, Http3Settings::default());
    assert_eq!(
        Http3Settings::default(),
        Http3Settings {
            max_streams: 100,
            idle_timeout_ms: 30_000,
            retry: RetryMode::Auto,
            early_data: false,
        }
    );
}

#[test]
fn settings_compile() {
    let c = ok(&format!(
        "[server]\nlisten = [{{ addr = \"127.0.0.1:8443\", tls = true, http3 = true }}]\n\
         [http3]\nmax_streams = 8\nidle_timeout_ms = 5000\nretry = \"always\"\n{CERT}"
    ));
    let h = c.snapshot.server.http3;
    assert_eq!(
        (h.max_streams, h.idle_timeout_ms, h.retry),
        (8, 5_000, RetryMode::Always)
    );
    assert!(!h.early_data);
    let c = ok(&format!(
        "[server]\nlisten = [{{ addr = \"127.0.0.1:8443\", tls = true, http3 = true }}]\n[http3]\nearly_data = true\n{CERT}"
    ));
    assert!(c.snapshot.server.http3.early_data);
    let c = ok(&format!(
        "[server]\nlisten = [{{ addr = \"127.0.0.1:8443\", tls = true }}]\n[http3]\nretry = \"never\"\n{CERT}"
    ));
    assert_eq!(c.snapshot.server.http3.retry, RetryMode::Never);
    assert!(c.runtime.http3.is_empty(), "no listener asked for it");
}

#[test]
fn http3_needs_tls_on_its_listener() {
    assert_eq!(
        one("[server]\nlisten = [{ addr = \"127.0.0.1:8443\", http3 = true }]\n"),
        at(
            "server.listen.http3_without_tls",
            "server.listen[0].http3",
            2,
            46
        )
    );
}

#[test]
fn every_setting_is_bounded() {
    let base = format!(
        "[server]\nlisten = [{{ addr = \"127.0.0.1:8443\", tls = true, http3 = true }}]\n{CERT}"
    );
    assert_eq!(
        one(&format!("{base}[http3]\nmax_streams = 0\n")),
        at("http3.max_streams.range", "http3.max_streams", 8, 15)
    );
    assert_eq!(
        one(&format!("{base}[http3]\nmax_streams = 1001\n")),
        at("http3.max_streams.range", "http3.max_streams", 8, 15)
    );
    assert_eq!(
        one(&format!("{base}[http3]\nidle_timeout_ms = 999\n")),
        at(
            "http3.idle_timeout_ms.range",
            "http3.idle_timeout_ms",
            8,
            19
        )
    );
    assert_eq!(
        one(&format!("{base}[http3]\nretry = \"sometimes\"\n")),
        at("http3.retry.invalid", "http3.retry", 8, 9)
    );
    let e = errors(&format!("{base}[http3]\nearly_data = \"yes\"\n"));
    assert_eq!(e.len(), 1, "{e:#?}");
}

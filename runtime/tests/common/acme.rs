//! A real ACME server for the tests: Debian's `pebble`, with
//! `pebble-challtestsrv` as its DNS (every name is 127.0.0.1), on loopback
//! ports, validating HTTP-01 and TLS-ALPN-01 on the ports the test gives
//! it. Its own HTTPS certificate comes from an authority of the test's
//! (`ca_file` in the profile).

use super::pki::Authority;
use super::TempDir;
use std::net::{SocketAddr, TcpListener};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// A port free on 127.0.0.1 a moment ago.
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A free UDP port (the DNS server's).
fn free_udp_port() -> u16 {
    std::net::UdpSocket::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Where pebble will listen and what it trusts, decided before it starts.
pub struct PebblePlan {
    pub port: u16,
    pub management: u16,
    pub dns: u16,
    /// The file the profile's `ca_file` names.
    pub ca_file: PathBuf,
    dir: TempDir,
    authority: Authority,
}

pub struct Pebble {
    pebble: Child,
    dns: Child,
    pub plan: PebblePlan,
}

impl PebblePlan {
    pub fn new() -> PebblePlan {
        let dir = TempDir::new();
        let authority = Authority::new("pebble test root");
        let ca_file = dir.0.join("pebble-ca.pem");
        std::fs::write(&ca_file, authority.cert.pem()).unwrap();
        PebblePlan {
            port: free_port(),
            management: free_port(),
            dns: free_udp_port(),
            ca_file,
            dir,
            authority,
        }
    }

    pub fn directory(&self) -> String {
        format!("https://127.0.0.1:{}/dir", self.port)
    }

    /// Starts pebble validating HTTP-01 on `http_port` and TLS-ALPN-01 on
    /// `tls_port`, rejecting `nonce_reject` percent of good nonces.
    pub fn start(self, http_port: u16, tls_port: u16, nonce_reject: u32) -> Pebble {
        let leaf = self.authority.issue(&["127.0.0.1", "localhost"]);
        let (cert, key) = (self.dir.0.join("pebble.pem"), self.dir.0.join("pebble.key"));
        std::fs::write(&cert, &leaf.2).unwrap();
        std::fs::write(&key, &leaf.3).unwrap();
        let config = self.dir.0.join("pebble.json");
        let json = serde_json::json!({"pebble": {
            "listenAddress": format!("127.0.0.1:{}", self.port),
            "managementListenAddress": format!("127.0.0.1:{}", self.management),
            "certificate": cert, "privateKey": key,
            "httpPort": http_port, "tlsPort": tls_port,
            "ocspResponderURL": "", "externalAccountBindingRequired": false,
        }});
        std::fs::write(&config, json.to_string()).unwrap();
        let dns = Command::new("pebble-challtestsrv")
            .args(["-dns01", &format!("127.0.0.1:{}", self.dns)])
            .args(["-http01", "", "-https01", "", "-tlsalpn01", ""])
            .args(["-management", &format!("127.0.0.1:{}", free_port())])
            .args(["-defaultIPv4", "127.0.0.1", "-defaultIPv6", ""])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("pebble-challtestsrv (Debian's pebble package)");
        let pebble = Command::new("pebble")
            .arg("-config")
            .arg(&config)
            .args(["-dnsserver", &format!("127.0.0.1:{}", self.dns)])
            .env("PEBBLE_VA_NOSLEEP", "1")
            .env("PEBBLE_WFE_NONCEREJECT", nonce_reject.to_string())
            .env("PEBBLE_AUTHZREUSE", "0")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("pebble (Debian's pebble package)");
        let p = Pebble {
            pebble,
            dns,
            plan: self,
        };
        assert!(p.wait_ready(Duration::from_secs(20)), "pebble answers");
        p
    }
}

impl Pebble {
    fn transport(&self) -> gapura_acme::transport::Transport {
        let der = rustls::pki_types::CertificateDer::from(self.plan.authority.cert.der().to_vec());
        gapura_acme::transport::Transport::new(Some(&[der.to_vec()]), Duration::from_secs(5))
            .unwrap()
    }

    fn wait_ready(&self, ceiling: Duration) -> bool {
        let t = self.transport();
        super::wait_until(ceiling, || {
            t.request("GET", &self.plan.directory(), None)
                .is_ok_and(|a| a.status == 200)
        })
    }

    /// The root pebble signs with (DER), from its management interface.
    pub fn root(&self) -> Vec<u8> {
        let url = format!("https://127.0.0.1:{}/roots/0", self.plan.management);
        let a = self.transport().request("GET", &url, None).unwrap();
        assert_eq!(a.status, 200);
        use rustls::pki_types::pem::PemObject;
        rustls::pki_types::CertificateDer::from_pem_slice(&a.body)
            .unwrap()
            .to_vec()
    }

    pub fn addr(&self) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], self.plan.port))
    }
}

impl Drop for Pebble {
    fn drop(&mut self) {
        for c in [&mut self.pebble, &mut self.dns] {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// A rustls client that verifies against `root` (pebble's).
pub fn verifying_client(root: &[u8]) -> std::sync::Arc<rustls::ClientConfig> {
    let mut roots = rustls::RootCertStore::empty();
    roots
        .add(rustls::pki_types::CertificateDer::from(root.to_vec()))
        .unwrap();
    let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
    std::sync::Arc::new(
        rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots)
            .with_no_client_auth(),
    )
}

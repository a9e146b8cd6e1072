//! TLS to a server Gapura calls (an upstream group's servers, a
//! forward-auth provider), as compiled into a snapshot: who vouches for
//! the server, the name its certificate must hold, the client certificate
//! to show. A leaf: it imports nothing of the crate, so the upstream
//! groups and the auth providers both use it without importing each other.

/// TLS to an upstream group's servers: who vouches for them, the name
/// their certificates must hold, and the client certificate to show.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UpstreamTls {
    /// The name the server's certificate must be valid for, sent as SNI;
    /// `None`: each server's address (its certificate must name the IP).
    pub server_name: Option<String>,
    pub roots: UpstreamRoots,
    /// A client certificate for servers that ask for one (mTLS).
    pub client: Option<ClientCertificate>,
    /// Whether the server's certificate is verified at all (`verify =
    /// false`: a lab only; `check` warns).
    pub verify: bool,
    /// The files as written in the profile, for logs and `check`.
    pub label: String,
}

/// The authorities an upstream's certificate must chain to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum UpstreamRoots {
    /// The web's roots as Mozilla's program lists them.
    Public,
    /// The DER certificates of `ca_file`.
    Own(Vec<Vec<u8>>),
}

/// A client certificate: its DER chain, the leaf first, and its key's DER.
#[derive(Clone, PartialEq, Eq)]
pub struct ClientCertificate {
    pub chain: Vec<Vec<u8>>,
    pub key: Vec<u8>,
}

impl std::fmt::Debug for ClientCertificate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "ClientCertificate({} certificates, key {} bytes)",
            self.chain.len(),
            self.key.len()
        )
    }
}

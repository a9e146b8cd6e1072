//! Settings the runtime applies itself (not part of the gate's snapshot).

use std::net::SocketAddr;

/// How the process runs: shards, driver, steering, listeners, drain.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RuntimeSettings {
    pub shards: Shards,
    pub driver: Driver,
    /// Whether plain HTTP/1.1 connections receive from the shard's own ring.
    pub ring: ClientRing,
    pub steering: Steering,
    /// Public HTTP listeners; no duplicates (port 0 means an ephemeral
    /// port); empty only in a profile of UDP relays alone.
    pub listen: Vec<SocketAddr>,
    /// The listen addresses (a subset of `listen`, in its order) that expect
    /// a PROXY protocol header before anything else; their peers must be in
    /// the snapshot's `gate.client.proxy_protocol_peers`.
    pub proxy_protocol: Vec<SocketAddr>,
    /// The positions in `listen` of the listeners that speak TLS; the
    /// snapshot's `tls` holds what they serve.
    pub tls: Vec<usize>,
    /// The positions in `listen` of the TLS listeners that also serve
    /// HTTP/3 on a UDP socket of the same address.
    pub http3: Vec<usize>,
    /// The admin listener (metrics); `None` when `admin = "off"`.
    pub admin: Option<SocketAddr>,
    /// The file of the bearer token the admin listener asks for
    /// (`[server] admin_token_file`; required when it is not on loopback).
    pub admin_token_file: Option<String>,
    /// How long a drain waits for open requests before closing.
    pub drain_timeout_ms: u64,
    /// Proof of work's key file (`[server] pow_key_file`), opened or
    /// created by the runtime; `None`: no key (proof of work answers 503).
    pub pow_key_file: Option<String>,
    /// Every UDP relay's listen addresses, in profile order (the runtime
    /// binds them at start; a reload cannot move them).
    pub udp_listen: Vec<SocketAddr>,
    /// `[server] user`: the user the process drops to once its ports are
    /// bound and its key files open; `None`: it stays who started it.
    pub user: Option<String>,
    /// `[fleet]`: the engine fleet-scoped limits are shared through;
    /// `None`: every limit is this node's own.
    pub fleet: Option<FleetSettings>,
    /// `[acme]` and the certificates it orders; `None` when none is
    /// ordered. A reload applies it without a restart.
    pub acme: Option<AcmeSettings>,
}

/// A challenge type the ACME thread answers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AcmeChallenge {
    Http01,
    TlsAlpn01,
}

/// `[acme]`, checked, with the names of every `acme = true` certificate.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AcmeSettings {
    pub directory: String,
    pub contact: Vec<String>,
    pub state_dir: String,
    /// The preferred first.
    pub challenges: Vec<AcmeChallenge>,
    /// `ca_file`'s certificates (DER): trust for the ACME server itself.
    pub roots: Option<Vec<Vec<u8>>>,
    /// Each `acme = true` certificate's names, in profile order.
    pub certificates: Vec<Vec<String>>,
    /// With `[fleet]`: the file whose first line keys the certificates
    /// the nodes share through the engine.
    pub shared_key_file: Option<String>,
    /// On-demand certificates for names the profile does not list.
    pub on_demand: Option<OnDemand>,
}

/// `[acme] on_demand`: a name not in the profile gets a certificate at its
/// first handshake only if `ask` answers 200 for it and `count` orders in
/// `per_s` seconds allow it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OnDemand {
    /// `http://` or `https://` URL, asked `?domain=NAME`.
    pub ask: String,
    pub count: u32,
    pub per_s: u64,
}

/// `[fleet]`, checked (docs/fleet.md).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FleetSettings {
    /// `redis://` or `rediss://` addresses, and whether they are a Redis
    /// Cluster's nodes (a list) rather than one server.
    pub redis: (Vec<String>, bool),
    /// The file whose first line is the engine's password (AUTH); it also
    /// keys the fleet's partition hashes when there is no `key_file`.
    pub password_file: Option<String>,
    /// The file whose first line keys the fleet's partition hashes (every
    /// node has it); one of it and `password_file` is required.
    pub key_file: Option<String>,
    /// This node's name in logs and metrics; `None`: the host name.
    pub node: Option<String>,
    /// How often a node exchanges its counts with the engine.
    pub sync_ms: u64,
    /// The nodes a limit is divided among while the engine is away.
    pub nodes_expected: u32,
    /// Keys each shard may share at once.
    pub shared_keys: usize,
    /// `profile = "pull"`: the node runs the fleet's signed profile.
    pub profile: Option<FleetProfile>,
}

/// `[fleet] profile = "pull"`: where a node takes its profile from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FleetProfile {
    /// The publisher's Ed25519 public key (base64): nothing else is taken.
    pub publisher_key: String,
    /// Where the last good version is kept (a restart without the engine
    /// starts from it).
    pub state_dir: String,
    /// How often the pointer is read.
    pub poll_ms: u64,
    /// The largest version taken.
    pub max_bytes: u64,
}

impl Default for RuntimeSettings {
    fn default() -> Self {
        RuntimeSettings {
            shards: Shards::Auto,
            driver: Driver::Auto,
            ring: ClientRing::Off,
            steering: Steering::Source,
            listen: vec![SocketAddr::from(([127, 0, 0, 1], 8080))],
            proxy_protocol: Vec::new(),
            tls: Vec::new(),
            http3: Vec::new(),
            admin: Some(SocketAddr::from(([127, 0, 0, 1], 9090))),
            drain_timeout_ms: 10_000,
            pow_key_file: None,
            admin_token_file: None,
            udp_listen: Vec::new(),
            user: None,
            fleet: None,
            acme: None,
        }
    }
}

/// Number of shards.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Shards {
    /// One per core the process may run on.
    Auto,
    /// Exactly this many (1..=1024).
    Count(u32),
}

/// The I/O driver.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Driver {
    /// io_uring, falling back to epoll when a ring cannot be created.
    Auto,
    IoUring,
    Epoll,
}

/// Where plain HTTP/1.1 connections (clients and upstreams) receive
/// (`[server] ring`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ClientRing {
    /// From the shard's own ring (one multishot receive per connection over
    /// provided buffers) when the shard runs on io_uring and the ring can
    /// be set up; else from the runtime's streams.
    On,
    /// From the runtime's streams.
    Off,
}

/// How connections are spread over shards.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Steering {
    /// By the client's source address (a client stays on one shard).
    Source,
    /// The kernel's SO_REUSEPORT hash.
    Kernel,
    /// By source prefix (IPv4 /24, IPv6 /56): prefix budgets are exact too.
    Prefix,
}

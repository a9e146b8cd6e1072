//! The compiled, immutable form of a profile and the decision it gives.
//!
//! A [`Snapshot`] is built once per (re)load by the config crate, published by
//! the control thread and read by every shard without locks. It holds only
//! immutable data; mutable state (tables, pools, counters) lives in shards.
//! [`Snapshot::decide`] is the gate's entry: pure, O(host name), no allocation.

use crate::answer::Answer;
use crate::host::{HostAction, HostTable, Redirect};
use crate::limits::{LimitRefusal, RequestLimits};
use crate::pages::{ErrorPages, ErrorStatus};
use crate::upstream::{Route, UpstreamGroup};

/// Connection-level settings every shard applies.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServerSettings {
    /// The whole request head must arrive within this time of its first byte
    /// (or of the previous response): slow trickles are cut here.
    pub header_timeout_ms: u64,
    /// A keep-alive connection may wait this long for its next request.
    pub idle_timeout_ms: u64,
    /// Longest gap between two reads of a request body.
    pub body_timeout_ms: u64,
    /// Longest time a response write may block.
    pub write_timeout_ms: u64,
    /// Requests served on one connection before it is closed (0: no limit).
    pub max_requests_per_connection: u64,
    /// Open connections one shard accepts; past it new ones are closed.
    pub max_connections_per_shard: u32,
    /// Answer for a Host no host claims and no default host takes (404 or 421).
    pub unknown_host: ErrorStatus,
    /// The access log (`[server] access_log`); `None`: off.
    pub access_log: Option<AccessLogSettings>,
    /// HTTP/2: h2 by ALPN over TLS, h2c by prior knowledge in plaintext.
    pub http2: Http2Settings,
    /// HTTP/3 on the listeners that ask for it (`[http3]`).
    pub http3: Http3Settings,
}

/// `[server] http2*`: HTTP/2 and its defences.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Http2Settings {
    pub enabled: bool,
    /// Streams one connection may have open at once.
    pub max_streams: u32,
    /// Streams the client may reset (or that end in a protocol error) per
    /// connection in 10 seconds before the connection is closed with
    /// GOAWAY `ENHANCE_YOUR_CALM` (rapid reset, CVE-2023-44487).
    pub max_resets: u32,
    /// SETTINGS, PING and PRIORITY frames and empty DATA frames one
    /// connection may send in 10 seconds before it is closed the same way.
    pub max_control_frames: u32,
}

impl Default for Http2Settings {
    fn default() -> Self {
        Http2Settings {
            enabled: true,
            max_streams: 128,
            max_resets: 200,
            max_control_frames: 1_000,
        }
    }
}

/// `[http3]`: HTTP/3 and its defences, for new connections.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Http3Settings {
    /// Bidirectional streams (requests) one connection may have open.
    pub max_streams: u32,
    /// A connection with nothing sent or received this long is closed.
    pub idle_timeout_ms: u64,
    /// When a new connection must first prove its address (Retry).
    pub retry: RetryMode,
    /// 0-RTT: requests may arrive in early data (resumed connections);
    /// only safe ones (GET, HEAD, OPTIONS) are served from it, others get
    /// 425.
    pub early_data: bool,
}

/// `[http3] retry`: when a new connection's address is validated by a
/// Retry round trip before any handshake work.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RetryMode {
    /// Once a shard holds more half-open handshakes than
    /// [`RETRY_AUTO_HALF_OPEN`].
    Auto,
    Always,
    Never,
}

/// Half-open handshakes per shard past which `retry = "auto"` asks every
/// new connection to prove its address first.
pub const RETRY_AUTO_HALF_OPEN: usize = 64;

impl Default for Http3Settings {
    fn default() -> Self {
        Http3Settings {
            max_streams: 100,
            idle_timeout_ms: 30_000,
            retry: RetryMode::Auto,
            early_data: false,
        }
    }
}

/// `[server] access_log`: where every answered request is written.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AccessLogSettings {
    /// The file, opened by the runtime's writer (append, created 0640).
    pub path: String,
    pub format: LogFormat,
    /// Write the client address as its keyed hash, never the address.
    pub hash_addresses: bool,
    /// Keep the query string in the logged path.
    pub log_query: bool,
}

/// The access log's line format.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LogFormat {
    /// One JSON object per line.
    Json,
    /// The combined log format (referer and user agent written as `-`).
    Combined,
}

impl Default for ServerSettings {
    fn default() -> Self {
        ServerSettings {
            header_timeout_ms: 10_000,
            idle_timeout_ms: 60_000,
            body_timeout_ms: 30_000,
            write_timeout_ms: 30_000,
            max_requests_per_connection: 0,
            max_connections_per_shard: 16_384,
            unknown_host: ErrorStatus::NotFound,
            access_log: None,
            http2: Http2Settings::default(),
            http3: Http3Settings::default(),
        }
    }
}

/// One host of the snapshot.
#[derive(Clone, Debug)]
pub struct HostEntry {
    /// The first name, for logs and explain.
    pub label: String,
    pub limits: RequestLimits,
    pub action: HostAction,
    /// The host's blocks, merged over the defaults.
    pub policy: crate::policy::RequestPolicy,
    /// Robots, maintenance, custom pages.
    pub extras: crate::policy::HostExtras,
}

/// Everything a shard needs to answer, compiled.
#[derive(Clone, Debug)]
pub struct Snapshot {
    /// Increases with every publish; 0 before the first.
    pub generation: u64,
    pub server: ServerSettings,
    pub hosts: HostTable,
    pub entries: Vec<HostEntry>,
    /// Limits for a request no host takes.
    pub default_limits: RequestLimits,
    pub pages: ErrorPages,
    /// Upstream groups, indexed by `Route::upstream`.
    pub upstreams: Vec<UpstreamGroup>,
    /// What every host's blocks share: client resolution, quotas, rate limits.
    pub gate: crate::policy::GatePolicy,
    /// UDP relays, in profile order.
    pub udp: Vec<std::sync::Arc<crate::udp::UdpPolicy>>,
    /// What TLS listeners serve; `None` when no listener is TLS.
    pub tls: Option<std::sync::Arc<crate::tls::TlsSettings>>,
    /// The HTTP-01 answers of ACME orders in flight (the runtime sets
    /// them; a compiled profile has none).
    pub acme: std::sync::Arc<crate::acme::Challenges>,
}

/// What to do with a request.
#[derive(Clone, Copy, Debug)]
pub enum Verdict<'s> {
    /// Write this fixed answer.
    Respond(&'s Answer),
    /// Write this redirect with the request's target.
    Redirect(&'s Redirect),
    /// 308 to the request's URL with `https` (and this port unless 443).
    HttpsRedirect(u16),
    /// Refuse with a page.
    Refuse(ErrorStatus),
    /// Forward along this route to its group.
    Forward(&'s Route, &'s UpstreamGroup),
    /// Close the connection without an answer.
    Drop,
    /// 401 with this page (it carries `WWW-Authenticate`).
    Challenge(&'s crate::pages::Page),
    /// A password must be verified off the shard: run the decision's job,
    /// then decide again from the step after this access list.
    Verify(u32),
    /// The host is in maintenance: this page.
    Maintenance(&'s crate::maintenance::Maintenance),
    /// Proof of work asks something of the client (`PowAsk`) under these
    /// settings.
    Pow(&'s crate::pow::ProofOfWork, PowAsk),
    /// Ask the forward-auth provider (`GatePolicy::auth_providers`, its
    /// index and mode) off the decision, then decide again from the step
    /// after it; the job is taken from the gate state
    /// (`AuthState::take_job`).
    Authenticate(crate::policy::BlockRef),
    /// Answer the forward-auth refusal remembered for this request (the
    /// decision's `relay`), then close.
    AuthRefusal,
}

/// What proof of work asks of a request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PowAsk {
    /// A browser without a valid cookie: the challenge page (403).
    Challenge,
    /// Not a browser (not a `GET` or `HEAD` accepting `text/html`): 403
    /// with the explanation.
    NotBrowser,
    /// `POST /.well-known/gapura/pow`: read the form, then verify it
    /// (`pow::verify_form`).
    Verify,
}

impl Verdict<'_> {
    /// The verdict's kind by name (`respond`, `redirect`, `refuse`,
    /// `forward`, `drop`, `challenge`, `verify`, `maintenance`,
    /// `pow_challenge`, `pow_refuse`, `pow_verify`), as the access log and
    /// explain write it; `authenticate` while a provider is asked.
    pub fn kind(&self) -> &'static str {
        match self {
            Verdict::Respond(_) => "respond",
            Verdict::Redirect(_) => "redirect",
            Verdict::HttpsRedirect(_) => "https_redirect",
            Verdict::Refuse(_) => "refuse",
            Verdict::Forward(..) => "forward",
            Verdict::Drop => "drop",
            Verdict::Challenge(_) => "challenge",
            Verdict::Verify(_) => "verify",
            Verdict::Maintenance(_) => "maintenance",
            Verdict::Pow(_, PowAsk::Challenge) => "pow_challenge",
            Verdict::Pow(_, PowAsk::NotBrowser) => "pow_refuse",
            Verdict::Pow(_, PowAsk::Verify) => "pow_verify",
            Verdict::Authenticate(_) => "authenticate",
            Verdict::AuthRefusal => "auth_refusal",
        }
    }
}

/// The status that answers a limit refusal.
pub fn limit_status(r: LimitRefusal) -> ErrorStatus {
    match r {
        LimitRefusal::UrlTooLong => ErrorStatus::UriTooLong,
        LimitRefusal::TooManyHeaders | LimitRefusal::HeadersTooLarge => {
            ErrorStatus::HeaderFieldsTooLarge
        }
        LimitRefusal::BodyTooLarge => ErrorStatus::PayloadTooLarge,
    }
}

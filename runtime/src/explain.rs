//! `gapura explain`: runs the gate's chain for a described request and
//! prints every step with its facts and a sentence, then the answer.
//!
//! It uses the same `Snapshot::decide` as the server, with a recording
//! trace and fresh shard tables of its own, so it changes no table, counter
//! or cache of a running server and cannot disagree with it about a
//! request that meets empty tables.

use gapura_gate::chain::{AuthOutcome, GateState, PowOutcome, QuotaOutcome, Request, Step, Trace};
use gapura_gate::client::Peer;
use gapura_gate::limits::LimitRefusal;
use gapura_gate::maintenance::MaintenanceOutcome;
use gapura_gate::pow::CookieError;
use gapura_gate::snapshot::PowAsk;
use gapura_gate::upstream::RouteMatch;
use gapura_gate::Verdict;
use std::process::ExitCode;

/// What a quota block did, in a sentence; `what` names the block.
fn quota_sentence(outcome: QuotaOutcome, what: &str) -> String {
    match outcome {
        QuotaOutcome::NotApplied => format!("no {what} applies"),
        QuotaOutcome::Exempt => "robots.txt is never limited".to_string(),
        QuotaOutcome::Admitted => format!("within every {what} (on empty tables)"),
        QuotaOutcome::Refused {
            level,
            retry_after_s,
        } => format!(
            "over the {} limit: 429, retry after {retry_after_s} s",
            level.name()
        ),
        QuotaOutcome::Shadowed { level } => format!(
            "over the {} limit, but in shadow mode: counted and let through",
            level.name()
        ),
    }
}

struct Recorder {
    lines: Vec<(String, String)>,
}

impl Trace for Recorder {
    fn step(&mut self, step: Step<'_>) {
        let (name, sentence) = block_line(step);
        self.lines.push((name.to_string(), sentence));
    }

    fn enabled(&self) -> bool {
        true
    }
}

/// The facts the chain learns before the blocks: client, host, path, route.
fn fact_line(step: Step<'_>) -> (&'static str, String) {
    match step {
        Step::Client { peer, client, via } => (
            "client",
            if peer == client {
                format!("the client is the peer {client} ({})", via.as_str())
            } else {
                format!(
                    "the client is {client}, named by peer {peer} ({})",
                    via.as_str()
                )
            },
        ),
        Step::Host { label } => (
            "host",
            match label {
                Some(l) => format!("matched host {l}"),
                None => "no host takes this Host header".to_string(),
            },
        ),
        Step::Path { canonical } => (
            "path",
            match canonical {
                Ok(p) => format!("canonical path {p}"),
                Err(e) => format!("the path cannot be made canonical ({e}): 400"),
            },
        ),
        Step::Route { index } => (
            "route",
            match index {
                Some(i) => format!("route #{i} takes it"),
                None => "no route takes this path: 404".to_string(),
            },
        ),
        // Every block is `block_line`'s, which hands only facts on.
        _ => ("", String::new()),
    }
}

/// What one block of the chain made of the request (the facts before the
/// blocks by `fact_line`).
fn block_line(step: Step<'_>) -> (&'static str, String) {
    match step {
        Step::Budgets { outcome } => ("budgets", quota_sentence(outcome, "budget")),
        Step::ConnectionRate { refused } => (
            "connection rate",
            match refused {
                None => "within the connection's request rate (a new connection)".to_string(),
                Some(s) => format!(
                    "over the connection's request rate: 429, retry after {s} s, then close"
                ),
            },
        ),
        Step::RateLimit { outcome } => ("rate limit", quota_sentence(outcome, "rate limit")),
        Step::Identity { outcome } => (
            "identity dimensions",
            quota_sentence(outcome, "identity dimension"),
        ),
        Step::AccessAddress {
            list,
            refused,
            mode,
        } => ("access address", address_sentence(list, refused, mode)),
        Step::RuleSet {
            set,
            rule,
            action,
            mode,
            exempt,
        } => (
            "rule set",
            if exempt {
                format!("set {set}: robots.txt is never ruled on")
            } else {
                match (rule, action) {
                    (Some(i), Some(a)) => format!(
                        "set {set}: rule {} matches: {}{}",
                        i + 1,
                        action_words(a),
                        shadow_note(mode)
                    ),
                    _ => format!("set {set}: no rule matches"),
                }
            },
        ),
        Step::Access {
            list,
            outcome,
            credentials,
            mode,
        } => (
            "access list",
            format!(
                "list {list}: {} (credentials: {}){}",
                access_words(outcome),
                credentials.as_str(),
                shadow_note(mode)
            ),
        ),
        Step::HttpsRedirect { redirected } => (
            "https redirect",
            if redirected {
                "the request came in plaintext: 308 to https".to_string()
            } else {
                "the request came over TLS".to_string()
            },
        ),
        Step::Robots { served } => (
            "robots.txt",
            if served {
                "answered with the managed robots.txt".to_string()
            } else {
                "not a robots.txt request".to_string()
            },
        ),
        Step::Maintenance { outcome } => (
            "maintenance",
            format!("the host is in maintenance: {}", maintenance_words(outcome)),
        ),
        Step::ForwardAuth {
            provider,
            endpoint,
            outcome,
        } => ("forward-auth", auth_sentence(provider, endpoint, outcome)),
        Step::ProofOfWork { outcome } => ("proof of work", pow_sentence(outcome)),
        Step::PowEndpoint { post } => (
            "proof of work",
            if post {
                "the verify endpoint: the form is checked once read (303 or 403)".to_string()
            } else {
                "the verify endpoint takes only POST: 403".to_string()
            },
        ),
        Step::RequestLimits { refusal } => (
            "request limits",
            match refusal {
                None => "within the host's request limits",
                Some(LimitRefusal::UrlTooLong) => "target longer than allowed: 414",
                Some(LimitRefusal::TooManyHeaders) => "too many header lines: 431",
                Some(LimitRefusal::HeadersTooLarge) => "header bytes over the limit: 431",
                Some(LimitRefusal::BodyTooLarge) => "declared body over the limit: 413",
            }
            .to_string(),
        ),
        fact => fact_line(fact),
    }
}

/// Forward-auth's step.
fn auth_sentence(provider: &str, endpoint: &str, outcome: AuthOutcome) -> String {
    match outcome {
        AuthOutcome::Remembered { identity } => format!(
            "provider {provider}: an allow is remembered for these credentials{}: let through",
            if identity {
                " (with identity headers)"
            } else {
                ""
            }
        ),
        AuthOutcome::WouldCall => format!(
            "provider {provider}: would call GET {endpoint} with the original request in \
             X-Forwarded-*; a 2xx lets it on, a 401, 403, 407 or redirect is relayed, anything \
             else refuses (502, 504 on timeout)"
        ),
        AuthOutcome::Allowed => format!("provider {provider}: allowed"),
        AuthOutcome::RememberedRefusal { status } => format!(
            "provider {provider}: its {status} for this request is remembered \
             (cache.negative_ttl_ms): answered again"
        ),
    }
}

fn pow_sentence(outcome: PowOutcome) -> String {
    match outcome {
        PowOutcome::Exempt => "robots.txt is never challenged".to_string(),
        PowOutcome::NotMarked => {
            "the rule set named by `when` did not mark this request: not challenged".to_string()
        }
        PowOutcome::NoKey => "no proof-of-work key is loaded: 503 (fail closed)".to_string(),
        PowOutcome::ValidCookie => "a valid gapura_pow cookie: let through".to_string(),
        PowOutcome::Ask { ask, cookie, mode } => {
            let why = match cookie {
                None => "no gapura_pow cookie".to_string(),
                Some(e) => format!(
                    "the gapura_pow cookie is refused ({})",
                    match e {
                        CookieError::Malformed => "malformed",
                        CookieError::BadTag => "forged, or made for another host or client",
                        CookieError::Expired => "expired",
                        CookieError::TooEasy => "solved at a lower difficulty than the host asks",
                    }
                ),
            };
            let what = match ask {
                PowAsk::NotBrowser => "not a browser page load: 403 with the explanation",
                _ => "the challenge page (403)",
            };
            format!("{why}: {what}{}", shadow_note(mode))
        }
    }
}

/// What the access list's address side made of the client.
fn address_sentence(
    list: &str,
    refused: Option<gapura_gate::access::AddressRefusal>,
    mode: gapura_gate::mode::Mode,
) -> String {
    use gapura_gate::access::AddressRefusal;
    match refused {
        None => format!("list {list}: the address alone refuses nothing"),
        Some(r) => format!(
            "list {list}: the address is refused ({}){}",
            match r {
                AddressRefusal::Drop => "the connection is dropped",
                AddressRefusal::Deny => "403",
            },
            shadow_note(mode)
        ),
    }
}

/// Maintenance's outcome, in words.
fn maintenance_words(outcome: MaintenanceOutcome) -> &'static str {
    match outcome {
        MaintenanceOutcome::Serve => "the maintenance page",
        MaintenanceOutcome::Bypassed => "the bypass list admits the client: let through",
        MaintenanceOutcome::Shadowed => "shadow mode: counted, let through",
    }
}

/// A rule's action, in words.
fn action_words(a: gapura_gate::ruleset::Action) -> &'static str {
    use gapura_gate::ruleset::Action;
    match a {
        Action::Deny => "deny (403)",
        Action::Drop => "drop the connection",
        Action::Allow => "allow (the set ends here)",
        Action::Challenge => "challenge (marked for proof of work)",
    }
}

/// What the access list made of the request, in words.
fn access_words(o: gapura_gate::chain::AccessStepOutcome) -> &'static str {
    use gapura_gate::chain::AccessStepOutcome as O;
    match o {
        O::Pass => "passes",
        O::Refuse => "refused (403)",
        O::Drop => "the connection is dropped",
        O::Challenge => "asks for a password (401)",
        O::Verify => "a password to verify (explain runs no PBKDF2)",
        O::Verified => "the password was verified",
    }
}

fn shadow_note(mode: gapura_gate::mode::Mode) -> &'static str {
    if mode == gapura_gate::mode::Mode::Shadow {
        " (shadow mode: counted, let through)"
    } else {
        ""
    }
}

fn verdict_text(v: &Verdict<'_>, snap: &gapura_gate::Snapshot, retry: u32) -> (u16, String) {
    match v {
        Verdict::Respond(a) => (a.status, format!("answer {} from the host", a.status)),
        Verdict::Redirect(r) => (r.status, format!("redirect {}", r.status)),
        Verdict::HttpsRedirect(port) => (308, format!("redirect 308 to https (port {port})")),
        Verdict::Refuse(s) if s.code() == 429 => (429, format!("refuse 429, Retry-After {retry}")),
        Verdict::Refuse(s) => (s.code(), format!("refuse {} with its page", s.code())),
        Verdict::Drop => (0, "close the connection without an answer".to_string()),
        Verdict::Challenge(_) => (401, "answer 401, asking for a password".to_string()),
        Verdict::Verify(_) => (
            0,
            "check the password on the verification pool (explain runs no PBKDF2)".to_string(),
        ),
        Verdict::AuthRefusal => (
            0,
            "answer the forward-auth refusal remembered for this request, then close".to_string(),
        ),
        Verdict::Authenticate(i) => (
            0,
            format!(
                "ask forward-auth provider {} (explain makes no call; the steps after it run \
                 once it allows)",
                snap.gate
                    .auth_providers
                    .get(i.index as usize)
                    .map_or("?", |p| p.name.as_str())
            ),
        ),
        Verdict::Pow(pow, PowAsk::Challenge) => (
            403,
            format!(
                "answer 403 with the proof-of-work challenge page (difficulty {})",
                pow.difficulty
            ),
        ),
        Verdict::Pow(_, PowAsk::NotBrowser) => (
            403,
            "answer 403: proof of work needs a browser with JavaScript".to_string(),
        ),
        Verdict::Pow(_, PowAsk::Verify) => (
            303,
            "read the form and verify the solution: 303 with the cookie, 303 without one \
             for an expired challenge, else 403"
                .to_string(),
        ),
        Verdict::Maintenance(m) => (
            m.status(),
            format!("answer {} with the maintenance page", m.status()),
        ),
        Verdict::Forward(route, group) => {
            let servers: Vec<String> = group.servers.iter().map(|s| s.addr.to_string()).collect();
            let _ = snap;
            (
                0,
                format!(
                    "forward along route {} to group {} ({})",
                    match &route.matcher {
                        RouteMatch::Exact(p) => format!("{p} (exact)"),
                        RouteMatch::Prefix(p) => format!("{p} (prefix)"),
                    },
                    group.name,
                    servers.join(", ")
                ),
            )
        }
    }
}

pub fn run(a: crate::cli::ExplainArgs) -> ExitCode {
    if let Some(relay) = a.method.strip_prefix("udp://") {
        return crate::explain_udp::run(&a, relay);
    }
    if let Some(extra) = &a.datagram {
        eprintln!(
            "gapura explain: unexpected {extra:?}: a third argument only follows udp://RELAY SOURCE"
        );
        return ExitCode::from(2);
    }
    let compiled = match load(&a) {
        Ok(c) => c,
        Err(code) => return code,
    };
    let admin = a.admin.or(compiled.runtime.admin);
    let compiled_token = compiled.runtime.admin_token_file.clone();
    let snap = compiled.snapshot;
    let asked = match Asked::from_args(&a) {
        Ok(x) => x,
        Err(code) => return code,
    };
    let headers = &asked.headers;
    let lines: Vec<(&str, &[u8])> = headers
        .iter()
        .map(|(n, v)| (n.as_str(), v.as_bytes()))
        .collect();
    let fresh_connection = std::cell::Cell::new(gapura_gate::quota::Bucket::default());
    let req = Request {
        peer: Peer::tcp(asked.peer),
        method: a.method.as_bytes(),
        host: asked.header("host").map(str::as_bytes),
        target: asked.path.as_bytes(),
        path: asked.path.as_bytes(),
        header_count: headers.len(),
        header_bytes: headers.iter().map(|(n, v)| n.len() + v.len()).sum(),
        content_length: asked.header("content-length").and_then(|v| v.parse().ok()),
        headers: &lines[..],
        // As the server sees it: a request on a new connection.
        connection: Some(&fresh_connection),
        tls: asked.tls,
    };
    let mut state = GateState::small();
    // Proof of work's tokens carry wall-clock seconds.
    state.unix_origin_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64);
    state.adopt(&snap, 0);
    let mut scratch = Box::new([0u8; gapura_gate::path::MAX_PATH_BYTES]);
    let mut rec = Recorder { lines: Vec::new() };
    let d = snap.decide(&req, &mut state, 0, &mut scratch, &mut rec);
    let mut decided = decision_json(&a, asked.peer, &rec, &d, &snap);
    if !a.live {
        print_decision(&a, asked.peer, &rec, &decided);
        return ExitCode::SUCCESS;
    }
    {
        let Some(addr) = admin else {
            eprintln!("gapura explain --live: the profile's admin listener is off");
            return ExitCode::FAILURE;
        };
        let token = match compiled_token {
            Some(path) => match crate::admin::read_token(&path) {
                Ok(t) => Some(t),
                Err(e) => {
                    eprintln!("gapura explain --live: {e}");
                    return ExitCode::FAILURE;
                }
            },
            None => None,
        };
        let live = ask_live(
            addr,
            &a.method,
            &asked.path,
            asked.peer,
            headers,
            token.as_deref(),
        )
        .and_then(|body| {
            serde_json::from_str::<serde_json::Value>(&body)
                .map_err(|e| format!("the admin listener's answer is not JSON: {e}"))
        });
        match live {
            Ok(live) => {
                // One document: the chain's decision with the live tables in it.
                decided["live"] = live;
                print_decision(&a, asked.peer, &rec, &decided);
            }
            Err(e) => {
                print_decision(&a, asked.peer, &rec, &decided);
                eprintln!("gapura explain --live: {addr}: {e}");
                return ExitCode::FAILURE;
            }
        }
    }
    ExitCode::SUCCESS
}

/// The profile explain reads (its proof-of-work key read, not created),
/// or the exit code of its errors, which are printed.
fn load(a: &crate::cli::ExplainArgs) -> Result<gapura_config::Compiled, ExitCode> {
    let mut compiled = match crate::profile::load(a.profile.as_deref().map(std::path::Path::new)) {
        Ok(c) => c,
        Err(errors) => {
            for e in errors {
                eprintln!(
                    "{}:{e}",
                    a.profile.as_deref().unwrap_or("<embedded default>")
                );
            }
            return Err(ExitCode::FAILURE);
        }
    };
    if let Err(e) = crate::powkey::load_into(&mut compiled, false) {
        if compiled.snapshot.gate.pow_in_use {
            eprintln!("gapura explain: proof of work has no key ({e}): its routes answer 503");
        }
    }
    Ok(compiled)
}

/// The request the arguments describe: its path, header lines (with the
/// forwarding headers `--via` implies), the peer the server would see,
/// and whether it came over TLS (an `https://` URL).
struct Asked {
    path: String,
    headers: Vec<(String, String)>,
    peer: std::net::IpAddr,
    tls: bool,
}

impl Asked {
    fn from_args(a: &crate::cli::ExplainArgs) -> Result<Asked, ExitCode> {
        let (rest, tls) = match (
            a.url.strip_prefix("http://"),
            a.url.strip_prefix("https://"),
        ) {
            (Some(r), _) => (r, false),
            (_, Some(r)) => (r, true),
            _ => {
                eprintln!("gapura explain: the URL must start with http:// or https://");
                return Err(ExitCode::from(2));
            }
        };
        let split = rest.find('/').unwrap_or(rest.len());
        let host = rest[..split].to_string();
        let path = if split == rest.len() {
            "/".to_string()
        } else {
            rest[split..].to_string()
        };
        let mut headers = a.headers.clone();
        if !headers.iter().any(|(n, _)| n.eq_ignore_ascii_case("host")) {
            headers.insert(0, ("Host".into(), host));
        }
        let client = a
            .client
            .unwrap_or_else(|| "127.0.0.1".parse().expect("literal"));
        let peer = match a.via.as_str() {
            "direct" => a.peer.or(a.client).unwrap_or(client),
            "proxy" => {
                headers.push(("X-Forwarded-For".into(), client.to_string()));
                a.peer
                    .unwrap_or_else(|| "127.0.0.1".parse().expect("literal"))
            }
            _ => {
                headers.push(("CF-Connecting-IP".into(), client.to_string()));
                if let Some(c) = &a.country {
                    headers.push(("CF-IPCountry".into(), c.clone()));
                }
                a.peer
                    .unwrap_or_else(|| "173.245.48.1".parse().expect("literal"))
            }
        };
        Ok(Asked {
            path,
            headers,
            peer,
            tls,
        })
    }

    /// The first line of a header, any case.
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// Prints the steps and the answer, as text or JSON (`--json`).
/// The chain's decision as JSON: the request, each step, the answer.
fn decision_json(
    a: &crate::cli::ExplainArgs,
    peer: std::net::IpAddr,
    rec: &Recorder,
    d: &gapura_gate::chain::Decision<'_>,
    snap: &gapura_gate::Snapshot,
) -> serde_json::Value {
    let (status, answer) = verdict_text(&d.verdict, snap, d.retry_after_s);
    let steps: Vec<serde_json::Value> = rec
        .lines
        .iter()
        .map(|(n, s)| serde_json::json!({ "step": n, "says": s }))
        .collect();
    serde_json::json!({
        "request": { "method": a.method, "url": a.url, "peer": peer.to_string() },
        "steps": steps,
        "answer": {
            "kind": d.verdict.kind(),
            "status": if status == 0 { serde_json::Value::Null } else { status.into() },
            "says": answer,
        },
    })
}

/// Prints the decision (and the live tables, under `live`, when asked
/// for): one JSON document with `--json`, else lines of text.
fn print_decision(
    a: &crate::cli::ExplainArgs,
    peer: std::net::IpAddr,
    rec: &Recorder,
    decided: &serde_json::Value,
) {
    if a.json {
        println!(
            "{}",
            serde_json::to_string_pretty(decided).unwrap_or_default()
        );
        return;
    }
    println!("{} {} from {peer}", a.method, a.url);
    for (n, s) in &rec.lines {
        println!("  {n:<15} {s}");
    }
    let answer = decided["answer"]["says"].as_str().unwrap_or("");
    println!("  {:<15} {answer}", "answer");
    if let Some(v) = decided["live"]["fleet_profile_version"].as_u64() {
        match v {
            0 => println!("the running server pulls the fleet's profile and runs its local one"),
            v => println!("the running server answers under the fleet's profile, version {v}"),
        }
    }
    if let Some(shards) = decided["live"]["shards"].as_array() {
        println!("live tables of the running server:");
        for s in shards {
            println!("  {}", live_line(s));
        }
    }
}

/// One shard's live tables as a line of text.
fn live_line(s: &serde_json::Value) -> String {
    let n = |k: &str| s[k].as_u64().unwrap_or(0);
    let mut line = format!(
        "shard {}: client {}, host {}, global window {}, source window {}, leases {} (of the \
         client's prefix {})",
        n("shard"),
        s["client"].as_str().unwrap_or("-"),
        s["host"].as_str().unwrap_or("none"),
        n("global_window_count"),
        n("source_window_count"),
        n("leases_active"),
        n("leases_for_source"),
    );
    let r = &s["rate_limit"];
    if let Some(name) = r["name"].as_str() {
        let tokens = r["tokens"].as_u64().unwrap_or(0);
        let word = if tokens == 1 { "token" } else { "tokens" };
        line.push_str(&format!(", rate limit {name}: {tokens} {word}"));
        // The live tables' own verdict, which the chain's steps above (run
        // on empty tables) cannot give.
        if tokens == 0 {
            line.push_str(": this client's next request now gets 429");
            if let Some(ms) = r["retry_after_ms"].as_u64() {
                line.push_str(&format!(" (a token in {ms} ms)"));
            }
        } else {
            line.push_str(": this client's next request is within it");
        }
    }
    for f in s["fleet"].as_array().into_iter().flatten() {
        line.push_str(&fleet_part(f));
    }
    for u in s["upstreams"].as_array().into_iter().flatten() {
        let n = |k: &str| u[k].as_u64().unwrap_or(0);
        line.push_str(&format!(
            "; upstream {}: {} connection(s), {} idle, {} request(s) queued",
            u["name"].as_str().unwrap_or("-"),
            n("connections"),
            n("idle"),
            n("queued"),
        ));
    }
    line
}

/// A fleet-scoped key's part of a live line: the shard's count and the
/// fleet's as last learned (tokens for a rate limit, requests in the
/// window for a budget).
fn fleet_part(f: &serde_json::Value) -> String {
    let name = f["name"].as_str().unwrap_or("-");
    let unit = if f["level"] == "rate_limit" {
        "token(s)"
    } else {
        "in the window"
    };
    let local = f["local"].as_u64().unwrap_or(0);
    if f["fallback"] == true {
        return format!("; fleet {name}: Redis away, local share, here {local} {unit}");
    }
    if f["shared"] != true {
        return format!("; fleet {name}: not shared yet, here {local} {unit}");
    }
    let fleet = f["fleet"]
        .as_u64()
        .map_or("not learned yet".to_string(), |n| format!("{n} {unit}"));
    let pending = f["pending"].as_u64().unwrap_or(0);
    let held = f["held"]
        .as_u64()
        .map_or(String::new(), |n| format!(" and {n} held in leases"));
    format!("; fleet {name}: here {local}, fleet {fleet}{held}, {pending} not yet sent")
}

/// Asks the running server's admin listener for its live tables (read
/// only) and returns its JSON answer.
fn ask_live(
    addr: std::net::SocketAddr,
    method: &str,
    path: &str,
    peer: std::net::IpAddr,
    headers: &[(String, String)],
    token: Option<&str>,
) -> Result<String, String> {
    use crate::admin::percent_encode as enc;
    use std::io::{Read, Write};
    let mut query = format!(
        "method={}&path={}&peer={}",
        enc(method),
        enc(path),
        enc(&peer.to_string())
    );
    for (n, v) in headers {
        query.push_str(&format!("&h={}", enc(&format!("{n}: {v}"))));
    }
    let mut s = std::net::TcpStream::connect_timeout(&addr, std::time::Duration::from_secs(2))
        .map_err(|e| e.to_string())?;
    s.set_read_timeout(Some(std::time::Duration::from_secs(5)))
        .map_err(|e| e.to_string())?;
    let auth = token.map_or(String::new(), |t| format!("Authorization: Bearer {t}\r\n"));
    write!(
        s,
        "GET /explain?{query} HTTP/1.1\r\nHost: admin\r\n{auth}Connection: close\r\n\r\n"
    )
    .map_err(|e| e.to_string())?;
    let mut answer = String::new();
    s.read_to_string(&mut answer).map_err(|e| e.to_string())?;
    let (head, body) = answer.split_once("\r\n\r\n").ok_or("no answer")?;
    if !head.starts_with("HTTP/1.1 200") {
        return Err(format!(
            "{}: {}",
            head.lines().next().unwrap_or(""),
            body.trim()
        ));
    }
    Ok(body.trim_end().to_string())
}

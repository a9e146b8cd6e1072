//! Budgets through the real binary: the global, source and identity
//! budgets refuse past their window and recover after it; ordinary routes
//! stop at the optional budget while critical ones use the reserve; health
//! probes count in a source budget of their own.

mod common;

use common::gate::{get_close, respond_host, retry_after, METRIC_WAIT};
use common::upstream;
use common::*;
use std::time::Duration;

/// Starts Gapura on `profile` and runs `trial` on it until it returns Ok
/// (at most three times): a fixed window's boundary may fall inside a
/// burst of requests, and that trial is then told apart by its pattern.
/// Each trial has a server started for it, whose budgets are whole, so no
/// trial waits for the window its failed forerunner counted in to end.
/// The server the trial fit on, and what the trial returned.
fn in_one_window<T>(
    profile: &str,
    mut trial: impl FnMut(&Gapura) -> Result<T, String>,
) -> (Gapura, T) {
    let mut seen = Vec::new();
    for _ in 0..3 {
        let g = Gapura::start(profile);
        match trial(&g) {
            Ok(t) => return (g, t),
            Err(e) => seen.push(e),
        }
    }
    panic!("no trial fit one window: {seen:#?}");
}

/// Sends from `src` until a request is admitted, every answer before it a
/// 429 (a refusal is not counted, so the budget that refuses stays spent
/// until its window ends); how many were refused.
fn admitted_after_the_window(g: &Gapura, src: &str) -> u64 {
    let mut refused = 0;
    let admitted = wait_until(Duration::from_secs(10), || {
        let r = request_from(src, g.addr, &get_close("b.test", "/"));
        if r.status != 200 {
            assert_eq!(r.status, 429, "from {src}");
            refused += 1;
        }
        r.status == 200
    });
    assert!(admitted, "{src} was not admitted again");
    refused
}

fn budget_profile(budget: &str) -> String {
    profile(
        "",
        &format!(
            "[quota]\nwindow_ms = 1000\n\n{budget}\n\n{}",
            respond_host("b.test", "default = true")
        ),
    )
}

/// Sends one request per `(source, expected status)` and returns the
/// Retry-After of each 429 when every status is as expected; counts the
/// 429s in `refused` either way.
fn statuses(reqs: &[(&str, u16)], g: &Gapura, refused: &mut u64) -> Result<Vec<u32>, String> {
    let mut retry = Vec::new();
    let mut got = Vec::new();
    for (src, _) in reqs {
        let r = request_from(src, g.addr, &get_close("b.test", "/"));
        if r.status == 429 {
            *refused += 1;
            retry.push(retry_after(&r));
        }
        got.push((*src, r.status));
    }
    let want: Vec<(&str, u16)> = reqs.to_vec();
    if got == want {
        Ok(retry)
    } else {
        Err(format!("{got:?}"))
    }
}

#[test]
fn the_global_budget_refuses_past_its_window_and_recovers_after_it() {
    let (g, refused) = in_one_window(&budget_profile("[quota.global]\nrequests = 3"), |g| {
        let mut refused = 0;
        let retry = statuses(
            &[
                ("127.0.0.2", 200),
                ("127.0.0.2", 200),
                ("127.0.1.2", 200),
                ("127.0.0.2", 429),
                ("127.0.2.2", 429),
            ],
            g,
            &mut refused,
        )?;
        // The time to the window's end, rounded up.
        assert_eq!(retry, [1, 1]);
        // After the window the budget is whole again.
        refused += admitted_after_the_window(g, "127.0.2.2");
        Ok(refused)
    });
    assert_eq!(
        g.wait_metric(
            "gapura_quota_refused_total{shard=\"0\",level=\"global\"}",
            refused,
            METRIC_WAIT
        ),
        refused
    );
}

#[test]
fn the_source_budget_counts_per_prefix_and_recovers_after_its_window() {
    let (g, refused) = in_one_window(&budget_profile("[quota.source]\nrequests = 2"), |g| {
        let mut refused = 0;
        let retry = statuses(
            &[
                ("127.0.0.2", 200),
                ("127.0.0.2", 200),
                ("127.0.0.2", 429),
                // The same /24: the same budget.
                ("127.0.0.3", 429),
                // Another /24: a budget of its own.
                ("127.0.1.2", 200),
                ("127.0.1.3", 200),
                ("127.0.1.2", 429),
            ],
            g,
            &mut refused,
        )?;
        assert_eq!(retry, [1, 1, 1]);
        // After the window both prefixes have their budgets again.
        refused += admitted_after_the_window(g, "127.0.0.2");
        let again = statuses(&[("127.0.1.2", 200)], g, &mut refused);
        assert!(again.is_ok(), "{again:?}");
        Ok(refused)
    });
    assert_eq!(
        g.wait_metric(
            "gapura_quota_refused_total{shard=\"0\",level=\"source\"}",
            refused,
            METRIC_WAIT
        ),
        refused
    );
}

#[test]
fn the_identity_budget_counts_per_credential() {
    let send = |g: &Gapura, key: Option<&str>| {
        let key = key.map_or(String::new(), |k| format!("X-Api-Key: {k}\r\n"));
        request(
            g.addr,
            format!("GET / HTTP/1.1\r\nHost: b.test\r\n{key}Connection: close\r\n\r\n").as_bytes(),
        )
        .status
    };
    let profile = budget_profile("[quota.identity]\nheader = \"x-api-key\"\nrequests = 2");
    let (g, refused) = in_one_window(&profile, |g| {
        let got: Vec<u16> = [
            Some("key-a"),
            Some("key-a"),
            Some("key-a"),
            Some("key-b"),
            None,
            None,
            None,
            Some("key-b"),
            Some("key-b"),
        ]
        .iter()
        .map(|k| send(g, *k))
        .collect();
        let refused = got.iter().filter(|s| **s == 429).count() as u64;
        if got == [200, 200, 429, 200, 200, 200, 200, 200, 429] {
            Ok(refused)
        } else {
            Err(format!("{got:?}"))
        }
    });
    assert_eq!(
        g.wait_metric(
            "gapura_quota_refused_total{shard=\"0\",level=\"identity\"}",
            refused,
            METRIC_WAIT
        ),
        refused
    );
}

fn routes_profile(quota: &str, up: std::net::SocketAddr) -> String {
    profile(
        "",
        &format!(
            r#"
[quota]
window_ms = 1000
{quota}

[[upstream]]
name = "app"
servers = ["{up}"]

[[host]]
names = ["app.test"]
default = true
kind = "proxy"
[[host.route]]
path = "/"
upstream = "app"
[[host.route]]
path = "/login"
upstream = "app"
operation = "login"
[[host.route]]
path = "/vip"
upstream = "app"
class = "critical"
[[host.route]]
path = "/healthz"
upstream = "app"
class = "health"
"#
        ),
    )
}

/// Sends `GET path` once per entry (on new connections) and compares the
/// statuses as a whole; counts the 429s in `refused`.
fn path_statuses(g: &Gapura, want: &[(&str, u16)], refused: &mut u64) -> Result<(), String> {
    let got: Vec<(&str, u16)> = want
        .iter()
        .map(|(p, _)| (*p, request(g.addr, &get_close("app.test", p)).status))
        .collect();
    *refused += got.iter().filter(|(_, s)| *s == 429).count() as u64;
    if got == want {
        Ok(())
    } else {
        Err(format!("{got:?}"))
    }
}

#[test]
fn ordinary_routes_stop_at_the_optional_budget_and_critical_ones_use_the_reserve() {
    let [operation, _] = routes_trial(
        "[quota.global]\nrequests = 4\noptional = 2\n\n[[quota.operation]]\nname = \"login\"\nrequests = 1",
        &[
            ("/login", 200),
            // The operation's budget is spent; the refusal costs the
            // global budget nothing.
            ("/login", 429),
            ("/", 200),
            // Ordinary routes stop at `optional`...
            ("/", 429),
            ("/login", 429),
            // ...critical ones go on to `requests`.
            ("/vip", 200),
            ("/vip", 200),
            ("/vip", 429),
        ],
        ["operation", "global"],
    );
    assert!(operation >= 1);
}

#[test]
fn health_probes_count_in_a_source_budget_of_their_own() {
    let [_, health] = routes_trial(
        "[quota.source]\nrequests = 1\n\n[quota.health]\nrequests = 2\n\n[[quota.operation]]\nname = \"login\"\nrequests = 100",
        &[
            ("/", 200),
            ("/", 429),
            // The public budget of the prefix is spent; probes still pass.
            ("/healthz", 200),
            ("/healthz", 200),
            ("/healthz", 429),
        ],
        ["source", "health"],
    );
    assert!(health >= 1);
}

/// Gapura with `routes_profile(quota)`: `want` answered in one window, and
/// every refusal counted at one of `levels`; the two levels' counts.
fn routes_trial(quota: &str, want: &[(&str, u16)], levels: [&str; 2]) -> [u64; 2] {
    let up = upstream::fixed(b"up");
    let (g, refused) = in_one_window(&routes_profile(quota, up.addr), |g| {
        let mut refused = 0;
        path_statuses(g, want, &mut refused)?;
        Ok(refused)
    });
    let got = refused_at(&g, levels, refused);
    assert_eq!(got[0] + got[1], refused);
    got
}

/// The refusals counted at two quota levels once their sum reaches `want`
/// (or `METRIC_WAIT` has passed).
fn refused_at(g: &Gapura, levels: [&str; 2], want: u64) -> [u64; 2] {
    let mut got = [0; 2];
    wait_until(METRIC_WAIT, || {
        got = levels.map(|l| {
            g.metric(&format!(
                "gapura_quota_refused_total{{shard=\"0\",level=\"{l}\"}}"
            ))
        });
        got[0] + got[1] >= want
    });
    got
}

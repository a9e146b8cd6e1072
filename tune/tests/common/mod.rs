//! Log lines and a deterministic generator for the tests.

#![allow(dead_code)]

use gapura_tune::analyze::{analyze, Analysis, Settings};
use gapura_tune::progress::Progress;
use gapura_tune::Options;

/// A small linear congruential generator (Knuth's MMIX constants): the
/// same seed gives the same numbers everywhere.
pub struct Lcg(pub u64);

impl Lcg {
    pub fn next(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        self.0 >> 33
    }

    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// 2026-12-01T00:00:00Z in Unix milliseconds.
pub const BASE_MS: u64 = 1_796_083_200_000;

/// An RFC 3339 UTC time with milliseconds, as the log writes it.
pub fn time(ms: u64) -> String {
    let secs = ms / 1000;
    let days = secs / 86_400 - BASE_MS / 86_400_000;
    let sod = secs % 86_400;
    assert!(days < 30, "the tests stay in December 2026");
    format!(
        "2026-12-{:02}T{:02}:{:02}:{:02}.{:03}Z",
        days + 1,
        sod / 3600,
        sod / 60 % 60,
        sod % 60,
        ms % 1000
    )
}

/// One access-log line.
pub fn line(ms: u64, client: &str, host: &str, path: &str) -> String {
    format!(
        "{{\"time\":\"{}\",\"shard\":1,\"client\":\"{client}\",\"host\":\"{host}\",\"method\":\"GET\",\
         \"path\":\"{path}\",\"status\":200,\"bytes\":120,\"upstream_ms\":null,\"total_ms\":3,\
         \"request_id\":\"0123456789abcdef01234567\",\"verdict\":\"respond\",\"step\":\"answer\"}}\n",
        time(ms)
    )
}

/// One access-log line that names its connection (`shard`, `connection`).
pub fn conn_line(ms: u64, client: &str, host: &str, (shard, conn): (u64, u64)) -> String {
    format!(
        "{{\"time\":\"{}\",\"shard\":{shard},\"connection\":{conn},\"client\":\"{client}\",\
         \"host\":\"{host}\",\"method\":\"GET\",\"path\":\"/\",\"status\":200}}\n",
        time(ms)
    )
}

/// Runs the pass over `log` with `opts`' profile and bounds.
pub fn run(log: &str, opts: &Options) -> Analysis {
    let settings = Settings {
        profile: opts.profile.as_ref(),
        window_ms: opts
            .profile
            .as_ref()
            .map_or(1000, |p| p.snapshot.gate.quota_sizes.window_ms),
        max_clients: opts.max_clients,
        max_groups: opts.max_groups,
    };
    let mut input = std::io::Cursor::new(log.as_bytes());
    analyze(&mut input, &settings, &mut Progress::new(None, 0)).unwrap()
}

pub fn opts() -> Options {
    Options::new("test.log".into())
}

/// The counts of a known distribution: `clients` clients (10.0.X.Y, one
/// /24 per 256), each sending `k` requests in each of `seconds` seconds
/// with `k` drawn from `ks` by [`Lcg`] seeded with `seed`. Returns the log,
/// sorted by time, and every (client, second) sample.
pub fn known(clients: u64, seconds: u64, ks: &[u64], seed: u64) -> (String, Vec<u64>) {
    let mut rng = Lcg(seed);
    let mut log = String::new();
    let mut samples = Vec::new();
    for s in 0..seconds {
        let mut this_second = Vec::new();
        for c in 0..clients {
            let k = ks[rng.below(ks.len() as u64) as usize];
            samples.push(k);
            for j in 0..k {
                this_second.push((s * 1000 + j * 1000 / k, c));
            }
        }
        this_second.sort();
        for (ms, c) in this_second {
            let ip = format!("10.0.{}.{}", c / 256, c % 256);
            log.push_str(&line(BASE_MS + ms, &ip, "a.test", "/x"));
        }
    }
    (log, samples)
}

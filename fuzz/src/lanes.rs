//! The lanes against the whole chain: a profile made from the input (one
//! to three respond hosts, each with any of the chain's blocks a respond
//! host can turn on, budgets of any level or none, rate limits of each
//! key, in shadow or not, small request limits), then requests made from
//! the rest of the input, decided on two states: by a lane where one
//! answers ([`Snapshot::lane_answer`]), else by the chain, and by the
//! chain alone. Every decision, the answer's bytes, the leases and every
//! counter must be the same.

use gapura_config::{compile_with, Environment, NoFiles, NoNames};
use gapura_gate::client::Peer;
use gapura_gate::testing::lanes::LaneRun;
use gapura_gate::Snapshot;

/// The input's bytes, read one choice at a time (zero once spent).
struct Choices<'a>(&'a [u8]);

impl Choices<'_> {
    fn next(&mut self) -> u8 {
        match self.0.split_first() {
            Some((&b, rest)) => {
                self.0 = rest;
                b
            }
            None => 0,
        }
    }

    fn pick(&mut self, n: usize) -> usize {
        usize::from(self.next()) % n
    }
}

/// The lines of a host's blocks the input turns on (bit by bit).
const HOST_BLOCKS: [&str; 6] = [
    "connection_rate = { requests = 3 }\n",
    "access_list = \"office\"\n",
    "rule_set = \"edge\"\n",
    "robots = \"disallow_all\"\n",
    "https_redirect = true\n",
    "limits = { max_url_bytes = 256, max_header_count = 8 }\n",
];

const RATE_LIMITS: [&str; 5] = ["", "ip", "path", "user", "quiet"];

/// A profile from the input's first bytes.
fn profile(c: &mut Choices<'_>) -> String {
    let mut src = String::from(
        "[[access_list]]\nname = \"office\"\nallow = [\"192.0.2.0/24\"]\n\n\
         [[rule_set]]\nname = \"edge\"\n\n[[rule_set.rule]]\npath.prefix = \"/admin\"\naction = \"deny\"\n\n\
         [[rate_limit]]\nname = \"ip\"\nrequests = 20\nper = \"minute\"\nburst = 3\n\
         ipv6_tiers = [{ prefix = 56, requests = 30, burst = 4 }]\n\n\
         [[rate_limit]]\nname = \"path\"\nrequests = 30\nper = \"minute\"\nburst = 2\nkey = \"ip_path\"\n\n\
         [[rate_limit]]\nname = \"user\"\nrequests = 30\nper = \"minute\"\nburst = 2\nkey = \"header\"\nheader = \"x-user\"\n\n\
         [[rate_limit]]\nname = \"quiet\"\nrequests = 1\nper = \"hour\"\nmode = \"shadow\"\n\n",
    );
    let budgets = c.next();
    if budgets & 1 != 0 {
        src.push_str("[quota]\nwindow_ms = 1000\n");
        if budgets & 2 != 0 {
            src.push_str(&format!("[quota.global]\nrequests = {}\n", 5 + c.pick(40)));
        }
        if budgets & 4 != 0 {
            src.push_str(&format!(
                "[quota.source]\nrequests = {}\nconcurrent = {}\n",
                2 + c.pick(10),
                1 + c.pick(3)
            ));
        }
        if budgets & 8 != 0 {
            src.push_str("[quota.identity]\nheader = \"authorization\"\nrequests = 4\n");
        }
    }
    let hosts = 1 + c.pick(3);
    for h in 0..hosts {
        src.push_str(&format!(
            "\n[[host]]\nnames = [\"h{h}.test\"]\nkind = \"respond\"\nstatus = {}\nbody = \"h{h}\"\n",
            200 + h
        ));
        if h == 0 {
            src.push_str("default = true\n");
        }
        let rate = RATE_LIMITS[c.pick(RATE_LIMITS.len())];
        if !rate.is_empty() {
            src.push_str(&format!("rate_limit = \"{rate}\"\n"));
        }
        let on = c.next();
        for (i, line) in HOST_BLOCKS.iter().enumerate() {
            if on & (1 << i) != 0 {
                src.push_str(line);
            }
        }
        if on & 0x40 != 0 {
            src.push_str("\n[host.maintenance]\nenabled = true\n");
        }
    }
    if c.next() & 1 != 0 {
        src.push_str("\n[protection]\noff = [\"all\"]\n");
    }
    src
}

const PEERS: [&str; 5] = [
    "192.0.2.1",
    "198.51.100.3",
    "2001:db8::1",
    "2001:db8:0:1::5",
    "127.0.0.1",
];
const HOSTS: [&[u8]; 4] = [b"h0.test", b"h1.test", b"h2.test", b"nobody.test"];
const PATHS: [&[u8]; 6] = [
    b"/",
    b"/a/../b?q",
    b"/robots.txt",
    b"/%2e%2e/..",
    b"/admin/x",
    b"/aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
];
type Lines = &'static [(&'static str, &'static [u8])];
/// The last has more lines than a host's `max_header_count` (8).
const HEADERS: [Lines; 4] = [
    &[],
    &[("authorization", b"Bearer t1")],
    &[("x-user", b"u1"), ("x-user", b"u2")],
    &[
        ("x-user", b"u1"),
        ("authorization", b"Bearer t2"),
        ("x-a", b"1"),
        ("x-b", b"2"),
        ("x-c", b"3"),
        ("x-d", b"4"),
        ("x-e", b"5"),
        ("x-f", b"6"),
        ("x-g", b"7"),
    ],
];

/// Requests from the rest of the input on one state: by the lane where
/// it answers (`lane`), else by the chain.
fn run<'s>(s: &'s Snapshot, input: &[u8], lane: bool) -> LaneRun<'s> {
    let mut r = LaneRun::new(s, lane);
    let mut c = Choices(input);
    let mut now_ms = 0u64;
    while !c.0.is_empty() && r.outcomes.len() < 512 {
        let peer = Peer::tcp(PEERS[c.pick(PEERS.len())].parse().unwrap());
        let host = HOSTS[c.pick(HOSTS.len())];
        let path = PATHS[c.pick(PATHS.len())];
        let headers = HEADERS[c.pick(HEADERS.len())];
        now_ms += u64::from(c.next()) * 4;
        let keep = c.pick(4);
        r.get((peer, host, path), headers, now_ms, keep);
    }
    r
}

/// The target: a profile from the input's first bytes, requests from the
/// rest, through the lanes and through the chain alone.
pub fn lanes(data: &[u8]) {
    lanes_counted(data);
}

/// [`lanes`], saying how many requests a lane answered and refused.
pub fn lanes_counted(data: &[u8]) -> (u32, u32) {
    let mut c = Choices(data);
    let src = profile(&mut c);
    let env = Environment {
        cores: 2,
        memory_bytes: 1 << 30,
        resolver: &NoNames,
        certificates: &NoFiles,
    };
    let compiled = match compile_with(&src, &env) {
        Ok(compiled) => compiled,
        Err(errors) => panic!("a profile the target makes must compile: {errors:?}\n{src}"),
    };
    let s = &compiled.snapshot;
    let rest = c.0;
    let by_lane = run(s, rest, true);
    let by_chain = run(s, rest, false);
    by_lane.assert_same_as(&by_chain, &src);
    by_lane.by_lane
}

#[cfg(test)]
mod tests {
    /// Inputs of every shape the target reads, pseudo-random: each holds.
    #[test]
    fn the_lanes_decide_as_the_chain_for_many_made_up_profiles() {
        let mut x: u64 = 0x2545_f491_4f6c_dd1d;
        let (mut answered, mut refused) = (0, 0);
        for len in [0usize, 3, 8, 40, 300, 2000] {
            for _ in 0..40 {
                let data: Vec<u8> = (0..len)
                    .map(|_| {
                        x ^= x << 13;
                        x ^= x >> 7;
                        x ^= x << 17;
                        x as u8
                    })
                    .collect();
                let (a, r) = super::lanes_counted(&data);
                answered += a;
                refused += r;
            }
        }
        // The lanes took part: they answered and refused many.
        assert!(answered > 100 && refused > 20, "{answered} {refused}");
    }
}

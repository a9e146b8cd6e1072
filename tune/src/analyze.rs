//! The pass over the log: every line into its group's client and the
//! client's source prefix, slots closed into histograms as they end.
//!
//! A *sample* is one (client, second) or (client, window) in which the
//! client sent at least one request: seconds without a request are not
//! samples, so the figures describe clients while they are active (an
//! idle client would otherwise pull the mean to zero). Seconds and windows
//! are cut on the Unix clock (second `s` is `[s*1000, s*1000+1000)` ms,
//! window `w` is `[w*window_ms, (w+1)*window_ms)`), as the gate cuts its
//! budget windows. A client is keyed per group: the same address on two
//! routes is two clients. Source prefixes are counted over all groups
//! together, as the gate's source budget counts them.
//!
//! Connections are counted the same way, keyed by the line's shard,
//! connection serial and client, per host (`connection_rate` is a
//! host-level setting): a sample is one (connection, second) with a
//! request. Lines without `connection` (logs written before it) are not in
//! these figures.

use crate::group::{GroupName, Grouper};
use crate::histogram::Histogram;
use crate::parse::{parse_line, Client, Skip};
use crate::progress::Progress;
use crate::read::next_line;
use crate::series::{Series, LATENESS_MS};
use crate::table::Lru;
use gapura_config::Compiled;
use std::io::BufRead;
use std::net::IpAddr;

/// What the pass needs to know.
#[derive(Clone, Copy)]
pub struct Settings<'p> {
    pub profile: Option<&'p Compiled>,
    /// The budget window in milliseconds (at least 1).
    pub window_ms: u64,
    /// Client entries held at once, over all groups; the prefix table has
    /// the same capacity.
    pub max_clients: usize,
    pub max_groups: usize,
}

/// One host and route's figures.
#[derive(Clone, Debug)]
pub struct GroupStats {
    pub name: GroupName,
    pub requests: u64,
    /// Of `requests`, those the limits in force refused (status 429): the
    /// figures count what the clients sent, refused or not.
    pub refused: u64,
    /// Client entries closed (an evicted client that comes back is counted
    /// again).
    pub clients: u64,
    /// Requests per client per active second.
    pub per_second: Histogram,
    /// Requests per client per active window.
    pub per_window: Histogram,
    /// Each client's busiest second, one sample per client.
    pub client_peaks: Histogram,
}

/// Source prefixes (IPv4 /24, IPv6 /56) over all groups.
#[derive(Clone, Debug, Default)]
pub struct SourceStats {
    pub prefixes: u64,
    /// Requests per prefix per active window.
    pub per_window: Histogram,
    /// Each prefix's busiest window, one sample per prefix.
    pub peaks: Histogram,
}

/// One host's connections, as its `connection_rate` would count them.
#[derive(Clone, Debug)]
pub struct HostConnections {
    pub host: String,
    /// Connection entries closed (an evicted one that comes back is counted
    /// again).
    pub connections: u64,
    /// Requests per connection per active second.
    pub per_second: Histogram,
    /// Each connection's busiest second, one sample per connection.
    pub peaks: Histogram,
}

/// Everything the pass found.
#[derive(Clone, Debug, Default)]
pub struct Analysis {
    pub groups: Vec<GroupStats>,
    pub sources: SourceStats,
    /// Per host, in order of appearance.
    pub connections: Vec<HostConnections>,
    /// Used lines without a `connection` key.
    pub without_connection: u64,
    pub connection_evictions: u64,
    pub window_ms: u64,
    pub bytes: u64,
    pub lines: u64,
    /// Lines used.
    pub requests: u64,
    /// The first and the last used line's time (ms since the Unix epoch):
    /// the span the figures rest on.
    pub first_ms: u64,
    pub last_ms: u64,
    pub malformed: u64,
    pub blank: u64,
    /// Lines more than [`LATENESS_MS`] older than the newest before them.
    pub late: u64,
    /// Lines whose client is `-`.
    pub no_client: u64,
    /// Lines whose client is a keyed hash (no prefix).
    pub hashed: u64,
    pub client_evictions: u64,
    pub prefix_evictions: u64,
    /// The most client entries held at once.
    pub peak_clients: usize,
    pub peak_prefixes: usize,
}

impl Analysis {
    /// The log's span, first to last used line, in whole seconds (at
    /// least 1 once a line was used).
    pub fn span_seconds(&self) -> u64 {
        if self.requests == 0 {
            return 0;
        }
        (self.last_ms - self.first_ms) / 1000 + 1
    }
}

#[derive(Clone, Debug, Default)]
struct ClientState {
    seconds: Series,
    windows: Series,
}

struct Pass<'p> {
    s: Settings<'p>,
    grouper: Grouper<'p>,
    clients: Lru<(u32, Client), ClientState>,
    prefixes: Lru<IpAddr, Series>,
    /// (host slot, shard, serial, client): one connection.
    connections: Lru<(u32, u64, u64, Client), Series>,
    /// Each group's host slot in `a.connections`.
    group_host: Vec<u32>,
    groups: Vec<GroupStats>,
    newest_ms: u64,
    a: Analysis,
}

impl<'p> Pass<'p> {
    fn group_stats(&mut self, g: u32) -> &mut GroupStats {
        while self.groups.len() <= g as usize {
            let name = self.grouper.names()[self.groups.len()].clone();
            self.groups.push(GroupStats {
                name,
                requests: 0,
                refused: 0,
                clients: 0,
                per_second: Histogram::default(),
                per_window: Histogram::default(),
                client_peaks: Histogram::default(),
            });
        }
        &mut self.groups[g as usize]
    }

    /// The host slot of group `g` (its connections' figures).
    fn host_slot(&mut self, g: u32) -> u32 {
        while self.group_host.len() <= g as usize {
            let host = &self.grouper.names()[self.group_host.len()].host;
            let slot = match self.a.connections.iter().position(|h| &h.host == host) {
                Some(i) => i,
                None => {
                    self.a.connections.push(HostConnections {
                        host: host.clone(),
                        connections: 0,
                        per_second: Histogram::default(),
                        peaks: Histogram::default(),
                    });
                    self.a.connections.len() - 1
                }
            };
            self.group_host.push(slot as u32);
        }
        self.group_host[g as usize]
    }

    fn close_connection(&mut self, slot: u32, mut st: Series) {
        let hc = &mut self.a.connections[slot as usize];
        let peak = st.close_all(&mut hc.per_second);
        hc.peaks.add(peak);
        hc.connections += 1;
    }

    /// Counts the line's request on its connection.
    fn connection(&mut self, g: u32, key: (u64, u64, Client), second: u64, watermark: u64) {
        let slot = self.host_slot(g);
        let (st, evicted) = self.connections.touch(&(slot, key.0, key.1, key.2));
        st.add(second);
        st.close_before(
            watermark,
            1000,
            &mut self.a.connections[slot as usize].per_second,
        );
        if let Some(((old_slot, ..), old)) = evicted {
            self.close_connection(old_slot, old);
        }
    }

    fn close_client(&mut self, g: u32, mut st: ClientState) {
        let gs = self.group_stats(g);
        let peak = st.seconds.close_all(&mut gs.per_second);
        st.windows.close_all(&mut gs.per_window);
        gs.client_peaks.add(peak);
        gs.clients += 1;
    }

    fn close_prefix(&mut self, mut st: Series) {
        let src = &mut self.a.sources;
        let peak = st.close_all(&mut src.per_window);
        src.peaks.add(peak);
        src.prefixes += 1;
    }

    fn line(&mut self, line: &[u8]) {
        let rec = match parse_line(line) {
            Ok(r) => r,
            Err(Skip::Blank) => return self.a.blank += 1,
            Err(Skip::Malformed) => return self.a.malformed += 1,
        };
        if rec.ms.saturating_add(LATENESS_MS) < self.newest_ms {
            return self.a.late += 1;
        }
        self.newest_ms = self.newest_ms.max(rec.ms);
        let Some(client) = rec.client else {
            return self.a.no_client += 1;
        };
        if self.a.requests == 0 || rec.ms < self.a.first_ms {
            self.a.first_ms = rec.ms;
        }
        self.a.last_ms = self.a.last_ms.max(rec.ms);
        self.a.requests += 1;
        let watermark = self.newest_ms.saturating_sub(LATENESS_MS);
        let g = self.grouper.group(&rec.host, &rec.path);
        let gs = self.group_stats(g);
        gs.requests += 1;
        if rec.status == Some(429) {
            gs.refused += 1;
        }
        let (second, window) = (rec.ms / 1000, rec.ms / self.s.window_ms);
        let (st, evicted) = self.clients.touch(&(g, client));
        st.seconds.add(second);
        st.windows.add(window);
        let gs = &mut self.groups[g as usize];
        st.seconds.close_before(watermark, 1000, &mut gs.per_second);
        st.windows
            .close_before(watermark, self.s.window_ms, &mut gs.per_window);
        self.a.peak_clients = self.a.peak_clients.max(self.clients.len());
        if let Some(((eg, _), old)) = evicted {
            self.close_client(eg, old);
        }
        match rec.connection {
            Some((shard, serial)) => self.connection(g, (shard, serial, client), second, watermark),
            None => self.a.without_connection += 1,
        }
        match client.prefix() {
            Some(prefix) => self.prefix(prefix, window, watermark),
            None => self.a.hashed += 1,
        }
    }

    fn prefix(&mut self, prefix: IpAddr, window: u64, watermark: u64) {
        let (st, evicted) = self.prefixes.touch(&prefix);
        st.add(window);
        st.close_before(watermark, self.s.window_ms, &mut self.a.sources.per_window);
        self.a.peak_prefixes = self.a.peak_prefixes.max(self.prefixes.len());
        if let Some((_, old)) = evicted {
            self.close_prefix(old);
        }
    }

    fn finish(mut self) -> Analysis {
        let clients: Vec<_> = self.clients.drain().collect();
        for ((g, _), st) in clients {
            self.close_client(g, st);
        }
        let connections: Vec<_> = self.connections.drain().collect();
        for ((slot, ..), st) in connections {
            self.close_connection(slot, st);
        }
        self.a.connection_evictions = self.connections.evictions();
        let prefixes: Vec<_> = self.prefixes.drain().collect();
        for (_, st) in prefixes {
            self.close_prefix(st);
        }
        self.a.client_evictions = self.clients.evictions();
        self.a.prefix_evictions = self.prefixes.evictions();
        self.a.groups = self.groups;
        self.a
    }
}

/// Reads the whole log, one line at a time, and returns what it found.
/// Memory is bounded by the settings' table sizes and group count, never by
/// the log's size. Errors: only a read error of the input.
pub fn analyze(
    input: &mut dyn BufRead,
    settings: &Settings<'_>,
    progress: &mut Progress<'_>,
) -> Result<Analysis, String> {
    let s = Settings {
        window_ms: settings.window_ms.max(1),
        ..*settings
    };
    let mut pass = Pass {
        s,
        grouper: Grouper::new(s.profile, s.max_groups),
        clients: Lru::new(s.max_clients),
        prefixes: Lru::new(s.max_clients),
        connections: Lru::new(s.max_clients),
        group_host: Vec::new(),
        groups: Vec::new(),
        newest_ms: 0,
        a: Analysis {
            window_ms: s.window_ms,
            ..Analysis::default()
        },
    };
    let mut buf = Vec::with_capacity(4096);
    while let Some(line) =
        next_line(input, &mut buf).map_err(|e| format!("cannot read the access log: {e}"))?
    {
        pass.a.bytes += line.consumed;
        pass.a.lines += 1;
        if line.too_long {
            pass.a.malformed += 1;
        } else {
            pass.line(&buf);
        }
        progress.tick(pass.a.bytes, pass.a.lines);
    }
    progress.finish(pass.a.bytes, pass.a.lines);
    Ok(pass.finish())
}

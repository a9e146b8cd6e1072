//! The access log's shard side: one line per answered request, formatted
//! into a per-shard buffer and handed to the runtime's writer thread when
//! it holds [`FLUSH_BYTES`] or when the shard's ticker says a second has
//! passed. A shard never waits for the disk: when the writer's queue is
//! full the buffer's lines are dropped and counted
//! (`gapura_access_log_dropped_total`), and a buffer never grows past
//! [`MAX_BUFFER_BYTES`].
//!
//! A line never carries credentials, cookies or the `Authorization` value:
//! it is built from the request line's method and path (the query only with
//! `log_query`), the host, the client address (or its keyed hash), and what
//! the server decided. Strings are escaped for JSON (control characters,
//! quotes, backslashes and bytes over 0x7e as `\u00XX`) or, in the combined
//! format, have `"`, `\` and non-printable bytes written as `\xXX`.

use super::stats::ShardStats;
use gapura_gate::snapshot::{AccessLogSettings, LogFormat};
use std::net::IpAddr;
use std::sync::mpsc::SyncSender;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

/// A shard's buffer is handed to the writer once it holds this much (each
/// hand-over wakes the writer: about 500 lines a wake).
pub const FLUSH_BYTES: usize = 128 * 1024;
/// A buffer never holds more: lines past it are dropped and counted.
pub const MAX_BUFFER_BYTES: usize = 512 * 1024;
/// The longest method, host and path a line keeps (longer ones are cut).
const METHOD_BYTES: usize = 16;
const HOST_BYTES: usize = 255;
const PATH_BYTES: usize = 1024;

/// One request's facts for its line, copied while its head is at hand.
#[derive(Debug)]
pub(super) struct LogRecord {
    pub start: Instant,
    method: [u8; METHOD_BYTES],
    method_len: u8,
    host: [u8; HOST_BYTES],
    host_len: u8,
    path: [u8; PATH_BYTES],
    path_len: u16,
    pub client: Option<IpAddr>,
    pub status: u16,
    pub verdict: &'static str,
    pub step: &'static str,
    pub upstream_ms: Option<u64>,
    /// Milliseconds the request waited for an upstream connection (`None`:
    /// it did not wait).
    pub queue_ms: Option<u64>,
    pub request_id: [u8; 24],
    /// The connection's serial on its shard.
    pub connection: u64,
    /// What carried the request: `HTTP/1.1`, `HTTP/2.0` or `HTTP/3`.
    pub protocol: &'static str,
    /// Begun and not yet written.
    active: bool,
    /// Bytes sent and queued on the connection when the request began.
    pub sent_before: u64,
}

impl Default for LogRecord {
    fn default() -> Self {
        LogRecord {
            start: Instant::now(),
            method: [0; METHOD_BYTES],
            method_len: 0,
            host: [0; HOST_BYTES],
            host_len: 0,
            path: [0; PATH_BYTES],
            path_len: 0,
            client: None,
            status: 0,
            verdict: "",
            step: "",
            upstream_ms: None,
            queue_ms: None,
            request_id: [b'-'; 24],
            connection: 0,
            protocol: "HTTP/1.1",
            sent_before: 0,
            active: false,
        }
    }
}

fn copy_cut<const N: usize>(dst: &mut [u8; N], src: &[u8]) -> usize {
    let n = src.len().min(N);
    dst[..n].copy_from_slice(&src[..n]);
    n
}

impl LogRecord {
    /// Starts the record of a new request whose head was complete at
    /// `start`.
    pub fn begin(&mut self, sent_before: u64, request_id: [u8; 24], start: Instant) -> &mut Self {
        self.start = start;
        self.method_len = 0;
        self.host_len = 0;
        self.path_len = 0;
        self.client = None;
        self.status = 0;
        self.verdict = "";
        self.step = "";
        self.upstream_ms = None;
        self.queue_ms = None;
        self.request_id = request_id;
        self.sent_before = sent_before;
        self.active = true;
        self
    }

    fn method(&self) -> &[u8] {
        &self.method[..usize::from(self.method_len)]
    }

    fn host(&self) -> &[u8] {
        &self.host[..usize::from(self.host_len)]
    }

    fn path(&self) -> &[u8] {
        &self.path[..usize::from(self.path_len)]
    }

    /// Whether a request is being recorded (begun, its line not written).
    pub fn active(&self) -> bool {
        self.active
    }

    /// The line is written.
    pub fn end(&mut self) {
        self.active = false;
    }

    /// The request line's facts; the query is cut unless `log_query`.
    pub fn set_request(&mut self, method: &[u8], host: &[u8], path: &[u8], log_query: bool) {
        self.method_len = copy_cut(&mut self.method, method) as u8;
        self.host_len = copy_cut(&mut self.host, host) as u8;
        let path = if log_query {
            path
        } else {
            let end = path.iter().position(|&b| b == b'?').unwrap_or(path.len());
            &path[..end]
        };
        self.path_len = copy_cut(&mut self.path, path) as u16;
    }
}

/// What consecutive lines share, formatted once: the time (lines of one
/// millisecond, or one second in the combined format) and the client.
#[derive(Debug, Default)]
struct LineCache {
    /// The unix time in ms (JSON) or s (combined) of `time`, plus one
    /// (0: empty).
    time_key: u64,
    time: [u8; 32],
    time_len: usize,
    client_key: Option<(IpAddr, bool)>,
    client: [u8; 32],
    client_len: usize,
}

/// Appends `write`'s bytes to `out`, or the cached copy when `key` is the
/// cached one.
fn cached<K: PartialEq + Copy>(
    out: &mut Vec<u8>,
    cache_key: &mut K,
    cache: &mut [u8],
    cache_len: &mut usize,
    key: K,
    write: impl FnOnce(&mut Vec<u8>),
) {
    if *cache_key == key {
        out.extend_from_slice(&cache[..*cache_len]);
        return;
    }
    let start = out.len();
    write(out);
    let n = out.len() - start;
    if n <= cache.len() {
        cache[..n].copy_from_slice(&out[start..]);
        *cache_len = n;
        *cache_key = key;
    }
}

/// A shard's log buffer and what it counted.
#[derive(Debug)]
pub struct ShardLog {
    buf: Vec<u8>,
    lines_in_buf: u64,
    cache: LineCache,
    /// A monotonic instant and the wall time then, in unix ms (the ticker
    /// takes them again once a second, so a clock step shows within one).
    epoch: Instant,
    epoch_unix_ms: u64,
    /// Where full buffers go (the runtime's writer); `None`: no writer.
    tx: Option<SyncSender<Vec<u8>>>,
}

impl ShardLog {
    pub fn new(tx: SyncSender<Vec<u8>>) -> ShardLog {
        let mut log = ShardLog {
            buf: Vec::with_capacity(FLUSH_BYTES + 4096),
            lines_in_buf: 0,
            cache: LineCache::default(),
            epoch: Instant::now(),
            epoch_unix_ms: 0,
            tx: Some(tx),
        };
        log.set_epoch();
        log
    }

    fn set_epoch(&mut self) {
        self.epoch = Instant::now();
        self.epoch_unix_ms = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default()
            .as_millis() as u64;
    }
}

impl Default for ShardLog {
    fn default() -> Self {
        ShardLog {
            buf: Vec::new(),
            lines_in_buf: 0,
            cache: LineCache::default(),
            epoch: Instant::now(),
            epoch_unix_ms: 0,
            tx: None,
        }
    }
}

impl ShardLog {
    /// Writes one request's line (when the snapshot logs). `bytes` are the
    /// response's bytes, head included; `address_hash` is the gate's keyed
    /// hash of an address (`None` when the gate is busy). No allocation
    /// once the buffer has its capacity.
    pub(super) fn write(
        &mut self,
        settings: &AccessLogSettings,
        rec: &LogRecord,
        bytes: u64,
        shard: usize,
        stats: &ShardStats,
        address_hash: impl FnOnce(IpAddr) -> Option<u64>,
    ) {
        if self.tx.is_none() {
            return;
        }
        if self.buf.len() >= MAX_BUFFER_BYTES {
            stats.access_log_dropped.inc();
            return;
        }
        let client_hash = match (settings.hash_addresses, rec.client) {
            (true, Some(ip)) => address_hash(ip),
            _ => None,
        };
        // One clock read: the wall time is the shard's epoch moved on by
        // the monotonic time since.
        let now = Instant::now();
        let total_ms = now.duration_since(rec.start).as_millis() as u64;
        let unix_ms = self.epoch_unix_ms + now.duration_since(self.epoch).as_millis() as u64;
        let mut line = Line {
            rec,
            shard,
            bytes,
            total_ms,
            client_hash,
            unix_ms,
            cache: &mut self.cache,
        };
        match settings.format {
            LogFormat::Json => line.json(&mut self.buf),
            LogFormat::Combined => line.combined(&mut self.buf),
        }
        self.lines_in_buf += 1;
        stats.access_log_lines.inc();
        if self.buf.len() >= FLUSH_BYTES {
            self.flush(stats);
        }
    }

    /// Hands the buffered lines to the writer and moves the epoch on (the
    /// shard's ticker calls this once a second). Never waits: a full queue
    /// drops them, counted.
    pub(super) fn tick(&mut self, stats: &ShardStats) {
        self.flush(stats);
        if self.tx.is_some() {
            self.set_epoch();
        }
    }

    fn flush(&mut self, stats: &ShardStats) {
        if self.buf.is_empty() {
            return;
        }
        let Some(tx) = &self.tx else {
            return;
        };
        let full = std::mem::replace(&mut self.buf, Vec::with_capacity(FLUSH_BYTES + 4096));
        if tx.try_send(full).is_err() {
            stats.access_log_dropped.add(self.lines_in_buf);
        }
        self.lines_in_buf = 0;
    }
}

/// A line's values.
struct Line<'a> {
    rec: &'a LogRecord,
    shard: usize,
    bytes: u64,
    total_ms: u64,
    client_hash: Option<u64>,
    unix_ms: u64,
    cache: &'a mut LineCache,
}

const HEX: &[u8; 16] = b"0123456789abcdef";

fn push_u64(out: &mut Vec<u8>, n: u64) {
    gapura_gate::pages::push_decimal(out, n);
}

fn push_2(out: &mut Vec<u8>, n: u64) {
    out.push(b'0' + (n / 10 % 10) as u8);
    out.push(b'0' + (n % 10) as u8);
}

/// `hh:mm:ss` of a second of the day.
fn push_hms(out: &mut Vec<u8>, sod: u64) {
    push_2(out, sod / 3600);
    out.push(b':');
    push_2(out, sod / 60 % 60);
    out.push(b':');
    push_2(out, sod % 60);
}

fn push_hash(out: &mut Vec<u8>, h: u64) {
    for i in (0..16).rev() {
        out.push(HEX[((h >> (i * 4)) & 0xf) as usize]);
    }
}

/// Days since 1970-01-01 as (year, month, day) (Howard Hinnant's
/// algorithm, proleptic Gregorian).
fn civil(days: i64) -> (i64, u64, u64) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u64;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u64;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

/// JSON string contents: printable ASCII as is, `"` and `\` escaped,
/// anything else as `\u00XX`.
fn push_json_str(out: &mut Vec<u8>, s: &[u8]) {
    let mut rest = s;
    loop {
        // Runs of bytes written as they are, in one copy.
        let safe = rest
            .iter()
            .position(|&b| !(0x20..=0x7e).contains(&b) || b == b'"' || b == b'\\')
            .unwrap_or(rest.len());
        out.extend_from_slice(&rest[..safe]);
        let Some((&b, tail)) = rest[safe..].split_first() else {
            return;
        };
        match b {
            b'"' => out.extend_from_slice(b"\\\""),
            b'\\' => out.extend_from_slice(b"\\\\"),
            _ => {
                out.extend_from_slice(b"\\u00");
                out.push(HEX[usize::from(b >> 4)]);
                out.push(HEX[usize::from(b & 0xf)]);
            }
        }
        rest = tail;
    }
}

/// A combined-format field: printable ASCII but `"` and `\`, else `\xXX`.
fn push_clf_str(out: &mut Vec<u8>, s: &[u8]) {
    for &b in s {
        match b {
            b'"' | b'\\' | 0..=0x1f | 0x7f..=0xff => {
                out.extend_from_slice(b"\\x");
                out.push(HEX[usize::from(b >> 4)]);
                out.push(HEX[usize::from(b & 0xf)]);
            }
            _ => out.push(b),
        }
    }
}

const MONTHS: [&[u8; 3]; 12] = [
    b"Jan", b"Feb", b"Mar", b"Apr", b"May", b"Jun", b"Jul", b"Aug", b"Sep", b"Oct", b"Nov", b"Dec",
];

impl Line<'_> {
    /// The client (its hash, its address, or `-`), formatted once for
    /// consecutive lines of one client.
    fn client(&mut self, out: &mut Vec<u8>) {
        let (hash, ip) = (self.client_hash, self.rec.client);
        let Some(addr) = ip else {
            out.push(b'-');
            return;
        };
        let c = &mut *self.cache;
        cached(
            out,
            &mut c.client_key,
            &mut c.client,
            &mut c.client_len,
            Some((addr, hash.is_some())),
            |out| match hash {
                Some(h) => push_hash(out, h),
                None => {
                    use std::io::Write;
                    let _ = write!(out, "{addr}");
                }
            },
        );
    }

    fn json(&mut self, out: &mut Vec<u8>) {
        let r = self.rec;
        let unix_ms = self.unix_ms;
        out.extend_from_slice(b"{\"time\":\"");
        let c = &mut *self.cache;
        cached(
            out,
            &mut c.time_key,
            &mut c.time,
            &mut c.time_len,
            unix_ms + 1,
            |out| {
                let secs = unix_ms / 1000;
                let (y, mo, d) = civil((secs / 86_400) as i64);
                let sod = secs % 86_400;
                push_u64(out, y.max(0) as u64);
                out.push(b'-');
                push_2(out, mo);
                out.push(b'-');
                push_2(out, d);
                out.push(b'T');
                push_hms(out, sod);
                out.push(b'.');
                let ms = unix_ms % 1000;
                out.push(b'0' + (ms / 100) as u8);
                push_2(out, ms % 100);
            },
        );
        out.extend_from_slice(b"Z\",\"shard\":");
        push_u64(out, self.shard as u64);
        out.extend_from_slice(b",\"connection\":");
        push_u64(out, r.connection);
        out.extend_from_slice(b",\"client\":\"");
        self.client(out);
        out.extend_from_slice(b"\",\"host\":\"");
        push_json_str(out, r.host());
        out.extend_from_slice(b"\",\"method\":\"");
        push_json_str(out, r.method());
        out.extend_from_slice(b"\",\"protocol\":\"");
        out.extend_from_slice(r.protocol.as_bytes());
        out.extend_from_slice(b"\",\"path\":\"");
        push_json_str(out, r.path());
        out.extend_from_slice(b"\",\"status\":");
        push_u64(out, u64::from(r.status));
        out.extend_from_slice(b",\"bytes\":");
        push_u64(out, self.bytes);
        out.extend_from_slice(b",\"upstream_ms\":");
        match r.upstream_ms {
            Some(ms) => push_u64(out, ms),
            None => out.extend_from_slice(b"null"),
        }
        if let Some(ms) = r.queue_ms {
            out.extend_from_slice(b",\"queue_ms\":");
            push_u64(out, ms);
        }
        out.extend_from_slice(b",\"total_ms\":");
        push_u64(out, self.total_ms);
        out.extend_from_slice(b",\"request_id\":\"");
        out.extend_from_slice(&r.request_id);
        out.extend_from_slice(b"\",\"verdict\":\"");
        out.extend_from_slice(r.verdict.as_bytes());
        out.extend_from_slice(b"\",\"step\":\"");
        out.extend_from_slice(r.step.as_bytes());
        out.extend_from_slice(b"\"}\n");
    }

    /// `client - - [10/Oct/2000:13:55:36 +0000] "GET /path HTTP/1.1" 200 2326 "-" "-"`
    fn combined(&mut self, out: &mut Vec<u8>) {
        let r = self.rec;
        let secs = self.unix_ms / 1000;
        self.client(out);
        out.extend_from_slice(b" - - [");
        let c = &mut *self.cache;
        cached(
            out,
            &mut c.time_key,
            &mut c.time,
            &mut c.time_len,
            // Seconds, kept apart from the JSON keys (ms + 1) by the top bit.
            (secs + 1) | 1 << 63,
            |out| {
                let (y, mo, d) = civil((secs / 86_400) as i64);
                let sod = secs % 86_400;
                push_2(out, d);
                out.push(b'/');
                out.extend_from_slice(MONTHS[(mo as usize).clamp(1, 12) - 1]);
                out.push(b'/');
                push_u64(out, y.max(0) as u64);
                out.push(b':');
                push_hms(out, sod);
            },
        );
        out.extend_from_slice(b" +0000] \"");
        push_clf_str(out, r.method());
        out.push(b' ');
        push_clf_str(out, r.path());
        out.push(b' ');
        out.extend_from_slice(r.protocol.as_bytes());
        out.extend_from_slice(b"\" ");
        push_u64(out, u64::from(r.status));
        out.push(b' ');
        push_u64(out, self.bytes);
        out.extend_from_slice(b" \"-\" \"-\"\n");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record() -> LogRecord {
        let mut r = LogRecord::default();
        r.begin(0, *b"0123456789abcdef01234567", Instant::now())
            .connection = 42;
        r.set_request(b"GET", b"a.test", b"/x\"y?token=secret", false);
        r.client = Some("203.0.113.7".parse().unwrap());
        r.status = 200;
        r.verdict = "respond";
        r.step = "answer";
        r
    }

    fn line<'a>(rec: &'a LogRecord, hash: Option<u64>, cache: &'a mut LineCache) -> Line<'a> {
        Line {
            rec,
            shard: 1,
            bytes: 120,
            total_ms: 3,
            client_hash: hash,
            // 2026-12-01T17:39:49.123Z
            unix_ms: 1_796_146_789_123,
            cache,
        }
    }

    #[test]
    fn a_json_line_has_every_key_and_no_query() {
        let rec = record();
        let mut out = Vec::new();
        line(&rec, None, &mut LineCache::default()).json(&mut out);
        let text = String::from_utf8(out).unwrap();
        assert_eq!(
            text,
            "{\"time\":\"2026-12-01T17:39:49.123Z\",\"shard\":1,\"connection\":42,\"client\":\"203.0.113.7\",\"host\":\"a.test\",\"method\":\"GET\",\"protocol\":\"HTTP/1.1\",\"path\":\"/x\\\"y\",\"status\":200,\"bytes\":120,\"upstream_ms\":null,\"total_ms\":3,\"request_id\":\"0123456789abcdef01234567\",\"verdict\":\"respond\",\"step\":\"answer\"}\n"
        );
        let v: serde_json::Value = serde_json::from_str(text.trim_end()).unwrap();
        assert_eq!(v["path"], "/x\"y");
    }

    #[test]
    fn hashed_addresses_never_show_the_address() {
        let rec = record();
        let mut out = Vec::new();
        line(&rec, Some(0xdead_beef_0123_4567), &mut LineCache::default()).json(&mut out);
        let text = String::from_utf8(out).unwrap();
        assert!(text.contains("\"client\":\"deadbeef01234567\""), "{text}");
        assert!(!text.contains("203.0.113.7"));
    }

    #[test]
    fn the_query_is_kept_only_when_asked_and_hostile_bytes_are_escaped() {
        let mut rec = record();
        rec.set_request(b"GET", b"a\x01.test", b"/p?q=\xff\n", true);
        let mut out = Vec::new();
        line(&rec, None, &mut LineCache::default()).json(&mut out);
        let text = String::from_utf8(out).unwrap();
        assert!(text.contains("\"host\":\"a\\u0001.test\""), "{text}");
        assert!(text.contains("\"path\":\"/p?q=\\u00ff\\u000a\""), "{text}");
        assert_eq!(text.matches('\n').count(), 1);
        serde_json::from_str::<serde_json::Value>(text.trim_end()).unwrap();
    }

    #[test]
    fn a_combined_line() {
        let rec = record();
        let mut out = Vec::new();
        line(&rec, None, &mut LineCache::default()).combined(&mut out);
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "203.0.113.7 - - [01/Dec/2026:17:39:49 +0000] \"GET /x\\x22y HTTP/1.1\" 200 120 \"-\" \"-\"\n"
        );
    }

    #[test]
    fn cached_parts_are_the_parts() {
        // One cache across lines of both formats, times and clients: each
        // line is what a fresh cache writes.
        let mut cache = LineCache::default();
        let mut rec = record();
        for i in 0..40u64 {
            rec.client = Some(if i % 3 == 0 {
                "203.0.113.7".parse().unwrap()
            } else {
                "2001:db8::1".parse().unwrap()
            });
            let hash = (i % 5 == 0).then_some(i);
            let ms = 1_796_146_789_123 + (i / 4) * 700;
            let mut a = Vec::new();
            let mut b = Vec::new();
            for (out, c) in [(&mut a, &mut cache), (&mut b, &mut LineCache::default())] {
                let mut l = line(&rec, hash, c);
                l.unix_ms = ms;
                if i % 2 == 0 {
                    l.json(out)
                } else {
                    l.combined(out)
                }
            }
            assert_eq!(a, b, "line {i}");
        }
    }

    #[test]
    fn civil_dates() {
        assert_eq!(civil(0), (1970, 1, 1));
        assert_eq!(civil(11_016), (2000, 2, 29));
        assert_eq!(civil(20_788), (2026, 12, 1));
    }
}

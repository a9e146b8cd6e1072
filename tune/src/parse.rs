//! One access-log line read into what tune counts: the time, the client,
//! the host and the path.
//!
//! A line is a JSON object (docs/profile.md, "The access log"); tune reads
//! `time`, `client`, `host` and `path`, and `shard` with `connection` when
//! the line has them (older logs do not), and ignores every other key. The log
//! escapes bytes over 0x7e as `\u00XX`, so the host and path are turned back
//! into those bytes (a character above U+00FF cannot come from the log and
//! makes the line malformed).

use serde_json::Value;
use std::net::IpAddr;

/// Who sent a request, as tune keys it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Client {
    /// An address: IPv4 whole, IPv6 cut to its /64 (what `key = "ip"` of a
    /// rate limit counts per client).
    Ip(IpAddr),
    /// A keyed hash (`log_addresses = "hash"`): no prefix can be derived.
    Hashed(u64),
}

impl Client {
    /// The client's source prefix as the gate's source budget keys it:
    /// IPv4 /24, IPv6 /56. `None` for a hashed client.
    pub fn prefix(&self) -> Option<IpAddr> {
        match self {
            Client::Ip(IpAddr::V4(a)) => Some(IpAddr::V4((u32::from(*a) & 0xffff_ff00).into())),
            Client::Ip(IpAddr::V6(a)) => {
                Some(IpAddr::V6((u128::from(*a) & !((1u128 << 72) - 1)).into()))
            }
            Client::Hashed(_) => None,
        }
    }
}

/// What a line says, borrowed from its parsed form where it can be.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Record {
    /// Milliseconds since the Unix epoch.
    pub ms: u64,
    /// `None`: the line's client is `-` (no address known).
    pub client: Option<Client>,
    pub host: Vec<u8>,
    pub path: Vec<u8>,
    /// The line's shard and connection serial (`None`: the line has no
    /// `connection`).
    pub connection: Option<(u64, u64)>,
    /// The answer's status (`None`: the line has none).
    pub status: Option<u64>,
}

/// Why a line was not used.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Skip {
    /// Not JSON, or a key missing or of the wrong type.
    Malformed,
    /// An empty (or all-blank) line.
    Blank,
}

/// Reads one line (without its newline). O(line), never panics.
pub fn parse_line(line: &[u8]) -> Result<Record, Skip> {
    if line.trim_ascii().is_empty() {
        return Err(Skip::Blank);
    }
    let v: Value = serde_json::from_slice(line).map_err(|_| Skip::Malformed)?;
    let field = |k: &str| v.get(k).and_then(Value::as_str).ok_or(Skip::Malformed);
    let ms = parse_time(field("time")?).ok_or(Skip::Malformed)?;
    let client = parse_client(field("client")?)?;
    let host = latin1_bytes(field("host")?)?;
    let path = latin1_bytes(field("path")?)?;
    let number = |k: &str| v.get(k).map(|n| n.as_u64().ok_or(Skip::Malformed));
    let connection = match (number("shard"), number("connection")) {
        (Some(shard), Some(conn)) => Some((shard?, conn?)),
        (_, None) => None,
        (None, Some(_)) => return Err(Skip::Malformed),
    };
    Ok(Record {
        ms,
        client,
        host,
        path,
        status: v.get("status").and_then(Value::as_u64),
        connection,
    })
}

/// A client field: `-`, an address, or 16 hex digits.
fn parse_client(s: &str) -> Result<Option<Client>, Skip> {
    if s == "-" {
        return Ok(None);
    }
    if let Ok(ip) = s.parse::<IpAddr>() {
        let ip = match ip {
            IpAddr::V6(a) => match a.to_ipv4_mapped() {
                Some(v4) => IpAddr::V4(v4),
                None => IpAddr::V6((u128::from(a) & !((1u128 << 64) - 1)).into()),
            },
            v4 => v4,
        };
        return Ok(Some(Client::Ip(ip)));
    }
    if s.len() == 16 && s.bytes().all(|b| b.is_ascii_hexdigit()) {
        return u64::from_str_radix(s, 16)
            .map(|h| Some(Client::Hashed(h)))
            .map_err(|_| Skip::Malformed);
    }
    Err(Skip::Malformed)
}

/// The log's characters back into bytes: each is U+0000..=U+00FF.
fn latin1_bytes(s: &str) -> Result<Vec<u8>, Skip> {
    s.chars()
        .map(|c| u8::try_from(u32::from(c)).map_err(|_| Skip::Malformed))
        .collect()
}

/// `YYYY-MM-DDTHH:MM:SS.mmmZ` (the fraction optional, any length) as
/// milliseconds since the epoch. `None` when it is not that shape or
/// before 1970.
pub fn parse_time(s: &str) -> Option<u64> {
    let b = s.as_bytes();
    if b.len() < 20 || b[4] != b'-' || b[7] != b'-' || b[10] != b'T' {
        return None;
    }
    if b[13] != b':' || b[16] != b':' || *b.last()? != b'Z' {
        return None;
    }
    let num = |r: std::ops::Range<usize>| -> Option<u64> {
        let d = b.get(r)?;
        if d.is_empty() || !d.iter().all(u8::is_ascii_digit) {
            return None;
        }
        Some(d.iter().fold(0u64, |a, &c| a * 10 + u64::from(c - b'0')))
    };
    let (y, mo, d) = (num(0..4)?, num(5..7)?, num(8..10)?);
    let (h, mi, sec) = (num(11..13)?, num(14..16)?, num(17..19)?);
    if !(1..=12).contains(&mo) || !(1..=31).contains(&d) || h > 23 || mi > 59 || sec > 60 {
        return None;
    }
    let frac = &b[19..b.len() - 1];
    let ms = match frac {
        [] => 0,
        [b'.', digits @ ..] if !digits.is_empty() && digits.iter().all(u8::is_ascii_digit) => {
            let mut ms = 0u64;
            for i in 0..3 {
                ms = ms * 10 + digits.get(i).map_or(0, |c| u64::from(c - b'0'));
            }
            ms
        }
        _ => return None,
    };
    let days = days_from_civil(y as i64, mo as i64, d as i64);
    let secs = days.checked_mul(86_400)? + (h * 3600 + mi * 60 + sec) as i64;
    u64::try_from(secs).ok()?.checked_mul(1000)?.checked_add(ms)
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's
/// algorithm).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_documented_line_reads() {
        let line = br#"{"time":"2026-12-01T17:39:49.123Z","shard":1,"client":"203.0.113.7","host":"a.test","method":"GET","path":"/x","status":200,"bytes":120,"upstream_ms":null,"total_ms":3,"request_id":"0123456789abcdef01234567","verdict":"respond","step":"answer"}"#;
        let r = parse_line(line).unwrap();
        assert_eq!(r.ms, 1_796_146_789_123);
        assert_eq!(r.client, Some(Client::Ip("203.0.113.7".parse().unwrap())));
        assert_eq!(r.host, b"a.test");
        assert_eq!(r.path, b"/x");
        assert_eq!(r.connection, None, "a line from before the connection key");
        let line = br#"{"time":"2026-12-01T17:39:49.123Z","shard":1,"connection":42,"client":"203.0.113.7","host":"a.test","method":"GET","path":"/x","status":200}"#;
        assert_eq!(parse_line(line).unwrap().connection, Some((1, 42)));
        let line = br#"{"time":"2026-12-01T17:39:49.123Z","shard":1,"connection":"x","client":"203.0.113.7","host":"a.test","path":"/x"}"#;
        assert_eq!(parse_line(line), Err(Skip::Malformed));
    }

    #[test]
    fn times_and_clients() {
        assert_eq!(parse_time("1970-01-01T00:00:01.5Z"), Some(1500));
        assert_eq!(parse_time("1970-01-01T00:00:01Z"), Some(1000));
        assert_eq!(parse_time("1970-13-01T00:00:01Z"), None);
        assert_eq!(parse_time("1969-12-31T23:59:59Z"), None);
        assert_eq!(parse_time("x"), None);
        assert_eq!(
            parse_client("0123456789abcdef"),
            Ok(Some(Client::Hashed(0x0123_4567_89ab_cdef)))
        );
        assert_eq!(parse_client("-"), Ok(None));
        assert_eq!(parse_client("nope"), Err(Skip::Malformed));
        let v6 = parse_client("2001:db8:1:2:3:4:5:6").unwrap().unwrap();
        assert_eq!(v6, Client::Ip("2001:db8:1:2::".parse().unwrap()));
        assert_eq!(v6.prefix(), Some("2001:db8:1::".parse().unwrap()));
    }
}

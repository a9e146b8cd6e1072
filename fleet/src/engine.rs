//! The engine: one Redis (or Valkey) server, or a Redis Cluster, reached
//! with the `redis` crate's blocking client from the reconciler's thread.
//!
//! One round is one pipeline: an `EVALSHA` of [`SCRIPT`] per shared key,
//! each touching one key (a cluster routes each to its key's slot; the key
//! carries a hash tag, so a key and anything a later script adds beside it
//! share a slot). A server that lost the script (a restart, `SCRIPT
//! FLUSH`) answers `NOSCRIPT`: the script is loaded (`SCRIPT LOAD`, on
//! every primary of a cluster) and the round sent again, once. Every
//! other error is the caller's: it drops the connection and falls back.
//!
//! Nothing here runs on a shard. Reads and writes have a timeout, so a
//! slow engine costs the reconciler a round, never a request.

use redis::{ConnectionLike, RedisResult};
use std::time::Duration;

/// The engine's side of a shared key's bucket, atomic per key: its
/// empty-at time in µs of the engine's clock, brought up to at most one
/// full refill ago, moved on by the count, held to one burst of debt, and
/// kept until it would be full again. Returns the bucket's age (µs; tokens
/// = age / interval), as `gapura_gate::quota::fleet::fleet_take` computes.
/// KEYS[1]: the bucket; ARGV: count, interval (µs), burst.
pub const SCRIPT: &str = r#"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local n = tonumber(ARGV[1])
local iv = tonumber(ARGV[2])
local tol = iv * tonumber(ARGV[3])
local e = tonumber(redis.call('GET', KEYS[1]))
if e == nil then
  if n == 0 then return string.format('%.0f', tol) end
  e = now - tol
end
if e < now - tol then e = now - tol end
e = e + n * iv
if e > now + tol then e = now + tol end
local ttl = math.ceil((e + tol - now) / 1000) + 1000
redis.call('SET', KEYS[1], string.format('%.0f', e), 'PX', ttl)
return string.format('%.0f', now - e)
"#;

/// The engine's side of a shared budget window, atomic per key: adds a
/// node's count to the window's key, sets the node's outstanding lease
/// (with the engine's own time, so node clocks do not matter), drops the
/// leases of nodes that stopped exchanging more than the lease lifetime
/// ago, and answers the fleet's count and the sum of every live lease
/// (`"COUNT HELD"`). Both keys
/// expire two windows and a second after they were made (the window is
/// over by then on every node whose clock is within a window of the
/// others').
/// KEYS[1]: the window's count, KEYS[2]: its leases (a hash: holder ->
/// "amount ms"); ARGV: count, expiry (ms), holder, outstanding, lease
/// lifetime (ms).
pub const WINDOW_SCRIPT: &str = r#"
local n = redis.call('INCRBY', KEYS[1], ARGV[1])
if redis.call('PTTL', KEYS[1]) < 0 then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
if tonumber(ARGV[4]) > 0 then
  redis.call('HSET', KEYS[2], ARGV[3], ARGV[4] .. ' ' .. now)
  if redis.call('PTTL', KEYS[2]) < 0 then
    redis.call('PEXPIRE', KEYS[2], ARGV[2])
  end
else
  redis.call('HDEL', KEYS[2], ARGV[3])
end
local ttl = tonumber(ARGV[5])
local sum = 0
local held = redis.call('HGETALL', KEYS[2])
for i = 1, #held, 2 do
  local amount, at = string.match(held[i + 1], '^(%d+) (%d+)$')
  if amount and now - tonumber(at) <= ttl then
    sum = sum + tonumber(amount)
  else
    redis.call('HDEL', KEYS[2], held[i])
  end
end
return string.format('%d %d', n, sum)
"#;

/// One shared budget window's part of a round.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WindowFlush {
    pub identity: u64,
    pub key: u64,
    /// The window's index (Unix ms / `window_ms`).
    pub window: u64,
    pub window_ms: u64,
    pub count: u64,
    /// What this node's leases of the key still hold unspent, and the
    /// node's name for them (random per process).
    pub outstanding: u64,
    pub holder: u64,
    /// How long the engine keeps a lease its holder stopped refreshing.
    pub lease_ttl_ms: u64,
}

/// A round's answers: every rate key's fleet bucket age (µs), then every
/// window's fleet count and what live leases hold of it, in order.
pub type Answers = (Vec<i64>, Vec<(u64, u64)>);

/// A window script's answer: the fleet's count and what live leases hold.
fn window_answer(a: &str) -> (u64, u64) {
    let mut parts = a.split(' ').map(|n| n.parse::<u64>().unwrap_or(0));
    (parts.next().unwrap_or(0), parts.next().unwrap_or(0))
}

/// The engine's name of a shared budget window: the level's identity and
/// the key in a hash tag, then the window.
pub fn window_name(identity: u64, key: u64, window: u64) -> String {
    format!("gapura:w:{{{identity:016x}{key:016x}}}:{window}")
}

/// The engine's name of a shared budget window's leases: in the window's
/// hash tag (one slot of a cluster).
pub fn lease_name(identity: u64, key: u64, window: u64) -> String {
    format!("gapura:wl:{{{identity:016x}{key:016x}}}:{window}")
}

/// One shared key's part of a round.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Flush {
    pub identity: u64,
    pub key: u64,
    pub count: u64,
    pub interval_ns: u64,
    pub burst: u32,
}

/// The engine's name of a shared key's bucket: the pair's identity and
/// the key (a keyed hash under the fleet's key), in a hash tag.
pub fn bucket_name(identity: u64, key: u64) -> String {
    format!("gapura:r:{{{identity:016x}{key:016x}}}")
}

/// Where the engine is and how to reach it.
#[derive(Clone, Debug)]
pub struct Target {
    pub addresses: Vec<String>,
    pub cluster: bool,
    pub password: Option<String>,
    /// Connect, read and write timeout.
    pub timeout: Duration,
}

/// What the reconciler asks of the engine it shares counts through: one
/// round's exchange (every key's count in, every rate key's fleet bucket
/// age in µs and every window's fleet count and held leases back, in
/// order). Redis is one
/// ([`Engine`]); the reconciler's tests use one in memory.
pub trait Exchange {
    fn exchange(&mut self, keys: &[Flush], windows: &[WindowFlush]) -> Result<Answers, String>;
}

/// How the reconciler gets an engine: at its first round, and again after
/// a failed round or a reload that moved the engine.
pub trait Connect {
    type Engine: Exchange;
    fn connect(&mut self, target: &Target) -> Result<Self::Engine, String>;
}

/// Redis (or Valkey, or a Redis Cluster): connected and its scripts
/// loaded within the target's timeout.
#[derive(Clone, Copy, Debug, Default)]
pub struct Redis;

impl Connect for Redis {
    type Engine = Engine;
    fn connect(&mut self, target: &Target) -> Result<Engine, String> {
        let mut e = Engine::connect(target).map_err(|e| words(&e))?;
        e.load_script().map_err(|e| words(&e))?;
        Ok(e)
    }
}

/// A Redis error in words an operator reads: what went wrong and, for a
/// password, where it is set; anything else as Redis said it.
pub fn words(e: &redis::RedisError) -> String {
    match (e.kind(), e.code()) {
        (redis::ErrorKind::AuthenticationFailed, _) | (_, Some("WRONGPASS")) => {
            "it refused the password (the [fleet] password_file)".to_string()
        }
        (_, Some("NOAUTH")) => {
            "it asks for a password and none is set (the [fleet] password_file)".to_string()
        }
        _ if e.is_connection_refusal() => "connection refused".to_string(),
        _ if e.is_timeout() => "no answer within the timeout".to_string(),
        _ => e.to_string(),
    }
}

impl Exchange for Engine {
    fn exchange(&mut self, keys: &[Flush], windows: &[WindowFlush]) -> Result<Answers, String> {
        Engine::exchange(self, keys, windows).map_err(|e| words(&e))
    }
}

/// A connection to the engine.
pub enum Engine {
    One(redis::Connection),
    Cluster(Box<redis::cluster::ClusterConnection>),
}

impl Engine {
    /// Connects (and authenticates) within the target's timeout.
    pub fn connect(t: &Target) -> RedisResult<Engine> {
        if t.cluster {
            let mut b = redis::cluster::ClusterClientBuilder::new(t.addresses.clone())
                .connection_timeout(t.timeout)
                .response_timeout(t.timeout)
                .retries(0);
            if let Some(p) = &t.password {
                b = b.password(p.clone());
            }
            let c = b.build()?.get_connection()?;
            c.set_read_timeout(Some(t.timeout))?;
            c.set_write_timeout(Some(t.timeout))?;
            return Ok(Engine::Cluster(Box::new(c)));
        }
        let mut info = redis::IntoConnectionInfo::into_connection_info(t.addresses[0].as_str())?;
        if let Some(p) = &t.password {
            let settings = info.redis_settings().clone().set_password(p);
            info = info.set_redis_settings(settings);
        }
        let c = redis::Client::open(info)?.get_connection_with_timeout(t.timeout)?;
        c.set_read_timeout(Some(t.timeout))?;
        c.set_write_timeout(Some(t.timeout))?;
        Ok(Engine::One(c))
    }

    pub(crate) fn conn(&mut self) -> &mut dyn ConnectionLike {
        match self {
            Engine::One(c) => c,
            Engine::Cluster(c) => c.as_mut(),
        }
    }

    /// Loads the scripts (on every primary of a cluster).
    pub fn load_script(&mut self) -> RedisResult<()> {
        for script in [SCRIPT, WINDOW_SCRIPT] {
            let _: String = redis::cmd("SCRIPT")
                .arg("LOAD")
                .arg(script)
                .query(self.conn())?;
        }
        Ok(())
    }

    /// One round of rate buckets alone: [`exchange`](Self::exchange)
    /// without budget windows.
    pub fn flush(&mut self, keys: &[Flush]) -> RedisResult<Vec<i64>> {
        Ok(self.exchange(keys, &[])?.0)
    }

    /// One round: every key's count in, every rate key's fleet bucket age
    /// (µs) and every window's fleet count back, in order (no key: a
    /// `PING`). Loads the scripts and sends again once on `NOSCRIPT`.
    /// O(keys); one round trip (two after a restart).
    pub fn exchange(&mut self, keys: &[Flush], windows: &[WindowFlush]) -> RedisResult<Answers> {
        if keys.is_empty() && windows.is_empty() {
            // Nothing shared: one PING keeps what the view says of the
            // engine true (a round's only operation).
            let _: String = redis::cmd("PING").query(self.conn())?;
            return Ok((Vec::new(), Vec::new()));
        }
        let answers = match self.send(keys, windows) {
            Err(e) if e.code() == Some("NOSCRIPT") => {
                self.load_script()?;
                self.send(keys, windows)
            }
            r => r,
        }?;
        let mut answers = answers.iter();
        let ages = answers
            .by_ref()
            .take(keys.len())
            .map(|a| a.parse::<i64>().unwrap_or(0))
            .collect();
        let counts = answers.map(|a| window_answer(a)).collect();
        Ok((ages, counts))
    }

    fn send(&mut self, keys: &[Flush], windows: &[WindowFlush]) -> RedisResult<Vec<String>> {
        let sha = redis::Script::new(SCRIPT).get_hash().to_string();
        let window_sha = redis::Script::new(WINDOW_SCRIPT).get_hash().to_string();
        let rates = keys.iter().map(|k| {
            let mut c = redis::cmd("EVALSHA");
            c.arg(&sha)
                .arg(1)
                .arg(bucket_name(k.identity, k.key))
                .arg(k.count)
                .arg(format!("{}", k.interval_ns as f64 / 1000.0))
                .arg(k.burst);
            c
        });
        let budgets = windows.iter().map(|w| {
            let mut c = redis::cmd("EVALSHA");
            c.arg(&window_sha)
                .arg(2)
                .arg(window_name(w.identity, w.key, w.window))
                .arg(lease_name(w.identity, w.key, w.window))
                .arg(w.count)
                .arg(w.window_ms.saturating_mul(2).saturating_add(1_000))
                .arg(format!("{:016x}", w.holder))
                .arg(w.outstanding)
                .arg(w.lease_ttl_ms);
            c
        });
        let commands = rates.chain(budgets);
        let answers: Vec<String> = match self {
            Engine::One(c) => {
                let mut p = redis::pipe();
                for cmd in commands {
                    p.add_command(cmd);
                }
                p.query(c)?
            }
            Engine::Cluster(c) => {
                let mut p = redis::cluster::cluster_pipe();
                for cmd in commands {
                    p.add_command(cmd);
                }
                p.query(c)?
            }
        };
        Ok(answers)
    }
}

/// What `gapura doctor` learns of the engine.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Health {
    /// `redis_version` of `INFO server` (or Valkey's `valkey_version`).
    pub version: String,
    /// `cluster_state` of `CLUSTER INFO` (a cluster only).
    pub cluster_state: Option<String>,
    /// One `PING`'s round trip.
    pub rtt: Duration,
}

/// Connects (and authenticates), reads the version (and a cluster's
/// state) and times one `PING`. For `gapura doctor`; never on a shard.
pub fn check(t: &Target) -> RedisResult<Health> {
    let mut e = Engine::connect(t)?;
    let info: String = match &mut e {
        Engine::One(c) => redis::cmd("INFO").arg("server").query(c)?,
        Engine::Cluster(c) => {
            let mut one = redis::Client::open(t.addresses[0].as_str())?
                .get_connection_with_timeout(t.timeout)?;
            if let Some(p) = &t.password {
                redis::cmd("AUTH").arg(p).query::<()>(&mut one)?;
            }
            let state: String = redis::cmd("CLUSTER").arg("INFO").query(&mut one)?;
            let _: String = redis::cmd("PING").query(c.as_mut())?;
            let info: String = redis::cmd("INFO").arg("server").query(&mut one)?;
            return Ok(Health {
                version: field(&info, &["valkey_version", "redis_version"]),
                cluster_state: Some(field(&state, &["cluster_state"])),
                rtt: timed_ping(&mut one)?,
            });
        }
    };
    let rtt = match &mut e {
        Engine::One(c) => timed_ping(c)?,
        Engine::Cluster(c) => timed_ping(c.as_mut())?,
    };
    Ok(Health {
        version: field(&info, &["valkey_version", "redis_version"]),
        cluster_state: None,
        rtt,
    })
}

fn timed_ping(c: &mut dyn ConnectionLike) -> RedisResult<Duration> {
    let started = std::time::Instant::now();
    let _: String = redis::cmd("PING").query(c)?;
    Ok(started.elapsed())
}

/// The first of `names` in an `INFO`-style text (`name:value` lines).
fn field(text: &str, names: &[&str]) -> String {
    names
        .iter()
        .find_map(|n| {
            text.lines()
                .find_map(|l| l.strip_prefix(n)?.strip_prefix(':'))
                .map(|v| v.trim().to_string())
        })
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::words;

    #[test]
    fn a_password_redis_refuses_is_said_in_words_with_where_it_is_set() {
        let refused = redis::RedisError::from((
            redis::ErrorKind::AuthenticationFailed,
            "Password authentication failed",
        ));
        assert_eq!(
            words(&refused),
            "it refused the password (the [fleet] password_file)"
        );
        let wrong = redis::make_extension_error(
            "WRONGPASS".into(),
            Some("invalid username-password pair".into()),
        );
        assert_eq!(words(&wrong), words(&refused));
        let none = redis::make_extension_error("NOAUTH".into(), Some("required".into()));
        assert!(words(&none).starts_with("it asks for a password"));
        // Anything else as Redis said it.
        let other = redis::make_extension_error("BUSY".into(), Some("script running".into()));
        assert!(words(&other).contains("BUSY"), "{}", words(&other));
    }
}

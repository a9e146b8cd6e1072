//! ACME's shared state in the engine: the order lock of each certificate
//! (with a fencing token and a lease that ends if its holder dies), each
//! node's challenge answers in flight and what the others have seen of
//! them, and each certificate, sealed by the ACME thread before it comes
//! here. Every key of one certificate shares a hash tag, so a Redis
//! Cluster keeps them on one node.
//!
//! Blocking calls within the target's timeout, made by the ACME thread
//! only; a failed call drops the connection and the next one connects
//! again.

use crate::engine::{words, Engine, Target};
use redis::{RedisResult, Script};

/// Takes a free lock: the fence counter moves on and the lock holds its
/// new value for the lease. Nil when the lock is held.
const LOCK: &str = r#"
local fence = redis.call('INCR', KEYS[2])
if redis.call('SET', KEYS[1], fence, 'NX', 'PX', ARGV[1]) then return fence end
return false
"#;

/// Deletes the lock if it still holds this fence.
const UNLOCK: &str = r#"
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"#;

/// Stores a certificate only for the lock's holder (a holder whose lease
/// ended and whose lock another took writes nothing).
const PUT: &str = r#"
if redis.call('GET', KEYS[1]) == ARGV[1] then redis.call('SET', KEYS[2], ARGV[2]) return 1 end
return 0
"#;

/// The engine's side of ACME for one node.
pub struct AcmeStore {
    target: Target,
    engine: Option<Engine>,
    prefix: String,
}

impl AcmeStore {
    /// Keys under `prefix` (a fleet's namespace); connects on first use.
    pub fn new(target: Target, prefix: &str) -> AcmeStore {
        AcmeStore {
            target,
            engine: None,
            prefix: prefix.to_string(),
        }
    }

    fn with<T>(&mut self, f: impl FnOnce(&mut Engine) -> RedisResult<T>) -> Result<T, String> {
        if self.engine.is_none() {
            self.engine = Some(Engine::connect(&self.target).map_err(|e| words(&e))?);
        }
        let engine = self.engine.as_mut().ok_or("no engine")?;
        let r = f(engine);
        if r.is_err() {
            self.engine = None;
        }
        r.map_err(|e| words(&e))
    }

    fn key(&self, what: &str, cert: &str) -> String {
        format!("{}:acme:{{{cert}}}:{what}", self.prefix)
    }

    /// The lock of certificate `cert` for `lease_ms`: its fencing token
    /// when taken, `None` while another holds it.
    pub fn lock(&mut self, cert: &str, lease_ms: u64) -> Result<Option<u64>, String> {
        let (lock, fence) = (self.key("lock", cert), self.key("fence", cert));
        self.with(|e| {
            Script::new(LOCK)
                .key(lock)
                .key(fence)
                .arg(lease_ms)
                .invoke(e.conn())
        })
    }

    /// Lets the lock go if it is still this fence's.
    pub fn unlock(&mut self, cert: &str, fence: u64) -> Result<(), String> {
        let lock = self.key("lock", cert);
        self.with(|e| {
            Script::new(UNLOCK)
                .key(lock)
                .arg(fence)
                .invoke::<i64>(e.conn())
        })
        .map(drop)
    }

    /// Stores `sealed` as certificate `cert`; false when `fence` no longer
    /// holds the lock (nothing written).
    pub fn put_certificate(
        &mut self,
        cert: &str,
        fence: u64,
        sealed: &[u8],
    ) -> Result<bool, String> {
        let (lock, data) = (self.key("lock", cert), self.key("certificate", cert));
        self.with(|e| {
            Script::new(PUT)
                .key(lock)
                .key(data)
                .arg(fence)
                .arg(sealed)
                .invoke::<i64>(e.conn())
        })
        .map(|n| n == 1)
    }

    /// Certificate `cert` as stored, sealed.
    pub fn certificate(&mut self, cert: &str) -> Result<Option<Vec<u8>>, String> {
        let data = self.key("certificate", cert);
        self.with(|e| redis::cmd("GET").arg(data).query(e.conn()))
    }

    fn answers_key(&self) -> String {
        format!("{}:acme:answers", self.prefix)
    }

    fn seen_key(&self) -> String {
        format!("{}:acme:seen", self.prefix)
    }

    /// This node's answers in flight (`None`: none), kept at most `ttl_ms`.
    pub fn set_answers(
        &mut self,
        node: &str,
        blob: Option<&[u8]>,
        ttl_ms: u64,
    ) -> Result<(), String> {
        let key = self.answers_key();
        self.with(|e| {
            match blob {
                Some(b) => {
                    redis::pipe()
                        .cmd("HSET")
                        .arg(&key)
                        .arg(node)
                        .arg(b)
                        .ignore()
                        .cmd("PEXPIRE")
                        .arg(&key)
                        .arg(ttl_ms)
                        .ignore()
                        .query::<()>(e.conn())?;
                }
                None => redis::cmd("HDEL")
                    .arg(&key)
                    .arg(node)
                    .query::<()>(e.conn())?,
            }
            Ok(())
        })
    }

    /// Every node's answers in flight.
    pub fn answers(&mut self) -> Result<Vec<(String, Vec<u8>)>, String> {
        let key = self.answers_key();
        self.with(|e| redis::cmd("HGETALL").arg(key).query(e.conn()))
    }

    /// Says which answers this node serves (their names, space-separated).
    pub fn serving(&mut self, node: &str, names: &str, ttl_ms: u64) -> Result<(), String> {
        let key = self.seen_key();
        self.with(|e| {
            redis::pipe()
                .cmd("HSET")
                .arg(&key)
                .arg(node)
                .arg(names)
                .ignore()
                .cmd("PEXPIRE")
                .arg(&key)
                .arg(ttl_ms)
                .ignore()
                .query::<()>(e.conn())
        })
    }

    /// How many nodes said they serve every one of `names`.
    pub fn served_by(&mut self, names: &[String]) -> Result<usize, String> {
        let key = self.seen_key();
        let all: Vec<(String, String)> =
            self.with(|e| redis::cmd("HGETALL").arg(key).query(e.conn()))?;
        Ok(all
            .iter()
            .filter(|(_, list)| {
                let have: Vec<&str> = list.split(' ').collect();
                names.iter().all(|n| have.contains(&n.as_str()))
            })
            .count())
    }
}

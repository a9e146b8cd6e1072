//! The engine's side of [`crate::profile`]: one blocking connection that
//! publishes, moves the pointer, reads versions (refusing an oversized one
//! before its text crosses the network) and keeps what nodes report. For
//! the `gapura fleet` commands and a node's puller thread; never a shard.

use crate::engine::{words, Engine, Target};
use crate::profile::{
    version_key, Pointer, Report, Signer, State, Version, HALT_KEY, HEALTH_KEY, NEXT_KEY,
    NODES_KEY, POINTER_KEY, SEEN_KEY,
};
use crate::rollout::Rollout;
use std::collections::HashMap;

/// A node as the engine has it: its name, its last report, when it last
/// looked (Unix s).
pub type NodeState = (String, Option<Report>, Option<u64>);

/// The halt: set `SERIAL REASON` only while the pointer of that serial is
/// current and no halt of it is set.
const HALT_SCRIPT: &str = r#"
local p = redis.call('GET', KEYS[1])
if not p or string.match(p, '^(%d+) ') ~= ARGV[1] then return 0 end
local h = redis.call('GET', KEYS[2])
if h and string.match(h, '^(%d+) ') == ARGV[1] then return 0 end
redis.call('SET', KEYS[2], ARGV[1] .. ' ' .. ARGV[2])
return 1
"#;

/// One connection to the engine.
pub struct Store {
    engine: Engine,
}

fn err(e: redis::RedisError) -> String {
    words(&e)
}

impl Store {
    pub fn connect(t: &Target) -> Result<Store, String> {
        Engine::connect(t)
            .map(|engine| Store { engine })
            .map_err(err)
    }

    fn query<T: redis::FromRedisValue>(&mut self, c: &redis::Cmd) -> Result<T, String> {
        c.query(self.engine.conn()).map_err(err)
    }

    /// Stores `text` as the next version, signed, and makes it current
    /// (`live`) under `rollout` (its previous version filled in from the
    /// pointer it replaces). Returns the version and its pointer.
    pub fn publish(
        &mut self,
        text: String,
        author: &str,
        (time_s, now_ms): (u64, u64),
        mut rollout: Rollout,
        key: &Signer,
    ) -> Result<(Version, Pointer), String> {
        if let Some(p) = self.pointer()? {
            rollout.previous = p.version;
            rollout.previous_sha256 = p.sha256;
        }
        let number: u64 = self.query(redis::cmd("INCR").arg(NEXT_KEY))?;
        let v = Version::signed(number, text, author, time_s, key);
        let fields = [
            ("sha256", v.sha256.clone()),
            ("size", v.size.to_string()),
            ("author", v.author.clone()),
            ("time", v.time.to_string()),
            ("signature", v.signature.clone()),
            ("text", v.text.clone()),
        ];
        let mut c = redis::cmd("HSET");
        c.arg(version_key(number));
        for (k, val) in &fields {
            c.arg(*k).arg(val);
        }
        self.query::<()>(&c)?;
        let p = self.point((number, &v.sha256), State::Live, rollout, now_ms, key)?;
        Ok((v, p))
    }

    /// Makes version `number` (of digest `sha256`) current in `state`,
    /// under a serial above the pointer it replaces.
    pub fn point(
        &mut self,
        version: (u64, &str),
        state: State,
        rollout: Rollout,
        now_ms: u64,
        key: &Signer,
    ) -> Result<Pointer, String> {
        let last = self.pointer()?.map_or(0, |p| p.serial);
        let p = Pointer::signed(now_ms.max(last + 1), version, state, rollout, key);
        self.query::<()>(redis::cmd("SET").arg(POINTER_KEY).arg(p.encode()))?;
        Ok(p)
    }

    /// The pointer as stored (`None`: nothing published, or not a
    /// pointer).
    pub fn pointer(&mut self) -> Result<Option<Pointer>, String> {
        let s: Option<String> = self.query(redis::cmd("GET").arg(POINTER_KEY))?;
        Ok(s.as_deref().and_then(Pointer::decode))
    }

    /// Version `number`; `Err` when its text is over `max_bytes` (asked
    /// before the text is read) or a field is missing.
    pub fn version(&mut self, number: u64, max_bytes: u64) -> Result<Option<Version>, String> {
        let key = version_key(number);
        let len: u64 = self.query(redis::cmd("HSTRLEN").arg(&key).arg("text"))?;
        if len > max_bytes {
            return Err(format!(
                "version {number} is {len} bytes, over the bound of {max_bytes}"
            ));
        }
        let m: HashMap<String, String> = self.query(redis::cmd("HGETALL").arg(&key))?;
        if m.is_empty() {
            return Ok(None);
        }
        let field = |k: &str| {
            m.get(k)
                .cloned()
                .ok_or_else(|| format!("version {number} has no {k}"))
        };
        let num = |k: &str| -> Result<u64, String> {
            field(k)?
                .parse()
                .map_err(|_| format!("version {number}'s {k} is not a number"))
        };
        Ok(Some(Version {
            number,
            text: field("text")?,
            sha256: field("sha256")?,
            size: num("size")?,
            author: field("author")?,
            time: num("time")?,
            signature: field("signature")?,
        }))
    }

    /// The newest version number given.
    pub fn latest(&mut self) -> Result<u64, String> {
        let n: Option<u64> = self.query(redis::cmd("GET").arg(NEXT_KEY))?;
        Ok(n.unwrap_or(0))
    }

    /// Records what `node` says, and that it looked at `time`.
    pub fn report(&mut self, node: &str, r: &Report) -> Result<(), String> {
        self.query::<()>(redis::cmd("HSET").arg(NODES_KEY).arg(node).arg(r.encode()))?;
        self.seen(node, r.time)
    }

    /// Records that `node` looked at the pointer at `time` (Unix s).
    pub fn seen(&mut self, node: &str, time: u64) -> Result<(), String> {
        self.query::<()>(redis::cmd("HSET").arg(SEEN_KEY).arg(node).arg(time))
    }

    /// Halts the rollout of the pointer of `serial`, saying `reason`, if
    /// that pointer is still current and not halted yet (one script:
    /// whichever canary asks first halts it). Whether this call did.
    pub fn halt(&mut self, serial: u64, reason: &str) -> Result<bool, String> {
        let done: i64 = self.query(
            redis::cmd("EVAL")
                .arg(HALT_SCRIPT)
                .arg(2)
                .arg(POINTER_KEY)
                .arg(HALT_KEY)
                .arg(serial)
                .arg(reason),
        )?;
        Ok(done == 1)
    }

    /// The halted serial and why, if a rollout is halted.
    pub fn halted(&mut self) -> Result<Option<(u64, String)>, String> {
        let s: Option<String> = self.query(redis::cmd("GET").arg(HALT_KEY))?;
        Ok(s.and_then(|s| {
            let (serial, reason) = s.split_once(' ')?;
            Some((serial.parse().ok()?, reason.to_string()))
        }))
    }

    /// Records a canary's last interval: `VERSION REQUESTS ERRORS REFUSED
    /// TIME`.
    pub fn health(&mut self, node: &str, line: &str) -> Result<(), String> {
        self.query::<()>(redis::cmd("HSET").arg(HEALTH_KEY).arg(node).arg(line))
    }

    /// Every canary's last interval, by name.
    pub fn healths(&mut self) -> Result<HashMap<String, String>, String> {
        self.query(redis::cmd("HGETALL").arg(HEALTH_KEY))
    }

    /// Every node's last report and when it last looked, by name.
    pub fn nodes(&mut self) -> Result<Vec<NodeState>, String> {
        let reports: HashMap<String, String> = self.query(redis::cmd("HGETALL").arg(NODES_KEY))?;
        let seen: HashMap<String, String> = self.query(redis::cmd("HGETALL").arg(SEEN_KEY))?;
        let mut names: Vec<&String> = reports.keys().chain(seen.keys()).collect();
        names.sort();
        names.dedup();
        Ok(names
            .into_iter()
            .map(|n| {
                (
                    n.clone(),
                    reports.get(n).and_then(|r| Report::decode(r)),
                    seen.get(n).and_then(|s| s.parse().ok()),
                )
            })
            .collect())
    }
}

//! Where a shard sends password checks: the process's verification pool.
//! PBKDF2 never runs on a shard thread; how a connection waits for its
//! check is `conn::verify`.

use gapura_gate::access::line::{Full, Ticket};
use gapura_gate::access::{VerifyJob, VerifyResult};

/// The process's verification pool, shared by every shard.
pub trait VerifyPool: Send + Sync {
    /// Enters a job. `Err` when the line (or this client's share) is full:
    /// answer 429 with `Retry-After: 1`.
    fn submit(&self, job: VerifyJob, now_ms: u64) -> Result<Ticket, Full>;
    /// The result, once the job has run.
    fn poll(&self, ticket: Ticket) -> Option<VerifyResult>;
    /// The waiter left (client gone, wait over): frees its place.
    fn cancel(&self, ticket: Ticket);
}

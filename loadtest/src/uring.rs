//! Direct io_uring engine for plain closed-loop HTTP/1.1 (not built yet).

use crate::shard::ShardCtx;
use crate::stats::ShardStats;

/// Runs the shard on the direct engine; an error means nothing was sent yet.
pub fn run_shard(_ctx: &ShardCtx) -> Result<ShardStats, String> {
    Err("not built".into())
}

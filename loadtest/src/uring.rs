//! Direct io_uring engine for plain closed-loop HTTP/1.1 (not built yet).

use crate::shard::ShardCtx;
use crate::stats::ShardStats;

/// Runs the shard on the direct engine, or hands the context back with the reason it cannot.
pub fn run_shard(ctx: ShardCtx) -> Result<ShardStats, (ShardCtx, String)> {
    Err((ctx, "not built".into()))
}

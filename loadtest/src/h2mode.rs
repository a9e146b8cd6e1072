//! HTTP/2 (not built yet).

use crate::shard::ShardCtx;
use crate::stats::ShardStats;

pub fn run_shard(_ctx: ShardCtx) -> Result<ShardStats, String> {
    Err("--http2 is not built yet".into())
}

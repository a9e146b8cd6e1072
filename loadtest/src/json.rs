//! JSON output (not built yet).
use crate::{cli::Config, findmax::Curve, shard::Outcome};
pub fn document(_cfg: &Config, _o: &Outcome, _fm: Option<&Curve>) -> serde_json::Value { serde_json::Value::Null }

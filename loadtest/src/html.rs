//! HTML report (not built yet).
use crate::{cli::Config, findmax::Curve, shard::Outcome};
pub fn page(_cfg: &Config, _o: &Outcome, _fm: Option<&Curve>) -> String { String::new() }

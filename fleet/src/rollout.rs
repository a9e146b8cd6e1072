//! A staged rollout's terms and its pure rules: which nodes are canaries
//! for a version, and what a canary's interval of traffic says.
//!
//! The publisher signs the terms into the pointer ([`Rollout`]): the
//! canary share (0: every node at once), the soak time the canaries hold
//! the version before the rest take it, the 5xx and refusal shares that
//! halt it, and the version the canaries return to. A node is a canary
//! for version V when a hash of its name and V falls under the share; when
//! none of the nodes seen lately is, the one with the lowest hash is (a
//! rollout always has a canary). The halt itself is the engine's
//! (`profilestore::Store::halt`, one script, no controller).

use sha2::{Digest, Sha256};

/// A rollout's terms, signed with the pointer.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Rollout {
    /// Percent of the nodes that take the version first (0: all at once).
    pub canary_pct: u8,
    /// How long the canaries hold it before the rest take it.
    pub soak_ms: u64,
    /// Shares of a canary's answers (per mille) that halt the rollout:
    /// 5xx, and the gate's refusals (0: not watched).
    pub halt_5xx_permille: u16,
    pub halt_refused_permille: u16,
    /// The version canaries return to on a halt (0: none).
    pub previous: u64,
    pub previous_sha256: String,
}

impl Rollout {
    /// `CANARY SOAK_MS HALT_5XX HALT_REFUSED PREVIOUS PREVIOUS_SHA256`
    /// (`-` for no previous digest).
    pub fn encode(&self) -> String {
        let sha = if self.previous_sha256.is_empty() {
            "-"
        } else {
            &self.previous_sha256
        };
        format!(
            "{} {} {} {} {} {sha}",
            self.canary_pct,
            self.soak_ms,
            self.halt_5xx_permille,
            self.halt_refused_permille,
            self.previous
        )
    }

    /// The six fields [`Rollout::encode`] writes, from `it`.
    pub fn decode<'a>(it: &mut impl Iterator<Item = &'a str>) -> Option<Rollout> {
        let canary_pct = it.next()?.parse().ok().filter(|&p: &u8| p <= 100)?;
        let soak_ms = it.next()?.parse().ok()?;
        let halt_5xx_permille = it.next()?.parse().ok()?;
        let halt_refused_permille = it.next()?.parse().ok()?;
        let previous = it.next()?.parse().ok()?;
        let previous_sha256 = match it.next()? {
            "-" => String::new(),
            s => s.to_string(),
        };
        Some(Rollout {
            canary_pct,
            soak_ms,
            halt_5xx_permille,
            halt_refused_permille,
            previous,
            previous_sha256,
        })
    }

    /// Whether the rollout is staged.
    pub fn staged(&self) -> bool {
        self.canary_pct > 0 && self.canary_pct < 100
    }
}

/// A node's place for version `version`: 0 to 99.
pub fn rank(node: &str, version: u64) -> u64 {
    let d = Sha256::new()
        .chain_update(node.as_bytes())
        .chain_update([0xFF])
        .chain_update(version.to_be_bytes())
        .finalize();
    u64::from_be_bytes([d[0], d[1], d[2], d[3], d[4], d[5], d[6], d[7]])
}

/// Whether `node` is a canary for `version` among the nodes `seen` lately
/// (itself included or not).
pub fn is_canary<'a>(
    node: &str,
    version: u64,
    pct: u8,
    seen: impl IntoIterator<Item = &'a str> + Clone,
) -> bool {
    let under = |n: &str| rank(n, version) % 100 < u64::from(pct);
    if under(node) {
        return true;
    }
    let mut names: Vec<&str> = seen.into_iter().collect();
    if names.iter().any(|n| under(n)) {
        return false;
    }
    // No node seen is under the share: the lowest rank is the canary.
    names.push(node);
    names.iter().min_by_key(|n| rank(n, version)) == Some(&node)
}

/// One interval of a canary's traffic: whether it passes `r`'s halt
/// thresholds (`Some(reason)`), given the requests, 5xx answers and
/// refusals counted in it. Fewer than `min` requests say nothing.
pub fn verdict(
    r: &Rollout,
    (requests, errors, refused): (u64, u64, u64),
    min: u64,
) -> Option<String> {
    if requests < min {
        return None;
    }
    let permille = |n: u64| n.saturating_mul(1000) / requests.max(1);
    let over = |limit: u16, n: u64| limit > 0 && permille(n) > u64::from(limit);
    if over(r.halt_5xx_permille, errors) {
        return Some(format!(
            "{} of {requests} answers were 5xx ({}‰, over {}‰)",
            errors,
            permille(errors),
            r.halt_5xx_permille
        ));
    }
    if over(r.halt_refused_permille, refused) {
        return Some(format!(
            "{} of {requests} requests were refused ({}‰, over {}‰)",
            refused,
            permille(refused),
            r.halt_refused_permille
        ));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn terms_round_trip() {
        let r = Rollout {
            canary_pct: 34,
            soak_ms: 30_000,
            halt_5xx_permille: 50,
            halt_refused_permille: 0,
            previous: 3,
            previous_sha256: "ab".into(),
        };
        assert_eq!(Rollout::decode(&mut r.encode().split(' ')), Some(r));
        let none = Rollout::default();
        assert_eq!(Rollout::decode(&mut none.encode().split(' ')), Some(none));
    }

    #[test]
    fn a_share_picks_about_its_share_and_always_one() {
        let names: Vec<String> = (0..1000).map(|i| format!("edge-{i}")).collect();
        let seen = names.iter().map(String::as_str);
        let canaries = names
            .iter()
            .filter(|n| is_canary(n, 7, 10, seen.clone()))
            .count();
        assert!((60..=140).contains(&canaries), "{canaries} of 1000 at 10 %");
        // The same nodes for the same version; others for another.
        let again = names
            .iter()
            .filter(|n| is_canary(n, 7, 10, seen.clone()))
            .count();
        assert_eq!(canaries, again);
        // Two nodes, a share neither falls under: exactly one canary.
        let pair = ["a", "b"];
        let pct = (1..100u8)
            .find(|&p| pair.iter().all(|n| rank(n, 1) % 100 >= u64::from(p)))
            .unwrap_or(1);
        let n = pair.iter().filter(|x| is_canary(x, 1, pct, pair)).count();
        assert_eq!(n, 1);
    }

    #[test]
    fn an_interval_over_a_threshold_halts() {
        let r = Rollout {
            canary_pct: 34,
            halt_5xx_permille: 50,
            ..Rollout::default()
        };
        assert_eq!(verdict(&r, (100, 5, 0), 20), None, "5 % is the bound");
        assert!(verdict(&r, (100, 6, 0), 20).unwrap().contains("5xx"));
        assert_eq!(verdict(&r, (10, 10, 0), 20), None, "too few to say");
        assert_eq!(verdict(&r, (100, 0, 100), 20), None, "refusals not watched");
    }
}

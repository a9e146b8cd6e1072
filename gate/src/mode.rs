//! Enforce or shadow: how a block's would-be refusal is carried out.
//!
//! Every refusing block (rule sets, access lists, country rules, rate limits,
//! maintenance) takes a [`Mode`]. Enforced, a refusal is answered. Shadowed,
//! the block still decides in full, but its refusal is only counted as a
//! shadow hit and the request goes on, so an operator can roll a rule out and
//! watch what it would have done before it does it. The helper is the one
//! place that turns "would refuse" into "counted, continue"; a block keeps its
//! own counters and passes the shadow counter in.
//!
//! Cost: a match and an add. No allocation.

/// How a block's refusals are carried out. The profile key is
/// `mode = "enforce" | "shadow"` (built-in `enforce`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Mode {
    /// Refusals are answered (the built-in).
    #[default]
    Enforce,
    /// Refusals are counted as shadow hits and the request goes on.
    Shadow,
}

impl Mode {
    /// Parses the profile value `"enforce"` or `"shadow"`.
    pub fn parse(s: &str) -> Option<Mode> {
        match s {
            "enforce" => Some(Mode::Enforce),
            "shadow" => Some(Mode::Shadow),
            _ => None,
        }
    }

    /// The profile value.
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Enforce => "enforce",
            Mode::Shadow => "shadow",
        }
    }

    /// Carries out a block's would-be refusal: enforced, it is returned
    /// unchanged; shadowed, `shadow_hits` is incremented and `None` comes
    /// back, meaning "continue". `None` in is `None` out in both modes.
    /// O(1), no allocation.
    #[inline]
    pub fn apply<R>(self, would_refuse: Option<R>, shadow_hits: &mut u64) -> Option<R> {
        match (self, would_refuse) {
            (Mode::Shadow, Some(_)) => {
                *shadow_hits += 1;
                None
            }
            (_, refusal) => refusal,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn enforce_passes_refusals_through_and_counts_nothing() {
        let mut hits = 0;
        assert_eq!(Mode::Enforce.apply(Some(403u16), &mut hits), Some(403));
        assert_eq!(Mode::Enforce.apply(None::<u16>, &mut hits), None);
        assert_eq!(hits, 0);
    }

    #[test]
    fn shadow_turns_a_refusal_into_a_counted_continue() {
        let mut hits = 0;
        assert_eq!(Mode::Shadow.apply(Some(403u16), &mut hits), None);
        assert_eq!(Mode::Shadow.apply(Some(403u16), &mut hits), None);
        assert_eq!(hits, 2);
        assert_eq!(Mode::Shadow.apply(None::<u16>, &mut hits), None);
        assert_eq!(hits, 2, "nothing to refuse is not a shadow hit");
    }

    #[test]
    fn profile_values_round_trip() {
        for m in [Mode::Enforce, Mode::Shadow] {
            assert_eq!(Mode::parse(m.as_str()), Some(m));
        }
        assert_eq!(Mode::parse("Shadow"), None);
        assert_eq!(Mode::parse(""), None);
        assert_eq!(Mode::default(), Mode::Enforce);
    }
}

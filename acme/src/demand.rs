//! On-demand certificates' rules, pure: the `on_demand` settings the
//! thread keeps, the fixed windows that bound its orders and asks, the
//! refused names it remembers, which names may be ordered, and the ask
//! URL. The thread's side (`ondemand`) carries them out.

/// The most refused names remembered.
pub const MAX_REFUSED: usize = 1024;
/// The most certificates on demand a process keeps (past it a new name
/// is not asked about: its handshakes get the default certificate).
pub const MAX_ON_DEMAND: usize = 10_000;
/// How long a refused name is not asked about again.
pub const REFUSED_FOR_S: i64 = 60;

/// `on_demand` as the thread keeps it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OnDemand {
    pub ask: String,
    /// Orders allowed per `per_s` seconds.
    pub count: u32,
    pub per_s: u64,
}

/// A fixed window's count.
#[derive(Debug, Default)]
pub(crate) struct Window {
    start_s: i64,
    used: u32,
}

impl Window {
    /// Takes one of `count` in the window of `per_s` seconds `now_s` is in.
    pub(crate) fn take(&mut self, count: u32, per_s: u64, now_s: i64) -> bool {
        let start = now_s - now_s.rem_euclid(per_s.max(1) as i64);
        if start != self.start_s {
            self.start_s = start;
            self.used = 0;
        }
        if self.used >= count {
            return false;
        }
        self.used += 1;
        true
    }
}

/// The thread's on-demand state.
#[derive(Debug, Default)]
pub(crate) struct State {
    pub(crate) orders: Window,
    pub(crate) asks: Window,
    /// Names refused, and until when.
    pub(crate) refused: Vec<(String, i64)>,
}

/// Whether `name` may be a certificate's name: a host name of letters,
/// digits, `-` and `.`, not an address, at most 253 bytes.
pub fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 253
        && name.contains('.')
        && name.parse::<std::net::IpAddr>().is_err()
        && name.split('.').all(|l| {
            !l.is_empty()
                && l.len() <= 63
                && !l.starts_with('-')
                && !l.ends_with('-')
                && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
        })
}

/// The ask URL for `name`.
pub fn ask_url(ask: &str, name: &str) -> String {
    let sep = if ask.contains('?') { '&' } else { '?' };
    format!("{ask}{sep}domain={name}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_window_allows_its_count_and_starts_over_with_the_next() {
        let mut w = Window::default();
        assert!(w.take(2, 60, 120));
        assert!(w.take(2, 60, 150));
        assert!(!w.take(2, 60, 179));
        assert!(w.take(2, 60, 180));
        assert!(!w.take(0, 60, 300));
    }

    #[test]
    fn only_host_names_are_ordered() {
        for ok in ["a.test", "www.a-b.example", "x1.y2.z3"] {
            assert!(valid_name(ok), "{ok}");
        }
        for bad in [
            "",
            "localhost",
            "127.0.0.1",
            "a..test",
            "-a.test",
            "a-.test",
            "a_b.test",
            "*.a.test",
            "a.test.",
            &"a".repeat(254),
        ] {
            assert!(!valid_name(bad), "{bad}");
        }
    }

    #[test]
    fn the_name_is_added_to_the_ask_url() {
        assert_eq!(
            ask_url("http://ask/ok", "a.test"),
            "http://ask/ok?domain=a.test"
        );
        assert_eq!(
            ask_url("http://ask/ok?k=1", "a.test"),
            "http://ask/ok?k=1&domain=a.test"
        );
    }
}

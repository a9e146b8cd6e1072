//! Progress on a terminal: bytes read of the file's size, the percentage
//! and lines per second, on one line rewritten with `\r`, at most four
//! times a second. Nothing is written when the writer is not a terminal.

use std::io::Write;
use std::time::{Duration, Instant};

const EVERY: Duration = Duration::from_millis(250);

/// Writes progress when enabled.
pub struct Progress<'w> {
    out: Option<&'w mut dyn Write>,
    total: u64,
    start: Instant,
    last: Instant,
    shown: bool,
}

impl<'w> Progress<'w> {
    /// `out`: `None` writes nothing. `total`: the file's size (0: unknown).
    pub fn new(out: Option<&'w mut dyn Write>, total: u64) -> Self {
        let now = Instant::now();
        Progress {
            out,
            total,
            start: now,
            last: now,
            shown: false,
        }
    }

    /// Called for every line; looks at the clock every 4096 lines.
    pub fn tick(&mut self, bytes: u64, lines: u64) {
        if self.out.is_none() || lines & 4095 != 0 {
            return;
        }
        let now = Instant::now();
        if now.duration_since(self.last) < EVERY {
            return;
        }
        self.last = now;
        self.show(bytes, lines, now);
    }

    fn show(&mut self, bytes: u64, lines: u64, now: Instant) {
        let secs = now.duration_since(self.start).as_secs_f64().max(1e-3);
        let rate = lines as f64 / secs;
        let line = if self.total > 0 {
            let pct = (bytes as f64 * 100.0 / self.total as f64).min(100.0);
            format!(
                "\r{} / {} ({pct:.1} %), {rate:.0} lines/s   ",
                human(bytes),
                human(self.total)
            )
        } else {
            format!("\r{}, {rate:.0} lines/s   ", human(bytes))
        };
        if let Some(out) = self.out.as_mut() {
            // Progress is a courtesy: a terminal that fails is not an error.
            let _ = out.write_all(line.as_bytes());
            let _ = out.flush();
            self.shown = true;
        }
    }

    /// The last figures, then a newline, when anything was shown.
    pub fn finish(&mut self, bytes: u64, lines: u64) {
        if !self.shown {
            return;
        }
        self.show(bytes, lines, Instant::now());
        if let Some(out) = self.out.as_mut() {
            let _ = out.write_all(b"\n");
        }
    }
}

/// Bytes in B, KiB, MiB or GiB, one decimal.
fn human(b: u64) -> String {
    const UNITS: [&str; 4] = ["B", "KiB", "MiB", "GiB"];
    let mut v = b as f64;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{b} B")
    } else {
        format!("{v:.1} {}", UNITS[u])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn progress_writes_only_when_asked() {
        let mut sink = Vec::new();
        {
            let mut p = Progress::new(Some(&mut sink), 2048);
            p.last = Instant::now() - EVERY * 2;
            p.tick(1024, 4096);
            p.finish(2048, 8000);
        }
        let text = String::from_utf8(sink).unwrap();
        assert!(text.starts_with("\r1.0 KiB / 2.0 KiB (50.0 %)"), "{text}");
        assert!(text.ends_with('\n'));
        let mut p = Progress::new(None, 10);
        p.tick(1, 4096);
        p.finish(1, 1);
    }
}

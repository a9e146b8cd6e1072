//! Findings, the report they make, and how it is written: text for a
//! person, JSON for a program, and the exit code.

use std::fmt::Write as _;

/// How much a finding matters, least first.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Level {
    /// As Gapura wants it.
    Ok,
    /// Worth knowing; nothing to fix (or doctor cannot tell).
    Info,
    /// Gapura runs, but worse than it could (or falls back).
    Warn,
    /// Gapura will not start or will not work as the profile asks.
    Fail,
}

impl Level {
    pub fn name(self) -> &'static str {
        match self {
            Level::Ok => "ok",
            Level::Info => "info",
            Level::Warn => "warn",
            Level::Fail => "fail",
        }
    }
}

/// One thing doctor looked at.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Finding {
    /// Stable identifier ("limits.nofile").
    pub id: &'static str,
    pub level: Level,
    /// What was found, with the numbers.
    pub found: String,
    /// Why it matters to Gapura.
    pub why: String,
    /// How to fix it (the exact setting or command); empty when there is
    /// nothing to do.
    pub fix: String,
}

impl Finding {
    pub fn new(id: &'static str, level: Level, found: impl Into<String>) -> Finding {
        Finding {
            id,
            level,
            found: found.into(),
            why: String::new(),
            fix: String::new(),
        }
    }

    pub fn why(mut self, why: impl Into<String>) -> Finding {
        self.why = why.into();
        self
    }

    pub fn fix(mut self, fix: impl Into<String>) -> Finding {
        self.fix = fix.into();
        self
    }
}

/// Exit code: nothing warns or fails.
pub const EXIT_OK: u8 = 0;
/// Exit code: something fails.
pub const EXIT_FAIL: u8 = 1;
/// Exit code reserved for usage errors (the caller's command line).
pub const EXIT_USAGE: u8 = 2;
/// Exit code: the worst finding is a warning.
pub const EXIT_WARN: u8 = 3;

/// Every finding, in the order the checks ran.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Report {
    pub findings: Vec<Finding>,
}

impl Report {
    /// The worst level found (`Ok` for an empty report).
    pub fn worst(&self) -> Level {
        self.findings
            .iter()
            .map(|f| f.level)
            .max()
            .unwrap_or(Level::Ok)
    }

    /// 0 when nothing warns or fails, 3 when the worst is a warning, 1 when
    /// anything fails.
    pub fn exit_code(&self) -> u8 {
        match self.worst() {
            Level::Ok | Level::Info => EXIT_OK,
            Level::Warn => EXIT_WARN,
            Level::Fail => EXIT_FAIL,
        }
    }

    /// The finding with this id.
    pub fn get(&self, id: &str) -> Option<&Finding> {
        self.findings.iter().find(|f| f.id == id)
    }

    fn count(&self, level: Level) -> usize {
        self.findings.iter().filter(|f| f.level == level).count()
    }

    /// Text for a person: failures, then warnings, then information, then
    /// what is fine, each finding a block with what was found, why it
    /// matters and how to fix it; a summary line last.
    pub fn to_text(&self) -> String {
        let mut out = String::new();
        for level in [Level::Fail, Level::Warn, Level::Info, Level::Ok] {
            let group: Vec<&Finding> = self.findings.iter().filter(|f| f.level == level).collect();
            if group.is_empty() {
                continue;
            }
            let _ = writeln!(out, "== {} ==", heading(level));
            for f in group {
                write_block(&mut out, f);
            }
        }
        let _ = writeln!(
            out,
            "{} checks: {} fail, {} warn, {} info, {} ok (exit {})",
            self.findings.len(),
            self.count(Level::Fail),
            self.count(Level::Warn),
            self.count(Level::Info),
            self.count(Level::Ok),
            self.exit_code()
        );
        out
    }

    /// `{"exit_code": n, "summary": {"fail": n, "warn": n, "info": n,
    /// "ok": n}, "findings": [{"id", "level", "found", "why", "fix"}]}`,
    /// findings in the order the checks ran.
    pub fn to_json(&self) -> serde_json::Value {
        let findings: Vec<serde_json::Value> = self
            .findings
            .iter()
            .map(|f| {
                serde_json::json!({
                    "id": f.id,
                    "level": f.level.name(),
                    "found": f.found,
                    "why": f.why,
                    "fix": f.fix,
                })
            })
            .collect();
        serde_json::json!({
            "exit_code": self.exit_code(),
            "summary": {
                "fail": self.count(Level::Fail),
                "warn": self.count(Level::Warn),
                "info": self.count(Level::Info),
                "ok": self.count(Level::Ok),
            },
            "findings": findings,
        })
    }
}

fn heading(level: Level) -> &'static str {
    match level {
        Level::Fail => "FAILURES",
        Level::Warn => "WARNINGS",
        Level::Info => "INFORMATION",
        Level::Ok => "OK",
    }
}

fn write_block(out: &mut String, f: &Finding) {
    let _ = writeln!(out, "[{}] {}", f.level.name().to_uppercase(), f.id);
    write_field(out, "found", &f.found);
    write_field(out, "why", &f.why);
    write_field(out, "fix", &f.fix);
    out.push('\n');
}

fn write_field(out: &mut String, name: &str, text: &str) {
    if text.is_empty() {
        return;
    }
    for (i, line) in text.lines().enumerate() {
        let label = if i == 0 { name } else { "" };
        let _ = writeln!(out, "  {label:<6} {line}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(levels: &[Level]) -> Report {
        Report {
            findings: levels
                .iter()
                .map(|&l| Finding::new("x.y", l, "found"))
                .collect(),
        }
    }

    #[test]
    fn exit_codes_follow_the_worst_level() {
        assert_eq!(report(&[]).exit_code(), 0);
        assert_eq!(report(&[Level::Ok, Level::Info]).exit_code(), 0);
        assert_eq!(
            report(&[Level::Ok, Level::Warn, Level::Info]).exit_code(),
            3
        );
        assert_eq!(report(&[Level::Fail, Level::Warn]).exit_code(), 1);
        assert_eq!(EXIT_USAGE, 2);
    }

    #[test]
    fn text_puts_failures_first_and_labels_every_field() {
        let r = Report {
            findings: vec![
                Finding::new("a.ok", Level::Ok, "fine"),
                Finding::new("b.warn", Level::Warn, "so-so\nsecond line")
                    .why("because")
                    .fix("sysctl -w x=1"),
                Finding::new("c.fail", Level::Fail, "broken"),
            ],
        };
        let t = r.to_text();
        let fail = t.find("[FAIL] c.fail").unwrap();
        let warn = t.find("[WARN] b.warn").unwrap();
        let ok = t.find("[OK] a.ok").unwrap();
        assert!(fail < warn && warn < ok, "{t}");
        assert!(t.contains("  found  so-so\n         second line\n"), "{t}");
        assert!(
            t.contains("  why    because\n  fix    sysctl -w x=1\n"),
            "{t}"
        );
        assert!(
            t.ends_with("3 checks: 1 fail, 1 warn, 0 info, 1 ok (exit 1)\n"),
            "{t}"
        );
    }

    #[test]
    fn json_has_the_same_fields() {
        let r = Report {
            findings: vec![Finding::new("a.b", Level::Warn, "f").why("w").fix("x")],
        };
        let j = r.to_json();
        assert_eq!(j["exit_code"], 3);
        assert_eq!(j["summary"]["warn"], 1);
        assert_eq!(j["summary"]["ok"], 0);
        let f = &j["findings"][0];
        assert_eq!(
            (&f["id"], &f["level"], &f["found"], &f["why"], &f["fix"]),
            (
                &serde_json::json!("a.b"),
                &serde_json::json!("warn"),
                &serde_json::json!("f"),
                &serde_json::json!("w"),
                &serde_json::json!("x")
            )
        );
    }
}

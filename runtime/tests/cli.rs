//! The command line itself: usage errors and their exit status, `--help` and
//! `--version`, and the completion scripts and man pages generated from the
//! same definition.

use std::process::{Command, Output};

const COMMANDS: [&str; 8] = [
    "run",
    "check",
    "explain",
    "passwd",
    "doctor",
    "tune",
    "completions",
    "man",
];

fn gapura(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_gapura"))
        .args(args)
        .env_remove("GAPURA_PASSWORD")
        .output()
        .unwrap()
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[test]
fn usage_errors_exit_2_with_a_message_on_stderr() {
    for args in [
        &[][..],
        &["frobnicate"],
        &["run", "--watch"],
        &["run", "--bogus"],
        &["run", "--profile"],
        &["check"],
        &["check", "a.toml", "b.toml"],
        &["explain"],
        &["explain", "GET", "http://a.test/", "extra"],
        &["explain", "--via", "carrier-pigeon", "http://a.test/"],
        &["explain", "--peer", "not-an-ip", "http://a.test/"],
        &["explain", "-H", "no colon", "http://a.test/"],
        &["passwd", "--iterations", "5"],
        &["passwd", "--iterations", "many"],
        &["passwd", "extra"],
        &["completions"],
        &["completions", "tcsh"],
        &["man", "frobnicate"],
        &["doctor", "--bogus"],
        &["tune"],
        &["tune", "--access-log"],
    ] {
        let out = gapura(args);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", stderr(&out));
        assert!(!stderr(&out).is_empty(), "{args:?}");
        assert!(out.stdout.is_empty(), "{args:?}: {}", stdout(&out));
    }
    // The message names what is wrong.
    let out = gapura(&["run", "--watch"]);
    assert!(stderr(&out).contains("--profile"), "{}", stderr(&out));
    let out = gapura(&["passwd", "--iterations", "5"]);
    assert!(
        stderr(&out).contains("100000 to 10000000"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn help_and_version_exit_0_on_stdout() {
    let out = gapura(&["--version"]);
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(
        stdout(&out).trim(),
        format!("gapura {}", env!("CARGO_PKG_VERSION"))
    );
    assert_eq!(stdout(&gapura(&["-V"])), stdout(&out));
    for args in [&["--help"][..], &["-h"], &["help"]] {
        let out = gapura(args);
        assert_eq!(out.status.code(), Some(0), "{args:?}");
        let text = stdout(&out);
        for c in COMMANDS {
            assert!(text.contains(c), "{args:?} lacks {c}: {text}");
        }
    }
    for c in COMMANDS {
        let out = gapura(&[c, "--help"]);
        assert_eq!(out.status.code(), Some(0), "{c}: {}", stderr(&out));
        assert!(
            stdout(&out).contains(&format!("gapura {c}")),
            "{}",
            stdout(&out)
        );
    }
    let text = stdout(&gapura(&["run", "--help"]));
    assert!(
        text.contains("--profile") && text.contains("--watch"),
        "{text}"
    );
}

#[test]
fn passwd_takes_its_iterations_and_refuses_an_empty_password() {
    let out = Command::new(env!("CARGO_BIN_EXE_gapura"))
        .args(["passwd", "--iterations", "100000"])
        .env("GAPURA_PASSWORD", "open-sesame")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(
        stdout(&out).starts_with("$pbkdf2-sha256$i=100000$"),
        "{}",
        stdout(&out)
    );
    let out = Command::new(env!("CARGO_BIN_EXE_gapura"))
        .arg("passwd")
        .env("GAPURA_PASSWORD", "")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
}

#[test]
fn every_shell_gets_a_completion_script_naming_every_command() {
    for shell in ["bash", "zsh", "fish", "elvish", "powershell"] {
        let out = gapura(&["completions", shell]);
        assert_eq!(out.status.code(), Some(0), "{shell}: {}", stderr(&out));
        let script = stdout(&out);
        assert!(script.len() > 500, "{shell}: {script}");
        assert!(script.contains("gapura"), "{shell}");
        for c in COMMANDS {
            assert!(script.contains(c), "{shell} lacks {c}");
        }
        // Options of the subcommands are completed too.
        assert!(script.contains("watch"), "{shell} lacks --watch");
        assert!(script.contains("iterations"), "{shell} lacks --iterations");
    }
}

#[test]
fn man_prints_gapura_1_and_a_page_per_command() {
    let out = gapura(&["man"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let page = stdout(&out);
    assert!(page.contains(".TH gapura 1"), "{page}");
    for section in ["NAME", "SYNOPSIS", "DESCRIPTION", "SUBCOMMANDS"] {
        assert!(
            page.contains(&format!(".SH {section}")),
            "{section}: {page}"
        );
    }
    assert!(page.contains(".SH \"EXIT STATUS\""), "{page}");
    for c in COMMANDS {
        // roff escapes the hyphen.
        assert!(page.contains(&format!("gapura\\-{c}(1)")), "{c}: {page}");
    }
    for c in COMMANDS {
        let out = gapura(&["man", c]);
        assert_eq!(out.status.code(), Some(0), "{c}: {}", stderr(&out));
        let page = stdout(&out);
        assert!(page.contains(&format!(".TH gapura-{c} 1")), "{c}: {page}");
        assert!(page.contains(".SH SYNOPSIS"), "{c}: {page}");
    }
    let page = stdout(&gapura(&["man", "run"]));
    assert!(page.contains("\\-\\-watch"), "{page}");
    let page = stdout(&gapura(&["man", "explain"]));
    assert!(page.contains("cloudflare"), "{page}");
}

#[test]
fn doctor_reports_every_check_as_json_with_its_exit_code() {
    let out = gapura(&["doctor", "--json"]);
    let code = out.status.code().unwrap();
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["exit_code"], code, "{}", stdout(&out));
    assert!([0, 1, 3].contains(&code), "{code}");
    let ids: Vec<&str> = report["findings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, gapura_doctor::CHECK_IDS);
    // A profile with errors is named, not checked against.
    let dir = std::env::temp_dir().join(format!("gapura-cli-doctor-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let bad = dir.join("bad.toml");
    std::fs::write(&bad, "[server]\nbogus = 1\n").unwrap();
    let out = gapura(&["doctor", "--profile", bad.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("error[profile.unknown_key]"),
        "{}",
        stderr(&out)
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn tune_reads_a_log_and_suggests_a_rate() {
    let dir = std::env::temp_dir().join(format!("gapura-cli-tune-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let log = dir.join("access.log");
    let mut text = String::new();
    // Ten clients, 3 requests a second each for 60 seconds (the least
    // tune suggests a rate from).
    for s in 0..60 {
        for c in 1..=10 {
            for _ in 0..3 {
                text.push_str(&format!(
                    "{{\"time\":\"2026-12-01T10:00:{s:02}.000Z\",\"shard\":0,\"client\":\"192.0.2.{c}\",\"host\":\"a.test\",\"method\":\"GET\",\"path\":\"/\",\"status\":200,\"bytes\":10,\"upstream_ms\":null,\"total_ms\":0,\"request_id\":\"x\",\"verdict\":\"respond\",\"step\":\"answer\"}}\n"
                ));
            }
        }
    }
    std::fs::write(&log, text).unwrap();
    let out = gapura(&["tune", "--access-log", log.to_str().unwrap(), "--write"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    // σ is 0, so the rate is the mean itself.
    let text = stdout(&out);
    assert!(text.contains("\nrequests = 3 "), "{text}");
    // The burst: ten times the busiest second (3).
    assert!(text.contains("\nburst = 30 "), "{text}");
    // The clients share 192.0.2.0/24: 30 a window.
    assert!(text.contains("[quota.source]\nrequests = 30 "), "{text}");
    let out = gapura(&[
        "tune",
        "--access-log",
        dir.join("missing.log").to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(1));
    let _ = std::fs::remove_dir_all(&dir);
}

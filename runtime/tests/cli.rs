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

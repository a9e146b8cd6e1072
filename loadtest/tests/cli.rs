//! The command line itself, through the binary: usage errors and their exit
//! status, `--help` and `--version`, and the completion scripts and man page
//! generated from the same definition.

use std::process::{Command, Output};

fn loadtest(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_gapura-loadtest"))
        .args(args)
        .output()
        .expect("the binary runs")
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[test]
fn usage_errors_exit_2_naming_the_flag() {
    for (args, names) in [
        (&[][..], "<URL>"),
        (&["--bogus", "http://127.0.0.1:1/"], "--bogus"),
        (&["-c", "many", "http://127.0.0.1:1/"], "--connections"),
        (&["-d10parsecs", "http://127.0.0.1:1/"], "--duration"),
        (&["-R", "0", "http://127.0.0.1:1/"], "--rate"),
        (&["--driver", "kqueue", "http://127.0.0.1:1/"], "--driver"),
        (&["-H", "no colon", "http://127.0.0.1:1/"], "--header"),
        (&["-t", "0", "http://127.0.0.1:1/"], "-t"),
        (&["-s", "pipeline.lua", "http://127.0.0.1:1/"], "Lua"),
        (&["--completions", "tcsh"], "--completions"),
        (
            &["--completions", "bash", "http://127.0.0.1:1/"],
            "--completions",
        ),
    ] {
        let out = loadtest(args);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", stderr(&out));
        assert!(stderr(&out).contains(names), "{args:?}: {}", stderr(&out));
        assert!(out.stdout.is_empty(), "{args:?}: {}", stdout(&out));
    }
}

#[test]
fn help_and_version_exit_0_on_stdout() {
    for a in ["-h", "--help"] {
        let out = loadtest(&[a]);
        assert_eq!(out.status.code(), Some(0), "{a}");
        let text = stdout(&out);
        for flag in [
            "--connections",
            "--threads",
            "--duration",
            "--rate",
            "--find-max",
        ] {
            assert!(text.contains(flag), "{a} lacks {flag}: {text}");
        }
    }
    for a in ["-v", "--version"] {
        let out = loadtest(&[a]);
        assert_eq!(out.status.code(), Some(0), "{a}");
        assert_eq!(
            stdout(&out).trim(),
            format!("gapura-loadtest {}", env!("CARGO_PKG_VERSION"))
        );
    }
}

#[test]
fn every_shell_gets_a_completion_script() {
    for shell in ["bash", "zsh", "fish", "elvish", "powershell"] {
        let out = loadtest(&["--completions", shell]);
        assert_eq!(out.status.code(), Some(0), "{shell}: {}", stderr(&out));
        let script = stdout(&out);
        assert!(script.contains("gapura-loadtest"), "{shell}: {script}");
        for flag in ["connections", "duration", "find-max", "engine"] {
            assert!(script.contains(flag), "{shell} lacks {flag}");
        }
    }
}

#[test]
fn man_prints_the_page() {
    let out = loadtest(&["--man"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let page = stdout(&out);
    assert!(page.contains(".TH gapura-loadtest 1"), "{page}");
    for section in [
        ".SH NAME",
        ".SH SYNOPSIS",
        ".SH OPTIONS",
        ".SH \"EXIT STATUS\"",
    ] {
        assert!(page.contains(section), "{section}: {page}");
    }
    // roff escapes the hyphens.
    assert!(page.contains("\\-\\-connections"), "{page}");
    assert!(page.contains("\\-\\-find\\-max"), "{page}");
}

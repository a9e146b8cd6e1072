//! Every `gapura check` and `gapura explain` command the README and
//! docs/*.md show in a code block, run against the shipped profiles: a
//! command the docs give an operator must work as written. A command
//! whose profile is not shipped (`/etc/gapura/...`, an example file a
//! page makes up) is skipped, and the test says how many ran.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

/// Shell words of a command line: whitespace-separated, `"..."` and
/// `'...'` kept whole, a trailing `# comment` dropped.
fn words(line: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut quote = None;
    let mut started = false;
    for c in line.chars() {
        match (quote, c) {
            (None, '#') if !started => break,
            (None, '"' | '\'') => {
                quote = Some(c);
                started = true;
            }
            (Some(q), c) if c == q => quote = None,
            (None, c) if c.is_whitespace() => {
                if started {
                    out.push(std::mem::take(&mut cur));
                    started = false;
                }
            }
            (_, c) => {
                cur.push(c);
                started = true;
            }
        }
    }
    if started {
        out.push(cur);
    }
    out
}

/// The `gapura check`/`explain` lines inside the code blocks of `text`,
/// as their words after `gapura`.
fn commands(text: &str) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    let mut in_block = false;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            in_block = !in_block;
            continue;
        }
        if !in_block {
            continue;
        }
        let line = line.trim_start().trim_start_matches("$ ");
        let line = line.strip_prefix("./target/release/").unwrap_or(line);
        let w = words(line);
        if w.len() >= 2 && w[0] == "gapura" && (w[1] == "check" || w[1] == "explain") {
            out.push(w[1..].to_vec());
        }
    }
    out
}

/// The profile a command names: `check FILE`, or `--profile`/`-p FILE`.
fn profile_of(args: &[String]) -> Option<&str> {
    if args[0] == "check" {
        return args.get(1).map(String::as_str);
    }
    let at = args.iter().position(|a| a == "--profile" || a == "-p")?;
    args.get(at + 1).map(String::as_str)
}

#[test]
fn the_check_and_explain_commands_the_docs_show_work_as_written() {
    let root = root();
    let mut pages = vec![root.join("README.md")];
    for e in std::fs::read_dir(root.join("docs")).unwrap().flatten() {
        if e.path().extension().is_some_and(|x| x == "md") {
            pages.push(e.path());
        }
    }
    pages.sort();
    let (mut ran, mut skipped) = (0, 0);
    for page in &pages {
        for args in commands(&std::fs::read_to_string(page).unwrap()) {
            let shipped = profile_of(&args)
                .is_some_and(|p| p.starts_with("profiles/") && root.join(p).is_file());
            if !shipped || args.iter().any(|a| a == "--live") {
                skipped += 1;
                continue;
            }
            let out = Command::new(common::bin())
                .args(&args)
                .current_dir(&root)
                .output()
                .unwrap();
            assert!(
                out.status.success(),
                "{}: gapura {}\n{}{}",
                page.display(),
                args.join(" "),
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
            ran += 1;
        }
    }
    println!("{ran} commands ran, {skipped} skipped (their profile is not shipped)");
    assert!(ran >= 2, "the README's check and explain at least");
}

#[test]
fn the_reader_finds_commands_in_blocks_only() {
    let text = "gapura check outside.toml\n```sh\n$ gapura check profiles/a.toml  # a comment\n./target/release/gapura explain -p x.toml udp://game 1.2.3.4:5 \"01 02\"\ncargo build\n```\n";
    let c = commands(text);
    assert_eq!(
        c,
        vec![
            vec!["check".to_string(), "profiles/a.toml".to_string()],
            [
                "explain",
                "-p",
                "x.toml",
                "udp://game",
                "1.2.3.4:5",
                "01 02"
            ]
            .map(String::from)
            .to_vec(),
        ]
    );
    assert_eq!(profile_of(&c[0]), Some("profiles/a.toml"));
    assert_eq!(profile_of(&c[1]), Some("x.toml"));
}

//! Every crate's root doc names every module the crate declares at its
//! root, and so does each module whose doc lists its own modules: a reader
//! starting from a crate's doc reaches every module in one hop.
//!
//! A module is named when its name appears backticked in the file's leading
//! `//!` block (`` `name` ``, or a link `` [`name`] ``). Modules under
//! `#[cfg(...)]` or `#[doc(hidden)]` count like the others.

use std::path::{Path, PathBuf};

/// Files below the crate roots whose doc lists their modules.
const LISTINGS: &[&str] = &[
    "http/src/server/mod.rs",
    "http/src/server/conn/mod.rs",
    "http/src/server/conn/forward/mod.rs",
    "http/src/codec/mod.rs",
    "gate/src/chain/mod.rs",
];

/// The workspace's root folder.
fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn read(file: &str) -> String {
    std::fs::read_to_string(workspace().join(file))
        .unwrap_or_else(|e| panic!("cannot read {file}: {e}"))
}

/// The workspace's members, as the root Cargo.toml lists them on its
/// `members = [...]` line.
fn members() -> Vec<String> {
    let manifest = read("Cargo.toml");
    let line = manifest
        .lines()
        .find(|l| l.trim_start().starts_with("members"))
        .expect("the workspace's Cargo.toml has a members line");
    let list = &line[line.find('[').expect("members = [") + 1..line.rfind(']').expect("]")];
    list.split(',')
        .map(|m| m.trim().trim_matches('"').to_string())
        .filter(|m| !m.is_empty())
        .collect()
}

/// Each member's crate roots: `src/lib.rs` and `src/main.rs`, those that
/// exist.
fn roots() -> Vec<String> {
    let mut roots = Vec::new();
    for m in members() {
        let found: Vec<String> = ["lib.rs", "main.rs"]
            .iter()
            .map(|f| format!("{m}/src/{f}"))
            .filter(|f| workspace().join(f).is_file())
            .collect();
        assert!(
            !found.is_empty(),
            "{m} has neither src/lib.rs nor src/main.rs"
        );
        roots.extend(found);
    }
    roots
}

/// The modules `text` declares: lines `mod x;`, `pub mod x;` or
/// `pub(crate) mod x;`.
fn declared(text: &str) -> Vec<&str> {
    text.lines()
        .filter_map(|l| {
            let l = l.trim();
            let rest = ["mod ", "pub mod ", "pub(crate) mod "]
                .iter()
                .find_map(|p| l.strip_prefix(p))?;
            Some(rest.strip_suffix(';')?.trim())
        })
        .collect()
}

/// The leading `//!` block of `text`.
fn doc(text: &str) -> String {
    text.lines()
        .map(str::trim)
        .take_while(|l| l.starts_with("//!") || l.is_empty())
        .filter_map(|l| l.strip_prefix("//!"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// "`name` is declared in FILE and its doc does not name it", for each
/// module of `file` its doc leaves out.
fn unnamed(file: &str) -> Vec<String> {
    let text = read(file);
    let doc = doc(&text);
    declared(&text)
        .into_iter()
        .filter(|m| !doc.contains(&format!("`{m}`")))
        .map(|m| format!("`{m}` is declared in {file} and its doc does not name it"))
        .collect()
}

#[test]
fn every_crate_doc_names_every_module_the_crate_declares() {
    let roots = roots();
    for r in [
        "runtime/src/main.rs",
        "config/src/lib.rs",
        "http/src/lib.rs",
    ] {
        assert!(roots.iter().any(|f| f == r), "{r} is not among the roots");
    }
    let missing: Vec<String> = roots.iter().flat_map(|f| unnamed(f)).collect();
    assert!(missing.is_empty(), "\n{}\n", missing.join("\n"));
}

#[test]
fn every_module_listing_names_every_module_declared_beside_it() {
    for f in LISTINGS {
        assert!(
            !declared(&read(f)).is_empty(),
            "{f} declares no module: the listing is gone or the scan misreads it"
        );
    }
    let missing: Vec<String> = LISTINGS.iter().flat_map(|f| unnamed(f)).collect();
    assert!(missing.is_empty(), "\n{}\n", missing.join("\n"));
}

#[test]
fn the_scan_reads_declarations_and_docs_as_written() {
    let text = "//! Modules: `a` and [`b`].\n//!\n//! More.\n\n#![forbid(unsafe_code)]\n\n\
                mod a;\npub mod b;\n#[cfg(test)]\npub(crate) mod c;\nmod d {\n}\n";
    assert_eq!(declared(text), ["a", "b", "c"]);
    assert_eq!(doc(text), " Modules: `a` and [`b`].\n\n More.");
}

//! The crates' inner borders, read from their sources: within any crate,
//! no import circle spans more than 2 files (DESIGN: arrows point down; a
//! circle is a design bug, between the files of one crate alike).
//!
//! A file's module is its path under `src/` (`a/b.rs` and `a/b/mod.rs` are
//! `a::b`). An import is a `crate::`, `super::` or `self::` path, or a path
//! that starts with a child module's name, outside comments and outside
//! `#[cfg(test)]` modules (a test module is its parent's, and may use what
//! its parent uses). A parent's `pub use` of its own children's items is a
//! facade, not an import (the children are below it). A path names the
//! longest module it starts with. Circles are found in the strongly
//! connected components of that graph.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

type Module = Vec<String>;

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let p = entry.path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|e| e == "rs") {
            out.push(p);
        }
    }
}

fn module_of(src: &Path, file: &Path) -> Module {
    let rel = file.strip_prefix(src).unwrap().with_extension("");
    let mut m: Module = rel
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    if matches!(m.last().map(String::as_str), Some("mod" | "lib" | "main")) {
        m.pop();
    }
    m
}

/// The text without comments and without `#[cfg(test)]` modules written
/// inline (their braces matched).
fn code_of(text: &str) -> String {
    let no_comments: String = text
        .lines()
        .map(|l| match l.find("//") {
            Some(i) if !l[..i].contains('"') => &l[..i],
            _ => l,
        })
        .collect::<Vec<_>>()
        .join("\n");
    let mut out = String::new();
    let mut rest = no_comments.as_str();
    while let Some(i) = rest.find("#[cfg(test)]") {
        out.push_str(&rest[..i]);
        let after = &rest[i + "#[cfg(test)]".len()..];
        let trimmed = after.trim_start();
        let is_inline_mod = trimmed.starts_with("mod ")
            && trimmed
                .find(['{', ';'])
                .is_some_and(|j| trimmed.as_bytes()[j] == b'{');
        if !is_inline_mod {
            rest = after;
            continue;
        }
        let open = after.find('{').unwrap();
        let mut depth = 0usize;
        let mut end = after.len();
        for (j, c) in after[open..].char_indices() {
            match c {
                '{' => depth += 1,
                '}' => {
                    depth -= 1;
                    if depth == 0 {
                        end = open + j + 1;
                        break;
                    }
                }
                _ => {}
            }
        }
        rest = &after[end..];
    }
    out.push_str(rest);
    out
}

/// `code` without its `pub use` statements of the module's own children
/// (`is_child` of a path's first name).
fn without_facade(code: &str, is_child: impl Fn(&str) -> bool) -> String {
    let mut out = String::new();
    let mut rest = code;
    while let Some(i) = rest
        .find("pub use ")
        .or_else(|| rest.find("pub(crate) use "))
    {
        let start = rest[i..]
            .find("use ")
            .map(|j| i + j + 4)
            .unwrap_or(rest.len());
        let end = rest[start..]
            .find(';')
            .map_or(rest.len(), |j| start + j + 1);
        let first = rest[start..end]
            .split("::")
            .next()
            .unwrap_or("")
            .trim()
            .to_string();
        out.push_str(&rest[..i]);
        if !is_child(&first) {
            out.push_str(&rest[i..end]);
        }
        rest = &rest[end..];
    }
    out.push_str(rest);
    out
}

/// Every path of `::`-joined identifiers in `code`.
fn paths(code: &str) -> Vec<Vec<String>> {
    let bytes = code.as_bytes();
    let ident = |b: u8| b.is_ascii_alphanumeric() || b == b'_';
    let mut out = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        if ident(bytes[i]) && (i == 0 || !(ident(bytes[i - 1]) || bytes[i - 1] == b':')) {
            let mut parts = Vec::new();
            let mut j = i;
            loop {
                let start = j;
                while j < bytes.len() && ident(bytes[j]) {
                    j += 1;
                }
                parts.push(code[start..j].to_string());
                if code[j..].starts_with("::") && j + 2 < bytes.len() && ident(bytes[j + 2]) {
                    j += 2;
                } else if code[j..].starts_with("::{") {
                    // `a::{b, c::D}`: each item under the prefix.
                    let close = code[j..].find('}').map_or(bytes.len(), |k| j + k);
                    for item in code[j + 3..close].split(',') {
                        let mut p = parts.clone();
                        p.extend(item.trim().split("::").map(|s| s.trim().to_string()));
                        out.push(p);
                    }
                    break;
                } else {
                    break;
                }
            }
            if parts.len() > 1 {
                out.push(parts);
            }
            i = j.max(i + 1);
        } else {
            i += 1;
        }
    }
    out
}

fn graph(crate_dir: &Path) -> BTreeMap<Module, BTreeSet<Module>> {
    let src = crate_dir.join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let modules: BTreeMap<Module, PathBuf> = files
        .iter()
        .map(|f| (module_of(&src, f), f.clone()))
        .collect();
    let longest = |p: &[String]| {
        (0..=p.len())
            .rev()
            .map(|n| p[..n].to_vec())
            .find(|m| modules.contains_key(m))
    };
    let mut g: BTreeMap<Module, BTreeSet<Module>> = BTreeMap::new();
    for (m, file) in &modules {
        let code = without_facade(&code_of(&std::fs::read_to_string(file).unwrap()), |first| {
            let mut child = m.clone();
            child.push(first.to_string());
            first == "self" || modules.contains_key(&child)
        });
        let edges = g.entry(m.clone()).or_default();
        for p in paths(&code) {
            let target: Module = match p[0].as_str() {
                "crate" => p[1..].to_vec(),
                "self" => m.iter().cloned().chain(p[1..].iter().cloned()).collect(),
                "super" => {
                    let mut base = m.clone();
                    let mut rest = &p[..];
                    while rest.first().is_some_and(|s| s == "super") {
                        base.pop();
                        rest = &rest[1..];
                    }
                    base.into_iter().chain(rest.iter().cloned()).collect()
                }
                // A child module's name.
                first => {
                    let mut child = m.clone();
                    child.push(first.to_string());
                    if !modules.contains_key(&child) {
                        continue;
                    }
                    m.iter().cloned().chain(p.iter().cloned()).collect()
                }
            };
            if let Some(t) = longest(&target) {
                if &t != m && !t.is_empty() {
                    edges.insert(t);
                }
            }
        }
    }
    g
}

/// The strongly connected components (Tarjan's), largest first.
fn circles(g: &BTreeMap<Module, BTreeSet<Module>>) -> Vec<Vec<Module>> {
    struct State<'a> {
        g: &'a BTreeMap<Module, BTreeSet<Module>>,
        index: BTreeMap<&'a Module, usize>,
        low: BTreeMap<&'a Module, usize>,
        stack: Vec<&'a Module>,
        on: BTreeSet<&'a Module>,
        out: Vec<Vec<Module>>,
    }
    fn visit<'a>(s: &mut State<'a>, v: &'a Module) {
        let n = s.index.len();
        s.index.insert(v, n);
        s.low.insert(v, n);
        s.stack.push(v);
        s.on.insert(v);
        let g = s.g;
        for w in g.get(v).into_iter().flatten() {
            let Some((w, _)) = g.get_key_value(w) else {
                continue;
            };
            if !s.index.contains_key(w) {
                visit(s, w);
                let lw = s.low[w];
                let lv = s.low.get_mut(v).unwrap();
                *lv = (*lv).min(lw);
            } else if s.on.contains(w) {
                let iw = s.index[w];
                let lv = s.low.get_mut(v).unwrap();
                *lv = (*lv).min(iw);
            }
        }
        if s.low[v] == s.index[v] {
            let mut comp = Vec::new();
            while let Some(w) = s.stack.pop() {
                s.on.remove(w);
                comp.push(w.clone());
                if w == v {
                    break;
                }
            }
            s.out.push(comp);
        }
    }
    let mut s = State {
        g,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on: BTreeSet::new(),
        out: Vec::new(),
    };
    for v in g.keys() {
        if !s.index.contains_key(v) {
            visit(&mut s, v);
        }
    }
    s.out.sort_by_key(|c| std::cmp::Reverse(c.len()));
    s.out
}

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

const CRATES: [&str; 12] = [
    "runtime", "http", "udp", "gate", "config", "bench", "loadtest", "doctor", "tune", "fuzz",
    "fleet", "acme",
];

/// Whether a strongly connected component holds a circle through more
/// than 2 files. It does not only when every import in it goes both ways
/// and those pairs form a tree (a module and its children, each child
/// using its parent: circles of 2 only); an import one way only lies on a
/// circle of 3 or more, and so does a loop of pairs.
fn has_long_circle(g: &BTreeMap<Module, BTreeSet<Module>>, comp: &[Module]) -> bool {
    if comp.len() <= 2 {
        return false;
    }
    let inside: BTreeSet<&Module> = comp.iter().collect();
    let mut pairs = 0;
    for a in comp {
        for b in g[a].iter().filter(|b| inside.contains(b)) {
            if !g[b].contains(a) {
                return true;
            }
            pairs += 1;
        }
    }
    // Each pair was seen from both ends.
    pairs / 2 > comp.len() - 1
}

#[test]
fn no_crate_has_an_import_circle_over_two_files() {
    let mut found = Vec::new();
    for name in CRATES {
        let g = graph(&workspace().join(name));
        for c in circles(&g).into_iter().filter(|c| has_long_circle(&g, c)) {
            let mut names: Vec<String> = c.iter().map(|m| m.join("::")).collect();
            names.sort();
            let inside: BTreeSet<&Module> = c.iter().collect();
            let arrows: Vec<String> = c
                .iter()
                .flat_map(|a| {
                    g[a].iter()
                        .filter(|b| inside.contains(b))
                        .map(move |b| format!("{} -> {}", a.join("::"), b.join("::")))
                })
                .collect();
            found.push(format!(
                "{name}: {} files: {} ({})",
                names.len(),
                names.join(", "),
                arrows.join("; ")
            ));
        }
    }
    assert!(
        found.is_empty(),
        "import circles over 2 files:\n{}",
        found.join("\n")
    );
}

#[test]
fn the_reader_finds_a_circle_it_is_shown() {
    // Three files in a circle (one through a child's name, one through
    // `super`, one through `crate`), a test module's import left out.
    let dir = std::env::temp_dir().join(format!("gapura-borders-{}", std::process::id()));
    let src = dir.join("src");
    std::fs::create_dir_all(src.join("a")).unwrap();
    std::fs::write(src.join("lib.rs"), "pub mod a;\npub mod c;\n").unwrap();
    std::fs::write(
        src.join("a/mod.rs"),
        "pub mod b;\nuse b::B;\n// use crate::x::Y;\n",
    )
    .unwrap();
    std::fs::write(
        src.join("a/b.rs"),
        "pub struct B(crate::c::C);\n#[cfg(test)]\nmod tests {\n    use crate::a::Z;\n}\n",
    )
    .unwrap();
    std::fs::write(
        src.join("c.rs"),
        "pub struct C;\nuse crate::a::{self, Q};\n",
    )
    .unwrap();
    let g = graph(&dir);
    let big = circles(&g);
    let _ = std::fs::remove_dir_all(&dir);
    let mut first: Vec<String> = big[0].iter().map(|m| m.join("::")).collect();
    first.sort();
    assert_eq!(first, ["a", "a::b", "c"], "{g:?}");
    assert!(has_long_circle(&g, &big[0]));
    let module = |s: &str| s.split("::").map(String::from).collect::<Module>();
    // `a::b` imports `c`; its test module's `crate::a::Z` is not counted.
    assert_eq!(g[&module("a::b")], BTreeSet::from([module("c")]));
}

#[test]
fn a_module_and_children_that_use_it_are_circles_of_two() {
    let module = |s: &str| s.split("::").map(String::from).collect::<Module>();
    let mut g: BTreeMap<Module, BTreeSet<Module>> = BTreeMap::new();
    for (a, b) in [("p", "p::x"), ("p::x", "p"), ("p", "p::y"), ("p::y", "p")] {
        g.entry(module(a)).or_default().insert(module(b));
        g.entry(module(b)).or_default();
    }
    let comp = circles(&g).remove(0);
    assert_eq!(comp.len(), 3);
    assert!(!has_long_circle(&g, &comp), "a star of pairs");
    // One child using the other closes a circle of three.
    g.get_mut(&module("p::x")).unwrap().insert(module("p::y"));
    assert!(has_long_circle(&g, &comp));
}

#[test]
fn the_http_codec_stands_alone() {
    // The codec is below the gate and below the rest of its crate: it is
    // fuzzed without them, and what it knows of a request is bytes.
    let src = workspace().join("http/src/codec");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    assert!(files.len() > 3, "{files:?}");
    let mut found = Vec::new();
    for f in files {
        let code = code_of(&std::fs::read_to_string(&f).unwrap());
        for (i, line) in code.lines().enumerate() {
            let upward = line
                .match_indices("crate::")
                .any(|(at, _)| !line[at..].starts_with("crate::codec"));
            if line.contains("gapura_gate") || upward {
                found.push(format!("{}:{}: {}", f.display(), i + 1, line.trim()));
            }
        }
    }
    assert!(found.is_empty(), "the codec imports:\n{}", found.join("\n"));
}

#[test]
fn an_http2_or_http3_stream_reads_no_http1_answer() {
    // An HTTP/2 or HTTP/3 client's answers are sent from their parts: the
    // stream's transport and the HTTP/3 connection parse no HTTP/1.1
    // response head and decode no chunked body (what the HTTP/2 stream
    // once did to every answer it was handed as text).
    let mut files = vec![workspace().join("http/src/server/muxstream.rs")];
    rust_files(&workspace().join("http/src/server/h3"), &mut files);
    assert!(files.len() >= 4, "{files:?}");
    for path in &files {
        let code = code_of(&std::fs::read_to_string(path).unwrap());
        let found: Vec<&str> = [
            "parse_response",
            "upstream::response",
            "ChunkedDecoder",
            "httparse::Response",
        ]
        .into_iter()
        .filter(|needle| code.contains(needle))
        .collect();
        assert!(found.is_empty(), "{} uses {found:?}", path.display());
    }
    let mux = code_of(&std::fs::read_to_string(&files[0]).unwrap());
    assert!(
        mux.contains("fn send_answer"),
        "the parts' sender moved: update this test"
    );
}

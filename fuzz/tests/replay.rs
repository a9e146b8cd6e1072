//! Every checked-in corpus file (the seeds and what long runs kept, crash
//! reproducers among them) through its target: the quick replay that
//! keeps fixed defects fixed.

use std::path::Path;

#[test]
fn every_corpus_replays_without_a_failure() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("corpus");
    for (name, target) in gapura_fuzz::TARGETS {
        let dir = root.join(name);
        let mut files: Vec<_> = std::fs::read_dir(&dir)
            .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
            .map(|e| e.expect("an entry").path())
            .collect();
        files.sort();
        assert!(
            files.iter().any(|f| f
                .file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with("seed-"))),
            "{name} has no seed"
        );
        for file in &files {
            let data = std::fs::read(file).expect("a corpus file");
            let outcome = std::panic::catch_unwind(|| target(&data));
            assert!(outcome.is_ok(), "{name}: {} fails", file.display());
        }
        println!("{name}: {} inputs", files.len());
    }
}

/// The seeds reach the depths the targets are for: requests through the
/// h2 server, a server hello from rustls.
#[test]
fn the_front_seeds_reach_requests_and_handshakes() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("corpus");
    let h2 = std::fs::read(root.join("h2_front/seed-00")).expect("a seed");
    assert_eq!(gapura_fuzz::front::h2_streams(&h2), 2);
    let hello = std::fs::read(root.join("tls_front/seed-00")).expect("a seed");
    assert!(gapura_fuzz::front::tls_answer(&hello) > 100);
}

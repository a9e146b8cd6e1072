//! The profile compiler: TOML text in, a snapshot or placed errors out,
//! never a panic.

use gapura_config::{compile_with, Environment, NoFiles, NoNames};

/// Compiles `data` (as UTF-8, lossily) as a profile: errors come in source
/// order, each with a stable code and a position inside the text.
pub fn profile(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    let env = Environment {
        cores: 2,
        memory_bytes: 1 << 30,
        resolver: &NoNames,
        certificates: &NoFiles,
    };
    let lines = text.lines().count() as u32 + 1;
    match compile_with(&text, &env) {
        Ok(compiled) => {
            for w in &compiled.warnings {
                assert!(w.line <= lines, "{w}");
            }
        }
        Err(errors) => {
            assert!(!errors.is_empty());
            for e in &errors {
                assert!(!e.code.is_empty() && e.code.is_ascii(), "{e}");
                assert!(e.line <= lines, "{e} past line {lines}");
            }
            assert!(errors
                .windows(2)
                .all(|w| (w[0].line, w[0].column) <= (w[1].line, w[1].column)));
        }
    }
}

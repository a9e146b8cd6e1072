//! Whole-profile tests: every error code from a small profile, with its
//! exact path and position, and the shipped profiles.

mod access;
mod access_spec;
mod acme;
mod auth;
mod bundles;
mod chain_order;
mod client;
mod decide;
mod docs;
mod extras;
mod fleet;
mod gate_codes;
mod hosts;
mod http3;
mod lanes;
mod limits;
mod parse;
mod policy;
mod pow;
mod profiles;
mod protection;
mod proxy;
mod quota;
mod ratelimit;
mod rulesets;
mod server;
mod tls;
mod udp;
mod upstreams;
mod upstreamtls;

use crate::{Compiled, Environment, FixedNames, ProfileError};

/// The names the tests resolve: localhost, to 127.0.0.1 and ::1.
fn names() -> FixedNames {
    FixedNames(vec![(
        "localhost".into(),
        vec!["127.0.0.1".parse().unwrap(), "::1".parse().unwrap()],
    )])
}

/// Compiles profile text on 2 cores with [`names`].
fn compile_str(src: &str) -> Result<Compiled, Vec<ProfileError>> {
    compile_with(src, 2)
}

/// Compiles profile text, `"auto"` shards meaning `cores`, with [`names`],
/// without the protective defaults (each test states the limits it
/// checks; `protection.rs` tests the defaults).
fn compile_with(src: &str, cores: u32) -> Result<Compiled, Vec<ProfileError>> {
    if src.contains("[protection]") {
        return compile_protected(src, cores);
    }
    // The warnings the added `off` brings are the harness's, not the
    // profile's: left out.
    let mut c = compile_protected(&format!("{src}\n[protection]\noff = [\"all\"]\n"), cores)?;
    c.warnings.retain(|w| w.code != "protection.off");
    Ok(c)
}

/// Compiles profile text as written, protective defaults included, on a
/// machine of `cores` cores and [`MEMORY`].
fn compile_protected(src: &str, cores: u32) -> Result<Compiled, Vec<ProfileError>> {
    let names = names();
    crate::compile_with(
        src,
        &Environment {
            cores,
            memory_bytes: MEMORY,
            resolver: &names,
            certificates: &FakeFiles,
        },
    )
}

/// Certificate files as the tests see them: a pair loads unless a name
/// says otherwise (`missing` in a file name: unreadable; a key named
/// `other`: not the certificate's); the ticket secret is 32 sevens.
struct FakeFiles;

impl crate::CertificateLoader for FakeFiles {
    fn load_pair(&self, cert: &str, key: &str) -> Result<crate::LoadedPair, crate::PairProblem> {
        if cert.contains("missing") {
            return Err(crate::PairProblem::Cert(format!("cannot read {cert}")));
        }
        if key.contains("missing") {
            return Err(crate::PairProblem::Key(format!("cannot read {key}")));
        }
        if key.contains("other") {
            return Err(crate::PairProblem::Mismatch(format!(
                "{key} does not belong to {cert}"
            )));
        }
        Ok(crate::LoadedPair {
            chain: vec![cert.as_bytes().to_vec()],
            key: key.as_bytes().to_vec(),
        })
    }
    fn load_ocsp(&self, path: &str) -> Result<Vec<u8>, String> {
        if path.contains("missing") {
            Err(format!("cannot read {path}"))
        } else {
            Ok(path.as_bytes().to_vec())
        }
    }
    fn load_cas(&self, path: &str) -> Result<Vec<Vec<u8>>, String> {
        if path.contains("missing") {
            Err(format!("cannot read {path}"))
        } else {
            Ok(vec![path.as_bytes().to_vec()])
        }
    }
    fn ticket_secret(&self) -> Vec<u8> {
        vec![7; 32]
    }
    /// `missing` in the name: unreadable; `bad`: alice's verifier, then a
    /// plain password on line 3; else alice's verifier and carol without
    /// one, under a comment.
    fn load_users(&self, path: &str) -> Result<String, String> {
        let hash = access::HASH;
        if path.contains("missing") {
            Err(format!("cannot read {path}"))
        } else if path.contains("bad") {
            Ok(format!("alice:{hash}\n\nbob:secret\n"))
        } else {
            Ok(format!("# staff\nalice:{hash}\ncarol\n"))
        }
    }
}

/// The memory of the tests' machine: 8 GiB.
const MEMORY: u64 = 8 << 30;

/// Reads and compiles a profile file on `cores` cores with [`names`].
fn load_file_with(path: &std::path::Path, cores: u32) -> Result<Compiled, Vec<ProfileError>> {
    let names = names();
    crate::load_file_with(
        path,
        &Environment {
            cores,
            memory_bytes: MEMORY,
            resolver: &names,
            certificates: &FakeFiles,
        },
    )
}

/// Reads and compiles a profile file on 2 cores with [`names`].
fn load_file(path: &std::path::Path) -> Result<Compiled, Vec<ProfileError>> {
    load_file_with(path, 2)
}

/// Compiles a profile that must be valid.
fn ok(src: &str) -> Compiled {
    match compile_str(src) {
        Ok(c) => c,
        Err(errors) => panic!("profile should compile, got {errors:#?}"),
    }
}

/// Compiles a profile that must be valid, `"auto"` shards meaning `cores`.
/// A compiled profile's warnings other than the plain-HTTP credential and
/// session ones (`host.insecure_*`) and the protections turned off
/// (`protection.off`), which the tests of those hold.
fn other_warnings(c: &Compiled) -> Vec<&ProfileError> {
    c.warnings
        .iter()
        .filter(|w| !w.code.starts_with("host.insecure_") && w.code != "protection.off")
        .collect()
}

fn ok_with(src: &str, cores: u32) -> Compiled {
    match compile_with(src, cores) {
        Ok(c) => c,
        Err(errors) => panic!("profile should compile on {cores} cores, got {errors:#?}"),
    }
}

/// The only error of a profile that must fail on `cores` cores, as
/// (code, path, line, column), its code checked to be documented.
fn one_with(src: &str, cores: u32) -> (&'static str, String, u32, u32) {
    let e = match compile_with(src, cores) {
        Ok(_) => panic!("profile should fail on {cores} cores:\n{src}"),
        Err(errors) => errors,
    };
    assert_eq!(e.len(), 1, "expected one error, got {e:#?}");
    assert!(
        DOC.contains(&format!("| `{}` |", e[0].code)),
        "{} is missing from docs/profile.md",
        e[0].code
    );
    key(&e[0])
}

/// The profile reference; every code a test sees must be listed there.
const DOC: &str = include_str!("../../../docs/profile.md");

/// Compiles a profile that must fail; returns its errors, each checked to
/// have a documented code.
fn errors(src: &str) -> Vec<ProfileError> {
    let errors = match compile_str(src) {
        Ok(_) => panic!("profile should fail:\n{src}"),
        Err(errors) => errors,
    };
    for e in &errors {
        assert!(
            DOC.contains(&format!("| `{}` |", e.code)),
            "{} is missing from docs/profile.md",
            e.code
        );
    }
    errors
}

/// (code, path, line, column) of the only error of a failing profile.
fn one(src: &str) -> (&'static str, String, u32, u32) {
    let e = errors(src);
    assert_eq!(e.len(), 1, "expected one error, got {e:#?}");
    key(&e[0])
}

fn key(e: &ProfileError) -> (&'static str, String, u32, u32) {
    (e.code, e.path.clone(), e.line, e.column)
}

/// (code, path) of every error, in order.
fn codes(src: &str) -> Vec<(&'static str, String)> {
    errors(src).into_iter().map(|e| (e.code, e.path)).collect()
}

/// `(code, path, line, column)` with a borrowed path, for terse asserts.
fn at(code: &'static str, path: &str, line: u32, column: u32) -> (&'static str, String, u32, u32) {
    (code, path.to_string(), line, column)
}

//! Proof-of-work micro benchmarks: checking a valid cookie (the path every
//! protected request with a cookie takes), a forged one, and a challenge.
//!
//! `cargo bench -p gapura-bench --bench pow`. Each figure is the median of 7
//! rounds of ns per operation.

use gapura_bench::measure;
use gapura_gate::pow::{check_challenge, check_cookie, mint_challenge, mint_cookie, PowKey};
use std::hint::black_box;
use std::net::IpAddr;

fn main() {
    let key = PowKey::new(&[5; 32]);
    let client: IpAddr = "203.0.113.9".parse().unwrap();
    let cookie = mint_cookie(&key, 1, client, u64::MAX, 16);
    let mut forged = cookie;
    forged[20] ^= 1;
    let challenge = mint_challenge(&key, 1, client, 100, [1; 16], 16);
    measure("valid cookie", 200_000, |i| {
        check_cookie(&key, 1, black_box(client), i as u64, 16, black_box(&cookie)).is_ok() as u64
    });
    measure("forged cookie", 200_000, |i| {
        check_cookie(&key, 1, black_box(client), i as u64, 16, black_box(&forged)).is_ok() as u64
    });
    measure("challenge", 200_000, |_| {
        check_challenge(&key, 1, black_box(client), 200, black_box(&challenge)).is_ok() as u64
    });
}

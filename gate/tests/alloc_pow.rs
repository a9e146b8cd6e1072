//! Checking a proof-of-work cookie and challenge allocates nothing: a
//! counting global allocator watches this thread.

use gapura_gate::pow::{check_challenge, check_cookie, mint_challenge, mint_cookie, PowKey};
use std::net::IpAddr;

mod common;
use common::allocations_in;

#[test]
fn checking_cookies_and_challenges_allocates_nothing() {
    let key = PowKey::new(&[5; 32]);
    let client: IpAddr = "203.0.113.9".parse().unwrap();
    let cookie = mint_cookie(&key, 1, client, 10_000, 16);
    let challenge = mint_challenge(&key, 1, client, 100, [1; 16], 16);
    let n = allocations_in(|| {
        for now in 0..100 {
            assert!(check_cookie(&key, 1, client, now, 16, &cookie).is_ok());
            assert!(check_cookie(&key, 2, client, now, 16, &cookie).is_err());
            assert!(check_challenge(&key, 1, client, 100 + now, &challenge).is_ok());
            assert!(check_cookie(&key, 1, client, now, 16, b"garbage").is_err());
        }
    });
    assert_eq!(n, 0);
}

//! The verify endpoint's form: `challenge`, `solution` and `return`, as a
//! browser posts them (`application/x-www-form-urlencoded`), checked in
//! the seed's order: the body's size, the challenge's tag and age, the
//! solution, the challenge's difficulty against the host's current one,
//! and the return target (a local path). Decoded into stack buffers; no
//! allocation.

use super::token::{
    check_challenge, mint_cookie, solves, ChallengeError, PowKey, ProofOfWork, CHALLENGE_CHARS,
    COOKIE_CHARS, MAX_SOLUTION_DIGITS,
};
use std::net::IpAddr;

/// The largest form the verify endpoint reads.
pub const MAX_FORM_BYTES: usize = 2048;

/// The longest return target accepted.
pub const MAX_RETURN_BYTES: usize = 1024;

/// Why a verify request was refused (403).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Rejection {
    /// A field missing, repeated, badly encoded or too long; a body over
    /// [`MAX_FORM_BYTES`].
    Malformed,
    /// The challenge is not ours, or not for this host and client.
    Forged,
    /// The solution does not have the challenge's leading zero bits.
    Unsolved,
    /// The challenge asked less than the host asks now.
    TooEasy,
    /// The return target is not a local path.
    BadReturn,
}

impl Rejection {
    pub const COUNT: usize = 5;
    pub const ALL: [Rejection; Rejection::COUNT] = [
        Rejection::Malformed,
        Rejection::Forged,
        Rejection::Unsolved,
        Rejection::TooEasy,
        Rejection::BadReturn,
    ];

    /// The metrics label.
    pub fn name(self) -> &'static str {
        match self {
            Rejection::Malformed => "malformed",
            Rejection::Forged => "forged",
            Rejection::Unsolved => "unsolved",
            Rejection::TooEasy => "too_easy",
            Rejection::BadReturn => "bad_return",
        }
    }
}

/// A verify request that gets a 303 to its return target.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verified {
    /// Solved: the cookie's value and its `Max-Age`.
    Cookie {
        value: [u8; COOKIE_CHARS],
        max_age_s: u64,
    },
    /// The challenge had expired: back without a cookie (a fresh challenge
    /// follows).
    Expired,
}

/// The decoded return target of a form.
pub struct ReturnTarget {
    buf: [u8; MAX_RETURN_BYTES],
    len: usize,
}

impl ReturnTarget {
    pub fn new() -> ReturnTarget {
        ReturnTarget {
            buf: [0; MAX_RETURN_BYTES],
            len: 0,
        }
    }

    /// The target, a local path (`/` and printable ASCII).
    pub fn as_bytes(&self) -> &[u8] {
        &self.buf[..self.len]
    }
}

impl Default for ReturnTarget {
    fn default() -> Self {
        ReturnTarget::new()
    }
}

/// Checks a verify form for `pow`'s host and `client` at `now_s` (unix
/// seconds). On a 303 the return target is in `ret`.
pub fn verify_form(
    key: &PowKey,
    pow: &ProofOfWork,
    client: IpAddr,
    now_s: u64,
    body: &[u8],
    ret: &mut ReturnTarget,
) -> Result<Verified, Rejection> {
    if body.len() > MAX_FORM_BYTES {
        return Err(Rejection::Malformed);
    }
    let mut challenge = [0u8; CHALLENGE_CHARS];
    let mut solution = [0u8; MAX_SOLUTION_DIGITS];
    let (mut c_len, mut s_len, mut r_len) = (None, None, None);
    for pair in body.split(|&b| b == b'&').filter(|p| !p.is_empty()) {
        let eq = pair.iter().position(|&b| b == b'=').unwrap_or(pair.len());
        let value = pair.get(eq + 1..).unwrap_or(b"");
        let (slot, out): (&mut Option<usize>, &mut [u8]) = match &pair[..eq] {
            b"challenge" => (&mut c_len, &mut challenge),
            b"solution" => (&mut s_len, &mut solution),
            b"return" => (&mut r_len, &mut ret.buf),
            // Other fields are ignored, as forms may carry more.
            _ => continue,
        };
        if slot.is_some() {
            return Err(Rejection::Malformed);
        }
        *slot = Some(form_decode(value, out).ok_or(Rejection::Malformed)?);
    }
    let (Some(c_len), Some(s_len), Some(r_len)) = (c_len, s_len, r_len) else {
        return Err(Rejection::Malformed);
    };
    ret.len = r_len;
    let challenge = &challenge[..c_len];
    let difficulty = match check_challenge(key, pow.host, client, now_s, challenge) {
        Ok(d) => Some(d),
        Err(ChallengeError::Expired) => None,
        Err(ChallengeError::Malformed) => return Err(Rejection::Malformed),
        Err(ChallengeError::BadTag) => return Err(Rejection::Forged),
    };
    if !is_local_target(ret.as_bytes()) {
        return Err(Rejection::BadReturn);
    }
    let Some(difficulty) = difficulty else {
        return Ok(Verified::Expired);
    };
    if !solves(challenge, &solution[..s_len], difficulty) {
        return Err(Rejection::Unsolved);
    }
    if difficulty < pow.difficulty {
        return Err(Rejection::TooEasy);
    }
    Ok(Verified::Cookie {
        value: mint_cookie(key, pow.host, client, now_s + pow.lifetime_s, difficulty),
        max_age_s: pow.lifetime_s,
    })
}

/// A path on this host: `/` first, never `//` or `/\` (another host to a
/// browser), printable ASCII without `\`, spaces or controls.
pub fn is_local_target(t: &[u8]) -> bool {
    t.first() == Some(&b'/')
        && !matches!(t.get(1), Some(b'/' | b'\\'))
        && t.iter().all(|&b| (0x21..0x7f).contains(&b) && b != b'\\')
}

/// Decodes one form value (`+` is a space, `%XX` a byte) into `out`; its
/// length, or `None` when it does not fit or is badly encoded.
fn form_decode(v: &[u8], out: &mut [u8]) -> Option<usize> {
    let mut n = 0;
    let mut i = 0;
    while i < v.len() {
        let b = match v[i] {
            b'+' => b' ',
            b'%' => {
                let hi = crate::path::hex(*v.get(i + 1)?)?;
                let lo = crate::path::hex(*v.get(i + 2)?)?;
                i += 2;
                hi << 4 | lo
            }
            b => b,
        };
        *out.get_mut(n)? = b;
        n += 1;
        i += 1;
    }
    Some(n)
}

#[cfg(test)]
mod tests {
    use super::super::token::{check_cookie, mint_challenge, KEY_BYTES};
    use super::*;
    use crate::mode::Mode;

    const NOW: u64 = 1_800_000_000;

    fn key() -> PowKey {
        PowKey::new(&[9; KEY_BYTES])
    }

    fn pow(difficulty: u8) -> ProofOfWork {
        ProofOfWork {
            difficulty,
            lifetime_s: 3600,
            when: None,
            mode: Mode::Enforce,
            host: 77,
        }
    }

    fn client() -> IpAddr {
        "203.0.113.9".parse().unwrap()
    }

    fn solve(challenge: &[u8], difficulty: u8) -> String {
        (0u64..)
            .map(|n| n.to_string())
            .find(|c| solves(challenge, c.as_bytes(), difficulty))
            .unwrap()
    }

    fn form(c: &[u8], s: &str, r: &str) -> Vec<u8> {
        format!(
            "challenge={}&solution={s}&return={r}",
            std::str::from_utf8(c).unwrap()
        )
        .into_bytes()
    }

    fn run(body: &[u8], p: &ProofOfWork, now: u64) -> (Result<Verified, Rejection>, Vec<u8>) {
        let mut ret = ReturnTarget::new();
        let r = verify_form(&key(), p, client(), now, body, &mut ret);
        (r, ret.as_bytes().to_vec())
    }

    #[test]
    fn a_solution_gets_a_cookie_for_the_host_and_client() {
        let c = mint_challenge(&key(), 77, client(), NOW, [1; 16], 6);
        let s = solve(&c, 6);
        let (r, ret) = run(&form(&c, &s, "%2Fdocs%3Fa%3D1"), &pow(6), NOW + 5);
        let Ok(Verified::Cookie { value, max_age_s }) = r else {
            panic!("{r:?}")
        };
        assert_eq!(ret, b"/docs?a=1");
        assert_eq!(max_age_s, 3600);
        assert_eq!(
            check_cookie(&key(), 77, client(), NOW + 3600, 6, &value),
            Ok(())
        );
        assert!(check_cookie(&key(), 78, client(), NOW + 10, 6, &value).is_err());
    }

    #[test]
    fn each_refusal_has_its_reason() {
        let c = mint_challenge(&key(), 77, client(), NOW, [2; 16], 6);
        let s = solve(&c, 6);
        let cases: Vec<(Vec<u8>, ProofOfWork, Rejection)> = vec![
            (
                form(&c, &s, "//evil.example/"),
                pow(6),
                Rejection::BadReturn,
            ),
            (form(&c, &s, "/%5Cevil"), pow(6), Rejection::BadReturn),
            (
                form(&c, &s, "https://evil.example/"),
                pow(6),
                Rejection::BadReturn,
            ),
            (
                form(&c, &s, "/a%0d%0aSet-Cookie:x"),
                pow(6),
                Rejection::BadReturn,
            ),
            (form(&c, &s, "/a+b"), pow(6), Rejection::BadReturn),
            (form(&c, "x1", "/"), pow(6), Rejection::Unsolved),
            (form(&c, &s, "/"), pow(8), Rejection::TooEasy),
            (
                b"challenge=abc&solution=1&return=/".to_vec(),
                pow(6),
                Rejection::Malformed,
            ),
            (
                b"solution=1&return=/".to_vec(),
                pow(6),
                Rejection::Malformed,
            ),
            (
                [form(&c, &s, "/"), b"&return=/".to_vec()].concat(),
                pow(6),
                Rejection::Malformed,
            ),
            (form(&c, &s, "/%zz"), pow(6), Rejection::Malformed),
            (vec![b'a'; MAX_FORM_BYTES + 1], pow(6), Rejection::Malformed),
        ];
        for (body, p, want) in cases {
            assert_eq!(
                run(&body, &p, NOW + 1).0,
                Err(want),
                "{}",
                String::from_utf8_lossy(&body)
            );
        }
        // Another host's or client's challenge is forged here.
        let other = mint_challenge(&key(), 78, client(), NOW, [2; 16], 6);
        let so = solve(&other, 6);
        assert_eq!(
            run(&form(&other, &so, "/"), &pow(6), NOW).0,
            Err(Rejection::Forged)
        );
        let elsewhere =
            mint_challenge(&key(), 77, "203.0.113.10".parse().unwrap(), NOW, [2; 16], 6);
        let se = solve(&elsewhere, 6);
        assert_eq!(
            run(&form(&elsewhere, &se, "/"), &pow(6), NOW).0,
            Err(Rejection::Forged)
        );
    }

    #[test]
    fn an_expired_challenge_goes_back_without_a_cookie() {
        let c = mint_challenge(&key(), 77, client(), NOW, [3; 16], 6);
        let s = solve(&c, 6);
        let (r, ret) = run(&form(&c, &s, "/page"), &pow(6), NOW + 601);
        assert_eq!(r, Ok(Verified::Expired));
        assert_eq!(ret, b"/page");
        // Still refused with a target that is not local.
        let (r, _) = run(&form(&c, &s, "//x"), &pow(6), NOW + 601);
        assert_eq!(r, Err(Rejection::BadReturn));
    }

    #[test]
    fn local_targets() {
        for ok in ["/", "/a/b?c=d&e=%20", "/~x"] {
            assert!(is_local_target(ok.as_bytes()), "{ok}");
        }
        for bad in [
            "",
            "a",
            "//x",
            "/\\x",
            "/a b",
            "/\u{e9}",
            "/a\\b",
            "http://x/",
        ] {
            assert!(!is_local_target(bad.as_bytes()), "{bad}");
        }
    }
}

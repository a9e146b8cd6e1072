//! Proof of work's answers: the challenge page (403 with `Cache-Control:
//! no-store`, the challenge and the difficulty in `data-` attributes of
//! `#gapura-pow`, solved by the inline script's Web Workers), the refusal
//! of a client that is not a browser, and the verify endpoint's 303.
//!
//! The page is built once per process from `page.html`, `page.css` and
//! `solver.js`; its CSP allows exactly that style and that script by their
//! SHA-256 (computed once), workers from `blob:` and forms to the page's
//! own origin. Writing it copies the bytes and fills three fixed-width
//! slots (challenge, difficulty, request id): no allocation.

use super::token::{mint_challenge, PowKey, ProofOfWork, CHALLENGE_CHARS, COOKIE_NAME};
use super::verify::Verified;
use crate::answer::{end_head, Answer, WriteCtx, REQUEST_ID_SLOT};
use crate::pages::{builtin_page, decimal, Page};
use crate::sink::{Lines, Sink};
use base64::Engine;
use sha2::{Digest, Sha256};
use std::net::IpAddr;
use std::sync::OnceLock;

const TEMPLATE: &str = include_str!("page.html");
const STYLE: &str = include_str!("page.css");
const SCRIPT: &str = include_str!("solver.js");

/// The challenge's place in the template while it is built.
const CHALLENGE_SLOT: &str = "________________________________________________________";
const DIFFICULTY_SLOT: &str = "__";

/// The challenge page, built once.
#[derive(Debug)]
pub struct ChallengePage {
    /// Status line and fixed headers, without Date.
    head: Lines,
    body: Box<[u8]>,
    challenge_at: usize,
    difficulty_at: usize,
    id_at: usize,
}

/// The page's Content-Security-Policy.
fn csp() -> String {
    let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(Sha256::digest(s));
    format!(
        "default-src 'none'; script-src 'sha256-{}'; style-src 'sha256-{}'; worker-src blob:; \
         form-action 'self'; base-uri 'none'; frame-ancestors 'none'",
        b64(SCRIPT),
        b64(STYLE)
    )
}

impl ChallengePage {
    fn build() -> ChallengePage {
        debug_assert_eq!(CHALLENGE_SLOT.len(), CHALLENGE_CHARS);
        let body = TEMPLATE
            .replace("{{style}}", STYLE)
            .replace("{{script}}", SCRIPT)
            .replace("{{challenge}}", CHALLENGE_SLOT)
            .replace("{{difficulty}}", DIFFICULTY_SLOT)
            .replace("{{request_id}}", REQUEST_ID_SLOT);
        // Each slot is found by its attribute, so one slot's characters
        // inside another cannot be taken for it.
        let at = |prefix: &str, slot: &str| {
            body.find(&format!("{prefix}{slot}"))
                .map_or(0, |p| p + prefix.len())
        };
        let csp = csp();
        let answer = Answer::new(
            403,
            &[
                ("Content-Type", "text/html; charset=utf-8"),
                ("Cache-Control", "no-store"),
                ("Referrer-Policy", "no-referrer"),
                ("X-Content-Type-Options", "nosniff"),
                ("Content-Security-Policy", &csp),
            ],
            body.as_bytes(),
        );
        ChallengePage {
            head: answer.head_lines().clone(),
            challenge_at: at("data-challenge=\"", CHALLENGE_SLOT),
            difficulty_at: at("data-difficulty=\"", DIFFICULTY_SLOT),
            id_at: at("", REQUEST_ID_SLOT),
            body: body.into_bytes().into_boxed_slice(),
        }
    }

    /// The process's page.
    pub fn get() -> &'static ChallengePage {
        static PAGE: OnceLock<ChallengePage> = OnceLock::new();
        PAGE.get_or_init(ChallengePage::build)
    }

    /// The page's body as built (slots unfilled), for tests.
    pub fn template(&self) -> &[u8] {
        &self.body
    }
}

/// The page a client that is not a browser gets (403), built once.
fn non_browser_page() -> &'static Page {
    static PAGE: OnceLock<Page> = OnceLock::new();
    PAGE.get_or_init(|| {
        builtin_page(
            403,
            "This page asks your browser to do a short computation before it opens. \
             Open it in a browser with JavaScript turned on.",
            "403 Forbidden: this address is protected by a proof-of-work check that \
             needs a browser with JavaScript.\n",
            &[],
        )
    })
}

/// A challenge to mint: for `pow`'s host and `client`, issued at `now_s`
/// (unix seconds) with `nonce`.
pub struct Mint<'a> {
    pub key: &'a PowKey,
    pub pow: &'a ProofOfWork,
    pub client: IpAddr,
    pub now_s: u64,
    pub nonce: [u8; 16],
}

/// Writes the challenge page with a fresh challenge. O(page), no
/// allocation once `out` has the capacity.
pub fn write_challenge_page<O: Sink>(
    out: &mut O,
    mint: &Mint<'_>,
    request_id: &[u8; 24],
    ctx: &WriteCtx<'_>,
) {
    let pow = mint.pow;
    let page = ChallengePage::get();
    out.head(403, &page.head);
    out.date(ctx.date_line);
    end_head(out, ctx);
    if ctx.head_only {
        return;
    }
    out.body(&page.body);
    let written = out.written_mut();
    let start = written.len() - page.body.len();
    let body = &mut written[start..];
    let challenge = mint_challenge(
        mint.key,
        pow.host,
        mint.client,
        mint.now_s,
        mint.nonce,
        pow.difficulty,
    );
    body[page.challenge_at..page.challenge_at + CHALLENGE_CHARS].copy_from_slice(&challenge);
    let d = pow.difficulty.min(99);
    body[page.difficulty_at] = b'0' + d / 10;
    body[page.difficulty_at + 1] = b'0' + d % 10;
    body[page.id_at..page.id_at + 24].copy_from_slice(request_id);
}

/// Writes the 403 of a client that is not a browser (HTML or text as it
/// accepts), with its request id.
pub fn write_non_browser_page<O: Sink>(
    out: &mut O,
    wants_html: bool,
    request_id: &[u8; 24],
    ctx: &WriteCtx<'_>,
) -> u16 {
    let answer = non_browser_page().for_client(wants_html);
    answer.write_into(out, ctx);
    answer.stamp(out.written_mut(), ctx.head_only, || *request_id);
    answer.status
}

/// The verify endpoint's fixed lines: its status line, and what follows
/// its `Location` and cookie.
fn verified_lines() -> &'static (Lines, Lines) {
    static LINES: OnceLock<(Lines, Lines)> = OnceLock::new();
    LINES.get_or_init(|| {
        (
            Lines::status(303),
            Lines::new(
                None,
                &[
                    ("Cache-Control", "no-store"),
                    ("Referrer-Policy", "no-referrer"),
                    ("Content-Length", "0"),
                ],
            ),
        )
    })
}

/// Writes the verify endpoint's 303 to `target` (a local path), with the
/// cookie when solved; `secure` when the request came over TLS. No
/// allocation once `out` has the capacity.
pub fn write_verified<O: Sink>(
    out: &mut O,
    verified: &Verified,
    target: &[u8],
    secure: bool,
    ctx: &WriteCtx<'_>,
) {
    let (status, rest) = verified_lines();
    out.head(303, status);
    out.field(b"Location", http::header::LOCATION, &[target]);
    if let Verified::Cookie { value, max_age_s } = verified {
        let mut digits = [0u8; 20];
        let max_age = decimal(*max_age_s, &mut digits);
        let secure: &[u8] = if secure { b"; Secure" } else { b"" };
        out.field(
            b"Set-Cookie",
            http::header::SET_COOKIE,
            &[
                COOKIE_NAME,
                b"=",
                value,
                b"; Path=/; Max-Age=",
                max_age,
                b"; HttpOnly; SameSite=Lax",
                secure,
            ],
        );
    }
    out.lines(rest);
    out.date(ctx.date_line);
    end_head(out, ctx);
}

#[cfg(test)]
mod tests {
    use super::super::token::{check_challenge, KEY_BYTES};
    use super::*;
    use crate::mode::Mode;

    fn ctx(head_only: bool) -> WriteCtx<'static> {
        WriteCtx {
            date_line: b"Date: Tue, 01 Dec 2026 00:00:00 GMT\r\n",
            head_only,
            close: false,
            keep_alive_10: false,
        }
    }

    fn pow() -> ProofOfWork {
        ProofOfWork {
            difficulty: 9,
            lifetime_s: 60,
            when: None,
            mode: Mode::Enforce,
            host: 5,
        }
    }

    fn attr<'a>(page: &'a str, name: &str) -> &'a str {
        let start = page.find(&format!("{name}=\"")).unwrap() + name.len() + 2;
        let len = page[start..].find('"').unwrap();
        &page[start..start + len]
    }

    #[test]
    fn the_page_carries_a_valid_challenge_and_its_difficulty() {
        let key = PowKey::new(&[1; KEY_BYTES]);
        let client: IpAddr = "192.0.2.1".parse().unwrap();
        let mut out = Vec::new();
        let p = pow();
        let mint = Mint {
            key: &key,
            pow: &p,
            client,
            now_s: 1000,
            nonce: [4; 16],
        };
        write_challenge_page(&mut out, &mint, &[b'a'; 24], &ctx(false));
        let text = String::from_utf8(out).unwrap();
        let (head, body) = text.split_once("\r\n\r\n").unwrap();
        assert!(head.starts_with("HTTP/1.1 403 Forbidden\r\n"), "{head}");
        assert!(head.contains("\r\nCache-Control: no-store\r\n"));
        let len: usize = head
            .split("Content-Length: ")
            .nth(1)
            .unwrap()
            .split("\r\n")
            .next()
            .unwrap()
            .parse()
            .unwrap();
        assert_eq!(len, body.len());
        let challenge = attr(body, "data-challenge");
        assert_eq!(attr(body, "data-difficulty"), "09");
        assert_eq!(
            check_challenge(&key, 5, client, 1000, challenge.as_bytes()),
            Ok(9)
        );
        assert!(body.contains(&"a".repeat(24)));
        assert!(body.contains("<noscript>"));
        // The CSP's hashes are the inline script's and style's.
        let csp = head
            .split("Content-Security-Policy: ")
            .nth(1)
            .unwrap()
            .split("\r\n")
            .next()
            .unwrap();
        for (tag, end) in [("<script>", "</script>"), ("<style>", "</style>")] {
            let inner = body.split(tag).nth(1).unwrap().split(end).next().unwrap();
            let hash = base64::engine::general_purpose::STANDARD.encode(Sha256::digest(inner));
            assert!(csp.contains(&format!("'sha256-{hash}'")), "{tag} {csp}");
        }
        assert!(csp.contains("worker-src blob:") && csp.contains("form-action 'self'"));
        assert!(body.is_ascii());
    }

    #[test]
    fn head_gets_headers_only() {
        let key = PowKey::new(&[1; KEY_BYTES]);
        let mut out = Vec::new();
        let p = pow();
        let mint = Mint {
            key: &key,
            pow: &p,
            client: "192.0.2.1".parse().unwrap(),
            now_s: 1,
            nonce: [0; 16],
        };
        write_challenge_page(&mut out, &mint, &[b'0'; 24], &ctx(true));
        assert!(out.ends_with(b"\r\n\r\n"));
    }

    #[test]
    fn the_303_sets_the_cookie_with_its_attributes() {
        let mut out = Vec::new();
        let v = Verified::Cookie {
            value: [b'x'; super::super::token::COOKIE_CHARS],
            max_age_s: 604800,
        };
        write_verified(&mut out, &v, b"/a?b=c", false, &ctx(false));
        let text = String::from_utf8(out).unwrap();
        assert!(
            text.starts_with("HTTP/1.1 303 See Other\r\nLocation: /a?b=c\r\n"),
            "{text}"
        );
        assert!(text.contains(&format!(
            "Set-Cookie: gapura_pow={}; Path=/; Max-Age=604800; HttpOnly; SameSite=Lax\r\n",
            "x".repeat(35)
        )));
        let mut out = Vec::new();
        write_verified(&mut out, &v, b"/", true, &ctx(false));
        assert!(String::from_utf8(out)
            .unwrap()
            .contains("SameSite=Lax; Secure\r\n"));
        let mut out = Vec::new();
        write_verified(&mut out, &Verified::Expired, b"/", false, &ctx(false));
        assert!(!String::from_utf8(out).unwrap().contains("Set-Cookie"));
    }
}

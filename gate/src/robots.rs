//! Managed robots.txt: a host's `/robots.txt` answered from precomputed bytes.
//!
//! A host either passes `/robots.txt` through to its upstream (the built-in)
//! or manages it: one of two presets (disallow everything, or keep the AI
//! crawlers out) or the operator's own text. A managed file is one
//! [`Answer`] built when the snapshot is compiled (`text/plain;
//! charset=utf-8`, `Cache-Control: max-age=3600`), so serving it is a
//! comparison and a copy.
//!
//! Only `GET` and `HEAD` of the canonical path `/robots.txt` are answered; the
//! query is ignored, any other method falls through as an ordinary request.
//! The same request is exempt from rule sets, rate limits and proof of work
//! (RFC 9309 reads a 4xx on the file as "no restrictions", so refusing it
//! would tell a crawler it may go anywhere): [`is_robots_request`] is that
//! test, and [`is_robots_candidate`] lets a caller skip canonicalising the
//! path for every other request.
//!
//! [`AI_CRAWLERS`] is the one list of AI crawlers: the robots preset names
//! them, and the rule-set preset "block AI crawlers" refuses them, so the two
//! can never disagree about who an AI crawler is.

use crate::answer::Answer;

/// The user agents of AI crawlers (their robots.txt product tokens, which
/// their `User-Agent` headers contain). Refreshed with each release.
pub const AI_CRAWLERS: &[&str] = &[
    "GPTBot",
    "ChatGPT-User",
    "OAI-SearchBot",
    "ClaudeBot",
    "Claude-User",
    "Claude-SearchBot",
    "Claude-Web",
    "anthropic-ai",
    "CCBot",
    "Google-Extended",
    "Applebot-Extended",
    "Bytespider",
    "PerplexityBot",
    "Perplexity-User",
    "Amazonbot",
    "meta-externalagent",
    "meta-externalfetcher",
    "FacebookBot",
    "cohere-ai",
    "cohere-training-data-crawler",
    "Diffbot",
    "ImagesiftBot",
    "Omgilibot",
    "Timpibot",
    "YouBot",
    "AI2Bot",
    "PanguBot",
    "Kangaroo Bot",
    "Webzio-Extended",
    "DuckAssistBot",
    "MistralAI-User",
];

/// The canonical path of the file.
pub const ROBOTS_PATH: &[u8] = b"/robots.txt";

/// Longest custom text, in bytes as typed: 64 KiB.
pub const MAX_CUSTOM_TEXT_BYTES: usize = 64 * 1024;

/// A host's robots.txt setting. Profile key `robots.mode`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum RobotsMode {
    /// The upstream answers (the built-in).
    #[default]
    Passthrough,
    /// `User-agent: *` / `Disallow: /`.
    DisallowAll,
    /// Every [`AI_CRAWLERS`] entry disallowed, everyone else allowed.
    BlockAiCrawlers,
    /// The operator's text (`robots.custom_text`).
    Custom,
}

impl RobotsMode {
    /// Parses the profile value.
    pub fn parse(s: &str) -> Option<RobotsMode> {
        Some(match s {
            "passthrough" => RobotsMode::Passthrough,
            "disallow_all" => RobotsMode::DisallowAll,
            "block_ai_crawlers" => RobotsMode::BlockAiCrawlers,
            "custom" => RobotsMode::Custom,
            _ => return None,
        })
    }

    /// The profile value.
    pub fn as_str(self) -> &'static str {
        match self {
            RobotsMode::Passthrough => "passthrough",
            RobotsMode::DisallowAll => "disallow_all",
            RobotsMode::BlockAiCrawlers => "block_ai_crawlers",
            RobotsMode::Custom => "custom",
        }
    }
}

/// Why a robots setting was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RobotsError {
    /// Mode `custom` with no text, or only whitespace.
    CustomTextRequired,
    /// Over [`MAX_CUSTOM_TEXT_BYTES`].
    CustomTextTooLong,
    /// A control character other than tab, CR or LF.
    CustomTextInvalid,
}

impl std::fmt::Display for RobotsError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            RobotsError::CustomTextRequired => "mode \"custom\" needs a non-empty custom_text",
            RobotsError::CustomTextTooLong => "custom_text is at most 64 KiB",
            RobotsError::CustomTextInvalid => {
                "custom_text holds no control characters other than tab and line breaks"
            }
        })
    }
}

impl std::error::Error for RobotsError {}

/// The text of the "disallow all" preset.
pub fn disallow_all_text() -> String {
    "User-agent: *\nDisallow: /\n".to_owned()
}

/// The text of the "block AI crawlers" preset: one group naming every
/// crawler of [`AI_CRAWLERS`], then everyone else allowed.
pub fn block_ai_crawlers_text() -> String {
    let mut text = String::new();
    for name in AI_CRAWLERS {
        text.push_str("User-agent: ");
        text.push_str(name);
        text.push('\n');
    }
    text.push_str("Disallow: /\n\nUser-agent: *\nAllow: /\n");
    text
}

/// Checks a custom text and returns it as served: `\r\n` and `\r` become
/// `\n`, and it ends with a newline. Allocates; O(n).
pub fn normalize_custom_text(text: &str) -> Result<String, RobotsError> {
    if text.trim().is_empty() {
        return Err(RobotsError::CustomTextRequired);
    }
    if text.len() > MAX_CUSTOM_TEXT_BYTES {
        return Err(RobotsError::CustomTextTooLong);
    }
    if text
        .chars()
        .any(|c| c.is_control() && !matches!(c, '\t' | '\r' | '\n'))
    {
        return Err(RobotsError::CustomTextInvalid);
    }
    let mut out = text.replace("\r\n", "\n").replace('\r', "\n");
    if !out.ends_with('\n') {
        out.push('\n');
    }
    Ok(out)
}

/// A host's compiled robots.txt. Immutable; lives in the snapshot.
#[derive(Clone, Debug, Default)]
pub struct Robots {
    mode: RobotsMode,
    answer: Option<Answer>,
}

impl Robots {
    /// Compiles a host's setting. `custom_text` is read only in mode
    /// `custom`. Allocates (compile time only).
    pub fn compile(mode: RobotsMode, custom_text: Option<&str>) -> Result<Robots, RobotsError> {
        let text = match mode {
            RobotsMode::Passthrough => return Ok(Robots::default()),
            RobotsMode::DisallowAll => disallow_all_text(),
            RobotsMode::BlockAiCrawlers => block_ai_crawlers_text(),
            RobotsMode::Custom => normalize_custom_text(custom_text.unwrap_or(""))?,
        };
        let headers = [
            ("Content-Type", "text/plain; charset=utf-8"),
            ("Cache-Control", "max-age=3600"),
            ("X-Content-Type-Options", "nosniff"),
        ];
        Ok(Robots {
            mode,
            answer: Some(Answer::new(200, &headers, text.as_bytes())),
        })
    }

    pub fn mode(&self) -> RobotsMode {
        self.mode
    }

    /// Whether the file is managed here (any mode but passthrough).
    pub fn is_managed(&self) -> bool {
        self.answer.is_some()
    }

    /// The answer for this request, or `None` when it falls through (the
    /// mode is passthrough, the method is not `GET`/`HEAD`, or the path is
    /// not `/robots.txt`). A `HEAD` is written with `WriteCtx::head_only`.
    /// O(1), no allocation.
    #[inline]
    pub fn answer(&self, method: &[u8], canonical_path: &[u8]) -> Option<&Answer> {
        let answer = self.answer.as_ref()?;
        is_robots_request(method, canonical_path).then_some(answer)
    }
}

/// Whether the request is `GET` or `HEAD` of `/robots.txt` (the canonical
/// path, query already cut off). Such a request is never ruled on, limited
/// or challenged. Methods are case-sensitive (RFC 9110). O(1).
#[inline]
pub fn is_robots_request(method: &[u8], canonical_path: &[u8]) -> bool {
    canonical_path == ROBOTS_PATH && (method == b"GET" || method == b"HEAD")
}

/// Whether a raw request target could canonicalise to `/robots.txt`: its
/// path part is long enough and either spells `robots` in any case or holds
/// a `%` escape. `false` means it certainly does not, so a caller need not
/// canonicalise it for the robots check. O(n), no allocation.
#[inline]
pub fn is_robots_candidate(raw_target: &[u8]) -> bool {
    let path = crate::path::path_of(raw_target);
    path.len() >= ROBOTS_PATH.len()
        && (path.contains(&b'%') || path.windows(6).any(|w| w.eq_ignore_ascii_case(b"robots")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::answer::WriteCtx;
    use crate::path::{canonical, MAX_PATH_BYTES};

    fn body(r: &Robots) -> String {
        String::from_utf8(r.answer(b"GET", b"/robots.txt").unwrap().body().to_vec()).unwrap()
    }

    #[test]
    fn passthrough_answers_nothing() {
        let r = Robots::compile(RobotsMode::Passthrough, Some("ignored")).unwrap();
        assert!(!r.is_managed());
        assert!(r.answer(b"GET", b"/robots.txt").is_none());
    }

    #[test]
    fn only_get_and_head_of_the_canonical_path_are_answered() {
        let r = Robots::compile(RobotsMode::DisallowAll, None).unwrap();
        assert!(r.answer(b"GET", b"/robots.txt").is_some());
        assert!(r.answer(b"HEAD", b"/robots.txt").is_some());
        for method in [&b"POST"[..], b"PUT", b"DELETE", b"OPTIONS", b"get", b"head"] {
            assert!(r.answer(method, b"/robots.txt").is_none(), "{method:?}");
        }
        for path in ["/robots.txt/x", "/robots", "/a/robots.txt", "/robots.txt2"] {
            assert!(r.answer(b"GET", path.as_bytes()).is_none(), "{path}");
        }
        // Redundant spellings and a query canonicalise to the same file.
        let mut scratch = [0u8; MAX_PATH_BYTES];
        for raw in [
            "/robots.txt?x=1",
            "/ROBOTS.TXT",
            "//robots.txt",
            "/a/../robots.txt",
            "/%72obots.txt",
            "/robots.txt;v=2",
        ] {
            assert!(is_robots_candidate(raw.as_bytes()), "{raw}");
            let path = canonical(raw.as_bytes(), &mut scratch).unwrap();
            assert!(r.answer(b"GET", path).is_some(), "{raw}");
        }
    }

    #[test]
    fn candidates_are_cheaply_excluded() {
        for raw in [
            "/",
            "/index.html",
            "/robot.txt",
            "/a/b/c/d/e/f/g",
            "/x?robots.txt",
        ] {
            assert!(!is_robots_candidate(raw.as_bytes()), "{raw}");
        }
    }

    #[test]
    fn answer_is_plain_text_cached_for_an_hour_and_head_keeps_the_length() {
        let r = Robots::compile(RobotsMode::DisallowAll, None).unwrap();
        assert_eq!(body(&r), "User-agent: *\nDisallow: /\n");
        let a = r.answer(b"HEAD", b"/robots.txt").unwrap();
        let mut out = Vec::new();
        a.write_into(
            &mut out,
            &WriteCtx {
                date_line: b"Date: x\r\n",
                head_only: true,
                close: false,
                keep_alive_10: false,
            },
        );
        assert_eq!(
            out,
            b"HTTP/1.1 200 OK\r\nContent-Type: text/plain; charset=utf-8\r\nCache-Control: max-age=3600\r\nX-Content-Type-Options: nosniff\r\nContent-Length: 26\r\nDate: x\r\n\r\n"
        );
    }

    #[test]
    fn ai_preset_names_every_crawler_in_one_group() {
        let r = Robots::compile(RobotsMode::BlockAiCrawlers, None).unwrap();
        let text = body(&r);
        for name in AI_CRAWLERS {
            assert!(text.contains(&format!("User-agent: {name}\n")), "{name}");
        }
        assert!(text.starts_with("User-agent: GPTBot\nUser-agent: ChatGPT-User\n"));
        assert!(text.ends_with("Disallow: /\n\nUser-agent: *\nAllow: /\n"));
        assert_eq!(text.matches("Disallow: /").count(), 1);
    }

    #[test]
    fn crawler_list_is_printable_ascii_and_unique_ignoring_case() {
        let mut seen = std::collections::HashSet::new();
        for name in AI_CRAWLERS {
            assert!(name.bytes().all(|b| (0x20..0x7F).contains(&b)), "{name}");
            assert!(seen.insert(name.to_ascii_lowercase()), "{name}");
        }
    }

    #[test]
    fn custom_text_is_normalised_and_validated() {
        let r = Robots::compile(
            RobotsMode::Custom,
            Some("User-agent: *\r\nDisallow: /a\rAllow: /"),
        )
        .unwrap();
        assert_eq!(body(&r), "User-agent: *\nDisallow: /a\nAllow: /\n");
        let r = Robots::compile(RobotsMode::Custom, Some("# caf\u{e9}\n")).unwrap();
        assert_eq!(body(&r), "# caf\u{e9}\n");
        for (text, err) in [
            (None, RobotsError::CustomTextRequired),
            (Some(" \n\t"), RobotsError::CustomTextRequired),
            (Some("a\0b"), RobotsError::CustomTextInvalid),
            (Some("a\x1bb"), RobotsError::CustomTextInvalid),
        ] {
            assert_eq!(Robots::compile(RobotsMode::Custom, text).unwrap_err(), err);
        }
        let long = "#".repeat(MAX_CUSTOM_TEXT_BYTES + 1);
        assert_eq!(
            Robots::compile(RobotsMode::Custom, Some(&long)).unwrap_err(),
            RobotsError::CustomTextTooLong
        );
    }

    #[test]
    fn modes_round_trip() {
        for m in [
            RobotsMode::Passthrough,
            RobotsMode::DisallowAll,
            RobotsMode::BlockAiCrawlers,
            RobotsMode::Custom,
        ] {
            assert_eq!(RobotsMode::parse(m.as_str()), Some(m));
        }
        assert_eq!(RobotsMode::parse("off"), None);
    }
}

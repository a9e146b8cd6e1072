//! Maintenance mode: a host answers every request with one page, except
//! for the clients its bypass admits.
//!
//! Compiled per snapshot into a [`Maintenance`] (absent when the host has it
//! off): the status (503 by default), a `Retry-After` folded into the head,
//! and the page, which is the host's `error_pages.maintenance` entry or the
//! built-in "Down for maintenance" message, in HTML for clients that ask for
//! it and plain text otherwise.
//!
//! Where it sits: after the host's policy chain, the request limits, the
//! HTTPS redirect and the managed robots.txt (a crawler reading a managed
//! file is not told the whole site is gone); before a fixed answer, the
//! proof-of-work endpoint and route matching. An admin host never has it.
//!
//! The bypass is an access list's address side (its allow rules admit the
//! client and its deny rules do not refuse it; no password is asked). The
//! caller computes that with the access-list block and passes the boolean:
//! this block does no address work of its own. Deciding is O(1) and writing
//! the page is a copy plus the encoded slots: no allocation.

use crate::answer::{end_head, reason_phrase, Answer, WriteCtx};
use crate::custom_pages::{CustomPage, PageEntrySpec, PageError, PageVars};
use crate::mode::Mode;
use crate::sink::Sink;

/// Statuses a maintenance answer may carry (503 is the built-in).
pub const MAINTENANCE_STATUSES: [u16; 8] = [503, 200, 500, 502, 504, 403, 404, 410];
/// Longest `Retry-After`: a week. 0 sends none.
pub const MAX_RETRY_AFTER_SECONDS: u32 = 7 * 24 * 3600;
/// The built-in page's heading.
pub const BUILTIN_HEADING: &str = "Down for maintenance";
/// The built-in page's sentence.
pub const BUILTIN_TEXT: &str = "This site is being worked on. Please try again later.";

/// A host's maintenance setting, merged field by field through the layers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MaintenanceSpec {
    pub enabled: bool,
    pub status: u16,
    pub retry_after_seconds: u32,
    /// The host's `error_pages.maintenance` entry, if any.
    pub page: Option<PageEntrySpec>,
}

impl Default for MaintenanceSpec {
    fn default() -> Self {
        MaintenanceSpec {
            enabled: false,
            status: 503,
            retry_after_seconds: 0,
            page: None,
        }
    }
}

/// Why a maintenance setting was refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MaintenanceError {
    /// Not one of [`MAINTENANCE_STATUSES`] (`maintenance.status.invalid`).
    Status,
    /// Over [`MAX_RETRY_AFTER_SECONDS`]
    /// (`maintenance.retry_after_seconds.invalid`).
    RetryAfter,
    /// The maintenance page entry (`errorPages.*`, under
    /// `error_pages.maintenance`).
    Page(PageError),
}

impl std::fmt::Display for MaintenanceError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            MaintenanceError::Status => {
                f.write_str("status is one of 503, 200, 500, 502, 504, 403, 404 or 410")
            }
            MaintenanceError::RetryAfter => {
                f.write_str("retry_after_seconds is 0 (none) to 604800 (a week)")
            }
            MaintenanceError::Page(e) => e.fmt(f),
        }
    }
}

impl std::error::Error for MaintenanceError {}

/// What the block did with one request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MaintenanceOutcome {
    /// Answer with the maintenance page.
    Serve,
    /// The bypass admitted the client: the request goes on.
    Bypassed,
    /// Shadow mode: the page would have been served; the request goes on.
    Shadowed,
}

impl MaintenanceOutcome {
    /// Whether the caller answers with the page.
    pub fn serves(self) -> bool {
        self == MaintenanceOutcome::Serve
    }
}

/// One shard's counters for one host's maintenance.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MaintenanceCounters {
    pub served: u64,
    pub bypassed: u64,
    pub shadow_hits: u64,
}

/// A host's compiled maintenance answer. Immutable; lives in the snapshot.
#[derive(Clone, Debug)]
pub struct Maintenance {
    status: u16,
    retry_after_seconds: u32,
    html: CustomPage,
    text: Answer,
}

impl Maintenance {
    /// Compiles a setting: `None` when it is off (nothing to carry), every
    /// error otherwise. Allocates; compile time only.
    pub fn compile(spec: &MaintenanceSpec) -> Result<Option<Maintenance>, Vec<MaintenanceError>> {
        let mut errors = Vec::new();
        if !MAINTENANCE_STATUSES.contains(&spec.status) {
            errors.push(MaintenanceError::Status);
        }
        if spec.retry_after_seconds > MAX_RETRY_AFTER_SECONDS {
            errors.push(MaintenanceError::RetryAfter);
        }
        if let Some(page) = &spec.page {
            errors.extend(
                crate::custom_pages::validate_entry(page)
                    .into_iter()
                    .map(MaintenanceError::Page),
            );
        }
        if !errors.is_empty() {
            return Err(errors);
        }
        if !spec.enabled {
            return Ok(None);
        }
        let retry = spec.retry_after_seconds.to_string();
        let mut extra: Vec<(&str, &str)> = Vec::new();
        if spec.retry_after_seconds > 0 {
            extra.push(("Retry-After", &retry));
        }
        let builtin = PageEntrySpec::message(BUILTIN_HEADING, BUILTIN_TEXT);
        let entry = spec.page.as_ref().unwrap_or(&builtin);
        let html = CustomPage::compile(spec.status, entry, &extra).map_err(|es| {
            es.into_iter()
                .map(MaintenanceError::Page)
                .collect::<Vec<_>>()
        })?;
        let mut text_headers = vec![
            ("Content-Type", "text/plain; charset=utf-8"),
            ("Cache-Control", "no-store"),
            ("Referrer-Policy", "no-referrer"),
            ("X-Content-Type-Options", "nosniff"),
        ];
        text_headers.extend_from_slice(&extra);
        let body = format!(
            "{} {}\n{BUILTIN_HEADING}. Please try again later.\n",
            spec.status,
            reason_phrase(spec.status)
        );
        Ok(Some(Maintenance {
            status: spec.status,
            retry_after_seconds: spec.retry_after_seconds,
            html,
            text: Answer::new(spec.status, &text_headers, body.as_bytes()),
        }))
    }

    pub fn status(&self) -> u16 {
        self.status
    }

    pub fn retry_after_seconds(&self) -> u32 {
        self.retry_after_seconds
    }

    /// Decides one request: `bypassed` is the bypass list's address verdict,
    /// computed by the caller (false when the host names no bypass list).
    /// Counts in `counters`. O(1), no allocation.
    #[inline]
    pub fn decide(
        &self,
        bypassed: bool,
        mode: Mode,
        counters: &mut MaintenanceCounters,
    ) -> MaintenanceOutcome {
        if bypassed {
            counters.bypassed += 1;
            return MaintenanceOutcome::Bypassed;
        }
        match mode.apply(Some(()), &mut counters.shadow_hits) {
            Some(()) => {
                counters.served += 1;
                MaintenanceOutcome::Serve
            }
            None => MaintenanceOutcome::Shadowed,
        }
    }

    /// Appends the maintenance answer: the HTML page for a client that asked
    /// for it, else the plain text. O(page), no allocation once `out` has
    /// the capacity.
    #[inline]
    pub fn write_into<O: Sink>(
        &self,
        out: &mut O,
        wants_html: bool,
        vars: &PageVars<'_>,
        ctx: &WriteCtx<'_>,
    ) {
        if wants_html {
            self.html.write_into(out, vars, None, ctx);
        } else {
            out.head(self.text.status, self.text.head_lines());
            out.date(ctx.date_line);
            end_head(out, ctx);
            if !ctx.head_only {
                out.body(self.text.body());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CTX: WriteCtx<'static> = WriteCtx {
        date_line: b"Date: x\r\n",
        head_only: false,
        close: false,
        keep_alive_10: false,
    };

    fn on(status: u16, retry: u32, page: Option<PageEntrySpec>) -> Maintenance {
        Maintenance::compile(&MaintenanceSpec {
            enabled: true,
            status,
            retry_after_seconds: retry,
            page,
        })
        .unwrap()
        .unwrap()
    }

    fn write(m: &Maintenance, html: bool, vars: &PageVars<'_>) -> String {
        let mut out = Vec::new();
        m.write_into(&mut out, html, vars, &CTX);
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn off_compiles_to_nothing_but_is_still_validated() {
        assert!(Maintenance::compile(&MaintenanceSpec::default())
            .unwrap()
            .is_none());
        let bad = MaintenanceSpec {
            status: 418,
            ..MaintenanceSpec::default()
        };
        assert_eq!(
            Maintenance::compile(&bad).unwrap_err(),
            vec![MaintenanceError::Status]
        );
    }

    #[test]
    fn built_in_page_is_down_for_maintenance_with_the_status_and_retry_after() {
        let m = on(503, 600, None);
        let page = write(&m, true, &PageVars::default());
        assert!(
            page.starts_with("HTTP/1.1 503 Service Unavailable\r\n"),
            "{page}"
        );
        assert!(page.contains("\r\nRetry-After: 600\r\n"));
        assert!(page.contains("\r\nCache-Control: no-store\r\n"));
        assert!(page.contains("<h1>Down for maintenance</h1>"));
        assert!(page.contains("<p class=\"s\">503</p>"));
        assert!(page.contains(&crate::pages::builtin_csp()));
        let text = write(&m, false, &PageVars::default());
        assert!(text.starts_with(
            "HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain; charset=utf-8\r\n"
        ));
        assert!(text.contains("\r\nRetry-After: 600\r\n"));
        assert!(text.ends_with(
            "\r\n\r\n503 Service Unavailable\nDown for maintenance. Please try again later.\n"
        ));
    }

    #[test]
    fn every_allowed_status_and_no_retry_after_at_zero() {
        for status in MAINTENANCE_STATUSES {
            let m = on(status, 0, None);
            assert_eq!(m.status(), status);
            let page = write(&m, true, &PageVars::default());
            assert!(page.starts_with(&format!("HTTP/1.1 {status} ")), "{page}");
            assert!(!page.contains("Retry-After"));
        }
    }

    #[test]
    fn host_entry_replaces_the_built_in_page() {
        let doc = PageEntrySpec::document("<h1>Back at {status} soon, {host}</h1>");
        let m = on(410, 0, Some(doc));
        let page = write(
            &m,
            true,
            &PageVars {
                host: b"<x>.test",
                ..PageVars::default()
            },
        );
        assert!(page.starts_with("HTTP/1.1 410 Gone\r\n"));
        assert!(
            page.ends_with("\r\n\r\n<h1>Back at 410 soon, &lt;x&gt;.test</h1>"),
            "{page}"
        );
        assert!(page.contains(crate::custom_pages::DOCUMENT_CSP));
    }

    #[test]
    fn bypass_skips_the_page_and_shadow_only_counts() {
        let m = on(503, 0, None);
        let mut c = MaintenanceCounters::default();
        assert_eq!(
            m.decide(false, Mode::Enforce, &mut c),
            MaintenanceOutcome::Serve
        );
        assert_eq!(
            m.decide(true, Mode::Enforce, &mut c),
            MaintenanceOutcome::Bypassed
        );
        assert_eq!(
            m.decide(false, Mode::Shadow, &mut c),
            MaintenanceOutcome::Shadowed
        );
        assert_eq!(
            m.decide(true, Mode::Shadow, &mut c),
            MaintenanceOutcome::Bypassed
        );
        assert_eq!(
            c,
            MaintenanceCounters {
                served: 1,
                bypassed: 2,
                shadow_hits: 1
            }
        );
        assert!(MaintenanceOutcome::Serve.serves());
        assert!(!MaintenanceOutcome::Shadowed.serves());
    }

    #[test]
    fn head_request_gets_the_length_without_the_body() {
        let m = on(503, 0, None);
        let mut out = Vec::new();
        let ctx = WriteCtx {
            head_only: true,
            ..CTX
        };
        let vars = PageVars {
            request_id: b"abc",
            ..PageVars::default()
        };
        m.write_into(&mut out, true, &vars, &ctx);
        let s = String::from_utf8(out).unwrap();
        assert!(s.ends_with("\r\n\r\n"));
        let full = write(&m, true, &vars);
        let body_len = full.len() - full.find("\r\n\r\n").unwrap() - 4;
        assert!(
            s.contains(&format!("Content-Length: {body_len}\r\n")),
            "{s}"
        );
    }
}

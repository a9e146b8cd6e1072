//! Semantic checks of `[client]`: how the client address is found,
//! compiled into the gate's [`ClientPolicy`].
//!
//! A network list's entries are parsed by the gate ([`Cidr::parse`]), so
//! its refusals (`address.*`) are exactly the gate's. Peers trusted to name
//! someone else (`trusted_proxies`, `proxy_protocol_peers`) may not be broad
//! ranges ([`too_broad_to_trust`]): anyone inside one could choose their own
//! address, and with it their own rate-limit partition. Each list is only
//! accepted where its mode reads it, so a list never sits in a profile
//! looking trusted while nothing reads it.

use crate::codes::ProfileCode;
use crate::error::Errors;
use crate::rawgate::{RawClient, RawRanges};
use crate::values::{choice, StrList};
use gapura_gate::cidr::{Cidr, CidrSet};
use gapura_gate::client::{
    cloudflare_ranges, too_broad_to_trust, ClientMode, ClientPolicy, ForwardedHeader,
};
use std::ops::Range;

/// The listener that expects a PROXY header first: its
/// `server.listen[N].proxy_protocol` path and the flag's span.
pub(crate) type ProxyListener = (String, Range<usize>);

/// Checks `[client]`. `proxy_listener` is the first listen entry with
/// `proxy_protocol = true`, when there is one.
pub(crate) fn check_client(
    c: &RawClient,
    proxy_listener: Option<&ProxyListener>,
    e: &mut Errors<'_>,
) -> ClientPolicy {
    let mode = choice(
        e,
        &c.mode,
        "client.mode",
        "client.mode.invalid",
        &[
            ("direct", Some(ClientMode::Direct)),
            (
                "x_forwarded_for",
                Some(ClientMode::TrustedProxy(ForwardedHeader::XForwardedFor)),
            ),
            (
                "forwarded",
                Some(ClientMode::TrustedProxy(ForwardedHeader::Forwarded)),
            ),
            ("cloudflare", Some(ClientMode::Cloudflare)),
        ],
        None,
    )
    .or(c.mode.is_none().then_some(ClientMode::Direct));
    let mode_text = c.mode.as_ref().map_or("direct", |m| m.get_ref().as_str());

    ClientPolicy {
        mode: mode.unwrap_or_default(),
        trusted_proxies: check_trusted_proxies(c, mode, mode_text, e),
        cloudflare_ranges: check_cloudflare_ranges(c, mode, mode_text, e),
        proxy_protocol_peers: check_proxy_protocol_peers(c, proxy_listener, e),
    }
}

/// `trusted_proxies`: required (and non-empty) with a forwarding-header
/// mode, refused with any other.
fn check_trusted_proxies(
    c: &RawClient,
    mode: Option<ClientMode>,
    mode_text: &str,
    e: &mut Errors<'_>,
) -> CidrSet {
    match &c.trusted_proxies {
        None => {
            if let (Some(ClientMode::TrustedProxy(_)), Some(m)) = (mode, &c.mode) {
                e.push(
                    "client.trusted_proxies.required",
                    "client.trusted_proxies",
                    m.span(),
                    format!(
                        "mode = {mode_text:?} believes the forwarding header only from \
                         trusted_proxies: list your proxies' addresses"
                    ),
                );
            }
            CidrSet::empty()
        }
        Some(list) => match mode {
            Some(ClientMode::TrustedProxy(_)) => {
                if list.get_ref().is_empty() {
                    e.push(
                        "client.trusted_proxies.required",
                        "client.trusted_proxies",
                        list.span(),
                        format!(
                            "mode = {mode_text:?} needs at least one trusted proxy; an empty \
                             list trusts nobody"
                        ),
                    );
                }
                networks(
                    e,
                    list,
                    "client.trusted_proxies",
                    Some("client.trusted_proxies.too_broad"),
                )
            }
            Some(_) => {
                e.push(
                    "client.trusted_proxies.unexpected",
                    "client.trusted_proxies",
                    list.span(),
                    format!(
                        "mode = {mode_text:?} reads no forwarding header; trusted_proxies \
                         belongs to mode = \"x_forwarded_for\" or \"forwarded\""
                    ),
                );
                CidrSet::empty()
            }
            None => CidrSet::empty(),
        },
    }
}

/// `cloudflare_ranges`: `"builtin"` or a list, only with mode
/// `"cloudflare"`; the set the mode trusts (empty for other modes).
fn check_cloudflare_ranges(
    c: &RawClient,
    mode: Option<ClientMode>,
    mode_text: &str,
    e: &mut Errors<'_>,
) -> CidrSet {
    let listed = match &c.cloudflare_ranges {
        None => None,
        Some(v) if mode.is_some() && mode != Some(ClientMode::Cloudflare) => {
            e.push(
                "client.cloudflare_ranges.unexpected",
                "client.cloudflare_ranges",
                v.span(),
                format!(
                    "mode = {mode_text:?} reads no CF-* header; cloudflare_ranges belongs to \
                     mode = \"cloudflare\""
                ),
            );
            None
        }
        Some(v) => match v.get_ref() {
            RawRanges::Word(w) if w == "builtin" => None,
            RawRanges::Word(w) => {
                e.push(
                    "client.cloudflare_ranges.invalid",
                    "client.cloudflare_ranges",
                    v.span(),
                    format!(
                        "must be \"builtin\" (Cloudflare's published ranges) or a list of \
                         addresses and networks, got {w:?}"
                    ),
                );
                None
            }
            RawRanges::List(items) => {
                if items.is_empty() {
                    e.push(
                        "client.cloudflare_ranges.invalid",
                        "client.cloudflare_ranges",
                        v.span(),
                        "an empty list trusts no Cloudflare peer: leave the key out for \
                         the built-in ranges, or list your cloudflared's address",
                    );
                }
                Some(parse_each(e, items, "client.cloudflare_ranges", None))
            }
        },
    };
    match mode {
        Some(ClientMode::Cloudflare) => listed.unwrap_or_else(cloudflare_ranges),
        _ => CidrSet::empty(),
    }
}

/// `proxy_protocol_peers`: required (and non-empty) when a listener expects
/// a PROXY header, refused when none does.
fn check_proxy_protocol_peers(
    c: &RawClient,
    proxy_listener: Option<&ProxyListener>,
    e: &mut Errors<'_>,
) -> CidrSet {
    match (&c.proxy_protocol_peers, proxy_listener) {
        (None, None) => CidrSet::empty(),
        (None, Some((flag, at))) => {
            e.push(
                "client.proxy_protocol_peers.required",
                "client.proxy_protocol_peers",
                at.clone(),
                format!(
                    "{flag} expects a PROXY header: list who may send one in \
                     client.proxy_protocol_peers"
                ),
            );
            CidrSet::empty()
        }
        (Some(list), None) => {
            e.push(
                "client.proxy_protocol_peers.unexpected",
                "client.proxy_protocol_peers",
                list.span(),
                "no listener expects a PROXY header: mark one in server.listen with \
                 { addr = \"...\", proxy_protocol = true }",
            );
            CidrSet::empty()
        }
        (Some(list), Some((flag, _))) => {
            if list.get_ref().is_empty() {
                e.push(
                    "client.proxy_protocol_peers.required",
                    "client.proxy_protocol_peers",
                    list.span(),
                    format!("{flag} expects a PROXY header, and an empty list trusts nobody"),
                );
            }
            networks(
                e,
                list,
                "client.proxy_protocol_peers",
                Some("client.proxy_protocol_peers.too_broad"),
            )
        }
    }
}

/// Parses a spanned list of networks under `path`.
fn networks(
    e: &mut Errors<'_>,
    list: &StrList,
    path: &str,
    too_broad: Option<&'static str>,
) -> CidrSet {
    parse_each(e, list.get_ref(), path, too_broad)
}

/// Parses every entry, reporting each refusal at its element; with
/// `too_broad`, ranges too broad to trust are refused with that code.
fn parse_each(
    e: &mut Errors<'_>,
    items: &[toml::Spanned<String>],
    path: &str,
    too_broad: Option<&'static str>,
) -> CidrSet {
    let mut cidrs = Vec::with_capacity(items.len());
    for (i, item) in items.iter().enumerate() {
        let p = format!("{path}[{i}]");
        match Cidr::parse(item.get_ref()) {
            Err(err) => e.push(
                err.code(),
                p,
                item.span(),
                format!("{:?}: {err}", item.get_ref()),
            ),
            Ok(c) => match too_broad {
                Some(code) if too_broad_to_trust(&c) => e.push(
                    code,
                    p,
                    item.span(),
                    format!(
                        "{c} is too broad to trust: anyone inside it could name their own \
                         address; list the proxies themselves (at least /16 for IPv4, /48 \
                         for IPv6)"
                    ),
                ),
                _ => cidrs.push(c),
            },
        }
    }
    CidrSet::from_cidrs(cidrs)
}

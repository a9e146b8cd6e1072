//! ACME Renewal Information (RFC 9773): where the server offers it (a
//! `renewalInfo` URL in its directory), it says in which window to renew
//! each certificate; the renewal then comes at a random time in that
//! window (at once when the window has begun), and the new order names the
//! certificate it replaces.
//!
//! A certificate is named by its certificate ID: the base64url of its
//! Authority Key Identifier's key identifier, a dot, and the base64url of
//! its serial number's DER bytes.

use crate::jws::b64;
use crate::validity::{days_from_civil, element, tbs_from_serial};
use serde_json::Value;

/// How often a window is asked for again when the server says nothing.
pub const ASK_AGAIN_S: i64 = 6 * 3600;

/// The certificate ID of the DER certificate `der`; `None` without an
/// Authority Key Identifier.
pub fn cert_id(der: &[u8]) -> Option<String> {
    let (0x02, serial, mut rest) = element(tbs_from_serial(der)?)? else {
        return None;
    };
    // signature, issuer, validity, subject, subjectPublicKeyInfo.
    for _ in 0..5 {
        rest = element(rest)?.2;
    }
    // issuerUniqueID [1], subjectUniqueID [2], then extensions [3].
    while let Some((tag, body, after)) = element(rest) {
        if tag == 0xa3 {
            return Some(format!("{}.{}", b64(key_identifier(body)?), b64(serial)));
        }
        rest = after;
    }
    None
}

/// The key identifier of the Authority Key Identifier among `[3]`'s
/// extensions.
fn key_identifier(explicit: &[u8]) -> Option<&[u8]> {
    const AKI: &[u8] = &[0x55, 0x1d, 0x23];
    let (0x30, mut list, _) = element(explicit)? else {
        return None;
    };
    while let Some((0x30, ext, after)) = element(list) {
        list = after;
        let (0x06, oid, mut fields) = element(ext)? else {
            continue;
        };
        if oid != AKI {
            continue;
        }
        // critical BOOLEAN, when present.
        if fields.first() == Some(&0x01) {
            fields = element(fields)?.2;
        }
        let (0x04, value, _) = element(fields)? else {
            return None;
        };
        let (0x30, aki, _) = element(value)? else {
            return None;
        };
        let (0x80, id, _) = element(aki)? else {
            return None;
        };
        return Some(id);
    }
    None
}

/// An RFC 3339 date-time (`2025-01-02T04:00:00Z`, fractions and offsets
/// allowed) as Unix seconds.
pub fn rfc3339(s: &str) -> Option<i64> {
    let b = s.as_bytes();
    if b.len() < 20
        || b[4] != b'-'
        || b[7] != b'-'
        || !matches!(b[10], b'T' | b't')
        || b[13] != b':'
        || b[16] != b':'
    {
        return None;
    }
    let n = |r: std::ops::Range<usize>| s.get(r)?.parse::<i64>().ok();
    let (y, mo, d, h, mi, sec) = (
        n(0..4)?,
        n(5..7)?,
        n(8..10)?,
        n(11..13)?,
        n(14..16)?,
        n(17..19)?,
    );
    if !(1..=12).contains(&mo) || !(1..=31).contains(&d) || h > 23 || mi > 59 || sec > 60 {
        return None;
    }
    let mut rest = &s[19..];
    if let Some(frac) = rest.strip_prefix('.') {
        let digits = frac.bytes().take_while(u8::is_ascii_digit).count();
        if digits == 0 {
            return None;
        }
        rest = &frac[digits..];
    }
    let offset = match rest {
        "Z" | "z" => 0,
        _ => {
            let sign = match rest.as_bytes().first()? {
                b'+' => 1,
                b'-' => -1,
                _ => return None,
            };
            let (oh, om) = rest[1..].split_once(':')?;
            if oh.len() != 2 || om.len() != 2 {
                return None;
            }
            sign * (oh.parse::<i64>().ok()? * 3600 + om.parse::<i64>().ok()? * 60)
        }
    };
    Some(days_from_civil(y, mo, d) * 86_400 + h * 3600 + mi * 60 + sec - offset)
}

/// The suggested window (start, end) of a renewalInfo answer.
pub fn parse_window(body: &[u8]) -> Option<(i64, i64)> {
    let v: Value = serde_json::from_slice(body).ok()?;
    let w = &v["suggestedWindow"];
    let (start, end) = (rfc3339(w["start"].as_str()?)?, rfc3339(w["end"].as_str()?)?);
    (start < end).then_some((start, end))
}

/// When to renew in `window`: a random point in it (`random` picks).
pub fn choose((start, end): (i64, i64), random: u64) -> i64 {
    start + (random % (end - start).max(1) as u64) as i64
}

#[cfg(test)]
mod tests {
    use super::*;

    /// RFC 9773 §4.1's example: key identifier
    /// 69:88:5B:6B:87:46:40:41:E1:B3:7B:84:7B:A0:AE:2C:DE:01:C8:D4 and
    /// serial 00:87:65:43:21.
    #[test]
    fn the_certificate_id_is_the_rfcs_example() {
        let kid = vec![
            0x69, 0x88, 0x5B, 0x6B, 0x87, 0x46, 0x40, 0x41, 0xE1, 0xB3, 0x7B, 0x84, 0x7B, 0xA0,
            0xAE, 0x2C, 0xDE, 0x01, 0xC8, 0xD4,
        ];
        let mut ca = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        ca.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        ca.key_identifier_method = rcgen::KeyIdMethod::PreSpecified(kid);
        let ca_key = rcgen::KeyPair::generate().unwrap();
        let ca = ca.self_signed(&ca_key).unwrap();
        let mut leaf = rcgen::CertificateParams::new(vec!["a.test".to_string()]).unwrap();
        leaf.serial_number = Some(rcgen::SerialNumber::from_slice(&[
            0x00, 0x87, 0x65, 0x43, 0x21,
        ]));
        leaf.use_authority_key_identifier_extension = true;
        let key = rcgen::KeyPair::generate().unwrap();
        let leaf = leaf.signed_by(&key, &ca, &ca_key).unwrap();
        assert_eq!(
            cert_id(leaf.der()).as_deref(),
            Some("aYhba4dGQEHhs3uEe6CuLN4ByNQ.AIdlQyE")
        );
        // Without the extension there is no ID.
        let plain = rcgen::CertificateParams::new(vec!["a.test".to_string()])
            .unwrap()
            .self_signed(&key)
            .unwrap();
        assert_eq!(cert_id(plain.der()), None);
        assert_eq!(cert_id(b"junk"), None);
    }

    #[test]
    fn dates_windows_and_the_choice() {
        assert_eq!(rfc3339("1970-01-01T00:00:00Z"), Some(0));
        assert_eq!(rfc3339("2025-01-02T04:00:00Z"), Some(1_735_790_400));
        assert_eq!(rfc3339("2025-01-02T04:00:00.123456Z"), Some(1_735_790_400));
        assert_eq!(rfc3339("2025-01-02T06:00:00+02:00"), Some(1_735_790_400));
        assert_eq!(rfc3339("2025-01-02T03:30:00-00:30"), Some(1_735_790_400));
        for bad in [
            "2025-01-02 04:00:00Z",
            "2025-13-02T04:00:00Z",
            "2025-01-02T04:00:00",
            "2025-01-02T04:00:00.Z",
            "x",
        ] {
            assert_eq!(rfc3339(bad), None, "{bad}");
        }
        let body = br#"{"suggestedWindow":{"start":"2025-01-02T04:00:00Z","end":"2025-01-03T04:00:00Z"},"explanationURL":"https://x"}"#;
        assert_eq!(parse_window(body), Some((1_735_790_400, 1_735_876_800)));
        assert_eq!(parse_window(br#"{"suggestedWindow":{"start":"2025-01-03T04:00:00Z","end":"2025-01-02T04:00:00Z"}}"#), None);
        assert_eq!(parse_window(b"{}"), None);
        assert_eq!(choose((100, 200), 0), 100);
        assert_eq!(choose((100, 200), 99), 199);
        assert_eq!(choose((100, 200), 100), 100);
    }
}

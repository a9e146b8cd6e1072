//! A certificate's validity period, read from its DER (RFC 5280 §4.1):
//! the few DER elements before it are stepped over, nothing else is
//! parsed.

/// Seconds since the Unix epoch, `notBefore` and `notAfter`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Validity {
    pub not_before: i64,
    pub not_after: i64,
}

/// One DER element: (tag, contents, the rest after it).
pub(crate) fn element(der: &[u8]) -> Option<(u8, &[u8], &[u8])> {
    let tag = *der.first()?;
    let first = *der.get(1)?;
    let (len, at) = if first < 0x80 {
        (first as usize, 2)
    } else {
        let n = (first & 0x7f) as usize;
        if n == 0 || n > 4 {
            return None;
        }
        let mut len = 0usize;
        for b in der.get(2..2 + n)? {
            len = (len << 8) | *b as usize;
        }
        (len, 2 + n)
    };
    let body = der.get(at..at.checked_add(len)?)?;
    Some((tag, body, &der[at + len..]))
}

/// The fields of the DER certificate `der`'s TBSCertificate from its
/// serial number on (the `[0]` version stepped over when present).
pub(crate) fn tbs_from_serial(der: &[u8]) -> Option<&[u8]> {
    let (0x30, cert, _) = element(der)? else {
        return None;
    };
    let (0x30, tbs, _) = element(cert)? else {
        return None;
    };
    if tbs.first() == Some(&0xa0) {
        return Some(element(tbs)?.2);
    }
    Some(tbs)
}

/// The validity of the DER certificate `der`; `None` when it is not one.
pub fn of(der: &[u8]) -> Option<Validity> {
    let mut rest = tbs_from_serial(der)?;
    // serialNumber, signature, issuer.
    for _ in 0..3 {
        rest = element(rest)?.2;
    }
    let (0x30, validity, _) = element(rest)? else {
        return None;
    };
    let (t1, before, after_rest) = element(validity)?;
    let (t2, after, _) = element(after_rest)?;
    Some(Validity {
        not_before: time(t1, before)?,
        not_after: time(t2, after)?,
    })
}

/// UTCTime (`YYMMDDHHMMSSZ`) or GeneralizedTime (`YYYYMMDDHHMMSSZ`).
fn time(tag: u8, s: &[u8]) -> Option<i64> {
    let s = std::str::from_utf8(s).ok()?.strip_suffix('Z')?;
    let (year, rest) = match (tag, s.len()) {
        (0x17, 12) => {
            let yy: i64 = s[..2].parse().ok()?;
            (if yy >= 50 { 1900 + yy } else { 2000 + yy }, &s[2..])
        }
        (0x18, 14) => (s[..4].parse().ok()?, &s[4..]),
        _ => return None,
    };
    if !rest.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let n = |i: usize| rest[i..i + 2].parse::<i64>().ok();
    let (month, day, h, m, sec) = (n(0)?, n(2)?, n(4)?, n(6)?, n(8)?);
    if !(1..=12).contains(&month) || !(1..=31).contains(&day) || h > 23 || m > 59 || sec > 60 {
        return None;
    }
    Some(days_from_civil(year, month, day) * 86_400 + h * 3600 + m * 60 + sec)
}

/// Days since 1970-01-01 of a proleptic Gregorian date.
pub(crate) fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_generated_certificates_validity_is_read_to_the_second() {
        let mut params = rcgen::CertificateParams::new(vec!["a.test".to_string()]).unwrap();
        params.not_before = rcgen::date_time_ymd(2026, 12, 6);
        params.not_after = rcgen::date_time_ymd(2027, 2, 8);
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = params.self_signed(&key).unwrap();
        let v = of(cert.der()).unwrap();
        assert_eq!(v.not_before, 1_796_515_200);
        assert_eq!(v.not_after, 1_802_044_800);
        assert_eq!((v.not_after - v.not_before) / 86_400, 64);
    }

    #[test]
    fn both_time_forms_and_the_century_rule() {
        assert_eq!(time(0x17, b"700101000000Z"), Some(0));
        assert_eq!(time(0x17, b"491231235959Z"), Some(2_524_607_999));
        assert_eq!(time(0x18, b"20500101000000Z"), Some(2_524_608_000));
        assert_eq!(time(0x18, b"20500101000000"), None);
        assert_eq!(time(0x17, b"701301000000Z"), None);
        assert_eq!(time(0x17, b"70010100000aZ"), None);
    }

    #[test]
    fn anything_else_is_none_not_a_panic() {
        assert_eq!(of(b""), None);
        assert_eq!(of(&[0x30, 0x84, 0xff, 0xff, 0xff, 0xff]), None);
        assert_eq!(of(&[0x30, 0x03, 0x30, 0x01, 0x00]), None);
        for n in 0..200u32 {
            let junk: Vec<u8> = (0..n)
                .map(|i| (i.wrapping_mul(2_654_435_761) >> 7) as u8)
                .collect();
            let _ = of(&junk);
        }
    }
}

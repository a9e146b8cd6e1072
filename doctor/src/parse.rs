//! Parsers for the kernel's small text formats: one value per file, CPU
//! lists ("0-3,8"), hex CPU masks ("ff,00000001"), bracketed choices
//! ("always [madvise] never"), kernel versions. Garbage gives `None`.

/// CPU numbers above this are taken as garbage (the kernel's own limit is
/// far lower on any real machine).
pub const MAX_CPU: u32 = 1 << 16;

/// The first line, trimmed; `None` when the text has none.
pub fn first_line(text: &str) -> Option<&str> {
    let line = text.lines().next()?.trim();
    (!line.is_empty()).then_some(line)
}

/// One integer alone in a file ("4096\n").
pub fn int(text: &str) -> Option<i64> {
    first_line(text)?.parse().ok()
}

/// A CPU list ("0-3,8,10-11"), sorted and without duplicates. An empty
/// text is an empty list; anything malformed is `None`.
pub fn cpu_list(text: &str) -> Option<Vec<u32>> {
    let text = text.trim();
    let mut cpus = Vec::new();
    if text.is_empty() {
        return Some(cpus);
    }
    for part in text.split(',') {
        let part = part.trim();
        // The kernel's "0-7:2/4" group syntax appears on command lines.
        let part = part.split(':').next()?;
        let (lo, hi) = match part.split_once('-') {
            Some((a, b)) => (a.trim().parse::<u32>().ok()?, b.trim().parse::<u32>().ok()?),
            None => {
                let n = part.parse::<u32>().ok()?;
                (n, n)
            }
        };
        if lo > hi || hi > MAX_CPU {
            return None;
        }
        cpus.extend(lo..=hi);
    }
    cpus.sort_unstable();
    cpus.dedup();
    Some(cpus)
}

/// Writes a CPU list the way the kernel does ("0-3,8").
pub fn format_cpus(cpus: &[u32]) -> String {
    let mut sorted = cpus.to_vec();
    sorted.sort_unstable();
    sorted.dedup();
    let mut parts = Vec::new();
    let mut i = 0;
    while i < sorted.len() {
        let start = sorted[i];
        let mut end = start;
        while i + 1 < sorted.len() && sorted[i + 1] == end + 1 {
            end += 1;
            i += 1;
        }
        parts.push(if start == end {
            start.to_string()
        } else {
            format!("{start}-{end}")
        });
        i += 1;
    }
    if parts.is_empty() {
        "none".to_string()
    } else {
        parts.join(",")
    }
}

/// A hex CPU mask ("ff,00000001": comma-separated 32-bit words, most
/// significant first) as the CPUs it sets.
pub fn hex_mask(text: &str) -> Option<Vec<u32>> {
    let digits: String = first_line(text)
        .unwrap_or("")
        .chars()
        .filter(|&c| c != ',')
        .collect();
    if !digits.chars().all(|c| c.is_ascii_hexdigit()) {
        return None;
    }
    let mut cpus = Vec::new();
    for (pos, c) in digits.chars().rev().enumerate() {
        let nibble = c.to_digit(16)?;
        for bit in 0..4 {
            if nibble & (1 << bit) != 0 {
                let cpu = u32::try_from(pos * 4 + bit).ok()?;
                if cpu > MAX_CPU {
                    return None;
                }
                cpus.push(cpu);
            }
        }
    }
    Some(cpus)
}

/// The bracketed choice ("always [madvise] never" gives "madvise").
pub fn bracketed(text: &str) -> Option<&str> {
    let start = text.find('[')?;
    let end = start + text[start..].find(']')?;
    let v = text[start + 1..end].trim();
    (!v.is_empty()).then_some(v)
}

/// Major and minor of a kernel release ("6.18.44-fc-v657" gives (6, 18)).
pub fn kernel_version(text: &str) -> Option<(u32, u32)> {
    let release = first_line(text)?;
    let mut parts = release.split(|c: char| !c.is_ascii_digit());
    let major = parts.next()?.parse().ok()?;
    let minor = parts.next()?.parse().ok()?;
    Some((major, minor))
}

/// The value of `key=` on a kernel command line, if present.
pub fn cmdline_value<'a>(cmdline: &'a str, key: &str) -> Option<&'a str> {
    cmdline
        .split_whitespace()
        .take_while(|w| *w != "--")
        .find_map(|w| w.strip_prefix(key)?.strip_prefix('='))
}

/// Bytes for a person: "404 KiB", "64 MiB", "unlimited" for `None`.
pub fn bytes(n: Option<u64>) -> String {
    let Some(n) = n else {
        return "unlimited".to_string();
    };
    if n >= 1 << 30 && n % (1 << 30) == 0 {
        format!("{} GiB", n >> 30)
    } else if n >= 1 << 20 && n % (1 << 20) == 0 {
        format!("{} MiB", n >> 20)
    } else if n >= 1 << 10 {
        format!("{} KiB", n.div_ceil(1 << 10))
    } else {
        format!("{n} bytes")
    }
}

/// A limit for a person: the number, or "unlimited".
pub fn limit(n: Option<u64>) -> String {
    n.map_or_else(|| "unlimited".to_string(), |n| n.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_lists_parse_and_format_back() {
        assert_eq!(cpu_list("0-1\n"), Some(vec![0, 1]));
        assert_eq!(cpu_list("0-3,8,10-11"), Some(vec![0, 1, 2, 3, 8, 10, 11]));
        assert_eq!(cpu_list("\n"), Some(vec![]));
        assert_eq!(cpu_list("2-1"), None);
        assert_eq!(cpu_list("zz"), None);
        assert_eq!(cpu_list("0-4294967295"), None);
        assert_eq!(cpu_list("1-3:1/2"), Some(vec![1, 2, 3]));
        assert_eq!(format_cpus(&[0, 1, 2, 3, 8, 10, 11]), "0-3,8,10-11");
        assert_eq!(format_cpus(&[5]), "5");
        assert_eq!(format_cpus(&[]), "none");
    }

    #[test]
    fn hex_masks_name_their_cpus() {
        assert_eq!(hex_mask("0\n"), Some(vec![]));
        assert_eq!(hex_mask("3"), Some(vec![0, 1]));
        assert_eq!(hex_mask("00000001,00000000"), Some(vec![32]));
        assert_eq!(hex_mask("f0"), Some(vec![4, 5, 6, 7]));
        assert_eq!(hex_mask("xyz"), None);
        assert_eq!(hex_mask(""), Some(vec![]));
    }

    #[test]
    fn small_values_parse() {
        assert_eq!(int("4096\n"), Some(4096));
        assert_eq!(int("-1\n"), Some(-1));
        assert_eq!(int("garbage"), None);
        assert_eq!(int(""), None);
        assert_eq!(bracketed("always [madvise] never\n"), Some("madvise"));
        assert_eq!(bracketed("always madvise never"), None);
        assert_eq!(bracketed("[]"), None);
        assert_eq!(kernel_version("6.18.44-fc-v657\n"), Some((6, 18)));
        assert_eq!(kernel_version("5.4.0-150-generic"), Some((5, 4)));
        assert_eq!(kernel_version("junk"), None);
        let cmd = "quiet isolcpus=2-3 nohz_full=2-3 -- --isolcpus=9";
        assert_eq!(cmdline_value(cmd, "isolcpus"), Some("2-3"));
        assert_eq!(cmdline_value(cmd, "nohz"), None);
        assert_eq!(bytes(Some(8 << 20)), "8 MiB");
        assert_eq!(bytes(Some(413_696)), "404 KiB");
        assert_eq!(bytes(Some(65_536)), "64 KiB");
        assert_eq!(bytes(None), "unlimited");
        assert_eq!(limit(Some(20_000)), "20000");
    }
}

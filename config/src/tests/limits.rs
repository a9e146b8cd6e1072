use super::*;
use gapura_gate::RequestLimits;

const HOST: &str = "[[host]]\nnames = [\"a.test\"]\n";

#[test]
fn host_limits_override_one_field_and_inherit_the_rest() {
    let c = ok(r#"
[defaults.limits]
max_body_bytes = "10 MiB"
max_url_bytes = 2048

[[host]]
names = ["a.test"]
[host.limits]
max_url_bytes = "1 KiB"

[[host]]
names = ["b.test"]
"#);
    // Defaults: two fields set, two built-in.
    assert_eq!(
        c.snapshot.default_limits,
        RequestLimits {
            max_body_bytes: 10_485_760,
            max_header_count: 100,
            max_header_bytes: 32_768,
            max_url_bytes: 2048,
        }
    );
    // Host a: its one field, the defaults' body limit, the built-in header limits.
    assert_eq!(
        c.snapshot.entries[0].limits,
        RequestLimits {
            max_body_bytes: 10_485_760,
            max_header_count: 100,
            max_header_bytes: 32_768,
            max_url_bytes: 1024,
        }
    );
    // Host b sets nothing: exactly the defaults.
    assert_eq!(c.snapshot.entries[1].limits, c.snapshot.default_limits);
}

#[test]
fn no_limits_anywhere_means_builtins() {
    let c = ok(HOST);
    assert_eq!(c.snapshot.default_limits, RequestLimits::default());
    assert_eq!(c.snapshot.entries[0].limits, RequestLimits::default());
}

#[test]
fn sizes_are_integers_or_strings_with_units() {
    let c = ok(r#"
[defaults.limits]
max_body_bytes = 1500
max_header_bytes = "1 KiB"
max_url_bytes = "256 B"
max_header_count = 8
[[host]]
names = ["a.test"]
limits = { max_body_bytes = "0" }
"#);
    let d = c.snapshot.default_limits;
    assert_eq!(
        (
            d.max_body_bytes,
            d.max_header_bytes,
            d.max_url_bytes,
            d.max_header_count
        ),
        (1500, 1024, 256, 8)
    );
    assert_eq!(c.snapshot.entries[0].limits.max_body_bytes, 0);
    let c = ok("[defaults.limits]\nmax_body_bytes = \"1 TiB\"\nmax_header_bytes = \"64 KiB\"\n");
    assert_eq!(c.snapshot.default_limits.max_body_bytes, 1 << 40);
    assert_eq!(c.snapshot.default_limits.max_header_bytes, 65_536);
}

#[test]
fn dotted_limit_keys_work_like_tables() {
    let c = ok("[[host]]\nnames = [\"a.test\"]\nlimits.max_url_bytes = 300\n");
    assert_eq!(c.snapshot.entries[0].limits.max_url_bytes, 300);
}

#[test]
fn each_limit_refuses_values_out_of_range() {
    let cases: [(&str, &str, &str); 7] = [
        ("max_body_bytes", "\"2 TiB\"", "limits.max_body_bytes.range"),
        ("max_body_bytes", "-1", "limits.max_body_bytes.range"),
        ("max_header_count", "7", "limits.max_header_count.range"),
        ("max_header_count", "129", "limits.max_header_count.range"),
        ("max_header_bytes", "1023", "limits.max_header_bytes.range"),
        ("max_header_bytes", "0", "limits.max_header_bytes.range"),
        ("max_url_bytes", "\"17 KiB\"", "limits.max_url_bytes.range"),
    ];
    for (field, value, code) in cases {
        let src = format!("[defaults.limits]\n{field} = {value}\n");
        let column = field.len() as u32 + 4;
        assert_eq!(
            one(&src),
            at(code, &format!("defaults.limits.{field}"), 2, column),
            "{field} = {value}"
        );
    }
    let e = errors("[defaults.limits]\nmax_header_bytes = 100\n");
    assert_eq!(e[0].message, "must be between 1 KiB and 64 KiB, got 100 B");
    let e = errors("[defaults.limits]\nmax_body_bytes = \"2 TiB\"\n");
    assert_eq!(
        e[0].message,
        "must be 0 (no limit) or between 1 B and 1 TiB, got 2 TiB"
    );
}

#[test]
fn unparseable_size_strings_are_invalid() {
    for field in ["max_body_bytes", "max_header_bytes", "max_url_bytes"] {
        let src = format!("{HOST}[host.limits]\n{field} = \"10 MB\"\n");
        let code = match field {
            "max_body_bytes" => "limits.max_body_bytes.invalid",
            "max_header_bytes" => "limits.max_header_bytes.invalid",
            _ => "limits.max_url_bytes.invalid",
        };
        let column = field.len() as u32 + 4;
        assert_eq!(
            one(&src),
            at(code, &format!("host[0].limits.{field}"), 4, column)
        );
    }
}

#[test]
fn header_count_is_an_integer_only() {
    assert_eq!(
        one("[defaults.limits]\nmax_header_count = \"100\"\n"),
        at("profile.type", "defaults.limits.max_header_count", 2, 20)
    );
}

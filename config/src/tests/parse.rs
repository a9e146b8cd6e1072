use super::*;

#[test]
fn unknown_key_reports_its_path_and_position() {
    assert_eq!(
        one("[server]\nshards = 2\nlisen = [\"127.0.0.1:1\"]\n"),
        at("profile.unknown_key", "server.lisen", 3, 1)
    );
    assert_eq!(
        one("[[host]]\nnames = [\"a.test\"]\n[[host]]\nnames = [\"b.test\"]\n[host.limits]\nmax_body = 1\n"),
        at("profile.unknown_key", "host[1].limits.max_body", 6, 1)
    );
    assert_eq!(
        one("colour = 1\n"),
        at("profile.unknown_key", "colour", 1, 1)
    );
    let e = errors("[server]\nlisen = []\n");
    assert!(e[0]
        .message
        .starts_with("unknown field `lisen`, expected one of `shards`"));
}

#[test]
fn wrong_types_report_the_value_path_and_position() {
    assert_eq!(
        one("[server]\ndrain_timeout_ms = \"10s\"\n"),
        at("profile.type", "server.drain_timeout_ms", 2, 20)
    );
    assert_eq!(
        one("[[host]]\nnames = [\"a.test\", 7]\n"),
        at("profile.type", "host[0].names[1]", 2, 20)
    );
    assert_eq!(
        one("[[host]]\nnames = [\"a.test\"]\nheaders = { X-A = 1 }\n"),
        at("profile.type", "host[0].headers.X-A", 3, 19)
    );
    assert_eq!(
        one("[[host]]\nnames = [\"a.test\"]\ndefault = \"yes\"\n"),
        at("profile.type", "host[0].default", 3, 11)
    );
    assert_eq!(
        one("[server]\nshards = true\n"),
        at("profile.type", "server.shards", 2, 10)
    );
}

#[test]
fn every_unknown_key_and_wrong_type_of_a_file_is_reported_in_one_run() {
    let src = "[server]\n\
               listen = [\"127.0.0.1:8080\", 5]\n\
               shards = true\n\
               [server.bogus]\n\
               a = 1\n\
               b = [1,\n  2]\n\
               [[host]]\n\
               names = [\"a.test\"]\n\
               limits = { max_header_count = \"x\", wat = 1 }\n\
               [[host]]\n\
               names = [\"b.test\"]\n\
               x.y = 2\n\
               [host.limits]\n\
               max_url_bytes = 3\n";
    let found: Vec<_> = errors(src).iter().map(key).collect();
    assert_eq!(
        found,
        vec![
            at("profile.type", "server.listen[1]", 2, 29),
            at("profile.type", "server.shards", 3, 10),
            at("profile.unknown_key", "server.bogus", 4, 9),
            at("profile.type", "host[0].limits.max_header_count", 10, 31),
            at("profile.unknown_key", "host[0].limits.wat", 10, 36),
            at("profile.unknown_key", "host[1].x", 13, 1),
            // Beside them, the checks of what was read.
            at(
                "limits.max_url_bytes.range",
                "host[1].limits.max_url_bytes",
                15,
                17
            ),
        ]
    );
}

#[test]
fn a_semantic_error_under_a_stepped_over_entry_is_not_reported_twice() {
    // `requests` has the wrong type; the rate limit then lacks it, which
    // is the same mistake.
    let src = "[[rate_limit]]\nname = \"r\"\nrequests = \"ten\"\n";
    let found: Vec<_> = errors(src).iter().map(key).collect();
    assert_eq!(
        found,
        vec![at("profile.type", "rate_limit[0].requests", 3, 12)]
    );
}

#[test]
fn reading_stops_at_a_syntax_error_or_a_missing_field_keeping_what_came_before() {
    let found: Vec<_> = errors("[server]\nbogus = 1\n[server\n")
        .iter()
        .map(key)
        .collect();
    // The syntax error comes first: nothing reads before it is fixed.
    assert_eq!(found, vec![at("profile.syntax", "", 3, 8)]);
    let found: Vec<_> = errors("[server]\nbogus = 1\nlisten = [{ tls = true }]\n")
        .iter()
        .map(key)
        .collect();
    assert_eq!(found[0], at("profile.unknown_key", "server.bogus", 2, 1));
    assert_eq!(found.len(), 2, "{found:?}");
}

#[test]
fn warnings_display_as_warnings() {
    let e = ProfileError {
        code: "access.users.no_hash",
        path: "access_list[0].users[0]".into(),
        line: 3,
        column: 5,
        message: "m".into(),
    };
    assert_eq!(
        e.as_warning().to_string(),
        "3:5: warning[access.users.no_hash] access_list[0].users[0]: m"
    );
}

#[test]
fn syntax_errors_have_a_position_and_no_path() {
    assert_eq!(one("[server\nshards = 1\n"), at("profile.syntax", "", 1, 8));
    assert_eq!(
        one("[server]\nshards = 1\nshards = 2\n"),
        at("profile.syntax", "", 3, 1)
    );
    let e = errors("[server\n");
    assert!(!e[0].message.contains('\n'), "{:?}", e[0].message);
    assert!(e[0]
        .to_string()
        .starts_with("1:8: error[profile.syntax] invalid table header"));
}

#[test]
fn columns_count_characters_after_multi_byte_text() {
    // "é" is 2 bytes and "☕" 3: the status value is byte 56 of its line but column 53.
    let src = "# café ☕\nhost = [{ names = [\"a.test\"], body = \"é☕\", status = 7 }]\n";
    assert_eq!(one(src), at("host.status.invalid", "host[0].status", 2, 53));
    let src = "# ☕☕☕\n[server]\nshards = \"☕\"\nfoo = 1\n";
    assert_eq!(
        errors(src).iter().map(key).collect::<Vec<_>>(),
        vec![
            at("server.shards.invalid", "server.shards", 3, 10),
            at("profile.unknown_key", "server.foo", 4, 1)
        ]
    );
    let src = "[server] # ☕\nlisten = [\"☕\", \"x\"]\n";
    let e = errors(src);
    assert_eq!(
        e.iter().map(key).collect::<Vec<_>>(),
        vec![
            at("server.listen.invalid", "server.listen[0]", 2, 11),
            at("server.listen.invalid", "server.listen[1]", 2, 16),
        ]
    );
}

#[test]
fn dates_are_a_type_error() {
    let (code, _, line, column) = one("[server]\ndrain_timeout_ms = 1979-05-27\n");
    assert_eq!((code, line, column), ("profile.type", 2, 20));
}

#[test]
fn unknown_key_displays_as_one_line_with_its_path() {
    let e = errors("[server]\nfoo = 1\n");
    assert_eq!(
        e[0].to_string(),
        "2:1: error[profile.unknown_key] server.foo: unknown field `foo`, expected one of `shards`, \
         `driver`, `ring`, `steering`, `listen`, `admin`, `drain_timeout_ms`, `header_timeout_ms`, \
         `idle_timeout_ms`, `body_timeout_ms`, `write_timeout_ms`, `max_requests_per_connection`, \
         `max_connections_per_shard`, `unknown_host`, `access_list`, `access_log`, `pow_key_file`, `admin_token_file`, `http2`, `http2_max_streams`, `http2_max_resets`, `http2_max_control_frames`, `user`"
    );
}

/// Mutated profiles through the reader that steps over errors: never a
/// panic, errors in source order with real positions, and at most one
/// error per stepped-over entry plus what stopped the reading.
#[test]
fn mutated_profiles_never_panic_and_report_placed_errors() {
    const BASE: &str = "[server]\nlisten = [\"127.0.0.1:8080\", { addr = \"127.0.0.1:8443\", proxy_protocol = false }]\nshards = 2\n\n[[host]]\nnames = [\"a.test\", \"*.b.test\"]\nkind = \"respond\"\nstatus = 200\nheaders = { X-A = \"1\" }\nlimits = { max_header_count = 50 }\n\n[[rate_limit]]\nname = \"r\"\nrequests = 10\nburst = 20\n\n[quota.source]\nrequests = 100\n";
    const PIECES: [&str; 12] = [
        "bogus = 1\n",
        "= ",
        "\"",
        "[",
        "]",
        "{",
        ",",
        "x.y = true\n",
        "7",
        "\n[host.zzz]\n",
        "é",
        "'",
    ];
    // A fixed xorshift stream: seed 0x5eed_70ad, so a failure reproduces.
    let mut state: u64 = 0x5eed_70ad;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    let lines = BASE.lines().count() as u32 + 4;
    for case in 0..400 {
        let mut src = BASE.to_string();
        for _ in 0..(1 + next() % 3) {
            let mut at = (next() as usize) % (src.len() + 1);
            while !src.is_char_boundary(at) {
                at -= 1;
            }
            if next() % 3 == 0 && at < src.len() {
                let mut end = at + 1;
                while !src.is_char_boundary(end) {
                    end += 1;
                }
                src.replace_range(at..end, "");
            } else {
                src.insert_str(at, PIECES[(next() % PIECES.len() as u64) as usize]);
            }
        }
        if let Err(errors) = compile_str(&src) {
            assert!(!errors.is_empty(), "case {case}: {src}");
            assert!(errors.len() <= 64 + 1 + 16, "case {case}: {errors:#?}");
            for pair in errors.windows(2) {
                assert!((pair[0].line, pair[0].column) <= (pair[1].line, pair[1].column));
            }
            for e in &errors {
                assert!(e.line >= 1 && e.line <= lines, "case {case}: {e}\n{src}");
            }
        }
    }
}

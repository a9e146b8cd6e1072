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
    assert_eq!(one(src), at("profile.unknown_key", "server.foo", 4, 1));
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
         `driver`, `steering`, `listen`, `admin`, `drain_timeout_ms`, `header_timeout_ms`, \
         `idle_timeout_ms`, `body_timeout_ms`, `write_timeout_ms`, `max_requests_per_connection`, \
         `max_connections_per_shard`, `unknown_host`, `access_list`, `access_log`, `pow_key_file`, `http2`, `http2_max_streams`, `http2_max_resets`, `http2_max_control_frames`"
    );
}

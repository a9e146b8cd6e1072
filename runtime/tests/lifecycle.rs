//! The process's life through the real binary: reloads, drain, steering,
//! port ownership and `check`.

mod common;

use common::*;
use std::net::{SocketAddr, TcpListener};
use std::process::Command;
use std::time::Duration;

fn respond_profile(body: &str) -> String {
    profile(
        "",
        &format!(
            "[[host]]\nnames = [\"r.test\"]\ndefault = true\nkind = \"respond\"\nbody = \"{body}\"\n"
        ),
    )
}

#[test]
fn sighup_reload_changes_the_answer_on_an_open_keep_alive_connection() {
    let g = Gapura::start(&respond_profile("one"));
    let mut c = Client::connect(g.addr);
    c.send(b"GET / HTTP/1.1\r\nHost: r.test\r\n\r\n");
    assert_eq!(c.response(false).body, b"one");
    std::fs::write(&g.profile, respond_profile("two")).unwrap();
    g.signal(libc::SIGHUP);
    assert!(g.wait_log("reloaded: generation 2", Duration::from_secs(5)));
    // The shard takes the new snapshot without a request (its tick).
    assert_eq!(
        g.wait_metric(
            "gapura_snapshot_generation{shard=\"0\"}",
            2,
            Duration::from_secs(5)
        ),
        2
    );
    c.send(b"GET / HTTP/1.1\r\nHost: r.test\r\n\r\n");
    assert_eq!(c.response(false).body, b"two");
    assert_eq!(g.metric("gapura_reloads_total{result=\"ok\"}"), 1);
    assert_eq!(
        g.metric("gapura_connections_accepted_total{shard=\"0\"}"),
        1
    );
}

#[test]
fn watch_reloads_when_the_file_changes() {
    let g = Gapura::try_start(&respond_profile("one"), &["--watch"]).unwrap();
    // The watcher compares the file's modification time with the one it
    // saw last, every 50 ms from its start (just after "ready"). A version
    // written before it starts, or stamped with the first version's time
    // (a file system's clock may be coarse), goes unseen: the new version
    // is written again, a moment later and so with a later time, until the
    // reload is logged. Each write renames a whole file into place, so the
    // watcher never reads half of one.
    let next = g.profile.with_extension("next");
    let reloaded = wait_until(Duration::from_secs(10), || {
        std::fs::write(&next, respond_profile("watched")).unwrap();
        std::fs::rename(&next, &g.profile).unwrap();
        g.wait_log("reloaded: generation 2", Duration::from_millis(500))
    });
    assert!(reloaded, "{}", g.log_text());
    assert_eq!(
        request(g.addr, b"GET / HTTP/1.1\r\nHost: r.test\r\n\r\n").body,
        b"watched"
    );
}

#[test]
fn a_failed_reload_keeps_serving_and_logs_every_error() {
    let g = Gapura::start(&respond_profile("stable"));
    let bad = profile(
        "",
        "[[host]]\nnames = [\"a b\"]\nkind = \"respond\"\n[[host]]\nnames = [\"x.test\"]\nkind = \"teleport\"\n",
    );
    std::fs::write(&g.profile, bad).unwrap();
    g.signal(libc::SIGHUP);
    assert!(g.wait_log("still serving generation 1", Duration::from_secs(5)));
    let log = g.log_text();
    assert!(log.contains("host.name.invalid"), "{log}");
    assert!(log.contains("host.kind.invalid"), "{log}");
    assert_eq!(
        request(g.addr, b"GET / HTTP/1.1\r\nHost: r.test\r\n\r\n").body,
        b"stable"
    );
    assert_eq!(g.metric("gapura_reloads_total{result=\"failed\"}"), 1);
    assert_eq!(g.metric("gapura_profile_generation"), 1);
}

#[test]
fn sigterm_drains_an_in_flight_request_then_exits_zero() {
    let mut g = Gapura::start(&respond_profile("done"));
    let mut c = Client::connect(g.addr);
    c.send(b"POST / HTTP/1.1\r\nHost: r.test\r\nContent-Length: 10\r\n\r\nhalf-");
    // The request is in flight once the server has read its first half.
    assert!(
        wait_peer_read(&c.stream, Duration::from_secs(10)),
        "the server never read the request"
    );
    g.signal(libc::SIGTERM);
    assert!(g.wait_log("draining", Duration::from_secs(2)));
    // New connections are no longer accepted: the listener closes (the
    // accept loop looks for the drain every 100 ms).
    assert!(
        wait_until(Duration::from_secs(10), || {
            std::net::TcpStream::connect(g.addr).is_err()
        }),
        "the listener still accepts"
    );
    c.send(b"rest!");
    let r = c.response(false);
    assert_eq!((r.status, r.body.as_slice()), (200, &b"done"[..]));
    assert_eq!(r.header("Connection"), Some("close"));
    let status = g
        .wait_exit(Duration::from_secs(5))
        .expect("exits after draining");
    assert!(status.success(), "{status}");
}

#[test]
fn idle_keep_alives_do_not_hold_up_the_drain() {
    let mut g = Gapura::start(&respond_profile("x"));
    let mut c = Client::connect(g.addr);
    c.send(b"GET / HTTP/1.1\r\nHost: r.test\r\n\r\n");
    assert_eq!(c.response(false).status, 200);
    g.signal(libc::SIGINT);
    let status = g.wait_exit(Duration::from_secs(3)).expect("exits promptly");
    assert!(status.success());
    assert!(c.closed_within(Duration::from_secs(1)));
}

fn connect_from(src: &str, to: SocketAddr) -> std::net::TcpStream {
    let sock = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    let local: SocketAddr = format!("{src}:0").parse().unwrap();
    sock.bind(&local.into()).unwrap();
    sock.connect(&to.into()).unwrap();
    sock.into()
}

#[test]
fn steering_keeps_each_source_on_one_shard() {
    let g = Gapura::start(&profile("shards = 2", HELLO_HOST).replace("shards = 1\n", ""));
    let accepted = |shard: usize| {
        g.metric(&format!(
            "gapura_connections_accepted_total{{shard=\"{shard}\"}}"
        ))
    };
    for src in [
        "127.0.0.2",
        "127.0.0.3",
        "127.0.0.4",
        "127.0.0.5",
        "127.0.0.6",
    ] {
        let before = [accepted(0), accepted(1)];
        for _ in 0..6 {
            let mut c = Client {
                stream: connect_from(src, g.addr),
                buf: Vec::new(),
            };
            c.stream
                .set_read_timeout(Some(Duration::from_secs(5)))
                .unwrap();
            c.send(b"GET / HTTP/1.1\r\nHost: hello.test\r\nConnection: close\r\n\r\n");
            assert_eq!(c.response(false).status, 200);
        }
        let delta = [accepted(0) - before[0], accepted(1) - before[1]];
        assert!(
            delta == [6, 0] || delta == [0, 6],
            "{src} spread over shards: {delta:?}"
        );
    }
}

#[test]
fn a_port_another_process_listens_on_is_refused() {
    let other = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = other.local_addr().unwrap().port();
    let text = profile("", HELLO_HOST).replace(
        "listen = [\"127.0.0.1:0\"]",
        &format!("listen = [\"127.0.0.1:{port}\"]"),
    );
    let err = match Gapura::try_start(&text, &[]) {
        Ok(_) => panic!("started on a taken port"),
        Err(e) => e,
    };
    assert!(err.contains("already in use by another process"), "{err}");
    assert!(err.contains("exit status: 1"), "{err}");
}

#[test]
fn check_reports_every_error_with_code_and_position() {
    let dir = TempDir::new();
    let file = dir.0.join("bad.toml");
    std::fs::write(
        &file,
        "[server]\nlisten = [\"127.0.0.1:8080\", \"nonsense\"]\n\n[[host]]\nnames = [\"a.test\"]\nkind = \"respond\"\n\n[[host]]\nnames = [\"a.test\"]\nkind = \"respond\"\nstatus = 99\n",
    )
    .unwrap();
    let out = Command::new(bin())
        .arg("check")
        .arg(&file)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    let name = file.display().to_string();
    assert!(
        err.contains(&format!(
            "{name}:2:29: error[server.listen.invalid] server.listen[1]"
        )),
        "{err}"
    );
    assert!(
        err.contains(&format!(
            "{name}:9:10: error[host.name.duplicate] host[1].names[0]"
        )),
        "{err}"
    );
    assert!(
        err.contains(&format!(
            "{name}:11:10: error[host.status.invalid] host[1].status"
        )),
        "{err}"
    );
    assert!(err.contains("3 error(s)"), "{err}");

    let good = dir.0.join("good.toml");
    std::fs::write(&good, HELLO_HOST).unwrap();
    let out = Command::new(bin())
        .arg("check")
        .arg(&good)
        .output()
        .unwrap();
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).contains("ok (1 host, 1 listen address,"));
}

#[test]
fn the_shipped_profiles_pass_check() {
    let mut names: Vec<String> = std::fs::read_dir("../profiles")
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".toml"))
        .collect();
    names.sort();
    // Every deployment kind the docs promise is there.
    for kind in ["default", "example", "edge", "internal-api", "game-relay"] {
        assert!(names.contains(&format!("{kind}.toml")), "{names:?}");
    }
    for name in names {
        let dir = TempDir::new();
        let p = dir.0.join(&name);
        // A server has /var/log/gapura and /var/lib/gapura (systemd's
        // LogsDirectory= and StateDirectory=); here the log and the key
        // files go where the test may write, since `check` refuses what
        // `run` could not open or create.
        // Its user too: a server has `gapura` (contrib/systemd's
        // sysusers.d file); here one every machine has stands in, since
        // `check` refuses a user `run` could not become.
        let text = std::fs::read_to_string(format!("../profiles/{name}"))
            .unwrap()
            .replace("/var/log/gapura/", &format!("{}/", dir.0.display()))
            .replace("/var/lib/gapura/", &format!("{}/", dir.0.display()))
            .replace("user = \"gapura\"", "user = \"root\"");
        std::fs::write(&p, text).unwrap();
        // The edge profile names its certificate pair relative to itself;
        // an operator brings their own, this check makes one.
        let certs = dir.0.join("certs");
        std::fs::create_dir_all(&certs).unwrap();
        common::tls::write_cert(&certs, "edge", &["example.com", "*.example.com"]);
        let out = Command::new(bin()).arg("check").arg(&p).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{name}: {err}");
        assert!(!err.contains("error["), "{name}: {err}");
    }
}

#[test]
fn connections_arriving_after_idle_gaps_are_all_served() {
    // The accept loop looks for a drain every 100 ms; a connection that
    // arrives as it does must still be accepted and answered. New
    // connections, one at a time, with gaps around that period. (When the
    // loop cancelled its accept at each look, the connection that met the
    // cancellation hung; the window is microseconds wide, so this catches
    // such a loss only now and then: it was found by the lease test in
    // quota.rs, which failed about one run in ten.)
    let g = Gapura::start(&profile("", HELLO_HOST));
    for i in 0..30u64 {
        std::thread::sleep(Duration::from_millis(95 + i % 11));
        let mut c = Client::connect(g.addr);
        c.stream
            .set_read_timeout(Some(Duration::from_secs(2)))
            .unwrap();
        c.send(b"GET / HTTP/1.1\r\nHost: hello.test\r\nConnection: close\r\n\r\n");
        let r = c.try_response(false);
        assert_eq!(r.map(|r| r.status), Some(200), "connection {i}");
    }
}

#[test]
fn a_reload_that_changes_a_table_size_is_refused_naming_the_setting() {
    let g = Gapura::start(&respond_profile("sized"));
    let resized = format!(
        "{}\n[quota]\nmax_leases = 2048\n",
        respond_profile("resized")
    );
    std::fs::write(&g.profile, resized).unwrap();
    g.signal(libc::SIGHUP);
    assert!(g.wait_log("still serving generation 1", Duration::from_secs(5)));
    let log = g.log_text();
    assert!(
        log.contains("reload refused: quota.max_leases changes from 16384 to 2048"),
        "{log}"
    );
    assert_eq!(
        request(g.addr, b"GET / HTTP/1.1\r\nHost: r.test\r\n\r\n").body,
        b"sized"
    );
    assert_eq!(g.metric("gapura_reloads_total{result=\"failed\"}"), 1);
}

/// `GET /heap` on the admin listener tells the heap in use; it is not
/// among the metrics (reading it walks the allocator's free lists).
#[test]
fn the_admin_listener_tells_the_heap_in_use_apart_from_the_metrics() {
    use std::io::{Read, Write};
    let g = Gapura::start(&respond_profile("one"));
    let mut s = std::net::TcpStream::connect(g.admin).unwrap();
    s.write_all(b"GET /heap HTTP/1.1\r\nHost: admin\r\n\r\n")
        .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    assert!(out.starts_with("HTTP/1.1 200 OK\r\n"), "{out}");
    let bytes: u64 = out
        .rsplit("\r\n\r\n")
        .next()
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(bytes > 0);
    assert!(!g.metrics().contains("heap"));
}

/// The ready line names the process's id (what `kill -HUP` is given), and
/// the listeners are said once the server is ready: a start that fails
/// after binding them (its admin address taken) never says it listened.
#[test]
fn the_ready_line_names_the_pid_and_a_failed_start_never_says_it_listened() {
    let g = Gapura::start(&profile("", HELLO_HOST));
    let text = g.log_text();
    let ready = text.lines().find(|l| l.contains(" ready: ")).unwrap();
    assert!(
        ready.ends_with(&format!("(pid {})", g.child.id())),
        "{ready}"
    );
    let listening = text.find("listening on http://").unwrap();
    assert!(listening < text.find(" ready: ").unwrap(), "{text}");

    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let admin = taken.local_addr().unwrap();
    let p =
        profile("", HELLO_HOST).replace("admin = \"127.0.0.1:0\"", &format!("admin = \"{admin}\""));
    let Err(said) = Gapura::try_start(&p, &[]) else {
        panic!("started with its admin address taken");
    };
    assert!(said.contains("cannot start"), "{said}");
    assert!(!said.contains("listening on"), "{said}");
}

/// A profile naming a user the machine does not have: `check` refuses it
/// in the words `run` would use, with how to create the user.
#[test]
fn check_reports_a_missing_user_as_run_would() {
    let dir = TempDir::new();
    let p = dir.0.join("p.toml");
    std::fs::write(
        &p,
        "[server]\nlisten = [\"127.0.0.1:0\"]\nuser = \"no-such-user-gapura-cli\"\n\n[[host]]\nnames = [\"a.test\"]\nkind = \"respond\"\nstatus = 200\nbody = \"a\"\n",
    )
    .unwrap();
    let check = Command::new(bin()).arg("check").arg(&p).output().unwrap();
    assert!(!check.status.success());
    let said = String::from_utf8_lossy(&check.stderr).to_string();
    let words = "[server] user = \"no-such-user-gapura-cli\": no such user; create it with";
    assert!(said.contains(words), "{said}");
    assert!(said.contains("`gapura run` would not start"), "{said}");
    // With its code and where the setting is written, as every error.
    assert!(
        said.contains("p.toml:3:8: error[server.user.missing] server.user: "),
        "{said}"
    );
    let run = Command::new(bin())
        .args(["run", "--profile"])
        .arg(&p)
        .output()
        .unwrap();
    assert!(!run.status.success());
    let said = String::from_utf8_lossy(&run.stderr);
    assert!(
        said.contains("p.toml:3:8: error[server.user.missing] server.user: "),
        "{said}"
    );
    assert!(said.contains(words), "{said}");
}

/// Every path a profile names is relative to the profile's directory,
/// whatever directory Gapura runs from (here the test's, not the
/// profile's): the proof-of-work key it creates, the access log it
/// writes, the admin token it reads.
#[test]
fn relative_paths_in_a_profile_are_relative_to_its_directory() {
    let text = profile(
        "pow_key_file = \"pow.key\"\nadmin_token_file = \"admin.token\"\naccess_log = { path = \"access.log\" }",
        HELLO_HOST,
    );
    // A profile file in a directory of its own, Gapura started from
    // another.
    let home = TempDir::new();
    std::fs::write(home.0.join("admin.token"), "s3cret-token-for-the-test\n").unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(
        home.0.join("admin.token"),
        std::fs::Permissions::from_mode(0o600),
    )
    .unwrap();
    let p = home.0.join("gapura.toml");
    std::fs::write(&p, &text).unwrap();
    let elsewhere = TempDir::new();
    let out = Command::new(bin())
        .arg("check")
        .arg(&p)
        .current_dir(&elsewhere.0)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(said.contains("created at first start"), "{said}");
    let mut child = Command::new(bin())
        .args(["run", "--allow-root", "--profile"])
        .arg(&p)
        .current_dir(&elsewhere.0)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let made = wait_until(Duration::from_secs(10), || home.0.join("pow.key").exists());
    let _ = child.kill();
    let _ = child.wait();
    assert!(made, "the key beside the profile");
    assert!(
        home.0.join("access.log").exists(),
        "the log beside the profile"
    );
    assert!(!elsewhere.0.join("pow.key").exists());
    assert!(!elsewhere.0.join("access.log").exists());
}

/// docs/operations.md's walk from a fresh machine to the edge profile
/// serving, in a temporary root: the profile installed as
/// `/etc/gapura/gapura.toml` with its certificate pair beside it, the
/// directories `/var/lib/gapura` and `/var/log/gapura`, `check`, then
/// `run`, and the two listeners answering. What a test cannot do stands
/// in: a user every machine has for `gapura`, loopback and ephemeral ports
/// for 80 and 443, a local server for the application's.
#[test]
fn the_operations_walkthrough_serves_the_edge_profile() {
    let root = TempDir::new();
    let etc = root.0.join("etc/gapura");
    let (lib, log) = (root.0.join("var/lib/gapura"), root.0.join("var/log/gapura"));
    for d in [etc.join("certs"), lib.clone(), log.clone()] {
        std::fs::create_dir_all(&d).unwrap();
    }
    let app = upstream::start(std::sync::Arc::new(|_: &upstream::UpRequest| {
        upstream::Reply::Bytes(upstream::ok(b"app"))
    }));
    let user = Command::new("id").arg("-un").output().unwrap();
    let user = String::from_utf8_lossy(&user.stdout).trim().to_string();
    let mut text = std::fs::read_to_string("../profiles/edge.toml")
        .unwrap()
        .replace("/var/log/gapura/", &format!("{}/", log.display()))
        .replace("/var/lib/gapura/", &format!("{}/", lib.display()))
        .replace("user = \"gapura\"", &format!("user = \"{user}\""))
        .replace(
            "listen = [\"0.0.0.0:80\", { addr = \"0.0.0.0:443\", tls = true }]",
            "listen = [\"127.0.0.1:0\", { addr = \"127.0.0.1:0\", tls = true }]",
        )
        .replace("admin = \"127.0.0.1:9090\"", "admin = \"127.0.0.1:0\"")
        .replace("shards = \"auto\"", "shards = 1");
    let servers: Vec<String> = text
        .lines()
        .filter(|l| l.starts_with("servers = [\"10.0.0."))
        .map(str::to_string)
        .collect();
    assert!(
        !servers.is_empty(),
        "the edge profile's application servers"
    );
    for line in servers {
        text = text.replace(&line, &format!("servers = [\"{}\"]", app.addr));
    }
    // 4. The profile and its certificate pair, beside it.
    let profile = etc.join("gapura.toml");
    std::fs::write(&profile, &text).unwrap();
    common::tls::write_cert(
        &etc.join("certs"),
        "edge",
        &["example.com", "*.example.com"],
    );
    // 5. check.
    let out = Command::new(bin())
        .arg("check")
        .arg(&profile)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    // 6. run (the harness starts it, from its own directory: the profile's
    //    relative certificate paths are from the profile's).
    let g = Gapura::start(&text.replace("certs/edge.", &format!("{}/certs/edge.", etc.display())));
    // 7. Port 80 redirects to HTTPS; 443 serves through the application.
    let r = request(
        g.addr,
        b"GET /api/x HTTP/1.1\r\nHost: example.com\r\nConnection: close\r\n\r\n",
    );
    assert_eq!(r.status, 308, "{}", String::from_utf8_lossy(&r.body));
    assert!(
        r.header("Location")
            .is_some_and(|l| l.starts_with("https://example.com")),
        "{:?}",
        r.header("Location")
    );
    let config = common::tls::client_config(common::tls::ClientOptions {
        alpn: &[b"http/1.1"],
        ..Default::default()
    });
    let mut c =
        common::tls::TlsClient::connect(g.tls_addr.unwrap(), Some("example.com"), &config).unwrap();
    let r = c.request(b"GET /api/x HTTP/1.1\r\nHost: example.com\r\nUser-Agent: curl/8\r\n\r\n");
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    assert_eq!(r.body, b"app");
    // The key and the log where the profile says.
    assert!(lib.join("pow.key").exists(), "the proof-of-work key");
    assert!(log.join("access.log").exists(), "the access log");
}

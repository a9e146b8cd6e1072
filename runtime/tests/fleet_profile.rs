//! One profile for the fleet through the real binary: three nodes pulling
//! from a real `redis-server`, `gapura fleet` publishing, and what each
//! failure does (docs/fleet.md, "One profile for the fleet").

mod common;

use common::fleet::{key_file, CEILING};
use common::*;
use gapura_fleet::testing::RedisServer;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

const POLL_MS: u64 = 200;

/// A publisher: its key file and the line nodes trust.
struct Publisher {
    _dir: TempDir,
    key: PathBuf,
    trust: String,
}

fn publisher() -> Publisher {
    let dir = TempDir::new();
    let key = dir.0.join("publisher.key");
    let out = Command::new(bin())
        .args(["fleet", "keygen"])
        .arg(&key)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let trust = String::from_utf8(out.stdout).unwrap().trim().to_string();
    assert!(trust.starts_with("publisher_key = \""), "{trust}");
    Publisher {
        _dir: dir,
        key,
        trust,
    }
}

/// `gapura fleet ARGS... --redis URL`: (success, stdout, stderr).
fn fleet(args: &[&str], redis: &RedisServer) -> (bool, String, String) {
    let out = Command::new(bin())
        .arg("fleet")
        .args(args)
        .args(["--redis", &redis.url()])
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Publishes `text` (written in `dir`) with `p`'s key.
fn publish(p: &Publisher, redis: &RedisServer, dir: &Path, text: &str) -> (bool, String) {
    let file = dir.join(format!("v{}.toml", text.len()));
    std::fs::write(&file, text).unwrap();
    let key = p.key.to_str().unwrap();
    let (ok, out, err) = fleet(&["publish", "--key", key, file.to_str().unwrap()], redis);
    (ok, out + &err)
}

/// The fleet's profile: one host answering `body`, and `extra`.
fn version(body: &str, extra: &str) -> String {
    format!(
        "[[host]]\nnames = [\"a.test\"]\ndefault = true\nkind = \"respond\"\nstatus = 200\n\
         body = \"{body}\\n\"\n{extra}\n[protection]\noff = [\"all\"]\n"
    )
}

/// A node pulling from `redis`, trusting `trust`, its state in `state`;
/// its own profile answers "local".
fn node(redis: &RedisServer, trust: &str, state: &Path, extra: &str) -> Gapura {
    let key = key_file();
    let name = state.file_name().unwrap().to_string_lossy().into_owned();
    let text = profile(
        "",
        &format!(
            "[fleet]\nredis = \"{}\"\nnodes_expected = 3\nkey_file = {key:?}\nnode = {name:?}\nprofile = \"pull\"\n\
             {trust}\nstate_dir = {:?}\nprofile_poll_ms = {POLL_MS}\n{extra}\n\
             [[host]]\nnames = [\"a.test\"]\ndefault = true\nkind = \"respond\"\nstatus = 200\nbody = \"local\\n\"\n",
            redis.url(),
            state.display().to_string()
        ),
    );
    Gapura::start(&text)
}

/// Three nodes, their state under `dir` (`state0` to `state2`, their
/// names too).
fn three(redis: &RedisServer, p: &Publisher, dir: &Path) -> Vec<Gapura> {
    (0..3)
        .map(|i| node(redis, &p.trust, &dir.join(format!("state{i}")), ""))
        .collect()
}

/// [`three`], once they run version 1 (answering "one").
fn three_on_one(redis: &RedisServer, p: &Publisher, dir: &Path) -> Vec<Gapura> {
    let nodes = three(redis, p, dir);
    assert!(publish(p, redis, dir, &version("one", "")).0);
    converge(&nodes, "one");
    nodes
}

fn body(g: &Gapura) -> String {
    let r = request(g.addr, &common::gate::get("a.test", "/"));
    String::from_utf8_lossy(&r.body).trim().to_string()
}

/// Waits until every node answers `want`; how long it took.
fn converge(nodes: &[Gapura], want: &str) -> Duration {
    let t0 = Instant::now();
    for g in nodes {
        assert!(
            wait_until(CEILING, || body(g) == want),
            "a node answers {:?}, not {want:?}: {}",
            body(g),
            g.log_text()
        );
    }
    t0.elapsed()
}

#[test]
fn a_publish_reaches_every_node_and_a_profile_with_an_error_is_never_published() {
    let redis = RedisServer::start();
    let p = publisher();
    let dir = TempDir::new();
    let nodes = three(&redis, &p, &dir.0);
    assert!(nodes.iter().all(|g| body(g) == "local"));
    let (ok, out) = publish(&p, &redis, &dir.0, &version("one", ""));
    assert!(ok, "{out}");
    let took = converge(&nodes, "one");
    eprintln!("version 1 applied on three nodes in {took:?} (poll {POLL_MS} ms)");
    for g in &nodes {
        assert_eq!(g.metric("gapura_fleet_profile_version"), 1);
        assert!(g.metric("gapura_fleet_profile_last_pull_seconds") > 0);
    }
    // A profile with an error: refused at publish, nothing changes.
    let (ok, out) = publish(&p, &redis, &dir.0, &version("two", "status = 999\n"));
    assert!(!ok, "{out}");
    assert!(
        out.contains("error[") && out.contains("not published"),
        "{out}"
    );
    let (_, status, _) = fleet(&["status", "--json"], &redis);
    let v: serde_json::Value = serde_json::from_str(&status).unwrap();
    assert_eq!(v["current"]["version"], 1, "{v}");
    assert_eq!(v["latest"], 1, "nothing stored for the refused one");
    let acks: Vec<&serde_json::Value> = v["nodes"].as_array().unwrap().iter().collect();
    assert_eq!(acks.len(), 3, "{v}");
    assert!(
        acks.iter().all(|n| n["ack"] == true && n["version"] == 1),
        "{v}"
    );
    // A second version, then a rollback to the first: both reach all.
    assert!(publish(&p, &redis, &dir.0, &version("second", "")).0);
    let took = converge(&nodes, "second");
    eprintln!("version 2 applied on three nodes in {took:?}");
    let key = p.key.to_str().unwrap();
    let (ok, out, err) = fleet(&["rollback", "--key", key], &redis);
    assert!(ok, "{out}{err}");
    converge(&nodes, "one");
}

#[test]
fn a_version_one_node_cannot_apply_is_refused_there_and_the_rest_carry_on() {
    let redis = RedisServer::start();
    let p = publisher();
    let dir = TempDir::new();
    // A users file the version names, present on two nodes' directories
    // only (a relative path is the node's profile directory's).
    let nodes = three(&redis, &p, &dir.0);
    let dirs = nodes[..2].iter().map(|g| g.profile.parent().unwrap());
    // The publisher checks the version with its own copy.
    for d in dirs.chain([dir.0.as_path()]) {
        let users = d.join("staff.users");
        std::fs::write(&users, "carol\n").unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&users, std::fs::Permissions::from_mode(0o600)).unwrap();
    }
    let list = "\n[[access_list]]\nname = \"staff\"\nallow = [\"127.0.0.0/8\"]\nusers_file = \"staff.users\"\n";
    assert!(publish(&p, &redis, &dir.0, &version("listed", list)).0);
    converge(&nodes[..2], "listed");
    let third = &nodes[2];
    assert!(
        wait_until(CEILING, || third.log_text().contains("version 1 refused")),
        "{}",
        third.log_text()
    );
    assert_eq!(body(third), "local", "the third stays on what it ran");
    let (_, status, _) = fleet(&["status"], &redis);
    assert!(status.contains("refused version 1"), "{status}");
    assert!(
        status.contains("accessList.usersFile.unreadable"),
        "{status}"
    );
}

#[test]
fn a_version_signed_by_another_key_and_an_oversized_one_are_refused() {
    let redis = RedisServer::start();
    let p = publisher();
    let stranger = publisher();
    let dir = TempDir::new();
    let g = node(
        &redis,
        &p.trust,
        &dir.0.join("state"),
        "profile_max_bytes = 2048\n",
    );
    assert!(publish(&p, &redis, &dir.0, &version("trusted", "")).0);
    converge(std::slice::from_ref(&g), "trusted");
    // Another key publishes: the pointer is not the publisher's.
    assert!(publish(&stranger, &redis, &dir.0, &version("stranger", "")).0);
    assert!(
        wait_until(CEILING, || g
            .log_text()
            .contains("not signed by the publisher key")),
        "{}",
        g.log_text()
    );
    assert_eq!(body(&g), "trusted");
    // A version past the node's bound (4 KiB of comment) is refused
    // before its text is read.
    let big = version("big", &format!("# {}\n", "x".repeat(4096)));
    let key = p.key.to_str().unwrap();
    let file = dir.0.join("big.toml");
    std::fs::write(&file, &big).unwrap();
    let (ok, out, err) = fleet(&["publish", "--key", key, file.to_str().unwrap()], &redis);
    assert!(ok, "{out}{err}");
    assert!(
        wait_until(CEILING, || g.log_text().contains("over the bound of 2048")),
        "{}",
        g.log_text()
    );
    assert_eq!(body(&g), "trusted");
    // 100 MB: refused at publish, before it is read.
    let huge = dir.0.join("huge.toml");
    std::fs::File::create(&huge)
        .unwrap()
        .set_len(100 << 20)
        .unwrap();
    let (ok, out, err) = fleet(&["publish", "--key", key, huge.to_str().unwrap()], &redis);
    assert!(!ok && err.contains("over --max-bytes"), "{out}{err}");
}

#[test]
fn without_the_engine_nodes_keep_their_version_and_a_restarted_one_runs_its_last_good() {
    let mut redis = RedisServer::start();
    let p = publisher();
    let dir = TempDir::new();
    let state = dir.0.join("state");
    let g = node(&redis, &p.trust, &state, "");
    assert!(publish(&p, &redis, &dir.0, &version("kept", "")).0);
    converge(std::slice::from_ref(&g), "kept");
    redis.kill();
    assert!(
        wait_until(CEILING, || g.log_text().contains("the engine is away")),
        "{}",
        g.log_text()
    );
    assert_eq!(body(&g), "kept");
    // A node started while the engine is down runs its last good version.
    drop(g);
    let g = node(&redis, &p.trust, &state, "");
    assert_eq!(body(&g), "kept");
    assert!(
        g.log_text().contains("starting from version 1"),
        "{}",
        g.log_text()
    );
    // The engine comes back empty (a restart without persistence): what
    // is published then is taken, the old pointer's serial notwithstanding.
    redis.restart();
    assert!(publish(&p, &redis, &dir.0, &version("after", "")).0);
    converge(std::slice::from_ref(&g), "after");
    // An engine restored from an older snapshot shows the pointer before
    // (validly signed, an older serial): no node takes it as a rollback.
    let older = redis.cli(&["GET", "gapura:{profile}:pointer"]);
    assert!(publish(&p, &redis, &dir.0, &version("newest", "")).0);
    converge(std::slice::from_ref(&g), "newest");
    redis.cli(&["SET", "gapura:{profile}:pointer", older.trim()]);
    let pulls = g.metric("gapura_fleet_profile_last_pull_seconds");
    assert!(wait_until(CEILING, || {
        g.metric("gapura_fleet_profile_last_pull_seconds") >= pulls + 2
    }));
    assert_eq!(body(&g), "newest", "the older pointer is not taken");
}

/// The canaries among `nodes` for `version` at `pct` (the nodes' names are
/// their state directories', as `node` makes them).
fn canaries(nodes: &[Gapura], version: u64, pct: u8) -> Vec<usize> {
    let names: Vec<String> = (0..nodes.len()).map(|i| format!("state{i}")).collect();
    let seen = names.iter().map(String::as_str);
    (0..nodes.len())
        .filter(|&i| gapura_fleet::rollout::is_canary(&names[i], version, pct, seen.clone()))
        .collect()
}

/// `gapura fleet publish` of `text` with extra arguments.
fn publish_with(p: &Publisher, redis: &RedisServer, dir: &Path, text: &str, extra: &[&str]) {
    let file = dir.join(format!("staged{}.toml", text.len()));
    std::fs::write(&file, text).unwrap();
    let key = p.key.to_str().unwrap();
    let mut args = vec!["publish", "--key", key];
    args.extend_from_slice(extra);
    args.push(file.to_str().unwrap());
    let (ok, out, err) = fleet(&args, redis);
    assert!(ok, "{out}{err}");
}

#[test]
fn a_staged_version_reaches_the_canaries_first_and_the_rest_after_the_soak() {
    let redis = RedisServer::start();
    let p = publisher();
    let dir = TempDir::new();
    let nodes = three_on_one(&redis, &p, &dir.0);
    let first = canaries(&nodes, 2, 34);
    assert!(!first.is_empty() && first.len() < 3, "{first:?}");
    publish_with(
        &p,
        &redis,
        &dir.0,
        &version("two", ""),
        &["--canary", "34%", "--soak", "3s"],
    );
    let canary = &nodes[first[0]];
    assert!(
        wait_until(CEILING, || body(canary) == "two"),
        "{}",
        canary.log_text()
    );
    // The others wait for the canaries' soak.
    for (i, g) in nodes.iter().enumerate() {
        if !first.contains(&i) {
            assert_eq!(body(g), "one", "node {i} took it before the soak");
        }
    }
    let took = converge(&nodes, "two");
    eprintln!("the rest took it {took:?} after the canary (soak 3 s)");
}

#[test]
fn a_canary_whose_answers_turn_to_5xx_halts_the_rollout_and_returns() {
    let redis = RedisServer::start();
    let p = publisher();
    let dir = TempDir::new();
    let nodes = three_on_one(&redis, &p, &dir.0);
    let first = canaries(&nodes, 2, 34);
    // Version 2 sends a.test to an upstream that answers 500.
    let failing =
        common::upstream::start(std::sync::Arc::new(|_: &common::upstream::UpRequest| {
            common::upstream::Reply::Bytes(
                b"HTTP/1.1 500 Internal Server Error\r\nContent-Length: 0\r\n\r\n".to_vec(),
            )
        }));
    let bad = format!(
        "[[upstream]]\nname = \"app\"\nservers = [\"{}\"]\n\n\
         [[host]]\nnames = [\"a.test\"]\ndefault = true\nkind = \"proxy\"\n\
         [[host.route]]\npath = \"/\"\nupstream = \"app\"\n\n[protection]\noff = [\"all\"]\n",
        failing.addr
    );
    publish_with(
        &p,
        &redis,
        &dir.0,
        &bad,
        &["--canary", "34%", "--soak", "30s", "--halt-on-5xx", "5%"],
    );
    let canary = &nodes[first[0]];
    let status = |g: &Gapura| request(g.addr, &common::gate::get("a.test", "/")).status;
    assert!(
        wait_until(CEILING, || status(canary) == 500),
        "{}",
        canary.log_text()
    );
    // Traffic on the canary: its interval's 5xx share passes 5 %; it halts
    // the rollout and returns to version 1.
    let bad_since = Instant::now();
    let returned = wait_until(CEILING, || {
        let codes: Vec<u16> = (0..30).map(|_| status(canary)).collect();
        codes.iter().all(|&c| c == 200)
    });
    assert!(returned, "{}", canary.log_text());
    eprintln!(
        "the canary answered 5xx for {:?} before it was back on version 1",
        bad_since.elapsed()
    );
    assert!(
        canary.log_text().contains("is halted"),
        "{}",
        canary.log_text()
    );
    // The others never took it.
    for g in &nodes {
        assert_eq!(status(g), 200);
    }
    let halted = redis.cli(&["GET", "gapura:{profile}:halt"]);
    assert!(halted.contains("5xx"), "{halted}");
    let (_, said, _) = fleet(&["status"], &redis);
    assert!(
        said.contains("halted by a canary") && said.contains("5xx"),
        "{said}"
    );
}

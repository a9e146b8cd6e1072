//! Real Redis servers for tests: `redis-server` (Debian's package) started
//! on a loopback port, killed and started again on the same port, and a
//! three-node Redis Cluster made with `redis-cli --cluster create`. No
//! mock: what the tests hold is what the engine does.
//!
//! Waits are for events (the port answering `PING`, the cluster saying
//! `cluster_state:ok`) with generous ceilings, never fixed sleeps.

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// How long a server may take to answer after it was started.
const START_CEILING: Duration = Duration::from_secs(20);

/// One `redis-server` on 127.0.0.1, no persistence; killed when dropped.
pub struct RedisServer {
    pub port: u16,
    dir: PathBuf,
    extra: Vec<String>,
    child: Option<Child>,
}

/// A free loopback port (bound, then let go).
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a loopback port")
}

fn scratch_dir(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "gapura-redis-{tag}-{}-{}",
        std::process::id(),
        free_port()
    ));
    std::fs::create_dir_all(&dir).expect("a scratch directory");
    dir
}

impl RedisServer {
    /// Starts a server on a free port and waits until it answers.
    pub fn start() -> RedisServer {
        RedisServer::start_with(free_port(), Vec::new(), scratch_dir("one"))
    }

    fn start_with(port: u16, extra: Vec<String>, dir: PathBuf) -> RedisServer {
        let mut s = RedisServer {
            port,
            dir,
            extra,
            child: None,
        };
        s.spawn();
        s
    }

    fn spawn(&mut self) {
        let child = Command::new("redis-server")
            .args(["--port", &self.port.to_string()])
            .args(["--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
            .arg("--dir")
            .arg(&self.dir)
            .args(&self.extra)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server runs (Debian's package redis-server; .ci/run installs it)");
        self.child = Some(child);
        wait_for_ping(self.port);
    }

    /// `redis://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// Kills the server (SIGKILL: no goodbye to its clients).
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Starts it again on the same port, empty, and waits until it answers.
    pub fn restart(&mut self) {
        self.kill();
        self.spawn();
    }

    /// Runs `redis-cli` against this server; its standard output.
    pub fn cli(&self, args: &[&str]) -> String {
        cli(self.port, args)
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.kill();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// `redis-cli -p PORT ARGS...`; its standard output ("" when it fails).
pub fn cli(port: u16, args: &[&str]) -> String {
    Command::new("redis-cli")
        .args(["-h", "127.0.0.1", "-p", &port.to_string()])
        .args(args)
        .stderr(Stdio::null())
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_default()
}

fn wait_for_ping(port: u16) {
    let deadline = Instant::now() + START_CEILING;
    while Instant::now() < deadline {
        if cli(port, &["PING"]).trim() == "PONG" {
            return;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    panic!("redis-server on port {port} did not answer within {START_CEILING:?}");
}

/// Three cluster-enabled servers made one cluster (no replicas).
pub struct RedisCluster {
    pub nodes: Vec<RedisServer>,
}

impl RedisCluster {
    /// Starts three nodes, creates the cluster and waits until every node
    /// says `cluster_state:ok`.
    pub fn start() -> RedisCluster {
        let nodes: Vec<RedisServer> = (0..3)
            .map(|i| {
                let port = free_port();
                let dir = scratch_dir(&format!("cluster{i}"));
                RedisServer::start_with(
                    port,
                    vec![
                        "--cluster-enabled".into(),
                        "yes".into(),
                        "--cluster-config-file".into(),
                        format!("nodes-{port}.conf"),
                    ],
                    dir,
                )
            })
            .collect();
        let addrs: Vec<String> = nodes
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.port))
            .collect();
        let out = Command::new("redis-cli")
            .arg("--cluster")
            .arg("create")
            .args(&addrs)
            .args(["--cluster-replicas", "0", "--cluster-yes"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .expect("redis-cli runs");
        assert!(out.success(), "redis-cli --cluster create failed");
        let deadline = Instant::now() + START_CEILING;
        for n in &nodes {
            while !n.cli(&["CLUSTER", "INFO"]).contains("cluster_state:ok") {
                assert!(Instant::now() < deadline, "the cluster did not become ok");
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        RedisCluster { nodes }
    }

    /// Every node's `redis://` address.
    pub fn urls(&self) -> Vec<String> {
        self.nodes.iter().map(RedisServer::url).collect()
    }
}

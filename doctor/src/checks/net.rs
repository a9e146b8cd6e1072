//! The network stack: listen queues, the steering program, kernel TLS and
//! whether the profile's ports are free.

use super::{Ctx, LISTEN_BACKLOG};
use crate::finding::{Finding, Level};
use crate::parse;
use crate::probe::Proto;
use gapura_config::Steering;
use std::io::ErrorKind;
use std::net::SocketAddr;

/// A sysctl that should be at least [`LISTEN_BACKLOG`].
fn backlog_sysctl(cx: &Ctx, id: &'static str, name: &str, why: &str) -> Finding {
    let path = format!("/proc/sys/{}", name.replace('.', "/"));
    let Some(v) = cx.host.read(&path).and_then(|t| parse::int(&t)) else {
        return Finding::new(id, Level::Info, format!("Cannot read {path}: cannot tell."));
    };
    let found = format!("{name} = {v}; Gapura listens with a backlog of {LISTEN_BACKLOG}.");
    if v >= i64::from(LISTEN_BACKLOG) {
        return Finding::new(id, Level::Ok, found);
    }
    Finding::new(id, Level::Warn, found)
        .why(why.replace("{v}", &v.to_string()))
        .fix(format!(
            "sysctl -w {name}={LISTEN_BACKLOG}, and to keep it across reboots put \
             `{name} = {LISTEN_BACKLOG}` in /etc/sysctl.d/90-gapura.conf"
        ))
}

/// `net.somaxconn`: the cap on every accept queue.
pub fn somaxconn(cx: &Ctx) -> Finding {
    backlog_sysctl(
        cx,
        "net.somaxconn",
        "net.core.somaxconn",
        "The kernel caps every listen backlog at {v}: in a burst, connections past {v} \
         waiting to be accepted are dropped and clients retry after a second or more.",
    )
}

/// `net.syn_backlog`: the cap on half-open connections.
pub fn syn_backlog(cx: &Ctx) -> Finding {
    let mut f = backlog_sysctl(
        cx,
        "net.syn_backlog",
        "net.ipv4.tcp_max_syn_backlog",
        "At most {v} half-open connections (SYN received) wait per listener: past it, \
         new SYNs are dropped, or answered with SYN cookies when net.ipv4.tcp_syncookies \
         is on, which lose TCP options.",
    );
    if let Some(c) = cx
        .host
        .read("/proc/sys/net/ipv4/tcp_syncookies")
        .and_then(|t| parse::int(&t))
    {
        f.found
            .push_str(&format!(" net.ipv4.tcp_syncookies = {c}."));
    }
    f
}

/// `net.steering`: attaches the SO_REUSEPORT steering program through the
/// caller's closure.
pub fn steering(cx: &Ctx, attach: &dyn Fn() -> Result<(), String>) -> Finding {
    const ID: &str = "net.steering";
    let result = attach();
    let shards = cx.cpus.shards();
    let (needed, what) = match cx.profile.map(|p| p.runtime.steering) {
        Some(Steering::Kernel) => (
            Some(false),
            "The profile uses steering = \"kernel\": no program is attached.".to_string(),
        ),
        Some(s) if shards < 2 => (
            Some(false),
            format!(
                "The profile uses steering = \"{}\" on {shards} shard: no program is \
                 attached with one shard.",
                if s == Steering::Prefix {
                    "prefix"
                } else {
                    "source"
                }
            ),
        ),
        Some(s) => (
            Some(true),
            format!(
                "The profile uses steering = \"{}\" on {shards} shards: each listener's \
                 group gets the program at start.",
                if s == Steering::Prefix {
                    "prefix"
                } else {
                    "source"
                }
            ),
        ),
        None => (None, "No profile given.".to_string()),
    };
    let Err(e) = result else {
        return Finding::new(
            ID,
            Level::Ok,
            format!("The SO_REUSEPORT steering program (classic BPF) attaches. {what}"),
        );
    };
    let level = match needed {
        Some(true) => Level::Fail,
        Some(false) => Level::Info,
        None => Level::Warn,
    };
    Finding::new(
        ID,
        level,
        format!("The SO_REUSEPORT steering program cannot be attached: {e}. {what}"),
    )
    .why(
        "Source and prefix steering keep each client on one shard so per-client limits are \
         exact; when the program cannot be attached, Gapura with steering = \"source\" or \
         \"prefix\" and two or more shards does not start.",
    )
    .fix(
        "SO_ATTACH_REUSEPORT_CBPF needs Linux 4.5 or later; in a container the seccomp \
         profile must allow setsockopt. Otherwise set `steering = \"kernel\"` in [server].",
    )
}

/// `tls.ktls`: whether the kernel offers TLS offload (for information).
pub fn ktls(cx: &Ctx) -> Finding {
    let ulp = cx.host.read("/proc/sys/net/ipv4/tcp_available_ulp");
    let in_ulp = ulp
        .as_deref()
        .is_some_and(|t| t.split_whitespace().any(|w| w == "tls"));
    let modules = cx.host.read("/proc/modules");
    let in_modules = modules.as_deref().is_some_and(|t| {
        t.lines()
            .any(|l| l.split_whitespace().next() == Some("tls"))
    });
    let found = if in_ulp || in_modules {
        let from = if in_ulp {
            "tcp_available_ulp lists tls"
        } else {
            "the tls module is loaded"
        };
        format!("Kernel TLS is available ({from}).")
    } else if ulp.is_none() && modules.is_none() {
        "Cannot read /proc/sys/net/ipv4/tcp_available_ulp or /proc/modules: cannot tell."
            .to_string()
    } else {
        format!(
            "Kernel TLS is not available now (tcp_available_ulp: {}; no tls module loaded).",
            ulp.as_deref()
                .and_then(parse::first_line)
                .unwrap_or("empty")
        )
    };
    Finding::new("tls.ktls", Level::Info, found).why(
        "Gapura terminates TLS in user space with rustls and does not use kernel TLS today; \
         this is for information only.",
    )
}

/// The state of one address, with the level it deserves.
fn port_state(cx: &Ctx, addr: SocketAddr, proto: Proto, role: &str) -> (Level, String) {
    let name = format!("{addr} ({} {role})", proto.name());
    match cx.probe.bind(addr, proto) {
        Ok(()) => (Level::Ok, format!("{name}: free")),
        Err(e) => match e.kind() {
            ErrorKind::AddrInUse => (Level::Fail, format!("{name}: in use")),
            ErrorKind::PermissionDenied => (
                Level::Warn,
                format!(
                    "{name}: this user may not bind it (ports below 1024 need root or \
                     CAP_NET_BIND_SERVICE)"
                ),
            ),
            ErrorKind::AddrNotAvailable => (
                Level::Fail,
                format!("{name}: the address is not on this host ({e})"),
            ),
            _ => (Level::Fail, format!("{name}: cannot bind ({e})")),
        },
    }
}

/// `ports.free`: every fixed address of the profile can be bound.
pub fn ports(cx: &Ctx) -> Finding {
    const ID: &str = "ports.free";
    let Some(p) = cx.profile else {
        return Finding::new(ID, Level::Info, "No profile given: no ports to look at.");
    };
    let r = &p.runtime;
    let wanted = r
        .listen
        .iter()
        .map(|a| (*a, Proto::Tcp, "listen"))
        .chain(r.admin.iter().map(|a| (*a, Proto::Tcp, "admin")))
        .chain(r.udp_listen.iter().map(|a| (*a, Proto::Udp, "udp relay")));
    let mut worst = Level::Ok;
    let mut lines = Vec::new();
    for (addr, proto, role) in wanted {
        if addr.port() == 0 {
            lines.push(format!(
                "{addr} ({} {role}): port 0, chosen at start",
                proto.name()
            ));
            continue;
        }
        let (level, line) = port_state(cx, addr, proto, role);
        worst = worst.max(level);
        lines.push(line);
    }
    if lines.is_empty() {
        return Finding::new(ID, Level::Ok, "The profile binds no addresses.");
    }
    let found = lines.join("\n");
    if worst == Level::Ok {
        return Finding::new(ID, Level::Ok, found);
    }
    Finding::new(ID, worst, found)
        .why(
            "Gapura checks every address before it binds any and does not start when one is \
             taken. A Gapura already running on these addresses makes this check fail, as \
             expected.",
        )
        .fix(
            "Find the owner with `ss -ltnp 'sport = :PORT'` (TCP) or `ss -lunp 'sport = :PORT'` \
             (UDP) and stop it, or change the address in the profile. For ports below 1024 \
             give Gapura AmbientCapabilities=CAP_NET_BIND_SERVICE in its systemd unit.",
        )
}

//! gapura-loadtest: the load tester Gapura ships.
//!
//! It owns closed-loop, open-loop (coordinated-omission corrected) and
//! find-max runs of HTTP/1.1, HTTPS, HTTP/2, HTTP/3 and UDP load against one origin,
//! on shards pinned like the server's (monoio, the same ring flags and the
//! same explicit epoll fallback), and the summary, JSON and HTML outputs.
//! It must never depend on the runtime crate: it is the instrument that
//! measures it.
//!
//! The binary is a thin wrapper over [`run_cli`]; the modules are public so
//! tests and tools can reuse the parser and the statistics.
//!
//! Modules:
//!
//! - `cli`: the command line into a validated `Config`; `target`: URLs and
//!   the request bytes built once.
//! - `shard`: pinned shards and the runtime they run on; `ctx`: what a
//!   shard's driver is given and gives back (below the drivers, which never
//!   import `shard`); `pacer`: the open loop's waits; `findmax`: the search
//!   for the highest rate under an SLO.
//! - Protocols: `h1` (HTTP/1.1 over monoio, plain or TLS), `uring` (plain
//!   HTTP/1.1 on a ring driven directly), `h2mode` (HTTP/2), `h3mode`
//!   (HTTP/3 over QUIC: quinn-proto and gapura-http's HTTP/3 codec), `udp`;
//!   `response`: HTTP/1.1 response framing over a socket's reads (the glue
//!   around gapura-http's response head parser and chunked decoder); `net`:
//!   sockets and TLS setup.
//! - Results: `stats` (per-shard measurements), `report` (the summary),
//!   `json`, `html`.

pub mod cli;
pub mod ctx;
pub mod findmax;
pub mod h1;
pub mod h2mode;
pub mod h3mode;
pub mod html;
pub mod json;
pub mod net;
pub mod pacer;
pub mod report;
pub mod response;
pub mod shard;
pub mod stats;
pub mod target;
pub mod udp;
pub mod uring;

use std::sync::Arc;

/// Exit status: at least one request completed.
pub const EXIT_OK: i32 = 0;
/// Exit status: no request completed (every one failed).
pub const EXIT_NO_SUCCESS: i32 = 1;
/// Exit status: invalid arguments or a run that could not start.
pub const EXIT_USAGE: i32 = 2;

/// Runs the command line `args` (without the program name) and returns the exit status.
pub fn run_cli(args: &[String]) -> i32 {
    let cfg = match cli::parse(args) {
        Ok(cli::Parsed::Run(c)) => c,
        Ok(cli::Parsed::Completions(shell)) => return print_all(&cli::completions(shell)),
        Ok(cli::Parsed::Man) => match cli::man_page() {
            Ok(page) => return print_all(&page),
            Err(e) => {
                eprintln!("gapura-loadtest: {e}");
                return EXIT_NO_SUCCESS;
            }
        },
        Err(cli::Error::Clap(e)) => {
            // A usage error on stderr (status 2), or --help / --version on stdout (0).
            let _ = e.print();
            return e.exit_code();
        }
        Err(cli::Error::Invalid(e)) => {
            eprintln!("gapura-loadtest: {e}");
            return EXIT_USAGE;
        }
    };
    let cfg: Arc<cli::Config> = Arc::from(cfg);
    let progress = !cfg.quiet && cfg.progress.unwrap_or_else(report::stdout_is_tty);
    if cfg.find_max {
        return findmax::run(&cfg, progress);
    }
    let outcome = match shard::execute(&cfg, cfg.rate, cfg.duration, progress) {
        Ok(o) => o,
        Err(e) => {
            eprintln!("gapura-loadtest: {e}");
            return EXIT_USAGE;
        }
    };
    if !cfg.quiet {
        print!("{}", report::text(&cfg, &outcome, cfg.rate));
    }
    if let Err(e) = write_outputs(&cfg, &outcome, None) {
        eprintln!("gapura-loadtest: {e}");
        return EXIT_USAGE;
    }
    if outcome.stats.requests + outcome.stats.warmup_requests == 0 {
        eprintln!("gapura-loadtest: no request succeeded");
        return EXIT_NO_SUCCESS;
    }
    EXIT_OK
}

/// Writes generated text (a completion script, the man page) to stdout.
fn print_all(bytes: &[u8]) -> i32 {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    match out.write_all(bytes).and_then(|()| out.flush()) {
        Ok(()) => EXIT_OK,
        Err(e) => {
            eprintln!("gapura-loadtest: {e}");
            EXIT_NO_SUCCESS
        }
    }
}

/// Writes `--json` and `--report` files when asked.
pub fn write_outputs(
    cfg: &cli::Config,
    o: &ctx::Outcome,
    fm: Option<&findmax::Curve>,
) -> Result<(), String> {
    if let Some(p) = &cfg.json {
        let v = json::document(cfg, o, fm);
        let text = serde_json::to_string_pretty(&v).map_err(|e| e.to_string())?;
        std::fs::write(p, text + "\n").map_err(|e| format!("{}: {e}", p.display()))?;
    }
    if let Some(p) = &cfg.report {
        std::fs::write(p, html::page(cfg, o, fm)).map_err(|e| format!("{}: {e}", p.display()))?;
    }
    Ok(())
}

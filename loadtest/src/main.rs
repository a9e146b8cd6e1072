//! The `gapura-loadtest` binary: parses the command line and runs it (see the library).

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    std::process::exit(gapura_loadtest::run_cli(&args));
}

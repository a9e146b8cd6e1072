//! `gapura passwd`: makes a password hash line for a profile's users.
//!
//! The password comes from `GAPURA_PASSWORD` (for scripts) or is read from
//! the terminal without echo (twice, and both must match) or from standard
//! input when it is not a terminal. The hash is PBKDF2-SHA256 with a random
//! salt from the kernel, in the format the access lists read.

use std::io::{BufRead, IsTerminal, Write};
use std::process::ExitCode;

fn read_hidden(prompt: &str) -> std::io::Result<String> {
    let stdin = std::io::stdin();
    let fd = 0;
    // SAFETY: termios calls on our own standard input, restored below.
    let mut old: libc::termios = unsafe { std::mem::zeroed() };
    let is_tty = unsafe { libc::tcgetattr(fd, &mut old) } == 0;
    if is_tty {
        let mut quiet = old;
        quiet.c_lflag &= !libc::ECHO;
        unsafe { libc::tcsetattr(fd, libc::TCSANOW, &quiet) };
    }
    eprint!("{prompt}");
    let _ = std::io::stderr().flush();
    let mut line = String::new();
    let r = stdin.lock().read_line(&mut line);
    if is_tty {
        unsafe { libc::tcsetattr(fd, libc::TCSANOW, &old) };
        eprintln!();
    }
    r?;
    Ok(line.trim_end_matches(['\r', '\n']).to_string())
}

pub fn run(args: crate::cli::PasswdArgs) -> ExitCode {
    let iterations = args.iterations;
    let password = match std::env::var("GAPURA_PASSWORD") {
        Ok(p) => p,
        Err(_) if std::io::stdin().is_terminal() => {
            let first = read_hidden("password: ");
            let second = read_hidden("again: ");
            match (first, second) {
                (Ok(a), Ok(b)) if a == b => a,
                (Ok(_), Ok(_)) => {
                    eprintln!("gapura passwd: the two passwords differ");
                    return ExitCode::FAILURE;
                }
                _ => {
                    eprintln!("gapura passwd: cannot read the password");
                    return ExitCode::FAILURE;
                }
            }
        }
        Err(_) => match read_hidden("") {
            Ok(p) => p,
            Err(_) => {
                eprintln!("gapura passwd: cannot read the password");
                return ExitCode::FAILURE;
            }
        },
    };
    if password.is_empty() {
        eprintln!("gapura passwd: the password is empty");
        return ExitCode::FAILURE;
    }
    let mut salt = [0u8; gapura_config::password::SALT_BYTES];
    if let Err(e) = crate::random::fill(&mut salt) {
        eprintln!("gapura passwd: cannot read /dev/urandom for a salt: {e}");
        return ExitCode::FAILURE;
    }
    match gapura_config::password::hash(&password, iterations, &salt) {
        Ok(line) => {
            println!("{line}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("gapura passwd: {e}");
            ExitCode::FAILURE
        }
    }
}

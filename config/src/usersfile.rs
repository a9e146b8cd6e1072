//! An access list's `users_file`: its users kept out of the profile, so
//! the profile may be readable by all while the password verifiers are
//! not (the file must not be readable or writable by others, like the
//! admin token). Read through the environment's loader (config reads no
//! file but the profile), again at every reload.
//!
//! One user per line, `name:verifier` (the `password_hash` a profile
//! would hold, as `gapura passwd` prints it), or `name` alone for a user
//! who cannot sign in; blank lines and lines starting with `#` are
//! skipped; at most [`MAX_BYTES`]. The users then go through the gate's
//! checks exactly as a profile's `users` do, each problem reported at the
//! `users_file` key with the file's line.

use gapura_gate::access::spec::UserSpec;

/// The largest users file read: 1,000 users of long verifiers fit many
/// times over.
pub const MAX_BYTES: usize = 1 << 20;

/// A file's users, each with its 1-based line.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct FileUsers {
    pub users: Vec<UserSpec>,
    pub lines: Vec<usize>,
}

/// Parses a users file's text. Never fails: a line without a name gives a
/// user the gate refuses with its own code.
pub(crate) fn parse(text: &str) -> FileUsers {
    let mut out = FileUsers::default();
    for (i, line) in text.lines().enumerate() {
        let line = line.trim_end_matches('\r');
        if line.trim().is_empty() || line.trim_start().starts_with('#') {
            continue;
        }
        let (name, hash) = match line.split_once(':') {
            Some((name, hash)) => (name, Some(hash.trim().to_string())),
            None => (line, None),
        };
        out.users.push(UserSpec {
            name: name.trim().to_string(),
            password_hash: hash.filter(|h| !h.is_empty()),
        });
        out.lines.push(i + 1);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_become_users_with_their_line_numbers() {
        let f = parse("# staff\nalice:$pbkdf2-sha256$i=1$a$b\n\ncarol\r\n  bob : $x \n");
        let got: Vec<_> = f
            .users
            .iter()
            .map(|u| (u.name.as_str(), u.password_hash.as_deref()))
            .collect();
        assert_eq!(
            got,
            [
                ("alice", Some("$pbkdf2-sha256$i=1$a$b")),
                ("carol", None),
                ("bob", Some("$x"))
            ]
        );
        assert_eq!(f.lines, [2, 4, 5]);
    }

    #[test]
    fn an_empty_name_is_kept_for_the_gate_to_refuse() {
        let f = parse(":$x\n");
        assert_eq!(f.users[0].name, "");
    }
}

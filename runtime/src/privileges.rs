//! Who the process runs as: `[server] user` names the user it becomes once
//! every port is bound and every key file read; started as root without
//! one, it refuses to run unless told `--allow-root`.
//!
//! The drop sets the user's primary group as the only group, then the
//! group id, then the user id (glibc applies each to every thread), and
//! checks that root cannot be taken back. Key files the process created
//! itself this start (proof of work's, the UDP envelopes') are given to the
//! user first, so a reload can read them again.

use std::ffi::{CStr, CString};
use std::path::PathBuf;

/// A user to become.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    pub name: String,
    pub uid: libc::uid_t,
    pub gid: libc::gid_t,
}

/// What start does about the user: stay, or drop to `Target`. Refuses root
/// without a user (unless `allow_root`) and a user the process cannot
/// become.
pub fn plan(user: Option<&str>, allow_root: bool) -> Result<Option<Target>, String> {
    // SAFETY: geteuid has no preconditions.
    let euid = unsafe { libc::geteuid() };
    decide(euid, user, allow_root, lookup)
}

fn decide(
    euid: libc::uid_t,
    user: Option<&str>,
    allow_root: bool,
    lookup: impl Fn(&str) -> Result<Target, String>,
) -> Result<Option<Target>, String> {
    match user {
        None if euid == 0 && !allow_root => Err(
            "refusing to run as root: set [server] user = \"gapura\" (a user to become once the \
             ports are bound), or pass --allow-root"
                .into(),
        ),
        None => Ok(None),
        Some(name) => {
            let target = lookup(name)?;
            if euid == target.uid {
                Ok(None)
            } else if euid == 0 {
                Ok(Some(target))
            } else {
                Err(format!(
                    "[server] user = \"{name}\": only root can become another user (running as uid {euid})"
                ))
            }
        }
    }
}

/// Whether `[server] user` names a user `run` can become: what `check`
/// reports, in `run`'s words.
pub fn check_user(name: &str) -> Result<(), String> {
    lookup(name).map(|_| ())
}

/// The user's ids from the system's user database.
fn lookup(name: &str) -> Result<Target, String> {
    let c_name = CString::new(name).map_err(|_| format!("bad user name {name:?}"))?;
    // SAFETY: passwd is plain data; getpwnam_r fills it and points its
    // strings into `buf`, which outlives every read below.
    let mut pw: libc::passwd = unsafe { std::mem::zeroed() };
    let mut result: *mut libc::passwd = std::ptr::null_mut();
    let mut buf = vec![0 as libc::c_char; 16 * 1024];
    let rc = unsafe {
        libc::getpwnam_r(
            c_name.as_ptr(),
            &mut pw,
            buf.as_mut_ptr(),
            buf.len(),
            &mut result,
        )
    };
    if rc != 0 {
        return Err(format!(
            "[server] user = \"{name}\": the user database could not be read: {}",
            std::io::Error::from_raw_os_error(rc)
        ));
    }
    if result.is_null() {
        return Err(format!(
            "[server] user = \"{name}\": no such user; create it with \
             `systemd-sysusers contrib/systemd/gapura.sysusers.conf` or \
             `useradd --system --home /var/lib/gapura --shell /usr/sbin/nologin {name}` \
             (docs/systemd.md)"
        ));
    }
    // SAFETY: pw_name points into `buf`, NUL-terminated by getpwnam_r.
    let found = unsafe { CStr::from_ptr(pw.pw_name) }
        .to_string_lossy()
        .into_owned();
    Ok(Target {
        name: found,
        uid: pw.pw_uid,
        gid: pw.pw_gid,
    })
}

/// Gives `files` (created by this process as root) to the target, then
/// becomes it. Every step is checked; a failure leaves the process as it
/// was only where the step before had not succeeded, so start refuses to
/// go on at any error.
pub fn drop_to(target: &Target, files: &[PathBuf]) -> Result<(), String> {
    for f in files {
        std::os::unix::fs::chown(f, Some(target.uid), Some(target.gid))
            .map_err(|e| format!("cannot give {} to {}: {e}", f.display(), target.name))?;
    }
    let gids = [target.gid];
    // SAFETY: plain system calls on ids; glibc applies set*id to every thread.
    unsafe {
        if libc::setgroups(1, gids.as_ptr()) != 0 {
            return Err(format!("setgroups: {}", std::io::Error::last_os_error()));
        }
        if libc::setgid(target.gid) != 0 {
            return Err(format!(
                "setgid({}): {}",
                target.gid,
                std::io::Error::last_os_error()
            ));
        }
        if libc::setuid(target.uid) != 0 {
            return Err(format!(
                "setuid({}): {}",
                target.uid,
                std::io::Error::last_os_error()
            ));
        }
        if target.uid != 0 && (libc::setuid(0) == 0 || libc::geteuid() == 0) {
            return Err("root could be taken back after the drop".into());
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gapura(name: &str) -> Result<Target, String> {
        if name == "gapura" {
            Ok(Target {
                name: "gapura".into(),
                uid: 990,
                gid: 985,
            })
        } else {
            Err(format!("[server] user = \"{name}\": no such user"))
        }
    }

    #[test]
    fn root_needs_a_user_or_allow_root() {
        let e = decide(0, None, false, gapura).unwrap_err();
        assert!(e.starts_with("refusing to run as root"), "{e}");
        assert_eq!(decide(0, None, true, gapura), Ok(None));
        assert_eq!(decide(1000, None, false, gapura), Ok(None));
    }

    #[test]
    fn root_drops_to_the_user_and_the_user_stays() {
        assert_eq!(
            decide(0, Some("gapura"), false, gapura)
                .unwrap()
                .unwrap()
                .uid,
            990
        );
        assert_eq!(decide(990, Some("gapura"), false, gapura), Ok(None));
        let e = decide(1000, Some("gapura"), false, gapura).unwrap_err();
        assert!(e.contains("only root can become another user"), "{e}");
        let e = decide(0, Some("nobody-here"), false, gapura).unwrap_err();
        assert!(e.ends_with("no such user"), "{e}");
    }

    #[test]
    fn the_user_database_is_read() {
        assert_eq!(lookup("root").unwrap().uid, 0);
        let e = lookup("no-such-user-gapura-test").unwrap_err();
        assert!(
            e.contains("no such user; create it with `systemd-sysusers contrib/systemd/gapura.sysusers.conf`"),
            "{e}"
        );
        // `check` says the same.
        assert_eq!(check_user("no-such-user-gapura-test"), Err(e));
        assert_eq!(check_user("root"), Ok(()));
    }
}

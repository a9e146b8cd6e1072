//! Where every /proc and /sys file is read from: the real filesystem, or
//! recorded content in tests.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Read-only access to the host's /proc and /sys files. Paths are absolute
/// ("/proc/sys/kernel/osrelease").
pub trait Host {
    /// The file's text; `None` when it is missing, unreadable or not UTF-8.
    fn read(&self, path: &str) -> Option<String>;
    /// The names in a directory, sorted; empty when it is missing.
    fn list(&self, dir: &str) -> Vec<String>;
    /// Where a symbolic link points (as written in the link); `None` when
    /// the path is not a link.
    fn link(&self, _path: &str) -> Option<String> {
        None
    }
}

/// The real filesystem under a root ("/" on the host itself).
#[derive(Clone, Debug)]
pub struct FsHost {
    root: PathBuf,
}

impl FsHost {
    /// The host's own files.
    pub fn new() -> FsHost {
        FsHost::at("/")
    }

    /// Files under `root` (a copy of /proc and /sys laid out below it).
    pub fn at(root: impl Into<PathBuf>) -> FsHost {
        FsHost { root: root.into() }
    }

    fn path(&self, path: &str) -> PathBuf {
        self.root.join(path.trim_start_matches('/'))
    }
}

impl Default for FsHost {
    fn default() -> Self {
        FsHost::new()
    }
}

/// Reads at most this much of one file: every file doctor reads is small,
/// and /proc files never end on their own terms for a broken reader.
const READ_LIMIT: u64 = 4 << 20;

impl Host for FsHost {
    fn read(&self, path: &str) -> Option<String> {
        use std::io::Read;
        let file = std::fs::File::open(self.path(path)).ok()?;
        let mut text = String::new();
        file.take(READ_LIMIT).read_to_string(&mut text).ok()?;
        Some(text)
    }

    fn list(&self, dir: &str) -> Vec<String> {
        let Ok(entries) = std::fs::read_dir(self.path(dir)) else {
            return Vec::new();
        };
        let mut names: Vec<String> = entries
            .filter_map(|e| e.ok()?.file_name().into_string().ok())
            .collect();
        names.sort();
        names
    }

    fn link(&self, path: &str) -> Option<String> {
        let target = std::fs::read_link(self.path(path)).ok()?;
        Some(Path::new(&target).to_string_lossy().into_owned())
    }
}

/// A host made of recorded files: what tests (and anyone replaying another
/// machine's files) read. Directories are implied by the files' paths.
#[derive(Clone, Debug, Default)]
pub struct MapHost {
    files: BTreeMap<String, String>,
    links: BTreeMap<String, String>,
}

impl MapHost {
    pub fn new() -> MapHost {
        MapHost::default()
    }

    /// Adds (or replaces) a file.
    pub fn file(mut self, path: &str, text: &str) -> MapHost {
        self.files.insert(path.to_string(), text.to_string());
        self
    }

    /// Adds a symbolic link (listed in its directory like a file).
    pub fn symlink(mut self, path: &str, target: &str) -> MapHost {
        self.links.insert(path.to_string(), target.to_string());
        self
    }

    /// Removes a file.
    pub fn without(mut self, path: &str) -> MapHost {
        self.files.remove(path);
        self
    }
}

impl Host for MapHost {
    fn read(&self, path: &str) -> Option<String> {
        self.files.get(path).cloned()
    }

    fn list(&self, dir: &str) -> Vec<String> {
        let prefix = format!("{}/", dir.trim_end_matches('/'));
        let mut names: Vec<String> = self
            .files
            .keys()
            .chain(self.links.keys())
            .filter_map(|p| p.strip_prefix(&prefix))
            .filter_map(|rest| rest.split('/').next())
            .filter(|n| !n.is_empty())
            .map(str::to_string)
            .collect();
        names.sort();
        names.dedup();
        names
    }

    fn link(&self, path: &str) -> Option<String> {
        self.links.get(path).cloned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn map_host_lists_the_directories_its_files_imply() {
        let h = MapHost::new()
            .file("/sys/class/net/eth0/mtu", "1500")
            .file("/sys/class/net/lo/mtu", "65536")
            .symlink("/sys/class/net/eth1", "../../devices/x/eth1");
        assert_eq!(h.list("/sys/class/net"), vec!["eth0", "eth1", "lo"]);
        assert_eq!(h.list("/sys/class/net/"), vec!["eth0", "eth1", "lo"]);
        assert!(h.list("/nothing").is_empty());
        assert_eq!(h.read("/sys/class/net/eth0/mtu").as_deref(), Some("1500"));
        assert_eq!(h.read("/sys/class/net/eth0/speed"), None);
    }

    #[test]
    fn fs_host_reads_under_its_root_and_never_fails_loudly() {
        let h = FsHost::new();
        assert!(h.read("/no/such/file").is_none());
        assert!(h.list("/no/such/dir").is_empty());
        assert!(h.link("/no/such/link").is_none());
        let dir = std::env::temp_dir().join(format!("gapura-doctor-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("proc/sys")).unwrap();
        std::fs::write(dir.join("proc/sys/x"), "7\n").unwrap();
        let h = FsHost::at(&dir);
        assert_eq!(h.read("/proc/sys/x").as_deref(), Some("7\n"));
        assert_eq!(h.list("/proc/sys"), vec!["x"]);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

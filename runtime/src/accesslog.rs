//! The access log's writer: one thread that appends the shards' buffers to
//! the file. Shards hand it whole buffers through a bounded queue and never
//! wait for it (a full queue drops lines, counted by the shard). SIGUSR1,
//! or a reload that names another file, reopens the file (for rotation:
//! move the file away, send SIGUSR1, the next buffer starts a new one).

use crate::log;
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, RecvTimeoutError, SyncSender};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Buffers queued per shard before lines are dropped.
const QUEUE_PER_SHARD: usize = 8;

/// The control thread's handle on the writer.
pub struct LogWriter {
    reopen: Arc<AtomicBool>,
    stop: Arc<AtomicBool>,
    path: Arc<Mutex<Option<String>>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl LogWriter {
    /// Starts the writer for `shards` shards, writing to `path` when set;
    /// the file is opened now, and one that cannot be opened is an error
    /// (the server does not start without the log it was asked for). The
    /// sender goes to every shard. `dropped` counts the lines the writer
    /// could not write (no file after a failed reopen, a failed write).
    pub fn start(
        path: Option<&str>,
        shards: usize,
        dropped: Arc<AtomicU64>,
    ) -> Result<(SyncSender<Vec<u8>>, LogWriter), String> {
        let first = match path {
            Some(p) => Some(open(p).map_err(|e| format!("access log: cannot open {p}: {e}"))?),
            None => None,
        };
        let (tx, rx) = sync_channel(QUEUE_PER_SHARD * shards.max(1));
        let mut w = LogWriter {
            reopen: Arc::new(AtomicBool::new(false)),
            stop: Arc::new(AtomicBool::new(false)),
            path: Arc::new(Mutex::new(path.map(str::to_string))),
            thread: None,
        };
        let (reopen, stop, shared) = (w.reopen.clone(), w.stop.clone(), w.path.clone());
        w.thread = Some(
            std::thread::Builder::new()
                .name("gapura-log".into())
                .spawn(move || write_loop(rx, first, &reopen, &stop, &shared, &dropped))
                .map_err(|e| format!("access log writer: {e}"))?,
        );
        Ok((tx, w))
    }

    /// Writes what the shards handed over, then stops the writer; call
    /// once the shards have ended (each flushes its buffer as it drains).
    pub fn finish(mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }

    /// Reopens the file before the next write (SIGUSR1).
    pub fn reopen(&self) {
        self.reopen.store(true, Ordering::Release);
    }

    /// A reload's path: a different one is opened before the next write.
    pub fn set_path(&self, path: Option<&str>) {
        if let Ok(mut p) = self.path.lock() {
            if p.as_deref() != path {
                *p = path.map(str::to_string);
                self.reopen();
            }
        }
    }
}

fn open(path: &str) -> std::io::Result<File> {
    OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o640)
        .open(path)
}

fn write_loop(
    rx: Receiver<Vec<u8>>,
    first: Option<File>,
    reopen: &AtomicBool,
    stop: &AtomicBool,
    path: &Mutex<Option<String>>,
    dropped: &AtomicU64,
) {
    let mut opened_before = first.is_some();
    let mut file: Option<File> = first;
    let mut failed_once = false;
    loop {
        let stopping = stop.load(Ordering::Acquire);
        let next = if stopping {
            // The last buffers, already queued.
            rx.try_recv().map_err(|_| RecvTimeoutError::Disconnected)
        } else {
            rx.recv_timeout(Duration::from_millis(200))
        };
        if reopen.swap(false, Ordering::AcqRel) {
            let p = path.lock().ok().and_then(|p| p.clone());
            file = match p.as_deref().map(open) {
                Some(Ok(f)) => {
                    failed_once = false;
                    if opened_before {
                        log!("access log: reopened {}", p.unwrap_or_default());
                    }
                    opened_before = true;
                    Some(f)
                }
                Some(Err(e)) => {
                    log!("access log: cannot open {}: {e}", p.unwrap_or_default());
                    None
                }
                None => None,
            };
        }
        match next {
            Ok(buf) => {
                let written = match file.as_mut() {
                    Some(f) => match f.write_all(&buf) {
                        Ok(()) => true,
                        Err(e) => {
                            if !failed_once {
                                log!("access log: write failed: {e}");
                                failed_once = true;
                            }
                            false
                        }
                    },
                    // A path set but no file: a reopen failed.
                    None => path.lock().map(|p| p.is_none()).unwrap_or(true),
                };
                if !written {
                    let lines = buf.iter().filter(|&&b| b == b'\n').count() as u64;
                    dropped.fetch_add(lines, Ordering::Relaxed);
                }
            }
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => return,
        }
    }
}

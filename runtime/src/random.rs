//! Randomness from the kernel: the gate's per-process hash seed and the
//! salts of `gapura passwd`. The one place the runtime reads `/dev/urandom`.

use std::io::Read;

/// Fills `buf` from `/dev/urandom`.
pub fn fill(buf: &mut [u8]) -> std::io::Result<()> {
    std::fs::File::open("/dev/urandom")?.read_exact(buf)
}

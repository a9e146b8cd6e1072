//! Randomness from the kernel: the gate's per-process hash seed, proof of
//! work's key and the salts of `gapura passwd`. The one place the runtime
//! asks for it: `getrandom(2)`, which blocks only until the kernel's pool is
//! first initialised and needs no file. There is no fallback: without
//! randomness the caller refuses to go on.

/// Fills `buf` with random bytes from the kernel.
pub fn fill(buf: &mut [u8]) -> std::io::Result<()> {
    let mut at = 0;
    while at < buf.len() {
        let rest = &mut buf[at..];
        // SAFETY: the pointer and length describe `rest`, a live, writable
        // slice; getrandom writes at most that many bytes.
        let n = unsafe { libc::getrandom(rest.as_mut_ptr().cast(), rest.len(), 0) };
        if n < 0 {
            let e = std::io::Error::last_os_error();
            if e.kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        at += n as usize;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #[test]
    fn two_draws_differ_and_fill_the_buffer() {
        let (mut a, mut b) = ([0u8; 64], [0u8; 64]);
        super::fill(&mut a).unwrap();
        super::fill(&mut b).unwrap();
        assert_ne!(a, b);
        assert!(a.iter().any(|&x| x != 0));
    }
}

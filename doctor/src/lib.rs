//! `gapura doctor`: checks the host for what Gapura needs and says why and
//! how to fix each finding.
//!
//! It must never change the host: it reads files under /proc and /sys and
//! asks the kernel what it allows, nothing more.

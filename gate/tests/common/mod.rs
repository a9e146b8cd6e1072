//! A counting global allocator for the allocation tests: it counts the
//! allocations of the current thread while a closure runs. Each test binary
//! that includes this module installs it.

#![allow(dead_code)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::hint::black_box;

struct Counting;

thread_local! {
    static COUNTING: Cell<bool> = const { Cell::new(false) };
    static COUNT: Cell<u64> = const { Cell::new(0) };
}

fn note() {
    let _ = COUNTING.try_with(|on| {
        if on.get() {
            let _ = COUNT.try_with(|c| c.set(c.get() + 1));
        }
    });
}

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        note();
        unsafe { System.alloc(layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        note();
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        note();
        unsafe { System.realloc(ptr, layout, new_size) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

/// Allocations made by `f` on this thread.
pub fn allocations<R>(f: impl FnOnce() -> R) -> u64 {
    COUNT.with(|c| c.set(0));
    COUNTING.with(|on| on.set(true));
    black_box(f());
    COUNTING.with(|on| on.set(false));
    COUNT.with(|c| c.get())
}

/// Allocations made on this thread while `f` runs.
pub fn allocations_in(f: impl FnOnce()) -> u64 {
    allocations(f)
}

/// Starts counting this thread's allocations from zero (for work that
/// runs across awaits: [`counted`] ends the count).
pub fn count_from_zero() {
    COUNT.with(|c| c.set(0));
    COUNTING.with(|on| on.set(true));
}

/// Ends the count [`count_from_zero`] started: the allocations since.
pub fn counted() -> u64 {
    COUNTING.with(|on| on.set(false));
    COUNT.with(|c| c.get())
}

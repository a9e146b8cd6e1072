//! Reused allocations for the state of an upstream exchange.
//!
//! An exchange's future is large (about 2.4 KiB) and lives only while a
//! request is forwarded; kept inline, it would sit in every connection's
//! task, idle ones too. On the heap, a fresh allocation per request costs
//! the allocator's slow path (the size is past its per-thread caches).
//! [`Slots`] keeps the allocations of finished exchanges, per shard, and
//! places the next exchange in one of them: an idle connection carries a
//! pointer, and a forwarded request pays no allocation.

use std::alloc::{alloc, dealloc, handle_alloc_error, Layout};
use std::cell::RefCell;
use std::future::Future;
use std::pin::Pin;
use std::ptr::NonNull;
use std::rc::Rc;
use std::task::{Context, Poll};

/// Most free allocations a shard keeps.
const KEPT: usize = 256;

/// A shard's free allocations, each with its layout.
#[derive(Default)]
pub(crate) struct Slots {
    free: RefCell<Vec<(NonNull<u8>, Layout)>>,
}

impl Slots {
    /// Places `f` in a kept allocation of its layout, or a new one.
    pub(crate) fn place<F: Future>(self: &Rc<Self>, f: F) -> Placed<F> {
        let layout = Layout::new::<F>();
        let reused = {
            let mut free = self.free.borrow_mut();
            free.iter()
                .rposition(|&(_, l)| l == layout)
                .map(|i| free.swap_remove(i).0)
        };
        let ptr = match reused {
            Some(p) => p.cast::<F>(),
            None if layout.size() == 0 => NonNull::dangling(),
            None => {
                // SAFETY: the layout's size is not zero.
                let raw = unsafe { alloc(layout) };
                match NonNull::new(raw) {
                    Some(p) => p.cast::<F>(),
                    None => handle_alloc_error(layout),
                }
            }
        };
        // SAFETY: `ptr` is valid for writes of `F` and aligned for it (an
        // allocation of `F`'s layout), and holds no live value.
        unsafe { ptr.as_ptr().write(f) };
        Placed {
            ptr,
            slots: self.clone(),
            _owns: std::marker::PhantomData,
        }
    }

    fn give(&self, ptr: NonNull<u8>, layout: Layout) {
        if layout.size() == 0 {
            return;
        }
        let mut free = self.free.borrow_mut();
        if free.len() < KEPT {
            free.push((ptr, layout));
        } else {
            // SAFETY: allocated by `alloc` with this layout, no longer used.
            unsafe { dealloc(ptr.as_ptr(), layout) };
        }
    }
}

impl Drop for Slots {
    fn drop(&mut self) {
        for (ptr, layout) in self.free.get_mut().drain(..) {
            // SAFETY: allocated by `alloc` with this layout, no longer used.
            unsafe { dealloc(ptr.as_ptr(), layout) };
        }
    }
}

/// A future placed in a shard's allocation: it stays at that address
/// until it is dropped, and its allocation then goes back to the shard.
pub(crate) struct Placed<F: Future> {
    ptr: NonNull<F>,
    slots: Rc<Slots>,
    /// It owns an `F` (for the drop check).
    _owns: std::marker::PhantomData<F>,
}

impl<F: Future> Future for Placed<F> {
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        // SAFETY: the value at `ptr` is live until `drop` and never moved
        // (only this handle reaches it), so pinning it is sound.
        unsafe { Pin::new_unchecked(&mut *self.ptr.as_ptr()) }.poll(cx)
    }
}

impl<F: Future> Drop for Placed<F> {
    fn drop(&mut self) {
        // SAFETY: the value is live and dropped exactly once, here.
        unsafe { std::ptr::drop_in_place(self.ptr.as_ptr()) };
        self.slots.give(self.ptr.cast(), Layout::new::<F>());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;

    struct Counted<'a>(&'a Cell<u32>, [u8; 64]);

    impl Drop for Counted<'_> {
        fn drop(&mut self) {
            self.0.set(self.0.get() + 1);
        }
    }

    fn run<F: Future>(f: F) -> F::Output {
        let mut f = std::pin::pin!(f);
        let mut cx = Context::from_waker(std::task::Waker::noop());
        loop {
            if let Poll::Ready(v) = f.as_mut().poll(&mut cx) {
                return v;
            }
        }
    }

    #[test]
    fn a_placed_future_runs_its_drops_once_and_its_allocation_is_reused() {
        let slots = Rc::new(Slots::default());
        let drops = Cell::new(0);
        let mut first = None;
        for i in 0..5u32 {
            let held = Counted(&drops, [i as u8; 64]);
            let placed = slots.place(async move {
                let h = held;
                u32::from(h.1[0]) + 1
            });
            let at = placed.ptr.cast::<u8>();
            assert_eq!(*first.get_or_insert(at), at, "the allocation is reused");
            assert_eq!(run(placed), i + 1);
            assert_eq!(drops.get(), i + 1);
        }
        // Dropped before it ran: its value is dropped too.
        let held = Counted(&drops, [0; 64]);
        drop(slots.place(async move {
            let _h = held;
        }));
        assert_eq!(drops.get(), 6);
        assert_eq!(slots.free.borrow().len(), 1);
    }
}

use super::*;
use crate::driver::{block_on, Driver};
use std::time::Duration;

/// Runs `f` as a task (so that its yields let the sweeper run) on a fresh
/// runtime of each driver.
fn on_both<F, Fut>(f: F)
where
    F: Fn() -> Fut,
    Fut: Future<Output = ()> + 'static,
{
    for driver in [Driver::Auto, Driver::Epoll] {
        let body = f();
        block_on(driver, 64, |_| async move { monoio::spawn(body).await }).unwrap();
    }
}

fn after(ms: u64) -> Instant {
    Instant::now() + Duration::from_millis(ms)
}

/// Lets the tasks queued now run once: a task woken while it runs goes
/// back to the front of monoio's queue, so the wake comes from a task
/// spawned behind them.
async fn yield_once() {
    let mut yielded = false;
    std::future::poll_fn(|cx| {
        if yielded {
            return Poll::Ready(());
        }
        yielded = true;
        let waker = cx.waker().clone();
        monoio::spawn(async move { waker.wake() });
        Poll::Pending
    })
    .await
}

/// Yields until `done` holds, at most 10,000 times.
async fn until(mut done: impl FnMut() -> bool) {
    for _ in 0..10_000 {
        if done() {
            return;
        }
        yield_once().await;
    }
    panic!("the condition never held");
}

#[test]
fn a_wait_that_ends_in_time_gives_its_output_and_sets_nothing_off() {
    on_both(|| async {
        let shard = Rc::new(Deadlines::default());
        let d = shard.register();
        for i in 0..1000u32 {
            assert_eq!(d.within(after(50), async { i }).await, Ok(i));
        }
        // An operation that waits once, then completes.
        let (tx, rx) = local_channel();
        // It runs once this task waits: the operation is pending first.
        monoio::spawn(async move { tx.set(7) });
        assert_eq!(d.within(after(10_000), rx).await, Ok(7));
        // Nothing was due: the sweeper never walked the table.
        assert_eq!(shard.sweeps(), 0);
        drop(d);
    });
}

#[test]
fn a_wait_past_its_deadline_ends_elapsed_never_early() {
    on_both(|| async {
        let shard = Rc::new(Deadlines::default());
        let d = shard.register();
        let at = after(30);
        let r = d.within(at, std::future::pending::<()>()).await;
        assert_eq!(r, Err(Elapsed));
        assert!(Instant::now() >= at);
        // The entry is clear again: the next wait runs normally.
        assert_eq!(d.within(after(30), async { 1 }).await, Ok(1));
    });
}

#[test]
fn deadlines_of_many_connections_fire_each_at_its_own_time() {
    on_both(|| async {
        let shard = Rc::new(Deadlines::default());
        let fired = Rc::new(RefCell::new(Vec::new()));
        let mut tasks = Vec::new();
        // Set in an order unlike their deadlines.
        for (i, ms) in [(0usize, 60u64), (1, 20), (2, 40), (3, 10_000)] {
            let d = shard.register();
            let fired = fired.clone();
            let at = after(ms);
            tasks.push(monoio::spawn(async move {
                let r = d.within(at, std::future::pending::<()>()).await;
                assert!(Instant::now() >= at);
                fired.borrow_mut().push((i, r));
            }));
        }
        let mut tasks = tasks.into_iter();
        for t in tasks.by_ref().take(3) {
            t.await;
        }
        // Each fired, earliest first; the 10 s one is still waiting.
        let got = fired.borrow().clone();
        assert_eq!(got.len(), 3);
        let mut order: Vec<usize> = got.iter().map(|x| x.0).collect();
        order.sort();
        assert_eq!(order, vec![0, 1, 2]);
        assert!(got.iter().all(|x| x.1 == Err(Elapsed)));
        assert_eq!(shard.live(), 1);
    });
}

#[test]
fn walks_are_spaced_however_the_deadlines_spread() {
    on_both(|| async {
        let shard = Rc::new(Deadlines::default());
        let start = Instant::now();
        let mut tasks = Vec::new();
        // 200 deadlines 0.1 ms apart: at most one walk per GAP.
        for i in 0..200u64 {
            let d = shard.register();
            let at = start + Duration::from_millis(10) + Duration::from_micros(100 * i);
            tasks.push(monoio::spawn(async move {
                assert_eq!(
                    d.within(at, std::future::pending::<()>()).await,
                    Err(Elapsed)
                );
                assert!(Instant::now() >= at);
            }));
        }
        for t in tasks {
            t.await;
        }
        let span = start.elapsed();
        let most = span.as_micros() / GAP.as_micros() + 2;
        assert!(
            shard.sweeps() as u128 <= most,
            "{} walks in {span:?}",
            shard.sweeps()
        );
    });
}

#[test]
fn an_earlier_deadline_moves_the_sweepers_wake_up() {
    on_both(|| async {
        let shard = Rc::new(Deadlines::default());
        let late = shard.register();
        let far_at = after(3_600_000);
        let far_ended = Rc::new(std::cell::Cell::new(false));
        let ended = far_ended.clone();
        let far = monoio::spawn(async move {
            let _ = late.within(far_at, std::future::pending::<()>()).await;
            ended.set(true);
        });
        // The sweeper waits toward the far deadline first.
        until(|| shard.next.get() == Some(far_at) && shard.sweeper.borrow().is_some()).await;
        let d = shard.register();
        assert_eq!(
            d.within(after(20), std::future::pending::<()>()).await,
            Err(Elapsed)
        );
        // Woken for the 20 ms deadline: the far wait still runs, and the
        // sweeper waits toward it again.
        assert!(!far_ended.get());
        until(|| shard.next.get() == Some(far_at)).await;
        drop(far);
    });
}

#[test]
fn a_dropped_wait_clears_its_deadline_and_the_sweeper_ends_with_the_last_connection() {
    on_both(|| async {
        let shard = Rc::new(Deadlines::default());
        let d = shard.register();
        {
            let wait = d.within(after(10), std::future::pending::<()>());
            let mut wait = std::pin::pin!(wait);
            // Polled once (pending), then dropped before its deadline.
            let polled = std::future::poll_fn(|cx| Poll::Ready(wait.as_mut().poll(cx))).await;
            assert!(polled.is_pending());
        }
        // A later deadline of another connection fires: the sweeper has
        // walked past the dropped wait's deadline with nothing waiting.
        let other = shard.register();
        assert_eq!(
            other.within(after(30), std::future::pending::<()>()).await,
            Err(Elapsed)
        );
        drop(other);
        {
            let t = shard.table.borrow();
            // (The waker is kept for the next wait: cloned once per connection.)
            assert!(t.entries.iter().all(|e| e.at.is_none() && !e.fired));
        }
        assert!(shard.running.get());
        drop(d);
        assert_eq!(shard.live(), 0);
        until(|| !shard.running.get()).await;
        // A new connection starts it again, on a reused entry (the table
        // has had two).
        let d = shard.register();
        assert!(shard.running.get());
        assert_eq!(shard.table.borrow().entries.len(), 2);
        assert_eq!(
            d.within(after(10), std::future::pending::<()>()).await,
            Err(Elapsed)
        );
    });
}

/// A one-value channel between tasks of one thread.
fn local_channel() -> (Sender, Receiver) {
    let cell = Rc::new((Cell::new(None), RefCell::new(None::<Waker>)));
    (Sender(cell.clone()), Receiver(cell))
}

type Shared = Rc<(Cell<Option<u32>>, RefCell<Option<Waker>>)>;

struct Sender(Shared);

impl Sender {
    fn set(&self, v: u32) {
        self.0 .0.set(Some(v));
        if let Some(w) = self.0 .1.borrow_mut().take() {
            w.wake();
        }
    }
}

struct Receiver(Shared);

impl Future for Receiver {
    type Output = u32;
    fn poll(self: std::pin::Pin<&mut Self>, cx: &mut std::task::Context<'_>) -> Poll<u32> {
        match self.0 .0.get() {
            Some(v) => Poll::Ready(v),
            None => {
                *self.0 .1.borrow_mut() = Some(cx.waker().clone());
                Poll::Pending
            }
        }
    }
}

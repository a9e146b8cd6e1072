use super::*;

fn config(slots: u32, places_per_slot: u32) -> LineConfig {
    LineConfig {
        slots,
        places_per_slot,
        client_places: 16,
        client_running: 2,
        max_wait_ms: 10_000,
        client_stripes: 1024,
    }
}

const ALICE: u64 = 1;
const BOB: u64 = 2;

#[test]
fn the_seed_sizes_scale_with_cores_but_never_below_eight_slots() {
    let c = LineConfig::for_cores(2);
    assert_eq!(c.slots, 8);
    assert_eq!(c.places(), 256);
    assert_eq!(c.client_places, 16);
    assert_eq!(c.client_running, 2);
    assert_eq!(c.max_wait_ms, 10_000);
    assert_eq!(c.client_stripes, 1024);
    assert_eq!(LineConfig::for_cores(16).places(), 512);
}

#[test]
fn identical_cold_credentials_are_verified_once() {
    let mut line = VerifyLine::new(config(8, 32));
    let a = line.enqueue(0xfeed, ALICE, "first", 0).unwrap();
    let b = line.enqueue(0xfeed, ALICE, "second", 5).unwrap();
    assert!(!a.joined);
    assert!(b.joined);
    assert_eq!(line.places_used(), 2);
    assert_eq!(line.queued_jobs(), 1);
    let (job, payload) = line.next_job().unwrap();
    assert_eq!(payload, "first");
    assert_eq!(line.next_job(), None);
    // A third identical request joins the running job.
    let c = line.enqueue(0xfeed, ALICE, "third", 7).unwrap();
    assert!(c.joined);
    let mut waiters: Vec<Ticket> = line.complete(job).collect();
    waiters.sort_by_key(|t| t.index());
    let mut want = vec![a.ticket, b.ticket, c.ticket];
    want.sort_by_key(|t| t.index());
    assert_eq!(waiters, want);
    assert_eq!(line.places_used(), 0);
    assert_eq!(line.running_jobs(), 0);
    // The job is gone: the same credentials make a new one.
    assert!(!line.enqueue(0xfeed, ALICE, "again", 9).unwrap().joined);
}

#[test]
fn different_credentials_and_unshared_jobs_run_apart() {
    let mut line = VerifyLine::new(config(8, 32));
    assert!(!line.enqueue(1, ALICE, (), 0).unwrap().joined);
    assert!(!line.enqueue(2, ALICE, (), 0).unwrap().joined);
    // Share key 0 (unknown user, no hash): each its own job.
    assert!(!line.enqueue(0, BOB, (), 0).unwrap().joined);
    assert!(!line.enqueue(0, BOB, (), 0).unwrap().joined);
    assert_eq!(line.queued_jobs(), 4);
}

#[test]
fn a_client_holds_at_most_its_share_of_places() {
    let mut line = VerifyLine::new(config(8, 32));
    for i in 0..16 {
        line.enqueue(100 + i, ALICE, (), 0).unwrap();
    }
    // The seventeenth is refused, joining or not.
    assert_eq!(line.enqueue(999, ALICE, (), 0), Err(Full::Client));
    assert_eq!(line.enqueue(100, ALICE, (), 0), Err(Full::Client));
    // Another client still gets in.
    assert!(line.enqueue(999, BOB, (), 0).is_ok());
    assert_eq!(line.places_used(), 17);
}

#[test]
fn a_full_line_refuses_everyone() {
    let mut line = VerifyLine::new(config(1, 4));
    for client in 1..=4 {
        line.enqueue(client, client, (), 0).unwrap();
    }
    assert_eq!(line.enqueue(9, 9, (), 0), Err(Full::Line));
    // Even identical credentials: a joiner needs a place too.
    assert_eq!(line.enqueue(1, 1, (), 0), Err(Full::Line));
    let (job, ()) = line.next_job().unwrap();
    assert_eq!(line.complete(job).count(), 1);
    assert!(line.enqueue(9, 9, (), 0).is_ok());
}

#[test]
fn one_client_runs_at_most_two_jobs_and_others_overtake_it() {
    let mut line = VerifyLine::new(config(8, 32));
    for key in [1, 2, 3] {
        line.enqueue(key, ALICE, ("alice", key), 0).unwrap();
    }
    line.enqueue(4, BOB, ("bob", 4), 1).unwrap();
    let (a1, p1) = line.next_job().unwrap();
    let (_a2, p2) = line.next_job().unwrap();
    let (_b, p3) = line.next_job().unwrap();
    assert_eq!([p1, p2, p3], [("alice", 1), ("alice", 2), ("bob", 4)]);
    // Alice's third waits although slots are free.
    assert_eq!(line.next_job(), None);
    assert_eq!(line.complete(a1).count(), 1);
    assert_eq!(line.next_job().map(|(_, p)| p), Some(("alice", 3)));
}

#[test]
fn no_more_jobs_run_than_slots() {
    let mut line = VerifyLine::new(config(2, 8));
    for client in 1..=3 {
        line.enqueue(client, client, client, 0).unwrap();
    }
    let (j1, _) = line.next_job().unwrap();
    line.next_job().unwrap();
    assert_eq!(line.next_job(), None);
    assert_eq!(line.running_jobs(), 2);
    drop(line.complete(j1));
    assert_eq!(line.next_job().map(|(_, p)| p), Some(3));
}

#[test]
fn an_aborted_request_leaves_the_line_at_once() {
    let mut line = VerifyLine::new(config(8, 32));
    let a = line.enqueue(7, ALICE, (), 0).unwrap();
    assert!(line.cancel(a.ticket));
    assert_eq!(line.places_used(), 0);
    // Its job had no one left and is dropped unrun.
    assert_eq!(line.queued_jobs(), 0);
    assert_eq!(line.next_job(), None);
    // A stale ticket frees nothing.
    assert!(!line.cancel(a.ticket));
    let b = line.enqueue(8, ALICE, (), 0).unwrap();
    assert_eq!(b.ticket.index(), a.ticket.index());
    assert!(!line.cancel(a.ticket));
    assert_eq!(line.places_used(), 1);
}

#[test]
fn one_twin_leaving_keeps_the_job_for_the_other() {
    let mut line = VerifyLine::new(config(8, 32));
    let a = line.enqueue(7, ALICE, (), 0).unwrap();
    let b = line.enqueue(7, ALICE, (), 0).unwrap();
    line.cancel(a.ticket);
    let (job, ()) = line.next_job().unwrap();
    assert_eq!(line.complete(job).collect::<Vec<_>>(), vec![b.ticket]);
}

#[test]
fn a_running_job_whose_waiters_left_still_completes() {
    let mut line = VerifyLine::new(config(8, 32));
    let a = line.enqueue(7, ALICE, "payload", 0).unwrap();
    let (job, payload) = line.next_job().unwrap();
    line.cancel(a.ticket);
    assert_eq!(line.places_used(), 0);
    assert_eq!(line.running_jobs(), 1);
    // The worker still holds the payload, and the result can fill the cache.
    assert_eq!(payload, "payload");
    assert_eq!(line.complete(job).count(), 0);
    assert_eq!(line.running_jobs(), 0);
    // A stale job id completes nothing.
    assert_eq!(line.complete(job).count(), 0);
    assert_eq!(line.running_jobs(), 0);
}

#[test]
fn places_expire_after_the_maximum_wait_in_arrival_order() {
    let mut line = VerifyLine::new(config(8, 32));
    let a = line.enqueue(1, ALICE, (), 0).unwrap();
    let b = line.enqueue(2, BOB, (), 5_000).unwrap();
    assert_eq!(line.next_expiry_ms(), Some(10_000));
    assert_eq!(line.expire(9_999), None);
    assert_eq!(line.expire(10_000), Some(a.ticket));
    assert_eq!(line.expire(10_000), None);
    assert_eq!(line.next_expiry_ms(), Some(15_000));
    assert_eq!(line.queued_jobs(), 1);
    assert_eq!(line.expire(15_000), Some(b.ticket));
    assert_eq!(line.next_expiry_ms(), None);
    assert_eq!((line.places_used(), line.queued_jobs()), (0, 0));
}

#[test]
fn a_waiter_on_a_running_job_expires_too() {
    let mut line = VerifyLine::new(config(8, 32));
    let a = line.enqueue(1, ALICE, (), 0).unwrap();
    let (job, ()) = line.next_job().unwrap();
    assert_eq!(line.expire(10_000), Some(a.ticket));
    assert_eq!(line.complete(job).count(), 0);
}

#[test]
fn dropping_the_waiters_frees_every_place() {
    let mut line = VerifyLine::new(config(8, 32));
    for _ in 0..3 {
        line.enqueue(5, ALICE, (), 0).unwrap();
    }
    let (job, ()) = line.next_job().unwrap();
    let mut w = line.complete(job);
    assert!(w.next().is_some());
    drop(w);
    assert_eq!(line.places_used(), 0);
    // Alice's share is whole again.
    for i in 0..16 {
        line.enqueue(10 + i, ALICE, (), 1).unwrap();
    }
}

#[test]
fn the_line_reuses_its_arrays_over_many_rounds() {
    let mut line = VerifyLine::new(config(1, 4));
    for round in 0..1_000u64 {
        let t = line.enqueue(round % 3 + 1, round, round, round).unwrap();
        if round % 2 == 0 {
            line.cancel(t.ticket);
        } else {
            let (job, p) = line.next_job().unwrap();
            assert_eq!(p, round);
            assert_eq!(line.complete(job).collect::<Vec<_>>(), vec![t.ticket]);
        }
        assert_eq!(line.places_used(), 0);
        assert_eq!(line.queued_jobs() + line.running_jobs(), 0);
    }
}

//! The worker's lease: nothing is fetched or started unless it holds (`core/src/worker/lease.rs`).

use super::*;

#[test]
fn at_start_the_worker_recovers_and_fetches_only_once_its_lease_is_held() {
    let mut hand = Hand::new(config());
    let effects = hand.drain();
    assert!(fetches(&effects).is_empty(), "no fetch before a heartbeat landed: {effects:?}");
    let (_, effects) = hand.fire_raw();
    assert_eq!(hand.now, t0(), "due at start");
    let sent = queries(&effects);
    assert!(sent.iter().any(|(_, s)| matches!(s, Statement::RecoverLapsed { .. })), "the recovery sweep");
    // The four-hour sweep within a minute, as graphile-worker's (core/tests/machine/sweep.rs).
    let first_sweep = hand.machine.deadline(TimerKind::LockSweep).expect("a lock sweep is armed");
    assert!(first_sweep - t0() <= FIRST_SWEEP_WITHIN, "{first_sweep}");
    assert!(!sent.iter().any(|(_, s)| matches!(s, Statement::Heartbeat { .. })), "the keeper heartbeats");
    assert_eq!(hand.machine.deadline(TimerKind::Heartbeat), None, "the keeper's timer");
    assert!(fetches(&effects).is_empty());
    // A failed heartbeat holds nothing, and is reported.
    let error = DbError { message: "connection lost".into(), retryable: true };
    let effects = hand.feed(Input::Heartbeat { sent: t0(), result: Err(error) });
    assert!(fetches(&effects).is_empty());
    assert!(events(&effects)
        .iter()
        .any(|e| matches!(e, Event::DatabaseError { statement: "renew the lease", .. })));
    let effects = hand.renew(t0());
    assert_eq!(fetches(&effects).len(), 1, "the first fetch follows the heartbeat");
}

#[test]
fn once_no_heartbeat_landed_for_a_lease_the_queue_goes_back_and_nothing_starts_until_one_lands() {
    let (mut hand, effects) = Hand::started(Config {
        concurrency: 1,
        local_queue_size: Some(10),
        local_queue_ttl: Duration::minutes(5),
        ..config()
    });
    let landed = hand.now;
    let (fetch, _) = fetches(&effects)[0];
    let effects = hand.jobs(fetch, jobs_of(1..=3));
    assert_eq!(started(&effects), vec![1], "2 and 3 wait");
    // From now on no heartbeat lands.
    let mut lapsed = Vec::new();
    while lapsed.is_empty() {
        let (_, effects) = hand.fire_raw();
        for (id, statement) in queries(&effects) {
            match statement {
                Statement::GetJobs { .. } => panic!("fetched with the lease unsure at {}", hand.now),
                Statement::ReturnJobs { ids, .. } => lapsed = ids,
                _ => {
                    hand.done(id);
                }
            }
        }
        if events(&effects).contains(&Event::LeaseLapsing) {
            assert!(!lapsed.is_empty(), "the queue goes back as the lease lapses: {effects:?}");
        }
    }
    assert_eq!(lapsed, vec![2, 3]);
    let lapse = landed + formica_core::worker::LEASE;
    assert!(
        hand.now >= lapse && hand.now < lapse + Duration::seconds(2),
        "a lease after the last landed heartbeat was sent, seen at the next timer (the poll): {}",
        hand.now
    );
    // A slot frees: nothing starts, nothing is fetched.
    let effects = hand.finish(1, TaskOutcome::Ok);
    assert!(started(&effects).is_empty() && fetches(&effects).is_empty(), "{effects:?}");
    // A heartbeat sent a while ago lands (late): the lease holds again, counted from its
    // sending.
    let sent = hand.now - Duration::seconds(2);
    let effects = hand.renew(sent);
    assert!(events(&effects).contains(&Event::LeaseRenewed), "{effects:?}");
    assert_eq!(fetches(&effects).len(), 1, "fetching again at once: {effects:?}");
    hand.advance(sent + formica_core::worker::LEASE - hand.now);
    let effects = hand.feed(Input::Timeout);
    assert!(events(&effects).contains(&Event::LeaseLapsing), "its lease runs out in turn: {effects:?}");
}

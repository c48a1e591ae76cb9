//! Flow control (`core/src/worker/flow.rs`): a rate limit's room returning wakes the fetch.

use super::*;
use formica_core::flow::{Control, Controls};

/// A limit of 2 a second, the worker polling every 10 s: a short fetch of the limited task
/// fetches again as soon as its oldest start leaves the second (room returns), not at the
/// poll; with no start of its own in the period, the poll remains.
#[test]
fn a_short_fetch_under_a_rate_limit_fetches_again_when_its_oldest_start_leaves_the_period() {
    let config = Config { flow_control: true, poll_interval: Duration::seconds(10), ..config() };
    let mut hand = Hand::new(config);
    let limits = vec![Control::rate_limit("t", 2, 1000)];
    let mut effects = hand.drain();
    if hand.machine.poll_timeout().is_some_and(|(at, _)| at <= t0()) {
        effects.extend(hand.fire_raw().1);
    }
    for (id, statement) in queries(&effects) {
        match statement {
            Statement::ReadFlow => {
                let controls = Controls { controls: limits.clone(), ..Default::default() };
                hand.feed(Input::QueryDone { id, result: QueryResult::Flow(controls) });
            }
            _ => {
                hand.done(id);
            }
        }
    }
    let effects = hand.renew(t0());
    let [(fetch, limit)] = fetches(&effects)[..] else { panic!("a fetch: {effects:?}") };
    assert!(limit > 2);
    hand.advance(Duration::milliseconds(5));
    let fetched_at = hand.now;
    // The limit held the rest back: 2 jobs, a short fetch.
    let effects = hand.jobs(fetch, vec![job(1, None, 1, 25), job(2, None, 1, 25)]);
    assert_eq!(started(&effects), vec![1, 2]);
    for id in [1, 2] {
        hand.advance(Duration::milliseconds(10));
        let effects = hand.finish(id, TaskOutcome::Ok);
        for (write, _) in writes(&effects) {
            // A written outcome wakes the fetch: the limit leaves nothing to take.
            for (fetch, _) in fetches(&hand.done(write)) {
                hand.jobs(fetch, vec![]);
            }
        }
    }
    let room = fetched_at + Duration::seconds(1);
    assert_eq!(hand.machine.deadline(TimerKind::Flow), Some(room), "room returns a second after the starts");
    let (kind, effects) = hand.fire();
    assert_eq!((kind, hand.now), (TimerKind::Flow, room));
    let [(fetch, _)] = fetches(&effects)[..] else { panic!("a fetch when room returns: {effects:?}") };
    // Another worker took the room: nothing, and no start of this worker's in the period.
    let effects = hand.jobs(fetch, vec![]);
    assert!(fetches(&effects).is_empty());
    let (kind, _) = hand.fire();
    assert_ne!(kind, TimerKind::Flow, "no room of its own to wait for: the poll, or the next read");
    assert!(hand.machine.deadline(TimerKind::Flow).is_none_or(|at| at > room + Duration::seconds(1)));
}

//! The periodic sweeps of stale locks and lapsed leases (`core/src/worker/sweep.rs`).

use super::*;

#[test]
fn locks_are_swept_within_a_minute_of_start_then_every_eight_to_ten_minutes() {
    let mut firsts = std::collections::BTreeSet::new();
    for seed in 0..20 {
        let (mut hand, _) = Hand::started(Config { seed, use_local_time: seed % 2 == 0, ..config() });
        let mut last = None;
        let mut sweeps = 0;
        while sweeps < 3 {
            let (kind, effects) = hand.fire();
            for (id, statement) in queries(&effects) {
                let result = match statement {
                    Statement::GetJobs { .. } => QueryResult::jobs(vec![]),
                    Statement::ResetLocked { locked_before } => {
                        assert_eq!(kind, TimerKind::LockSweep);
                        match last {
                            None => {
                                let after = hand.now - t0();
                                assert!(after <= FIRST_SWEEP_WITHIN, "seed {seed}: first after {after}");
                                firsts.insert(after);
                            }
                            Some(last) => {
                                let gap = hand.now - last;
                                assert!(
                                    gap >= Duration::minutes(8) && gap <= Duration::minutes(10),
                                    "seed {seed}: {gap}"
                                );
                            }
                        }
                        let expected = (seed % 2 == 0).then(|| hand.now - Duration::hours(4));
                        assert_eq!(locked_before, expected);
                        last = Some(hand.now);
                        sweeps += 1;
                        QueryResult::Done
                    }
                    _ => QueryResult::Done,
                };
                hand.feed(Input::QueryDone { id, result });
            }
        }
    }
    assert!(firsts.len() > 10, "workers started together spread their first sweeps: {firsts:?}");
    let once = Worker::new(Config { run_once: true, ..config() }, t0());
    assert_eq!(once.deadline(TimerKind::LockSweep), None, "run-once does not sweep");
}

#[test]
fn the_sweep_intervals_are_the_configured_ones_plus_their_jitter() {
    let sweep = Duration::minutes(1);
    let recovery = Duration::milliseconds(500);
    for seed in 0..10 {
        let config = Config { seed, lock_sweep_interval: sweep, recovery_interval: recovery, ..config() };
        let (mut hand, _) = Hand::started(config);
        let (mut swept, mut recovered) = (vec![], vec![t0()]);
        while swept.len() < 4 {
            let (_, effects) = hand.fire();
            for (id, statement) in queries(&effects) {
                match statement {
                    Statement::ResetLocked { .. } => swept.push(hand.now),
                    Statement::RecoverLapsed { .. } => recovered.push(hand.now),
                    _ => {}
                }
                let result = match statement {
                    Statement::GetJobs { .. } => QueryResult::jobs(vec![]),
                    _ => QueryResult::Done,
                };
                hand.feed(Input::QueryDone { id, result });
            }
        }
        // The first lock sweep within the interval; then a quarter more at most for the lock
        // sweep, a third for the recovery sweep.
        assert!(swept[0] - t0() <= sweep, "seed {seed}: first lock sweep at {}", swept[0] - t0());
        for gap in swept.windows(2).map(|w| w[1] - w[0]) {
            assert!(gap >= sweep && gap <= sweep * 5 / 4, "seed {seed}: lock sweeps {gap} apart");
        }
        assert!(recovered.len() > 3 * 60 * 3 / 2, "seed {seed}: {} recovery sweeps", recovered.len());
        for gap in recovered.windows(2).map(|w| w[1] - w[0]) {
            assert!(gap >= recovery && gap <= recovery * 4 / 3, "seed {seed}: recovery sweeps {gap} apart");
        }
    }
}

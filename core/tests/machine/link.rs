//! The LISTEN connection: reconnecting with backoff (`core/src/worker/link.rs`).

use super::*;

#[test]
fn listener_reconnects_with_a_capped_growing_backoff() {
    let cap = Duration::seconds(3);
    let (mut hand, _) = Hand::started(Config { max_listener_backoff: cap, ..config() });
    let mut delays = Vec::new();
    for failure in 1..=8 {
        let effects = hand.feed(Input::ListenerDown { error: "refused".into() });
        let retry_at = events(&effects)
            .into_iter()
            .find_map(|e| match e {
                Event::ListenerDown { retry_at, .. } => Some(retry_at),
                _ => None,
            })
            .expect("a ListenerDown event");
        assert_eq!(hand.machine.deadline(TimerKind::Listener), Some(retry_at));
        let delay = retry_at - hand.now;
        let base = (50.0 * (failure as f64).exp()).min(cap.num_milliseconds() as f64);
        assert!(delay <= cap, "capped: {delay}");
        assert!(
            delay.num_milliseconds() as f64 >= (base * 0.5).floor(),
            "failure {failure}: {delay} vs {base}"
        );
        delays.push(delay);
        hand.now = retry_at;
        let effects = hand.feed(Input::Timeout);
        assert!(effects.contains(&Effect::ConnectListener));
    }
    assert!(delays[0] < Duration::milliseconds(200));
    assert!(delays[7] >= cap / 2);
    // A connection that comes up resets the backoff and looks for missed jobs.
    let effects = hand.feed(Input::ListenerUp);
    assert!(events(&effects).contains(&Event::ListenerUp));
    let effects = hand.feed(Input::ListenerDown { error: "lost".into() });
    let delay = events(&effects)
        .into_iter()
        .find_map(|e| match e {
            Event::ListenerDown { retry_at, .. } => Some(retry_at - hand.now),
            _ => None,
        })
        .expect("event");
    assert!(delay < Duration::milliseconds(200), "reset after success: {delay}");
}

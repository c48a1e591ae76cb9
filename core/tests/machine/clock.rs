//! The machine's clock.

use super::*;

#[test]
fn the_clock_never_goes_back() {
    let (mut hand, _) = Hand::started(config());
    hand.now = t0() + Duration::seconds(10);
    hand.feed(Input::Timeout);
    hand.now = t0() - Duration::hours(1);
    hand.feed(Input::Timeout);
    assert_eq!(hand.machine.now(), t0() + Duration::seconds(10));
}

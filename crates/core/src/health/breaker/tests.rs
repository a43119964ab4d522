use super::*;

fn config() -> BreakerConfig {
    BreakerConfig {
        consecutive_failures: 3,
        failure_rate: 0.5,
        window: 8,
        min_calls: 4,
        cool_down: Duration::from_secs(10),
    }
}

#[test]
fn consecutive_failures_open_it_and_a_success_resets_the_count() {
    // The rate rule out of the way: only the run of failures is judged.
    let c = BreakerConfig {
        min_calls: 64,
        window: 64,
        ..config()
    };
    let t = Instant::now();
    let mut b = Breaker::default();
    assert!(!b.record(false, false, t, &c));
    assert!(!b.record(false, false, t, &c));
    assert!(!b.record(true, false, t, &c), "a success breaks the run");
    assert_eq!(b.consecutive_failures(), 0);
    assert!(!b.record(false, false, t, &c));
    assert!(!b.record(false, false, t, &c));
    assert_eq!(b.state(t, &c), BreakerState::Closed);
    assert!(b.record(false, false, t, &c), "the third in a row opens it");
    assert_eq!(b.state(t, &c), BreakerState::Open);
    assert_eq!(b.admit(t, &c), Admission::Refuse);
}

#[test]
fn a_failure_rate_over_the_window_opens_it() {
    let (c, t) = (config(), Instant::now());
    let mut b = Breaker::default();
    // Alternating: never three in a row, but half of the window fails.
    for (n, success) in [true, false, true].into_iter().enumerate() {
        assert!(!b.record(success, false, t, &c), "{n}: below min_calls");
    }
    assert!(b.record(false, false, t, &c), "4 calls, 2 failed: 50%");
    // Old outcomes leave the window: 8 successes then 3 failures in 8 is 37.5%.
    let mut b = Breaker::default();
    for _ in 0..8 {
        b.record(true, false, t, &c);
    }
    b.record(false, false, t, &c);
    b.record(true, false, t, &c);
    b.record(false, false, t, &c);
    b.record(true, false, t, &c);
    assert_eq!(b.state(t, &c), BreakerState::Closed, "2 of 8 failed");
    b.record(false, false, t, &c);
    assert_eq!(b.state(t, &c), BreakerState::Closed, "3 of 8 failed");
    b.record(false, false, t, &c);
    assert_eq!(b.state(t, &c), BreakerState::Open, "4 of 8 failed");
}

#[test]
fn after_the_cool_down_one_trial_decides() {
    let (c, t) = (config(), Instant::now());
    let mut b = Breaker::default();
    for _ in 0..3 {
        b.record(false, false, t, &c);
    }
    let early = t + Duration::from_secs(9);
    assert_eq!(b.admit(early, &c), Admission::Refuse, "still cooling down");
    let later = t + c.cool_down;
    assert_eq!(b.state(later, &c), BreakerState::HalfOpen);
    assert_eq!(b.admit(later, &c), Admission::Trial);
    assert_eq!(b.admit(later, &c), Admission::Refuse, "one trial at a time");
    // A call admitted before the breaker opened reports late: ignored.
    assert!(!b.record(true, false, later, &c));
    assert_eq!(b.state(later, &c), BreakerState::HalfOpen);
    // The trial fails: open again, for a whole new cool-down.
    assert!(b.record(false, true, later, &c));
    assert_eq!(
        b.admit(later + Duration::from_secs(9), &c),
        Admission::Refuse
    );
    let again = later + c.cool_down;
    assert_eq!(b.admit(again, &c), Admission::Trial);
    assert!(b.record(true, true, again, &c));
    assert_eq!(b.state(again, &c), BreakerState::Closed);
    assert_eq!(b.consecutive_failures(), 0);
    assert_eq!(b.admit(again, &c), Admission::Pass);
}

#[test]
fn a_restart_lets_the_next_call_try_the_new_process() {
    let (c, t) = (config(), Instant::now());
    let mut b = Breaker::default();
    for _ in 0..3 {
        b.record(false, false, t, &c);
    }
    assert_eq!(b.failures(), 3);
    let soon = t + Duration::from_secs(4);
    assert_eq!(b.retry_in(soon, &c), Some(Duration::from_secs(6)));
    assert!(b.restarted(), "open to half-open is a change");
    assert_eq!(b.state(soon, &c), BreakerState::HalfOpen);
    assert_eq!(
        b.admit(soon, &c),
        Admission::Trial,
        "no cool-down to wait out"
    );
    assert!(b.record(true, true, soon, &c));
    assert_eq!(b.state(soon, &c), BreakerState::Closed);
    // A closed breaker keeps its count across restarts: crash, restart, crash… opens it.
    let mut b = Breaker::default();
    b.record(false, false, t, &c);
    assert!(!b.restarted());
    assert_eq!(b.consecutive_failures(), 1);
    b.record(false, false, t, &c);
    assert!(!b.restarted());
    assert!(b.record(false, false, t, &c), "the third crash opens it");
}

#[test]
fn an_abandoned_trial_lets_the_next_call_try() {
    let (c, t) = (config(), Instant::now());
    let mut b = Breaker::default();
    for _ in 0..3 {
        b.record(false, false, t, &c);
    }
    let later = t + c.cool_down;
    assert_eq!(b.admit(later, &c), Admission::Trial);
    b.trial_abandoned();
    assert_eq!(b.admit(later, &c), Admission::Trial);
}

#[test]
fn the_probe_counts_while_closed_and_is_the_trial_after_the_cool_down() {
    let (c, t) = (config(), Instant::now());
    let mut b = Breaker::default();
    for _ in 0..3 {
        b.probe(false, t, &c);
    }
    assert_eq!(b.state(t, &c), BreakerState::Open);
    // Before the cool-down a good probe changes nothing.
    assert!(!b.probe(true, t + Duration::from_secs(1), &c));
    assert_eq!(b.state(t, &c), BreakerState::Open);
    // After it, a failed probe opens it again; a good one closes it.
    let later = t + c.cool_down;
    assert!(b.probe(false, later, &c));
    assert_eq!(b.state(later, &c), BreakerState::Open);
    let again = later + c.cool_down;
    assert!(b.probe(true, again, &c));
    assert_eq!(b.state(again, &c), BreakerState::Closed);
    // While a call is out as the trial, the probe leaves the decision to it.
    for _ in 0..3 {
        b.record(false, false, again, &c);
    }
    let third = again + c.cool_down;
    assert_eq!(b.admit(third, &c), Admission::Trial);
    assert!(!b.probe(true, third, &c));
    assert_eq!(b.admit(third, &c), Admission::Refuse);
}

#[test]
fn a_trip_opens_a_closed_breaker_at_once_and_leaves_an_open_one() {
    let (c, t) = (config(), Instant::now());
    let mut b = Breaker::default();
    assert!(b.trip(t), "closed to open is a change");
    assert_eq!(b.state(t, &c), BreakerState::Open);
    assert_eq!(b.consecutive_failures(), 1);
    assert!(!b.trip(t + Duration::from_secs(1)), "already open");
    // The cool-down still counts from the trip: a later trip does not extend it.
    let later = t + c.cool_down;
    assert_eq!(b.state(later, &c), BreakerState::HalfOpen);
    assert!(b.probe(true, later, &c), "the trial closes it");
    assert_eq!(b.state(later, &c), BreakerState::Closed);
}

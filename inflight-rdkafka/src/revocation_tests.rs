//! Every transition of the hand-off's protocol, fed directly: no consumer,
//! a clock of the test's own.

use super::*;

fn tp(p: i32) -> TopicPartition {
    TopicPartition::new("t", p)
}

const BOUND: Duration = Duration::from_secs(5);

fn found(drained: bool) -> Revoked {
    Revoked {
        lost: false,
        drained,
        closing: false,
    }
}

/// A look by a poll or a `commit_progress`: it never waits.
fn poll(drained: bool) -> Look {
    Look {
        drained,
        closed: false,
        closing: false,
        can_wait: false,
    }
}

/// Drives a revocation from its hand-over to the end; returns the actions
/// on the way.
fn finish(hand_off: &mut HandOff) -> Vec<Action> {
    let mut actions = hand_off.handed_over();
    actions.extend(hand_off.let_go());
    actions
}

#[test]
fn by_default_the_hand_off_waits_in_the_callback_then_hands_over_and_lets_go() {
    let mut hand_off = HandOff::new(BOUND, false);
    let now = Instant::now();
    let actions = hand_off.revoked(vec![tp(0)], found(false), now);
    assert_eq!(
        actions,
        [Action::Wait {
            deadline: now + BOUND
        }]
    );
    // The wait's looks: not drained yet, then drained.
    let step = Look {
        can_wait: true,
        ..poll(false)
    };
    assert_eq!(
        hand_off.look(step, now),
        [Action::Wait {
            deadline: now + BOUND
        }]
    );
    let done = Look {
        drained: true,
        ..step
    };
    assert_eq!(
        hand_off.look(done, now),
        [Action::HandOver {
            partitions: vec![tp(0)],
            commit: true
        }]
    );
    assert_eq!(
        finish(&mut hand_off),
        [
            Action::LetGo(vec![tp(0)]),
            Action::PostRebalance(vec![tp(0)])
        ],
        "nothing paused: nothing resumed"
    );
    assert_eq!(*hand_off.state(), State::Assigned);
}

#[test]
fn a_deferred_hand_off_pauses_and_a_look_finishes_it_once_drained() {
    let mut hand_off = HandOff::new(BOUND, true);
    let now = Instant::now();
    assert_eq!(
        hand_off.revoked(vec![tp(0), tp(1)], found(false), now),
        [Action::Pause(vec![tp(0), tp(1)])]
    );
    assert!(hand_off.paused(Ok(())).is_empty());
    assert_eq!(hand_off.partitions(), [tp(0), tp(1)]);
    // Polls look without waiting.
    assert!(hand_off.look(poll(false), now).is_empty());
    let later = now + BOUND / 2;
    assert_eq!(
        hand_off.look(poll(true), later),
        [Action::HandOver {
            partitions: vec![tp(0), tp(1)],
            commit: true
        }]
    );
    // A second driver's look gets nothing: the hand-over is given once.
    assert!(hand_off.look(poll(true), later).is_empty());
    assert_eq!(
        finish(&mut hand_off),
        [
            Action::Resume(vec![tp(0), tp(1)]),
            Action::LetGo(vec![tp(0), tp(1)]),
            Action::PostRebalance(vec![tp(0), tp(1)])
        ]
    );
}

#[test]
fn the_bound_passing_hands_over_what_was_done_and_reports_the_rest() {
    let mut hand_off = HandOff::new(BOUND, true);
    let now = Instant::now();
    hand_off.revoked(vec![tp(0)], found(false), now);
    hand_off.paused(Ok(()));
    let actions = hand_off.look(poll(false), now + BOUND);
    // The driver reports the records the hand-over released (it counts
    // them).
    assert_eq!(
        actions[0],
        Action::HandOver {
            partitions: vec![tp(0)],
            commit: true
        }
    );
}

#[test]
fn nothing_to_wait_for_or_a_closing_consumer_runs_the_hand_off_in_the_callback() {
    for found in [
        found(true),
        Revoked {
            closing: true,
            ..found(false)
        },
    ] {
        let mut hand_off = HandOff::new(BOUND, true);
        let now = Instant::now();
        assert_eq!(
            hand_off.revoked(vec![tp(0)], found, now),
            [Action::Wait {
                deadline: now + BOUND
            }],
            "{found:?}"
        );
    }
}

#[test]
fn a_failed_pause_runs_the_hand_off_in_the_callback() {
    let mut hand_off = HandOff::new(BOUND, true);
    let now = Instant::now();
    hand_off.revoked(vec![tp(0)], found(false), now);
    let actions = hand_off.paused(Err("no".into()));
    assert!(matches!(&actions[0], Action::Report(e) if e.contains("pausing")));
    assert_eq!(
        actions[1],
        Action::Wait {
            deadline: now + BOUND
        }
    );
    hand_off.look(poll(true), now);
    assert_eq!(
        finish(&mut hand_off)[0],
        Action::LetGo(vec![tp(0)]),
        "not paused: nothing to resume"
    );
}

#[test]
fn a_lost_assignment_is_released_without_a_commit_and_let_go() {
    let mut hand_off = HandOff::new(BOUND, true);
    let lost = Revoked {
        lost: true,
        ..found(false)
    };
    let actions = hand_off.revoked(vec![tp(0)], lost, Instant::now());
    assert!(matches!(&actions[0], Action::Report(e) if e.starts_with("assignment lost")));
    assert_eq!(
        actions[1],
        Action::HandOver {
            partitions: vec![tp(0)],
            commit: false
        }
    );
    assert_eq!(
        finish(&mut hand_off),
        [
            Action::LetGo(vec![tp(0)]),
            Action::PostRebalance(vec![tp(0)])
        ]
    );
}

/// Finding 4: a consumer that closes while a deferred hand-off waits (its
/// `Drop`, a panic's unwinding) commits what was done at once, while its
/// group still answers, then waits within the bound; a group that ended
/// meanwhile gets no request: the records are released, nothing let go.
#[test]
fn a_closing_consumer_commits_what_was_done_then_waits_within_the_bound() {
    let mut hand_off = HandOff::new(BOUND, true);
    let now = Instant::now();
    hand_off.revoked(vec![tp(0)], found(false), now);
    hand_off.paused(Ok(()));
    let closing = Look {
        closing: true,
        can_wait: true,
        ..poll(false)
    };
    assert_eq!(
        hand_off.look(closing, now),
        [
            Action::Commit,
            Action::Wait {
                deadline: now + BOUND
            }
        ]
    );
    // Committed once.
    assert_eq!(
        hand_off.look(closing, now),
        [Action::Wait {
            deadline: now + BOUND
        }]
    );
    let closed = Look {
        closed: true,
        ..closing
    };
    let actions = hand_off.look(closed, now);
    assert!(matches!(&actions[0], Action::Report(e) if e.contains("closed first")));
    assert_eq!(
        actions[1],
        Action::HandOver {
            partitions: vec![tp(0)],
            commit: false
        }
    );
    assert_eq!(
        hand_off.handed_over(),
        [Action::PostRebalance(vec![tp(0)])],
        "no resume, no unassign: the group ended"
    );
    assert_eq!(*hand_off.state(), State::Assigned);
}

/// Finding 4, the bound: a closing consumer's wait ends at the deadline.
#[test]
fn a_closing_consumers_wait_ends_at_the_bound() {
    let mut hand_off = HandOff::new(BOUND, true);
    let now = Instant::now();
    hand_off.revoked(vec![tp(0)], found(false), now);
    hand_off.paused(Ok(()));
    let closing = Look {
        closing: true,
        can_wait: true,
        ..poll(false)
    };
    hand_off.look(closing, now);
    let actions = hand_off.look(closing, now + BOUND);
    assert_eq!(
        actions.last(),
        Some(&Action::HandOver {
            partitions: vec![tp(0)],
            commit: true
        })
    );
}

/// Finding 3: the protocol never asks for a wait that could take the
/// tracker's interrupt: its only wait is `Wait`, a look now and then.
#[test]
fn finishing_a_deferred_hand_off_is_a_wait_of_looks() {
    let mut hand_off = HandOff::new(BOUND, true);
    let now = Instant::now();
    assert!(hand_off.finish().is_empty(), "none in progress");
    hand_off.revoked(vec![tp(0)], found(false), now);
    assert_eq!(
        hand_off.finish(),
        [Action::Wait {
            deadline: now + BOUND
        }]
    );
}

#[test]
fn results_out_of_turn_change_nothing() {
    let mut hand_off = HandOff::new(BOUND, true);
    assert!(hand_off.paused(Ok(())).is_empty());
    assert!(hand_off.look(poll(true), Instant::now()).is_empty());
    assert!(hand_off.handed_over().is_empty());
    assert!(hand_off.let_go().is_empty());
    assert_eq!(*hand_off.state(), State::Assigned);
}

#[test]
fn a_revocation_during_a_hand_off_is_reported_and_handed_off_too() {
    let mut hand_off = HandOff::new(BOUND, true);
    let now = Instant::now();
    hand_off.revoked(vec![tp(0)], found(false), now);
    hand_off.paused(Ok(()));
    let actions = hand_off.revoked(vec![tp(1)], found(false), now);
    assert!(matches!(&actions[0], Action::Report(e) if e.contains("still being handed off")));
    assert_eq!(hand_off.partitions(), [tp(0), tp(1)]);
}

/// Review finding 1 (A): a drain timeout past what an `Instant` holds
/// saturates to a far deadline; no panic in rdkafka's callback.
#[test]
fn a_drain_timeout_of_duration_max_saturates() {
    for defer in [false, true] {
        let mut hand_off = HandOff::new(Duration::MAX, defer);
        let now = Instant::now();
        let actions = hand_off.revoked(vec![tp(0)], found(false), now);
        assert_eq!(actions.len(), 1, "{actions:?}");
        hand_off.paused(Ok(()));
        assert!(hand_off.look(poll(false), now + BOUND).is_empty());
        assert!(matches!(
            hand_off.look(poll(true), now)[..],
            [Action::HandOver { .. }]
        ));
    }
}

/// Review finding 2: until its driver says the pause landed, no look
/// hands over (a committer's look could otherwise let the partitions go
/// before the pause, which librdkafka keeps across a re-assignment: never
/// fetched again); a waiting look waits on.
#[test]
fn no_look_hands_over_before_the_pause_landed() {
    let mut hand_off = HandOff::new(BOUND, true);
    let now = Instant::now();
    hand_off.revoked(vec![tp(0)], found(false), now);
    let closed = Look {
        closed: true,
        ..poll(true)
    };
    assert!(hand_off.look(poll(true), now + BOUND).is_empty());
    assert!(hand_off.look(closed, now + BOUND).is_empty());
    let waits = Look {
        can_wait: true,
        ..poll(true)
    };
    assert_eq!(
        hand_off.look(waits, now),
        [Action::Wait {
            deadline: now + BOUND
        }]
    );
    assert!(hand_off.paused(Ok(())).is_empty());
    assert!(hand_off.paused(Ok(())).is_empty(), "once");
    assert!(matches!(
        hand_off.look(poll(true), now)[..],
        [Action::HandOver { .. }]
    ));
    assert_eq!(finish(&mut hand_off)[0], Action::Resume(vec![tp(0)]));
}

/// Review finding 2: a revocation that comes while another driver lets
/// the last one go (between its unassign and its `let_go`) is queued, not
/// written over it; the handle stays for it, and the end of the first
/// starts it.
#[test]
fn a_revocation_while_one_is_let_go_is_queued_and_keeps_the_handle() {
    let mut hand_off = HandOff::new(BOUND, true);
    let now = Instant::now();
    hand_off.revoked(vec![tp(0)], found(false), now);
    hand_off.hold(Some(crate::drive::Handle::unused()));
    hand_off.paused(Ok(()));
    hand_off.look(poll(true), now);
    assert_eq!(
        hand_off.handed_over(),
        [Action::Resume(vec![tp(0)]), Action::LetGo(vec![tp(0)])]
    );
    // The next revocation, before this driver's `let_go`.
    let actions = hand_off.revoked(vec![tp(1)], found(false), now);
    assert!(matches!(&actions[..], [Action::Report(e)] if e.contains("handed off next")));
    hand_off.hold(Some(crate::drive::Handle::unused()));
    assert!(hand_off.revokes(&tp(0)) && hand_off.revokes(&tp(1)));
    assert_eq!(
        hand_off.let_go(),
        [
            Action::PostRebalance(vec![tp(0)]),
            Action::Pause(vec![tp(1)])
        ]
    );
    assert!(hand_off.handle().is_some(), "kept for the queued one");
    assert_eq!(hand_off.partitions(), [tp(1)]);
    hand_off.paused(Ok(()));
    hand_off.look(poll(true), now);
    finish(&mut hand_off);
    assert_eq!(*hand_off.state(), State::Assigned);
    assert!(hand_off.handle().is_none(), "cleared by the end");
}

/// Review finding 2: a revocation while another driver hands over is
/// queued too (the hand-over's state is not overwritten).
#[test]
fn a_revocation_while_one_is_handed_over_is_queued() {
    let mut hand_off = HandOff::new(BOUND, false);
    let now = Instant::now();
    hand_off.revoked(vec![tp(0)], found(true), now);
    hand_off.look(poll(true), now);
    hand_off.revoked(vec![tp(1)], found(true), now);
    assert_eq!(
        hand_off.handed_over(),
        [Action::LetGo(vec![tp(0)])],
        "the first hand-over goes on"
    );
    assert_eq!(
        hand_off.let_go(),
        [
            Action::PostRebalance(vec![tp(0)]),
            Action::Wait {
                deadline: now + BOUND
            }
        ]
    );
    assert_eq!(hand_off.partitions(), [tp(1)]);
}

/// Review finding 3: a lost revocation merged into a paused deferred one
/// keeps the pause, and lifts it before letting the partitions go.
#[test]
fn a_lost_revocation_merged_into_a_paused_one_resumes() {
    let mut hand_off = HandOff::new(BOUND, true);
    let now = Instant::now();
    hand_off.revoked(vec![tp(0)], found(false), now);
    hand_off.paused(Ok(()));
    let lost = Revoked {
        lost: true,
        ..found(false)
    };
    hand_off.revoked(vec![tp(0)], lost, now);
    assert_eq!(
        hand_off.handed_over(),
        [Action::Resume(vec![tp(0)]), Action::LetGo(vec![tp(0)])]
    );
}

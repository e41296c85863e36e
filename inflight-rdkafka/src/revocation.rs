//! The hand-off's protocol, as states and transitions: what a revocation
//! goes through from rdkafka's callback to the partitions let go, with no
//! rdkafka call and no clock in it (the time comes in as `now`).
//!
//! ```text
//!              revoked (lost)                         revoked (waits: deferred)
//!   Assigned ───────────────────────┐   Assigned ──────────────► Revoking{paused}
//!      │ revoked (in the callback)  │                                 │ look: drained, or
//!      ▼                            │                                 │ the deadline passed,
//!   Revoking{not paused} ─ look ──► HandingOver{commit?} ◄────────────┘ or the consumer closed
//!                                   │ handed over
//!                                   ▼
//!                          LettingGo  (resume if paused, unassign; none once closed)
//!                                   │ let go
//!                                   ▼
//!                          Assigned  (your post_rebalance)
//! ```
//!
//! The driver ([`HandOffContext`](crate::HandOffContext)) feeds it events
//! (a revocation from rdkafka's callback, a look at the revoked
//! partitions from a poll, a `commit_progress`, a `continue_hand_off` or
//! a wait's step, the result of each action) and carries out the actions
//! it answers with, in order: pause, wait, hand over (the final commit,
//! the revoke on the tracker and the end of the partitions' lives, as one
//! step of [`Commits`](crate::Commits)), resume, let go, run your
//! `post_rebalance`, report an error. An action is answered once: two
//! drivers (the polling thread and a committer) never both carry one out.
//!
//! What it never does, each pinned by a test below: wait by taking the
//! tracker's interrupt (a wait is a look now and then, which takes none);
//! leave a revocation that nothing will finish (a look from each poll,
//! the close's included, finishes it within its bound); commit without
//! the points still on their way (the hand-over carries every point not
//! confirmed).

use crate::consumer::TopicPartition;
use crate::drive::Handle;
use std::time::{Duration, Instant};

/// How far a deadline goes when `now + timeout` does not fit in an
/// [`Instant`] (a `Duration::MAX` timeout): a hundred years.
const FAR: Duration = Duration::from_secs(100 * 365 * 24 * 60 * 60);

/// `now + timeout`, saturated to a far future where that does not fit in
/// an [`Instant`] (no timeout may panic: a panic in rdkafka's callback
/// would leave a revocation nobody lets go).
pub(crate) fn deadline_after(now: Instant, timeout: Duration) -> Instant {
    now.checked_add(timeout)
        .or_else(|| now.checked_add(FAR))
        .unwrap_or(now)
}

/// Where the hand-off is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum State {
    /// No revocation in progress: the assigned partitions flow.
    Assigned,
    /// Revoked partitions wait for their records until `deadline`:
    /// `paused` (deferred: rdkafka's callback returned, and each look
    /// finishes it once it can) or in rdkafka's callback, which waits.
    Revoking {
        partitions: Vec<TopicPartition>,
        deadline: Instant,
        paused: bool,
        /// The pause was asked for and its driver has not said how it went
        /// ([`HandOff::paused`]): no look hands over meanwhile, so the
        /// pause never lands after the partitions were let go (librdkafka
        /// keeps an application pause across a re-assignment).
        pausing: bool,
        /// The consumer began to close while it waited, and what was done
        /// so far was committed then (the group may end before the bound
        /// passes).
        secured: bool,
    },
    /// One driver makes the final commit (none for a lost assignment or a
    /// `closed` consumer) and revokes the partitions.
    HandingOver {
        partitions: Vec<TopicPartition>,
        paused: bool,
        closed: bool,
        /// The revocation's drain bound: a refused final commit is made
        /// again until then (see [`HandOff::commit_deadline`]).
        deadline: Instant,
    },
    /// One driver lets the partitions go.
    LettingGo { partitions: Vec<TopicPartition> },
}

/// What the driver does next.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Action {
    /// Pause the partitions, then say how that went ([`HandOff::paused`]).
    Pause(Vec<TopicPartition>),
    /// Commit what was done so far (synchronous), the partitions still
    /// owned: the consumer is closing, and its group may end before the
    /// hand-over.
    Commit,
    /// Wait a little (not past `deadline`) and look again
    /// ([`HandOff::look`]): the hand-off runs where the driver is.
    Wait { deadline: Instant },
    /// The final commit (if `commit`), then the revoke of each partition
    /// on the tracker and the end of their lives; then
    /// [`HandOff::handed_over`].
    HandOver {
        partitions: Vec<TopicPartition>,
        commit: bool,
    },
    /// Lift the pause of the partitions (an application pause outlives the
    /// assignment).
    Resume(Vec<TopicPartition>),
    /// Let the partitions go (the protocol's unassign), then
    /// [`HandOff::let_go`].
    LetGo(Vec<TopicPartition>),
    /// Run your `post_rebalance` for the revocation.
    PostRebalance(Vec<TopicPartition>),
    /// Keep this in the context's errors.
    Report(String),
}

/// What rdkafka's revocation callback found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Revoked {
    /// The assignment was lost (another member owns it already).
    pub(crate) lost: bool,
    /// Every record of the partitions is resolved already.
    pub(crate) drained: bool,
    /// The consumer is closing or unsubscribing: nobody would look again.
    pub(crate) closing: bool,
}

/// A look at the revoked partitions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Look {
    /// Every record of the partitions is resolved.
    pub(crate) drained: bool,
    /// The consumer's group has terminated: it answers no request.
    pub(crate) closed: bool,
    /// The consumer is closing or unsubscribing (its subscription is
    /// empty): its group may end at any time.
    pub(crate) closing: bool,
    /// The one who looks may wait (rdkafka's callback, `finish_hand_off`).
    pub(crate) can_wait: bool,
}

/// A revocation that came while another was being handed over: it is
/// handed off once that one ends.
#[derive(Debug)]
struct Queued {
    partitions: Vec<TopicPartition>,
    found: Revoked,
    at: Instant,
}

/// The hand-off's protocol (see the module docs).
#[derive(Debug)]
pub(crate) struct HandOff {
    state: State,
    drain_timeout: Duration,
    defer: bool,
    /// A revocation to hand off once the one in progress ends (never
    /// overwrites it).
    queued: Option<Queued>,
    /// The consumer's handle for the poll hook, held exactly while a
    /// hand-off is in progress: set and cleared by the transitions, under
    /// the same lock (a late clear never wipes a newer revocation's).
    handle: Option<Handle>,
}

impl HandOff {
    /// Nothing revoked; each revocation waits at most `drain_timeout` for
    /// its records, outside rdkafka's callback if `defer`.
    pub(crate) fn new(drain_timeout: Duration, defer: bool) -> Self {
        Self {
            state: State::Assigned,
            drain_timeout,
            defer,
            queued: None,
            handle: None,
        }
    }

    /// Keeps the consumer's `handle` for the poll hook while a hand-off is
    /// in progress (none kept otherwise: it is cleared when it ends).
    pub(crate) fn hold(&mut self, handle: Option<Handle>) {
        if self.state != State::Assigned && handle.is_some() {
            self.handle = handle;
        }
    }

    /// The consumer's handle, while a hand-off is in progress.
    pub(crate) fn handle(&self) -> Option<Handle> {
        self.handle
    }

    /// Whether `partition` was revoked and is not let go yet: in the
    /// hand-off in progress or in the one queued behind it.
    pub(crate) fn revokes(&self, partition: &TopicPartition) -> bool {
        self.partitions().contains(partition)
            || self
                .queued
                .as_ref()
                .is_some_and(|queued| queued.partitions.contains(partition))
    }

    /// Every partition revoked and not let go yet (see
    /// [`revokes`](Self::revokes)).
    pub(crate) fn all_revoked(&self) -> Vec<TopicPartition> {
        let mut all = self.partitions().to_vec();
        if let Some(queued) = &self.queued {
            all.extend(queued.partitions.iter().cloned());
        }
        all
    }

    pub(crate) fn state(&self) -> &State {
        &self.state
    }

    /// While a hand-over is to be made: until when a refused final commit
    /// is made again (the revocation's drain bound).
    pub(crate) fn commit_deadline(&self) -> Option<Instant> {
        match &self.state {
            State::HandingOver { deadline, .. } => Some(*deadline),
            _ => None,
        }
    }

    /// Whether it defers the drain out of rdkafka's callback.
    pub(crate) fn defers(&self) -> bool {
        self.defer
    }

    /// The partitions whose hand-off is in progress (none when assigned).
    pub(crate) fn partitions(&self) -> &[TopicPartition] {
        match &self.state {
            State::Assigned => &[],
            State::Revoking { partitions, .. }
            | State::HandingOver { partitions, .. }
            | State::LettingGo { partitions } => partitions,
        }
    }

    /// rdkafka revoked `partitions` (its callback).
    pub(crate) fn revoked(
        &mut self,
        partitions: Vec<TopicPartition>,
        found: Revoked,
        now: Instant,
    ) -> Vec<Action> {
        let mut actions = Vec::new();
        let mut partitions = partitions;
        let mut deadline = deadline_after(now, self.drain_timeout);
        let mut was_paused = false;
        match &self.state {
            State::Assigned => {}
            State::Revoking {
                partitions: waiting,
                deadline: first,
                paused,
                pausing: false,
                ..
            } => {
                // rdkafka revokes again before the last was let go (it
                // does not, as it waits for the unassign): say so, and
                // hand those off with these, the pause kept.
                actions.push(Action::Report(format!(
                    "revoked {partitions:?} while {waiting:?} were still being handed off"
                )));
                let fresh: Vec<_> = partitions
                    .into_iter()
                    .filter(|p| !waiting.contains(p))
                    .collect();
                partitions = waiting.iter().cloned().chain(fresh).collect();
                deadline = deadline.min(*first);
                was_paused = *paused;
            }
            _ => {
                // Being paused, handed over or let go by another driver
                // (the next revocation may come between a driver's
                // unassign and its `let_go`): never overwritten, these
                // are handed off once it ends.
                actions.push(Action::Report(format!(
                    "revoked {partitions:?} while {:?} were still being handed off: handed off \
                     next",
                    self.partitions()
                )));
                match &mut self.queued {
                    Some(queued) => {
                        for partition in partitions {
                            if !queued.partitions.contains(&partition) {
                                queued.partitions.push(partition);
                            }
                        }
                        queued.found.lost |= found.lost;
                        queued.found.drained &= found.drained;
                        queued.found.closing |= found.closing;
                    }
                    None => {
                        self.queued = Some(Queued {
                            partitions,
                            found,
                            at: now,
                        });
                    }
                }
                return actions;
            }
        }
        if found.lost {
            actions.push(Action::Report(format!(
                "assignment lost: {partitions:?} released without a commit"
            )));
            self.state = State::HandingOver {
                partitions: partitions.clone(),
                paused: was_paused,
                closed: false,
                deadline: now, // no commit
            };
            actions.push(Action::HandOver {
                partitions,
                commit: false,
            });
            return actions;
        }
        if self.defer && !found.drained && !found.closing {
            actions.push(Action::Pause(partitions.clone()));
            self.state = State::Revoking {
                partitions,
                deadline,
                paused: true,
                pausing: true,
                secured: false,
            };
            return actions;
        }
        self.state = State::Revoking {
            partitions,
            deadline,
            paused: was_paused,
            pausing: false,
            secured: false,
        };
        actions.push(Action::Wait { deadline });
        actions
    }

    /// The pause of a deferred revocation went (`Ok`) or not: then the
    /// hand-off runs in the callback, as by default. Until this, no look
    /// hands over.
    pub(crate) fn paused(&mut self, result: Result<(), String>) -> Vec<Action> {
        let State::Revoking {
            partitions,
            deadline,
            paused,
            pausing,
            ..
        } = &mut self.state
        else {
            return Vec::new();
        };
        if !*pausing {
            return Vec::new(); // out of turn
        }
        *pausing = false;
        match result {
            Ok(()) => Vec::new(),
            Err(e) => {
                *paused = false;
                vec![
                    Action::Report(format!("pausing the revoked {partitions:?}: {e}")),
                    Action::Wait {
                        deadline: *deadline,
                    },
                ]
            }
        }
    }

    /// A look at the revoked partitions: once their records are resolved,
    /// the bound has passed or the consumer closed, the hand-over (one
    /// look gets it); else a wait if the one who looks may wait, after a
    /// commit of what was done if the consumer began to close.
    pub(crate) fn look(&mut self, look: Look, now: Instant) -> Vec<Action> {
        let State::Revoking {
            partitions,
            deadline,
            paused,
            pausing,
            secured,
        } = &mut self.state
        else {
            return Vec::new();
        };
        if *pausing {
            // The pause has not landed: handing over now could let the
            // partitions go before it does, and they would stay paused.
            return if look.can_wait {
                vec![Action::Wait {
                    deadline: *deadline,
                }]
            } else {
                Vec::new()
            };
        }
        let timed_out = now >= *deadline;
        if !look.drained && !timed_out && !look.closed {
            let mut actions = Vec::new();
            if look.closing && !*secured {
                *secured = true;
                actions.push(Action::Commit);
            }
            if look.can_wait {
                actions.push(Action::Wait {
                    deadline: *deadline,
                });
            }
            return actions;
        }
        let (partitions, paused, deadline) = (partitions.clone(), *paused, *deadline);
        let mut actions = Vec::new();
        if look.closed {
            actions.push(Action::Report(format!(
                "final commit: the consumer closed first; {partitions:?} released without it"
            )));
        }
        // Records the bound left in flight: the driver reports how many
        // the hand-over released (it alone can count them).
        actions.push(Action::HandOver {
            partitions: partitions.clone(),
            commit: !look.closed,
        });
        self.state = State::HandingOver {
            partitions,
            paused,
            closed: look.closed,
            deadline,
        };
        actions
    }

    /// The hand-over was made (its errors reported by the driver): the
    /// partitions go, their pause lifted first.
    pub(crate) fn handed_over(&mut self) -> Vec<Action> {
        let State::HandingOver {
            partitions,
            paused,
            closed,
            ..
        } = &self.state
        else {
            return Vec::new();
        };
        let (partitions, paused, closed) = (partitions.clone(), *paused, *closed);
        if closed {
            // The group terminated: it let the partitions go itself, and
            // a request would wait for ever.
            return self.ended(partitions);
        }
        let mut actions = Vec::new();
        if paused {
            actions.push(Action::Resume(partitions.clone()));
        }
        actions.push(Action::LetGo(partitions.clone()));
        self.state = State::LettingGo { partitions };
        actions
    }

    /// The partitions were let go: the revocation is over.
    pub(crate) fn let_go(&mut self) -> Vec<Action> {
        let State::LettingGo { partitions } = &self.state else {
            return Vec::new();
        };
        let partitions = partitions.clone();
        self.ended(partitions)
    }

    /// The revocation of `partitions` is over: your `post_rebalance`, then
    /// the revocation queued behind it, if any (else the handle goes).
    fn ended(&mut self, partitions: Vec<TopicPartition>) -> Vec<Action> {
        self.state = State::Assigned;
        let mut actions = vec![Action::PostRebalance(partitions)];
        match self.queued.take() {
            Some(queued) => {
                actions.extend(self.revoked(queued.partitions, queued.found, queued.at))
            }
            None => self.handle = None,
        }
        actions
    }

    /// The next look must finish the hand-off where it is (an assignment
    /// arrives, `finish_hand_off`): a wait, if one waits.
    pub(crate) fn finish(&self) -> Vec<Action> {
        match &self.state {
            State::Revoking { deadline, .. } => vec![Action::Wait {
                deadline: *deadline,
            }],
            _ => Vec::new(),
        }
    }
}

#[cfg(test)]
#[path = "revocation_tests.rs"]
mod tests;

//! Running one test body in several tracker modes. A mode is a type, so a
//! body is compiled once per mode: `each_mode!` expands it for each tracker
//! given, with `$tracker` bound to that tracker, and with [`Modal`] in
//! scope so that a body may call `committable` on any of them (a barrier
//! tracker has no such call; here it answers empty, as the body expects).

#![allow(dead_code)] // each test file uses a different part

use inflight::mode::{Barrier, Inline};
use inflight::{Committable, Tracker};
use std::collections::HashMap;
use std::hash::Hash;

/// `each_mode!(tracker = [Tracker::new(), Tracker::builder().watermarks().build()] { body })`
/// runs `body` once for each tracker, in order.
macro_rules! each_mode {
    ($tracker:pat = [$($make:expr),+ $(,)?] $body:block) => {
        $({
            #[allow(unused_imports)]
            use $crate::modes::Modal as _;
            let $tracker = $make;
            $body
        })+
    };
}

/// Runs `$body` with `$tracker` bound to a fresh tracker of each of the
/// five kinds (barrier, watermarks, progress with a budget of 64, and the
/// barrier and watermark trackers with offsets inline); the body's sends
/// fix the partition and offset types, which must be integers.
#[allow(unused_macros)] // not every test file uses it
macro_rules! every_kind {
    ($tracker:pat => $body:block) => {
        each_mode!($tracker = [
            Tracker::new(),
            Tracker::builder().watermarks().build(),
            Tracker::builder().progress(64).build(),
            Tracker::builder().inline_offsets().build(),
            Tracker::builder().inline_offsets().watermarks().build(),
        ] $body)
    };
}

/// `committable` on a barrier tracker, for bodies run in every mode: it
/// keeps no watermarks, so nothing is ever committable. (The typed
/// trackers' own calls take precedence where they exist.)
pub trait Modal<P, O> {
    fn committable(&self) -> HashMap<P, O>;
    fn committable_with_stats(&self) -> Committable<P, O>;
}

/// `Modal` for the barrier modes, plain and inline.
macro_rules! barrier_modal {
    ($($mode:ty),*) => {
        $(
            impl<P, O> Modal<P, O> for Tracker<P, O, $mode>
            where
                P: Hash + Eq + Clone + Send + Sync,
                O: Clone + Send + Sync,
            {
                fn committable(&self) -> HashMap<P, O> {
                    HashMap::new()
                }

                fn committable_with_stats(&self) -> Committable<P, O> {
                    Committable::default()
                }
            }
        )*
    };
}

barrier_modal!(Barrier, Inline<Barrier>);

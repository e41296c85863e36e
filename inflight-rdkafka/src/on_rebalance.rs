//! Your rebalance callbacks ([`OnRebalance`]), for a context that
//! [`HandOffContext`] wraps.

use crate::consumer::Resumable;
use crate::hand_off::HandOffContext;
use rdkafka::consumer::{Consumer, ConsumerContext, DefaultConsumerContext, Rebalance};

/// Your rebalance callbacks, for a context that [`HandOffContext`] wraps.
///
/// rdkafka passes `ConsumerContext::pre_rebalance` and `post_rebalance` a
/// `BaseConsumer<Self>`, and the consumer is a
/// `BaseConsumer<HandOffContext<M, Self>>` (or a `StreamConsumer` around
/// one): those two cannot be called on your context as they are.
/// Implement this trait instead (its methods default to doing nothing, so
/// `impl OnRebalance for MyContext {}` is enough when there are none).
///
/// The consumer they get is any rdkafka consumer with this context
/// (`K: Consumer<HandOffContext<M, Self>>`): the `BaseConsumer` rdkafka's
/// rebalance callback runs on (a `StreamConsumer`'s own, inside), or the
/// consumer you gave [`commit_progress`](crate::commit_progress), [`continue_hand_off`](crate::continue_hand_off) or
/// [`finish_hand_off`](crate::finish_hand_off) when a deferred hand-off ends there.
/// `consumer.context().inner()` is your context, and
/// `consumer.context().last_hand_off()` what a revocation's hand-off did.
///
/// ```
/// use inflight_rdkafka::{HandOffContext, OnRebalance, Resumable};
/// use rdkafka::consumer::{Consumer, ConsumerContext, Rebalance};
/// use rdkafka::ClientContext;
///
/// struct Announce;
/// impl ClientContext for Announce {}
/// impl ConsumerContext for Announce {}
/// impl OnRebalance for Announce {
///     fn post_rebalance<M: Resumable, K: Consumer<HandOffContext<M, Self>>>(
///         &self,
///         consumer: &K,
///         rebalance: &Rebalance<'_>,
///     ) {
///         if let Rebalance::Revoke(_) = rebalance {
///             if let Some(done) = consumer.context().last_hand_off() {
///                 eprintln!("handed off: {done}");
///             }
///         }
///     }
/// }
/// ```
pub trait OnRebalance: ConsumerContext {
    /// Runs before the rebalance is applied. On a revocation it runs
    /// **before** the hand-off: the revoked partitions are still tracked.
    #[allow(unused_variables)]
    fn pre_rebalance<M: Resumable, K: Consumer<HandOffContext<M, Self>>>(
        &self,
        consumer: &K,
        rebalance: &Rebalance<'_>,
    ) {
    }

    /// Runs after the rebalance is applied. On an assignment it runs
    /// **after** the committed progress was read back:
    /// [`HandOffContext::is_done`] already answers for the new partitions.
    /// On a revocation, after the partitions were let go:
    /// [`HandOffContext::last_hand_off`] says what the hand-off did.
    #[allow(unused_variables)]
    fn post_rebalance<M: Resumable, K: Consumer<HandOffContext<M, Self>>>(
        &self,
        consumer: &K,
        rebalance: &Rebalance<'_>,
    ) {
    }
}

impl OnRebalance for DefaultConsumerContext {}

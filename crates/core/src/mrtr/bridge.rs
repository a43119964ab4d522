//! The MRTR bridge's state, owned here rather than on `Gateway`: the sealer and the table of
//! parked calls its tokens name, the bounded pool of dedicated processes and each principal's
//! share of it, and (per-session mode) the warm partitions.

use std::sync::Arc;

use tokio::sync::Semaphore;

use super::MAX_HELD;
use super::{default_share, Dedicated, HeldTable, Partitions, Sealer, Shares};
use crate::GatewayConfig;

/// Most dedicated processes (running or parked MRTR calls) at once (and never more than
/// `--max-sessions`): every concurrent Modern call spawns one, so without a bound any client
/// could fork the host to exhaustion.
pub(crate) const MAX_DEDICATED: usize = 128;

/// Everything the bridge keeps between rounds and across calls.
#[derive(Debug)]
pub(crate) struct Bridge {
    /// Seals `requestState` tokens ...
    pub(crate) sealer: Sealer,
    /// ... that name calls parked here while the client is asked for input.
    pub(crate) held: HeldTable<Dedicated>,
    /// Bounds the dedicated MRTR processes, running and parked alike.
    pub(crate) slots: Arc<Semaphore>,
    /// The size of that pool (for error messages).
    pub(crate) pool: usize,
    /// ... and each principal's fair share of them.
    pub(crate) shares: Arc<Shares>,
    /// Per-session mode: warm backend processes for Modern requests, by (principal,
    /// declared capabilities).
    pub(crate) partitions: Partitions,
    /// Modern backends' `requestState`s sealed for their callers (`relay::sealed`), with the
    /// same key as the bridge's own tokens.
    pub(crate) relay: crate::relay::SealedRelay,
}

impl Bridge {
    /// An empty bridge for a gateway with these limits: the pool is never larger than
    /// `--max-sessions`, and partitions share its bound.
    pub(crate) fn new(config: &GatewayConfig) -> Self {
        let pool = MAX_DEDICATED.min(config.max_sessions.max(1));
        let share = config
            .mrtr_per_principal
            .unwrap_or_else(|| default_share(pool));
        Bridge {
            sealer: Sealer::new().at_replica(config.replica_id.clone()),
            held: HeldTable::new(MAX_HELD),
            slots: Arc::new(Semaphore::new(pool)),
            pool,
            shares: Shares::new(share),
            partitions: Partitions::new(pool, config.partition_idle),
            relay: crate::relay::SealedRelay::new(config.relay_state_ttl),
        }
    }

    /// Shuts down expired parked calls (called by the reaper).
    pub(crate) fn reap_held_calls(&self) {
        drop(self.held.reap());
    }

    /// Shuts down every parked call (gateway shutdown).
    pub(crate) async fn end_held_calls(&self) {
        for call in self.held.drain() {
            call.retire().await;
        }
    }
}

//! The MRTR bridge's state, owned here rather than on `Gateway`: the sealer and the table of
//! parked calls its tokens name, the bounded pool of dedicated processes and each principal's
//! share of it, and (per-session mode) the warm partitions.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Semaphore;

use super::MAX_HELD;
use super::{default_share, Dedicated, HeldTable, Partitions, Sealer, Shares};

/// Most dedicated processes (running or parked MRTR calls) at once (and never more than
/// `--max-sessions`): every concurrent Modern call spawns one, so without a bound any client
/// could fork the host to exhaustion.
pub(crate) const MAX_DEDICATED: usize = 128;

/// The bridge's bounds and deadlines (from the gateway's configuration).
#[derive(Debug, Clone)]
pub(crate) struct Limits {
    /// `--max-sessions`: the pool is never larger.
    pub(crate) max_sessions: usize,
    /// Most dedicated calls one principal may hold; `None`: an eighth of the pool.
    pub(crate) per_principal: Option<usize>,
    /// This replica's name, sealed into its tokens.
    pub(crate) replica_id: Option<String>,
    /// A warm partition unused this long is stopped.
    pub(crate) partition_idle: Duration,
    /// How long a sealed Modern backend's `requestState` stays valid.
    pub(crate) relay_state_ttl: Duration,
    /// A round's deadline, restarted by progress ...
    pub(crate) request_timeout: Duration,
    /// ... and its bound however much progress it reports.
    pub(crate) max_request_time: Duration,
    /// How long a process the bridge starts may take to answer its `initialize`.
    pub(crate) handshake_timeout: Duration,
}

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
    /// Its bounds and deadlines.
    pub(crate) limits: Limits,
}

impl Bridge {
    /// An empty bridge for a gateway with these limits: the pool is never larger than
    /// `--max-sessions`, and partitions share its bound.
    pub(crate) fn new(limits: Limits) -> Self {
        let pool = MAX_DEDICATED.min(limits.max_sessions.max(1));
        let share = limits.per_principal.unwrap_or_else(|| default_share(pool));
        Bridge {
            sealer: Sealer::new().at_replica(limits.replica_id.clone()),
            held: HeldTable::new(MAX_HELD),
            slots: Arc::new(Semaphore::new(pool)),
            pool,
            shares: Shares::new(share),
            partitions: Partitions::new(pool, limits.partition_idle),
            relay: crate::relay::SealedRelay::new(limits.relay_state_ttl),
            limits,
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

//! Whether a remote connected Modern first also speaks Legacy, learned when the first Legacy
//! client arrives rather than at startup.
//!
//! A gateway is a 2026-07-28 client of a remote that answers `server/discover`: every request
//! it sends such a remote carries `MCP-Protocol-Version` and `_meta`, and a Legacy
//! `initialize` of its own would not. So `run --url` connects Modern first
//! (`EraPolicy::ModernFirst`) and leaves the Legacy question open. The first Legacy client's
//! `initialize` asks it once (single-flight), on an upstream session of the gateway's own that
//! is ended at once: a remote that answers gets each Legacy session an upstream session of its
//! own, as before; one whose refusal says it speaks no Legacy (a Modern version or code
//! named, or the method unknown) turns the per-session mode off for good, and Legacy clients
//! share its stateless Modern handle through the gateway's relay, as with any Modern-only
//! backend. Anything else (unreachable, slow, another error) settles nothing: that client and
//! those in the next 30 s get upstream sessions of their own, and a later client asks again.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use switchboard_upstream::{InboundSink, Upstream};
use switchboard_wire::Message;
use tokio::sync::OnceCell;

use super::SpawnBackend;

/// The answer, once known: `true` when the remote answers a Legacy `initialize`.
#[derive(Debug, Default)]
pub(crate) struct LegacyProbe {
    answer: OnceCell<bool>,
    /// When the last try settled nothing: no new try for [`RETRY_AFTER`].
    unsettled: parking_lot::Mutex<Option<Instant>>,
}

/// How long an unsettled try (unreachable, timed out, an error that says nothing) is not
/// repeated: the Legacy clients meanwhile get upstream sessions of their own, as before.
const RETRY_AFTER: Duration = Duration::from_secs(30);
/// The most one try may take, whatever the handshake deadline.
const MAX_TRY: Duration = Duration::from_secs(5);

impl LegacyProbe {
    /// Whether the remote refused Legacy: per-session mode is then off.
    pub(crate) fn refused(&self) -> bool {
        self.answer.get() == Some(&false)
    }

    /// Whether the remote was asked and answers Legacy.
    pub(crate) fn confirmed(&self) -> bool {
        self.answer.get() == Some(&true)
    }

    /// Whether a Legacy session may get an upstream session of its own: at once when the
    /// backend's Legacy side was learned at startup (`unprobed` false), else asked once.
    pub(crate) async fn speaks_legacy(
        &self,
        unprobed: bool,
        spawner: &Arc<dyn SpawnBackend>,
        deadline: Duration,
    ) -> bool {
        if !unprobed {
            return true;
        }
        let asked = self
            .answer
            .get_or_try_init(|| self.try_once(spawner, deadline));
        // Unsettled: the client's own `initialize` goes to an upstream session of its own,
        // and fails there as any would if the remote cannot take it.
        asked.await.copied().unwrap_or(true)
    }

    /// One try, unless one settled nothing a moment ago (then waiters behind a failed try
    /// do not each try again): bounded by [`MAX_TRY`].
    async fn try_once(
        &self,
        spawner: &Arc<dyn SpawnBackend>,
        deadline: Duration,
    ) -> Result<bool, ()> {
        let recent = (*self.unsettled.lock()).is_some_and(|at| at.elapsed() < RETRY_AFTER);
        if recent {
            return Err(());
        }
        let settled = ask(spawner, deadline.min(MAX_TRY)).await;
        if settled.is_err() {
            *self.unsettled.lock() = Some(Instant::now());
        }
        settled
    }
}

async fn ask(spawner: &Arc<dyn SpawnBackend>, deadline: Duration) -> Result<bool, ()> {
    let sink: Arc<dyn InboundSink> = Arc::new(AsksNothing);
    let (handle, owner) = super::spawn_off_runtime(spawner, sink)
        .await
        .map_err(|_| ())?;
    let asked = crate::backend::answers_legacy(&handle, deadline);
    let answered = tokio::time::timeout(deadline, asked).await;
    owner.shutdown(super::SHUTDOWN_GRACE).await;
    match answered {
        Ok(Ok(speaks)) => {
            tracing::info!(
                legacy = speaks,
                "remote asked whether it speaks Legacy (first Legacy client)"
            );
            Ok(speaks)
        }
        Ok(Err(_)) | Err(_) => Err(()),
    }
}

/// The probe's session serves no client: whatever the remote asks goes unanswered.
#[derive(Debug)]
struct AsksNothing;

impl InboundSink for AsksNothing {
    fn deliver(&self, _line: &Bytes, _msg: &Message<'_>, _backend: &Upstream) {}
}

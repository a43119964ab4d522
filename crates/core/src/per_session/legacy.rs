//! Whether a remote connected Modern first also speaks Legacy, learned when the first Legacy
//! client arrives rather than at startup.
//!
//! A gateway is a 2026-07-28 client of a remote that answers `server/discover`: every request
//! it sends such a remote carries `MCP-Protocol-Version` and `_meta`, and a Legacy
//! `initialize` of its own would not. So `run --url` connects Modern first
//! (`EraPolicy::ModernFirst`) and leaves the Legacy question open. The first Legacy client's
//! `initialize` asks it once (single-flight), on an upstream session of the gateway's own that
//! is ended at once: a remote that answers gets each Legacy session an upstream session of its
//! own, as before; one that refuses turns the per-session mode off for good, and Legacy
//! clients share its stateless Modern handle through the gateway's relay, as with any
//! Modern-only backend. An unreachable remote settles nothing (asked again next time).

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use switchboard_upstream::{InboundSink, Upstream};
use switchboard_wire::Message;
use tokio::sync::OnceCell;

use super::SpawnBackend;

/// The answer, once known: `true` when the remote answers a Legacy `initialize`.
#[derive(Debug, Default)]
pub(crate) struct LegacyProbe(OnceCell<bool>);

impl LegacyProbe {
    /// Whether the remote refused Legacy: per-session mode is then off.
    pub(crate) fn refused(&self) -> bool {
        self.0.get() == Some(&false)
    }

    /// Whether the remote was asked and answers Legacy.
    pub(crate) fn confirmed(&self) -> bool {
        self.0.get() == Some(&true)
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
        let asked = self.0.get_or_try_init(|| ask(spawner, deadline)).await;
        // Not asked (unreachable): the client's own `initialize` goes there and fails as
        // any would.
        asked.copied().unwrap_or(true)
    }
}

async fn ask(spawner: &Arc<dyn SpawnBackend>, deadline: Duration) -> Result<bool, ()> {
    let sink: Arc<dyn InboundSink> = Arc::new(AsksNothing);
    let (handle, owner) = super::spawn_off_runtime(spawner, sink)
        .await
        .map_err(|_| ())?;
    let answered = crate::backend::answers_legacy(&handle, deadline).await;
    owner.shutdown(super::SHUTDOWN_GRACE).await;
    match answered {
        Ok(speaks) => {
            tracing::info!(
                legacy = speaks,
                "remote asked whether it speaks Legacy (first Legacy client)"
            );
            Ok(speaks)
        }
        Err(_) => Err(()),
    }
}

/// The probe's session serves no client: whatever the remote asks goes unanswered.
#[derive(Debug)]
struct AsksNothing;

impl InboundSink for AsksNothing {
    fn deliver(&self, _line: &Bytes, _msg: &Message<'_>, _backend: &Upstream) {}
}

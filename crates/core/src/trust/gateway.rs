//! Where the aggregating gateway consults tool trust: each fetched tools list is screened
//! (`vmcp::view`), quarantined tools are left out of lists (`vmcp::rebuild`) and refused on
//! call (`vmcp::route`), and an approval (the state file changed, or `POST /trust/approve`)
//! re-lists and tells every session its tools changed.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use serde_json::Value;
use tokio_util::sync::CancellationToken;
use tracing::warn;

use switchboard_wire::{encode_notification, method};

use super::{Seen, Trust, TrustMode};
use crate::BackendId;
use crate::{CoreError, Gateway};

/// Pending definitions `/trust` lists at most.
const STATUS_LIMIT: usize = 1000;

/// How often the state file is checked for changes made outside the gateway.
const WATCH_INTERVAL: Duration = Duration::from_secs(1);

impl Gateway {
    /// The trust state, when the gateway aggregates with trust on.
    pub(crate) fn trust(&self) -> Option<&Arc<Trust>> {
        self.vmcp()?.trust.as_ref()
    }

    /// Screens one fetch of `backend`'s tools before the catalog records it.
    pub(crate) async fn screen_tools(&self, backend: &BackendId, items: &[Value]) {
        let Some(trust) = self.trust().cloned() else {
            return;
        };
        if trust.config().mode == TrustMode::Off {
            return;
        }
        let seen: Vec<Seen> = items.iter().filter_map(Seen::of).collect();
        let backend = backend.to_string();
        // File I/O (and a lock another process may hold for a moment): off the runtime.
        if let Err(e) = tokio::task::spawn_blocking(move || trust.screen(&backend, &seen)).await {
            warn!("trust screen failed: {e}");
        }
    }

    /// `POST /trust/approve`: pins `backend`'s pending definition of `tool`. False when none
    /// is pending.
    pub async fn approve_tool(
        &self,
        backend: &str,
        tool: &str,
        digest: &str,
        by: &crate::Principal,
    ) -> Result<super::Approval, CoreError> {
        let Some(trust) = self.trust().cloned() else {
            return Err(CoreError::Unsupported(
                "tool trust (not aggregating)".into(),
            ));
        };
        if !trust.config().may_approve(by) {
            return Err(CoreError::Forbidden(
                "not an approver: approving over HTTP needs a principal listed in trust.approvers (or run `switchboard trust approve` where the state file is)",
            ));
        }
        let (b, t, d, by) = (
            backend.to_owned(),
            tool.to_owned(),
            digest.to_owned(),
            by.clone(),
        );
        let outcome = tokio::task::spawn_blocking(move || trust.approve(&b, &t, &d, &by))
            .await
            .unwrap_or(super::Approval::NothingPending);
        let approved = outcome == super::Approval::Approved;
        if approved {
            self.trust_changed(true);
        }
        Ok(outcome)
    }

    /// Whether `who` may see and approve what waits (`trust.approvers`); false when trust is
    /// not on here.
    pub fn trust_approver(&self, who: &crate::Principal) -> bool {
        self.trust().is_some_and(|t| t.config().may_approve(who))
    }

    /// What `GET /trust` shows (`None`: trust is not on here).
    pub fn trust_status(&self) -> Option<Value> {
        Some(self.trust()?.status(STATUS_LIMIT))
    }

    /// Re-reads the trust state file when it changes (`switchboard trust approve`), once a
    /// second, until `stop`. Returns at once when there is no file to watch.
    pub async fn run_trust_watch(self: Arc<Self>, stop: CancellationToken) {
        let Some(trust) = self.trust().cloned() else {
            return;
        };
        if trust.config().state_file.is_none() || trust.config().mode == TrustMode::Off {
            return;
        }
        let mut tick = tokio::time::interval(WATCH_INTERVAL);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
        loop {
            tokio::select! {
                () = stop.cancelled() => return,
                _ = tick.tick() => {}
            }
            let t = trust.clone();
            if let Ok(Some(released)) =
                tokio::task::spawn_blocking(move || t.reload_if_changed()).await
            {
                self.trust_changed(!released.is_empty());
            }
        }
    }

    /// The pins changed: every backend's tools are fetched (and screened) again at the next
    /// list; when a tool came back, sessions hear `tools/list_changed` (payload-free, as
    /// backends' own are rebuilt).
    fn trust_changed(&self, released: bool) {
        for entry in self.backends.iter() {
            self.registry
                .tables(&entry.id)
                .lists_changed
                .mark(method::TOOLS_LIST_CHANGED);
        }
        if released {
            let data = Bytes::from(encode_notification(method::TOOLS_LIST_CHANGED, None));
            self.registry.sessions.broadcast(&data);
            self.registry
                .listeners
                .list_changed(method::TOOLS_LIST_CHANGED);
        }
    }
}

impl crate::vmcp::Vmcp {
    /// Refuses a call to a quarantined tool (`original`: its backend's own name).
    pub(crate) fn refuse_quarantined(
        &self,
        backend: &BackendId,
        original: &str,
    ) -> Result<(), CoreError> {
        match &self.trust {
            Some(trust) if trust.blocks(backend.as_str(), original) => {
                Err(CoreError::Quarantined {
                    backend: backend.clone(),
                    tool: original.chars().take(128).collect(),
                })
            }
            _ => Ok(()),
        }
    }
}

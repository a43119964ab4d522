//! Where the aggregating gateway consults tool trust: each fetched tools list is screened
//! (`vmcp::view`, [`Trust::screen_tools`]), quarantined tools are left out of lists
//! (`vmcp::rebuild`) and refused on call (`vmcp::route`), and an approval (the state file
//! changed, [`Trust::watch`], or `POST /trust/approve`, [`Trust::approve_by`]) re-lists and
//! tells every session its tools changed ([`tools_changed`]).

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use serde_json::Value;
use tokio_util::sync::CancellationToken;
use tracing::warn;

use switchboard_wire::{encode_notification, method};

use super::{Approval, Seen, Trust, TrustMode};
use crate::registry::Registry;
use crate::BackendId;
use crate::{Backends, CoreError};

/// Pending definitions `/trust` lists at most.
const STATUS_LIMIT: usize = 1000;

/// How often the state file is checked for changes made outside the gateway.
const WATCH_INTERVAL: Duration = Duration::from_secs(1);

impl Trust {
    /// Screens one fetch of `backend`'s tools before the catalog records it.
    pub(crate) async fn screen_tools(self: &Arc<Self>, backend: &BackendId, items: &[Value]) {
        if self.config().mode == TrustMode::Off {
            return;
        }
        let trust = self.clone();
        let seen: Vec<Seen> = items.iter().filter_map(Seen::of).collect();
        let backend = backend.to_string();
        // File I/O (and a lock another process may hold for a moment): off the runtime.
        if let Err(e) = tokio::task::spawn_blocking(move || trust.screen(&backend, &seen)).await {
            warn!("trust screen failed: {e}");
        }
    }

    /// An approval over HTTP (`POST /trust/approve`, by `by`): pins `backend`'s pending
    /// definition of `tool` if `by` is an approver. `NothingPending` when none is pending.
    pub(crate) async fn approve_by(
        self: &Arc<Self>,
        backend: &str,
        tool: &str,
        digest: &str,
        by: &crate::Principal,
    ) -> Result<Approval, CoreError> {
        if !self.config().may_approve(by) {
            return Err(CoreError::Forbidden(
                "not an approver: approving over HTTP needs a principal listed in trust.approvers (or run `switchboard trust approve` where the state file is)",
            ));
        }
        let (trust, b, t, d, by) = (
            self.clone(),
            backend.to_owned(),
            tool.to_owned(),
            digest.to_owned(),
            by.clone(),
        );
        Ok(
            tokio::task::spawn_blocking(move || trust.approve(&b, &t, &d, &by))
                .await
                .unwrap_or(Approval::NothingPending),
        )
    }

    /// Whether `who` may see and approve what waits (`trust.approvers`).
    pub fn is_approver(&self, who: &crate::Principal) -> bool {
        self.config().may_approve(who)
    }

    /// What `GET /trust` shows.
    pub fn status_page(&self) -> Value {
        self.status(STATUS_LIMIT)
    }

    /// Re-reads the trust state file when it changes (`switchboard trust approve`), once a
    /// second, until `stop`; `changed` hears whether a tool came back. Returns at once when
    /// there is no file to watch.
    pub(crate) async fn watch(self: Arc<Self>, stop: &CancellationToken, changed: impl Fn(bool)) {
        if self.config().state_file.is_none() || self.config().mode == TrustMode::Off {
            return;
        }
        let mut tick = tokio::time::interval(WATCH_INTERVAL);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
        loop {
            tokio::select! {
                () = stop.cancelled() => return,
                _ = tick.tick() => {}
            }
            let t = self.clone();
            if let Ok(Some(released)) =
                tokio::task::spawn_blocking(move || t.reload_if_changed()).await
            {
                changed(!released.is_empty());
            }
        }
    }
}

/// The pins changed: every backend of `backends` has its tools fetched (and screened) again
/// at the next list; when a tool came back (`released`), the sessions and listeners of
/// `registry` hear `tools/list_changed` (payload-free, as backends' own are rebuilt).
pub(crate) fn tools_changed(backends: &Backends, registry: &Registry, released: bool) {
    for entry in backends.iter() {
        registry
            .tables(&entry.id)
            .lists_changed
            .mark(method::TOOLS_LIST_CHANGED);
    }
    if released {
        let data = Bytes::from(encode_notification(method::TOOLS_LIST_CHANGED, None));
        registry.sessions.broadcast(&data);
        registry.listeners.list_changed(method::TOOLS_LIST_CHANGED);
    }
}

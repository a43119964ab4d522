//! What an operator reads and does over HTTP (`/status`, `/metrics`, `/readyz`, `/stats`,
//! trust approval): a view over the parts of the gateway those answers come from, taken
//! explicitly, so `http` needs one accessor ([`crate::Gateway::operator`]) for all of them.

use std::sync::Arc;

use serde_json::Value;

use crate::health::{Health, PrincipalView};
use crate::mrtr::Bridge;
use crate::registry::Registry;
use crate::trust::{Approval, Trust};
use crate::{BackendEra, Backends, CoreError, Principal};

/// The operator's view of a gateway: readiness, status, metrics, table sizes and trust.
#[derive(Debug, Clone, Copy)]
pub struct Operator<'a> {
    pub(super) backends: &'a Backends,
    pub(super) registry: &'a Registry,
    pub(super) health: &'a Health,
    pub(super) mrtr: &'a Bridge,
    pub(super) trust: Option<&'a Arc<Trust>>,
    pub(super) per_session: &'a crate::per_session::Spawner,
    /// The merged lists, when aggregating (each backend's item counts).
    pub(super) vmcp: Option<&'a crate::vmcp::Vmcp>,
}

impl Operator<'_> {
    /// `/healthz`: whether the primary backend is alive.
    pub fn alive(&self) -> bool {
        self.backends.primary_alive()
    }

    /// `/readyz`: whether the gateway is ready to serve (`--ready-when`).
    pub fn ready(&self) -> bool {
        self.health.ready()
    }

    /// The primary backend's era (`/stats`).
    pub fn primary_era(&self) -> BackendEra {
        let era = self.backends.primary_era();
        BackendEra {
            // A remote connected Modern first that a Legacy client found speaks Legacy too.
            legacy: era.legacy || self.per_session.legacy_confirmed(),
            ..era
        }
    }

    /// `/status`: per backend its health, era, transport, breaker, process, traffic and item
    /// counts; the live sessions by transport, and by principal as `caller` may see them
    /// (`None`: an open `/status`, nobody's; see `PrincipalView`).
    pub fn status(&self, caller: Option<&Principal>) -> Value {
        let items = |id: &crate::BackendId| self.vmcp.map(|v| v.item_counts(id));
        let view = match caller {
            None => PrincipalView::Nobody,
            Some(who) if self.trust.is_some_and(|t| t.is_approver(who)) => PrincipalView::Every,
            Some(who) => PrincipalView::Own(who),
        };
        let sessions = &self.registry.sessions;
        self.health.status(self.backends, (sessions, view), &items)
    }

    /// The text exposition of every metric, with the gauges set from the gateway now.
    pub fn render_metrics(&self) -> String {
        let (streamable, sse) = self.registry.sessions.count_by_transport();
        crate::metrics::set_sessions("streamable_http", streamable);
        crate::metrics::set_sessions("sse", sse);
        self.health.export();
        crate::metrics::render()
    }

    /// Live sessions (for metrics and leak tests).
    pub fn session_count(&self) -> usize {
        self.registry.sessions.len()
    }

    /// Every routing-table entry the gateway holds: pending backend calls, progress routes,
    /// subscription rows and URI locks, per-session entries, and parked MRTR calls. Zero when
    /// idle with no sessions; leak tests assert on it.
    pub fn table_entries(&self) -> usize {
        let pending: usize = self
            .backends
            .iter()
            .map(|b| b.backend.handle.pending_len())
            .sum();
        let per_backend: usize = self
            .registry
            .all_tables()
            .iter()
            .map(|t| t.subs.len() + t.tasks.len())
            .sum();
        pending
            + self.registry.progress.len()
            + per_backend
            + self.registry.sessions.entry_count()
            + self.registry.listeners.len()
            + self.mrtr.held.len()
    }

    /// Warm Modern partitions (per-session mode). Counted apart from `table_entries`: they
    /// are kept on purpose while idle, and reaped after `partition_idle`.
    pub fn partition_count(&self) -> usize {
        self.mrtr.partitions.len()
    }

    /// The trust state, when the gateway aggregates with trust on (`trust`).
    pub fn trust(&self) -> Option<&Arc<Trust>> {
        self.trust
    }

    /// `POST /trust/approve`: pins `backend`'s pending definition of `tool` (`NothingPending`
    /// when none is); an approval has every backend's tools listed again and tells the
    /// sessions.
    pub async fn approve_tool(
        &self,
        backend: &str,
        tool: &str,
        digest: &str,
        by: &Principal,
    ) -> Result<Approval, CoreError> {
        let Some(trust) = self.trust else {
            return Err(CoreError::Unsupported(
                "tool trust (not aggregating)".into(),
            ));
        };
        let outcome = trust.approve_by(backend, tool, digest, by).await?;
        if outcome == Approval::Approved {
            crate::trust::tools_changed(self.backends, self.registry, true);
        }
        Ok(outcome)
    }
}

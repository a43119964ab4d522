//! The gateway's limits, deadlines and feature settings (`GatewayConfig`), and the empty
//! routing registries they size.

use std::sync::Arc;
use std::time::Duration;

use crate::registry::Registry;

/// Limits and deadlines.
#[derive(Debug, Clone)]
pub struct GatewayConfig {
    /// How long a request may wait for its backend answer before it is failed (and cancelled
    /// upstream).
    pub request_timeout: Duration,
    /// Progress for a request restarts its `request_timeout`; this bounds the whole request
    /// however much progress it reports, measured from its start.
    pub max_request_time: Duration,
    /// How long a backend process may take to answer the gateway's (or, per-session, the
    /// client's) `initialize`.
    pub handshake_timeout: Duration,
    /// Idle time after which a Legacy session expires.
    pub session_ttl: Duration,
    /// Most concurrent Legacy sessions; more are refused rather than exhausting memory.
    pub max_sessions: usize,
    /// Most concurrent sessions one principal may hold; more get 429. `None`: no limit (with
    /// anonymous access every caller is the same principal, so only the table bound applies).
    pub max_sessions_per_principal: Option<usize>,
    /// Authorization policy, rate limits and audit log (all off by default).
    pub access: crate::Access,
    /// Per-session mode: a session whose listen stream has been gone this long (with nothing
    /// in flight) is ended, and its process with it.
    pub listen_grace: Duration,
    /// Most dedicated MRTR calls (running or parked) one principal may hold; more get 429.
    /// `None`: an eighth of the pool (at least one).
    pub mrtr_per_principal: Option<usize>,
    /// Per-session mode: a warm Modern partition unused this long is stopped.
    pub partition_idle: Duration,
    /// How long a sealed `requestState` relayed from a Modern backend stays valid.
    pub relay_state_ttl: Duration,
    /// `Some`: the backends are aggregated into one virtual server (`switchboard serve`);
    /// `None`: the one backend is proxied transparently (`run`).
    pub vmcp: Option<crate::vmcp::VmcpConfig>,
    /// Probes, breakers and readiness (`health`).
    pub health: crate::health::HealthConfig,
    /// Spans per request and backend call (`trace`), exported through the globally
    /// installed tracer provider. Off by default.
    pub traces: bool,
    /// Composite tools (`serve` only) and the bounds of their handles.
    pub workflows: crate::workflow::WorkflowConfig,
    /// Where Streamable HTTP sessions are kept beyond this process (`session_store`);
    /// `None`: in memory only.
    pub session_store: Option<Arc<dyn crate::SessionRecords>>,
    /// With a session store that cannot take a new session: refuse it (false, the default)
    /// or serve it from this process only (true).
    pub store_fallback_memory: bool,
    /// This replica's name among the replicas on the session store, when requests can be
    /// forwarded between them (`http::hop`): sessions with state only this process holds
    /// (their own upstreams) are recorded with it as their home, and served only there.
    /// `None`: no forwarding; such sessions are not stored.
    pub replica_id: Option<String>,
    /// Checks on what flows between clients and tools (`guardrails`); `None`: none.
    pub guardrails: Option<Arc<crate::guardrails::Guardrails>>,
}

impl Default for GatewayConfig {
    fn default() -> Self {
        GatewayConfig {
            request_timeout: Duration::from_secs(60),
            max_request_time: Duration::from_secs(3600),
            handshake_timeout: Duration::from_secs(30),
            session_ttl: Duration::from_secs(30 * 60),
            max_sessions: 100_000,
            max_sessions_per_principal: None,
            access: crate::Access::default(),
            listen_grace: Duration::from_secs(60),
            mrtr_per_principal: None,
            vmcp: None,
            partition_idle: Duration::from_secs(60),
            relay_state_ttl: Duration::from_secs(300),
            health: crate::health::HealthConfig::default(),
            traces: false,
            workflows: crate::workflow::WorkflowConfig::default(),
            session_store: None,
            store_fallback_memory: false,
            replica_id: None,
            guardrails: None,
        }
    }
}

impl GatewayConfig {
    /// Empty routing registries with this configuration's session limits, for
    /// [`crate::Gateway::new`] and the backends' sinks.
    pub fn registry(&self) -> Arc<Registry> {
        let sessions = crate::session::Sessions::new(self.max_sessions, self.session_ttl);
        let registry = Registry::new(match self.max_sessions_per_principal {
            Some(n) => sessions.with_principal_limit(n),
            None => sessions,
        });
        if let Some(replica) = &self.replica_id {
            registry.at_replica(replica);
        }
        registry
            .progress
            .guard(crate::guardrails::note_check(&self.guardrails));
        registry
    }
}

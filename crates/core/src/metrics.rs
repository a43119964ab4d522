//! Prometheus metrics: every series the gateway exports, recorded here and nowhere else, and
//! rendered as the text exposition format for `http`'s `/metrics`.
//!
//! Names follow the OpenTelemetry MCP semantic conventions where they exist, adapted to
//! Prometheus (dots become underscores, the unit a suffix): `mcp_server_operation_duration_
//! seconds` (the gateway serving clients) and `mcp_client_operation_duration_seconds` (the
//! gateway as the client of its backends), labelled `mcp_method_name`. Everything else is
//! `switchboard_*`.
//!
//! Cardinality is bounded by construction: a method is one of the MCP vocabulary or `other`
//! (never the client's string), a backend one of the configured names, an outcome and an era
//! one of a few fixed words. No session ids, no tool names. Labels are `&'static str`s and
//! `BackendId`s (a reference count, no allocation), so recording is a read-locked map look-up
//! and an atomic add.
//!
//! The registry is process-wide, like Prometheus's default registry: one gateway runs per
//! process, and counters must be reachable from admission and the send path without a handle
//! threaded through every call. Gauges (sessions, breaker states, in-flight calls) are set
//! from the gateway when a scrape renders them.

use std::sync::LazyLock;
use std::time::Duration;

use prometheus_client::encoding::{EncodeLabelSet, EncodeLabelValue, LabelValueEncoder};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::{Registry, Unit};

use crate::BackendId;

/// The methods a `mcp_method_name` label can name; anything else is `other`.
const METHODS: &[&str] = &[
    "initialize",
    "ping",
    "tools/list",
    "tools/call",
    "prompts/list",
    "prompts/get",
    "resources/list",
    "resources/templates/list",
    "resources/read",
    "resources/subscribe",
    "resources/unsubscribe",
    "completion/complete",
    "logging/setLevel",
    "server/discover",
    "subscriptions/listen",
    "tasks/get",
    "tasks/list",
    "tasks/result",
    "tasks/cancel",
    "notifications/initialized",
    "notifications/cancelled",
    "notifications/progress",
    "notifications/roots/list_changed",
];

/// A method as a label: one of [`METHODS`] or `other`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct Method(&'static str);

impl Method {
    pub(crate) fn of(name: &str) -> Method {
        Method(
            METHODS
                .iter()
                .find(|m| **m == name)
                .copied()
                .unwrap_or("other"),
        )
    }
}

impl EncodeLabelValue for Method {
    fn encode(&self, encoder: &mut LabelValueEncoder<'_>) -> Result<(), std::fmt::Error> {
        EncodeLabelValue::encode(&self.0, encoder)
    }
}

impl EncodeLabelValue for BackendId {
    fn encode(&self, encoder: &mut LabelValueEncoder<'_>) -> Result<(), std::fmt::Error> {
        EncodeLabelValue::encode(&self.as_str(), encoder)
    }
}

/// A fixed word as a label value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct Word(pub(crate) &'static str);

impl EncodeLabelValue for Word {
    fn encode(&self, encoder: &mut LabelValueEncoder<'_>) -> Result<(), std::fmt::Error> {
        EncodeLabelValue::encode(&self.0, encoder)
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct ServerLabels {
    mcp_method_name: Method,
    /// `legacy` or `modern`.
    mcp_era: Word,
    /// `ok`, `error` (a JSON-RPC error answer), `failed` (the gateway could not get an
    /// answer), `cancelled`, `denied` (policy), `rate_limited`.
    outcome: Word,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct ClientLabels {
    backend: BackendId,
    mcp_method_name: Method,
    /// `ok` (any answer), `failed`, `timeout`, `refused` (breaker open), `cancelled`.
    outcome: Word,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct BackendLabels {
    backend: BackendId,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct StateLabels {
    backend: BackendId,
    state: Word,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct TransportLabels {
    network_transport: Word,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct StoreLabels {
    /// `put`, `get`, `touch`, `delete`, `publish`.
    op: Word,
    /// `ok` or `error`.
    outcome: Word,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct OutcomeLabels {
    outcome: Word,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct GuardLabels {
    /// A configured guardrail's name: bounded by the config.
    guardrail: GuardName,
    /// `reject`, `redact`, `truncate`, `warn`, `quarantine`.
    action: Word,
}

/// A guardrail's configured name as a label value.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct GuardName(std::sync::Arc<str>);

impl EncodeLabelValue for GuardName {
    fn encode(&self, encoder: &mut LabelValueEncoder<'_>) -> Result<(), std::fmt::Error> {
        EncodeLabelValue::encode(&&*self.0, encoder)
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct ReasonLabels {
    reason: Word,
}

type Latency<L> = Family<L, Histogram, fn() -> Histogram>;

/// Every series (see the module documentation).
pub(crate) struct Metrics {
    registry: Registry,
    requests: Family<ServerLabels, Counter>,
    server_duration: Latency<ServerLabels>,
    backend_requests: Family<ClientLabels, Counter>,
    client_duration: Latency<ClientLabels>,
    denials: Family<ReasonLabels, Counter>,
    restarts: Family<BackendLabels, Counter>,
    reloads: Family<OutcomeLabels, Counter>,
    hops: Family<OutcomeLabels, Counter>,
    policy_evaluations: Family<OutcomeLabels, Counter>,
    store_duration: Latency<StoreLabels>,
    sessions: Family<TransportLabels, Gauge>,
    breaker: Family<StateLabels, Gauge>,
    health: Family<StateLabels, Gauge>,
    in_flight: Family<BackendLabels, Gauge>,
    guardrail_actions: Family<GuardLabels, Counter>,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Metrics")
    }
}

/// The latency histograms' bucket bounds, in seconds: 0.5 ms doubling to about 33 s (a
/// cached list answers in well under a millisecond, a tool may run for seconds). `/status`'s
/// last-minute percentiles (`health::recent`) use the same ones.
pub(crate) const LATENCY_BOUNDS: [f64; 17] = {
    let mut bounds = [0.0005; 17];
    let mut i = 1;
    while i < bounds.len() {
        bounds[i] = bounds[i - 1] * 2.0;
        i += 1;
    }
    bounds
};

fn latency() -> Histogram {
    Histogram::new(LATENCY_BOUNDS)
}

static METRICS: LazyLock<Metrics> = LazyLock::new(Metrics::new);

impl Metrics {
    fn new() -> Metrics {
        let mut registry = Registry::default();
        let m = Metrics {
            requests: Family::default(),
            server_duration: Family::new_with_constructor(latency),
            backend_requests: Family::default(),
            client_duration: Family::new_with_constructor(latency),
            denials: Family::default(),
            restarts: Family::default(),
            reloads: Family::default(),
            hops: Family::default(),
            policy_evaluations: Family::default(),
            store_duration: Family::new_with_constructor(latency),
            sessions: Family::default(),
            breaker: Family::default(),
            health: Family::default(),
            in_flight: Family::default(),
            guardrail_actions: Family::default(),
            registry: Registry::default(),
        };
        registry.register(
            "switchboard_requests",
            "Client requests by MCP method, era and outcome",
            m.requests.clone(),
        );
        registry.register_with_unit(
            "mcp_server_operation_duration",
            "Time to answer a client request, at the gateway",
            Unit::Seconds,
            m.server_duration.clone(),
        );
        registry.register(
            "switchboard_backend_requests",
            "Requests the gateway sent to a backend, by backend, MCP method and outcome",
            m.backend_requests.clone(),
        );
        registry.register_with_unit(
            "mcp_client_operation_duration",
            "Time a backend took to answer the gateway",
            Unit::Seconds,
            m.client_duration.clone(),
        );
        registry.register(
            "switchboard_denials",
            "Requests refused by the authorization policy or a rate limit",
            m.denials.clone(),
        );
        registry.register(
            "switchboard_backend_restarts",
            "Backend processes restarted after they ended",
            m.restarts.clone(),
        );
        registry.register(
            "switchboard_config_reloads",
            "Config reloads by outcome: applied, refused, unchanged",
            m.reloads.clone(),
        );
        registry.register(
            "switchboard_replica_hops",
            "Requests forwarded to the replica serving their session, by outcome",
            m.hops.clone(),
        );
        registry.register(
            "switchboard_policy_evaluations",
            "Authorization policy evaluations by outcome: allow, deny",
            m.policy_evaluations.clone(),
        );
        registry.register_with_unit(
            "switchboard_session_store_duration",
            "Round-trips to the session store (Redis) by operation and outcome",
            Unit::Seconds,
            m.store_duration.clone(),
        );
        registry.register(
            "switchboard_sessions",
            "Live sessions by transport",
            m.sessions.clone(),
        );
        registry.register(
            "switchboard_backend_breaker_state",
            "1 for each backend's current circuit-breaker state",
            m.breaker.clone(),
        );
        registry.register(
            "switchboard_backend_health",
            "1 for each backend's current health state",
            m.health.clone(),
        );
        registry.register(
            "switchboard_backend_in_flight",
            "Requests awaiting a backend's answer",
            m.in_flight.clone(),
        );
        registry.register(
            "switchboard_guardrail_actions",
            "Actions guardrails took, by guardrail (a configured name) and action",
            m.guardrail_actions.clone(),
        );
        Metrics { registry, ..m }
    }
}

/// The process's metrics.
pub(crate) fn get() -> &'static Metrics {
    &METRICS
}

/// A client request's end, as admission saw it.
pub(crate) fn request(method: &str, modern: bool, outcome: &'static str, took: Duration) {
    let m = get();
    let labels = ServerLabels {
        mcp_method_name: Method::of(method),
        mcp_era: Word(if modern { "modern" } else { "legacy" }),
        outcome: Word(outcome),
    };
    m.requests.get_or_create(&labels).inc();
    m.server_duration
        .get_or_create(&labels)
        .observe(took.as_secs_f64());
    match outcome {
        "denied" => m.denials.get_or_create(&reason("policy")).inc(),
        "rate_limited" => m.denials.get_or_create(&reason("rate_limit")).inc(),
        _ => 0,
    };
}

fn reason(word: &'static str) -> ReasonLabels {
    ReasonLabels { reason: Word(word) }
}

/// A call to a backend's end (`health::call_ended` also counts it in the backend's last
/// minute, for `/status`).
pub(crate) fn backend_call(
    backend: &BackendId,
    method: Method,
    outcome: &'static str,
    took: Duration,
) {
    let m = get();
    let labels = ClientLabels {
        backend: backend.clone(),
        mcp_method_name: method,
        outcome: Word(outcome),
    };
    m.backend_requests.get_or_create(&labels).inc();
    if outcome != "refused" {
        m.client_duration
            .get_or_create(&labels)
            .observe(took.as_secs_f64());
    }
}

/// A backend process was restarted.
/// One session-store round-trip (`session_store`; the store crate reports through it).
pub fn store_call(op: &'static str, ok: bool, elapsed: Duration) {
    get()
        .store_duration
        .get_or_create(&StoreLabels {
            op: Word(op),
            outcome: Word(if ok { "ok" } else { "error" }),
        })
        .observe(elapsed.as_secs_f64());
}

/// One request forwarded to another replica (`http::hop`): `forwarded` (an answer came
/// back), `unreachable`, `home_gone`.
pub fn hop(outcome: &'static str) {
    get()
        .hops
        .get_or_create(&OutcomeLabels {
            outcome: Word(outcome),
        })
        .inc();
}

/// One action a guardrail took.
pub(crate) fn guardrail_action(guardrail: &std::sync::Arc<str>, action: &'static str) {
    get()
        .guardrail_actions
        .get_or_create(&GuardLabels {
            guardrail: GuardName(guardrail.clone()),
            action: Word(action),
        })
        .inc();
}

/// One evaluation of the authorization policy (`allow` or `deny`): what a request costs in
/// policy work, and what proves it is decided once.
pub(crate) fn policy_evaluated(allowed: bool) {
    get()
        .policy_evaluations
        .get_or_create(&OutcomeLabels {
            outcome: Word(if allowed { "allow" } else { "deny" }),
        })
        .inc();
}

pub(crate) fn reloaded(outcome: &'static str) {
    get()
        .reloads
        .get_or_create(&OutcomeLabels {
            outcome: Word(outcome),
        })
        .inc();
}

pub(crate) fn restarted(backend: &BackendId) {
    get()
        .restarts
        .get_or_create(&BackendLabels {
            backend: backend.clone(),
        })
        .inc();
}

/// Sets one backend's gauges: `state` (one of `states`, every health state's word) and
/// `breaker` are 1 for the current word, 0 for the others (so a scrape shows transitions, not
/// only presence).
pub(crate) fn set_backend(
    backend: &BackendId,
    (states, state): (&[&'static str], &'static str),
    breaker: &'static str,
    in_flight: usize,
) {
    let m = get();
    for &word in states {
        let labels = StateLabels {
            backend: backend.clone(),
            state: Word(word),
        };
        m.health
            .get_or_create(&labels)
            .set(i64::from(word == state));
    }
    for word in ["closed", "open", "half_open"] {
        let labels = StateLabels {
            backend: backend.clone(),
            state: Word(word),
        };
        m.breaker
            .get_or_create(&labels)
            .set(i64::from(word == breaker));
    }
    m.in_flight
        .get_or_create(&BackendLabels {
            backend: backend.clone(),
        })
        .set(i64::try_from(in_flight).unwrap_or(i64::MAX));
}

/// Sets the live session count of a transport.
pub(crate) fn set_sessions(transport: &'static str, count: usize) {
    get()
        .sessions
        .get_or_create(&TransportLabels {
            network_transport: Word(transport),
        })
        .set(i64::try_from(count).unwrap_or(i64::MAX));
}

/// The text exposition of every series.
pub(crate) fn render() -> String {
    let mut out = String::new();
    // Writing into a String cannot fail.
    let _ = prometheus_client::encoding::text::encode(&mut out, &get().registry);
    out
}

/// Whether a Legacy answer the gateway encoded is a JSON-RPC error: every encoder writes
/// `{"jsonrpc":"2.0","id":<id>,` and then `"result"` or `"error"`, so this is a prefix
/// comparison, not a parse (it runs on every request).
pub(crate) fn is_error_answer(body: &[u8], id: Option<&str>) -> bool {
    const HEAD: &[u8] = br#"{"jsonrpc":"2.0","#;
    let Some(rest) = body.strip_prefix(HEAD) else {
        return false;
    };
    let rest = match id {
        Some(id) => rest
            .strip_prefix(br#""id":"#.as_slice())
            .and_then(|r| r.strip_prefix(id.as_bytes()))
            .and_then(|r| r.strip_prefix(b",".as_slice())),
        None => Some(rest),
    };
    rest.is_some_and(|r| r.starts_with(br#""error""#))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn methods_are_a_bounded_set() {
        assert_eq!(Method::of("tools/call").0, "tools/call");
        assert_eq!(Method::of("tools/call2").0, "other");
        assert_eq!(Method::of(&"x".repeat(10_000)).0, "other");
    }

    #[test]
    fn error_answers_are_told_by_their_prefix() {
        let id = switchboard_wire::RequestId::from_string("7");
        let ok = switchboard_wire::encode_result(&id, r#"{"error":"no"}"#);
        assert!(!is_error_answer(&ok, Some(r#""7""#)));
        let err = switchboard_wire::encode_error(
            Some(&id),
            &switchboard_wire::ErrorObject::new(-32601, "nope"),
        );
        assert!(is_error_answer(&err, Some(r#""7""#)));
        assert!(!is_error_answer(&err, Some(r#""8""#)));
        let anon = switchboard_wire::encode_error(
            None,
            &switchboard_wire::ErrorObject::new(-32601, "nope"),
        );
        assert!(is_error_answer(&anon, None));
    }

    #[test]
    fn recorded_series_render_with_their_labels() {
        let backend: BackendId = "metrics-unit".parse().unwrap();
        backend_call(
            &backend,
            Method::of("tools/call"),
            "ok",
            Duration::from_millis(3),
        );
        let text = render();
        assert!(
            text.contains(r#"switchboard_backend_requests_total{backend="metrics-unit",mcp_method_name="tools/call",outcome="ok"} 1"#),
            "{text}"
        );
        assert!(text.contains("mcp_client_operation_duration_seconds_bucket"));
    }
}

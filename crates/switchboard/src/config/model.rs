//! The config file as serde reads it: camelCase keys, unknown keys refused. The shipped JSON
//! Schema (`schema/switchboard.schema.json`) describes the same shape; a unit test keeps the
//! two in step. Values here are as written: `${VAR}` references are expanded later, so this
//! model can be shown (`validate`) without showing a secret.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Deserializer};

/// The whole file.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(crate) struct ConfigFile {
    /// A JSON Schema reference for editors; ignored.
    #[serde(rename = "$schema")]
    pub(crate) _schema: Option<String>,
    pub(crate) listen: Option<Listen>,
    /// The default isolation of command backends (`--isolation`).
    pub(crate) isolation: Option<IsolationKey>,
    pub(crate) worker_threads: Option<u16>,
    /// `KEY=VALUE` lines for `${KEY}` references (mode 0600 or stricter).
    pub(crate) secrets_file: Option<PathBuf>,
    pub(crate) auth: Option<Auth>,
    pub(crate) policy: Option<Policy>,
    pub(crate) audit: Option<Audit>,
    pub(crate) limits: Option<Limits>,
    pub(crate) timeouts: Option<Timeouts>,
    pub(crate) http: Option<Http>,
    pub(crate) health: Option<Health>,
    pub(crate) metrics: Option<Metrics>,
    pub(crate) session_store: Option<SessionStoreSection>,
    /// The token vault's key (`token_store.rs`).
    pub(crate) token_store: Option<TokenStoreSection>,
    pub(crate) traces: Option<Traces>,
    pub(crate) aggregation: Option<Aggregation>,
    pub(crate) backends: Vec<BackendEntry>,
    /// Tools the gateway runs itself (`core::workflow`, checked by `config::composite`).
    #[serde(default)]
    pub(crate) composite_tools: Vec<switchboard_core::workflow::CompositeSpec>,
    /// Tool pins (`trust.rs`).
    pub(crate) trust: Option<super::trust::TrustSection>,
    /// The default sandbox of command backends (`sandbox.rs`); off when absent.
    pub(crate) sandbox: Option<super::sandbox::SandboxKey>,
    /// Checks on what flows between clients and tools (`switchboard_guard`).
    #[serde(default)]
    pub(crate) guardrails: Vec<switchboard_guard::RuleSpec>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(crate) struct Listen {
    pub(crate) host: Option<String>,
    pub(crate) port: Option<u16>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub(crate) enum IsolationKey {
    Shared,
    PerSession,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(crate) struct Auth {
    /// An `--auth-config` JSON file.
    pub(crate) config_file: Option<PathBuf>,
    pub(crate) api_keys_file: Option<PathBuf>,
    #[serde(default)]
    pub(crate) api_keys: Vec<ApiKey>,
    pub(crate) jwt: Option<Jwt>,
    pub(crate) public_url: Option<String>,
    pub(crate) allow_anonymous_non_loopback: Option<bool>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(crate) struct ApiKey {
    pub(crate) name: String,
    /// The key, normally a `${VAR}` reference.
    pub(crate) key: String,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(crate) struct Jwt {
    pub(crate) issuer: String,
    pub(crate) jwks_url: String,
    #[serde(default)]
    pub(crate) audiences: Vec<String>,
    #[serde(default)]
    pub(crate) algorithms: Vec<String>,
    pub(crate) leeway: Option<Dur>,
    pub(crate) jwks_refresh_cooldown: Option<Dur>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(crate) struct Policy {
    /// A Cedar policy file.
    pub(crate) file: PathBuf,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(crate) struct Audit {
    /// A file to append JSON lines to, or `-` for stdout.
    pub(crate) log: String,
    /// Include params and results, truncated to this many bytes.
    pub(crate) bodies: Option<usize>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(crate) struct Limits {
    pub(crate) max_sessions: Option<usize>,
    pub(crate) max_sessions_per_principal: Option<u64>,
    pub(crate) mrtr_per_principal: Option<u64>,
    pub(crate) max_connections: Option<u64>,
    pub(crate) max_in_flight: Option<usize>,
    pub(crate) max_body_bytes: Option<usize>,
    pub(crate) max_line_bytes: Option<usize>,
    /// `N/s`, `N/m` or `N/h`, per principal.
    pub(crate) rate_limit: Option<String>,
    /// Tool name (or `*`) → rate.
    #[serde(default)]
    pub(crate) tool_rate_limits: BTreeMap<String, String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(crate) struct Timeouts {
    pub(crate) request: Option<Dur>,
    pub(crate) max_request: Option<Dur>,
    pub(crate) session_ttl: Option<Dur>,
    pub(crate) partition_idle: Option<Dur>,
    pub(crate) send: Option<Dur>,
    pub(crate) header_read: Option<Dur>,
    pub(crate) idle: Option<Dur>,
    pub(crate) startup: Option<Dur>,
    pub(crate) listen_grace: Option<Dur>,
    pub(crate) shutdown_grace: Option<Dur>,
    pub(crate) keep_alive: Option<Dur>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(crate) struct Http {
    pub(crate) allowed_hosts: Option<Vec<String>>,
    pub(crate) allowed_origins: Option<Vec<String>>,
    pub(crate) endpoint_prefix: Option<String>,
    pub(crate) trust_forwarded_prefix: Option<bool>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(crate) struct Health {
    pub(crate) probe_interval: Option<Dur>,
    pub(crate) probe_timeout: Option<Dur>,
    pub(crate) ready_when: Option<ReadyWhen>,
    pub(crate) status_open: Option<bool>,
    pub(crate) breaker: Option<Breaker>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) enum ReadyWhen {
    Any,
    All,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(crate) struct Breaker {
    pub(crate) consecutive_failures: Option<u32>,
    pub(crate) failure_rate: Option<f64>,
    pub(crate) cool_down: Option<Dur>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(crate) struct Metrics {
    pub(crate) listen: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(crate) struct SessionStoreSection {
    pub(crate) url: String,
    pub(crate) password_file: Option<PathBuf>,
    pub(crate) key_prefix: Option<String>,
    pub(crate) fallback: Option<StoreFallbackKey>,
    pub(crate) replica_secret_file: Option<PathBuf>,
    pub(crate) replica_url: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(crate) struct TokenStoreSection {
    /// 32 random bytes, mode 0600 or stricter.
    pub(crate) encryption_key_file: PathBuf,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub(crate) enum StoreFallbackKey {
    Refuse,
    Memory,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(crate) struct Traces {
    pub(crate) endpoint: Option<String>,
    pub(crate) service_name: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(crate) struct Aggregation {
    pub(crate) conflict_resolution: Option<ConflictResolution>,
    pub(crate) prefix_format: Option<String>,
    pub(crate) priority: Option<Vec<String>>,
    pub(crate) failure_mode: Option<FailureMode>,
    pub(crate) list_cache_ttl: Option<Dur>,
    /// `on`: `tools/list` shows `find_tools` and `call_tool` instead of the catalog.
    pub(crate) tool_search: Option<Switch>,
}

/// `on`/`off` (or `true`/`false`: YAML 1.1 readers turn a bare `on` into a boolean).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Switch(pub(crate) bool);

impl<'de> Deserialize<'de> for Switch {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Bool(bool),
            Word(String),
        }
        match Raw::deserialize(d)? {
            Raw::Bool(b) => Ok(Switch(b)),
            Raw::Word(w) if w == "on" => Ok(Switch(true)),
            Raw::Word(w) if w == "off" => Ok(Switch(false)),
            Raw::Word(w) => Err(serde::de::Error::custom(format!(
                "expected on or off, found {w:?}"
            ))),
        }
    }
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) enum ConflictResolution {
    /// Prefix only the names that collide.
    #[default]
    Conditional,
    /// Prefix every name.
    Prefix,
    /// Earlier backends in `priority` win; the others' colliding names are dropped.
    Priority,
    /// Every collision needs an override.
    Manual,
}

impl ConflictResolution {
    /// As the file spells it.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            ConflictResolution::Conditional => "conditional",
            ConflictResolution::Prefix => "prefix",
            ConflictResolution::Priority => "priority",
            ConflictResolution::Manual => "manual",
        }
    }
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) enum FailureMode {
    /// A failing backend is left out of lists.
    #[default]
    BestEffort,
    /// A failing backend fails the list.
    Fail,
}

impl FailureMode {
    /// As the file spells it.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            FailureMode::BestEffort => "bestEffort",
            FailureMode::Fail => "fail",
        }
    }
}

/// One backend as written: `command`, `url` or `openapi` (exactly one, checked after the
/// schema).
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(crate) struct BackendEntry {
    pub(crate) name: String,
    pub(crate) command: Option<String>,
    #[serde(default)]
    pub(crate) args: Vec<String>,
    #[serde(default)]
    pub(crate) env: BTreeMap<String, String>,
    pub(crate) cwd: Option<PathBuf>,
    pub(crate) isolation: Option<IsolationKey>,
    /// Processes of the command that share its requests (1 to 64; shared isolation only).
    pub(crate) replicas: Option<u32>,
    pub(crate) url: Option<String>,
    /// A REST API described by an OpenAPI document.
    pub(crate) openapi: Option<OpenApiKey>,
    pub(crate) transport: Option<Transport>,
    #[serde(default)]
    pub(crate) headers: BTreeMap<String, String>,
    pub(crate) headers_file: Option<PathBuf>,
    /// An alias of `auth: {type: passthrough}`.
    #[serde(default)]
    pub(crate) forward_caller_token: bool,
    /// How the gateway authenticates to a remote (`outgoing`).
    pub(crate) auth: Option<BackendAuth>,
    pub(crate) timeout: Option<Dur>,
    #[serde(default)]
    pub(crate) tools: ListSettings,
    #[serde(default)]
    pub(crate) prompts: ListSettings,
    /// This command backend's sandbox (`sandbox.rs`): over the top level's.
    pub(crate) sandbox: Option<super::sandbox::SandboxKey>,
    /// This backend's guardrails, over the top level's by name.
    #[serde(default)]
    pub(crate) guardrails: Vec<switchboard_guard::RuleSpec>,
}

/// `backends[].openapi`: the spec (a file, relative to the config's directory, or an
/// `http(s)` URL) and where its operations are called.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(crate) struct OpenApiKey {
    pub(crate) spec: String,
    pub(crate) base_url: String,
    pub(crate) max_response_bytes: Option<usize>,
}

/// `backends[].auth`: one object whatever the type (which keys each type takes is checked
/// after the schema, in `outgoing`, with messages naming the type).
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(crate) struct BackendAuth {
    #[serde(rename = "type")]
    pub(crate) kind: AuthType,
    pub(crate) token_endpoint: Option<String>,
    pub(crate) client_id: Option<String>,
    pub(crate) client_secret_file: Option<PathBuf>,
    pub(crate) audience: Option<String>,
    #[serde(default)]
    pub(crate) scopes: Vec<String>,
    pub(crate) resource: Option<String>,
    /// oauth: the public https URL of the gateway's Client ID Metadata Document.
    pub(crate) client_metadata_url: Option<String>,
    /// oauth: `client_secret_basic`, `client_secret_post` or `none`.
    pub(crate) token_endpoint_auth: Option<String>,
    /// oauth: the issuer of the only authorization server this backend's tokens (and a
    /// pre-registered client's credentials) may come from or go to.
    pub(crate) authorization_server: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) enum AuthType {
    /// The caller's own token, as presented (`forwardCallerToken`).
    Passthrough,
    /// RFC 8693: the caller's token exchanged for one meant for the backend.
    TokenExchange,
    /// The gateway's own token (RFC 6749 §4.4).
    ClientCredentials,
    /// Per-user OAuth: each principal's own token, after its consent.
    Oauth,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) enum Transport {
    Auto,
    Streamable,
    Sse,
}

/// What one backend exposes of one kind (tools or prompts).
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(crate) struct ListSettings {
    #[serde(default)]
    pub(crate) allow: Vec<String>,
    #[serde(default)]
    pub(crate) deny: Vec<String>,
    pub(crate) default_visibility: Option<Visibility>,
    /// Original name → what to expose instead.
    #[serde(default)]
    pub(crate) overrides: BTreeMap<String, Override>,
}

impl ListSettings {
    /// Whether these settings change anything (a transparent proxy cannot apply them).
    pub(crate) fn is_empty(&self) -> bool {
        self == &ListSettings::default()
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) enum Visibility {
    Allow,
    Deny,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(crate) struct Override {
    pub(crate) name: Option<String>,
    pub(crate) title: Option<String>,
    pub(crate) description: Option<String>,
    /// Replaces the tool's annotations (an object, kept as written).
    pub(crate) annotations: Option<serde_json::Map<String, serde_json::Value>>,
    /// This tool's guardrails, over its backend's by name.
    #[serde(default)]
    pub(crate) guardrails: Vec<switchboard_guard::RuleSpec>,
}

/// A duration: `"250ms"`, `"5s"`, `"2m"`, `"1h"`, `"1.5s"`, or a number of seconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Dur(pub(crate) Duration);

impl<'de> Deserialize<'de> for Dur {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Secs(f64),
            Text(String),
        }
        let parsed = match Raw::deserialize(d)? {
            Raw::Secs(v) => secs(v),
            Raw::Text(t) => parse_duration(&t),
        };
        parsed.map(Dur).map_err(serde::de::Error::custom)
    }
}

fn secs(v: f64) -> Result<Duration, String> {
    Duration::try_from_secs_f64(v).map_err(|_| format!("{v} is not a duration in seconds"))
}

/// Parses `<number><unit>` with unit `ms`, `s`, `m` or `h`.
pub(crate) fn parse_duration(text: &str) -> Result<Duration, String> {
    let t = text.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (number, unit) = t.split_at(split);
    let scale = match unit {
        "ms" => 0.001,
        "s" | "" => 1.0,
        "m" => 60.0,
        "h" => 3600.0,
        _ => {
            return Err(format!(
                "`{text}`: expected a duration like 250ms, 5s, 2m or 1h"
            ))
        }
    };
    let n: f64 = number
        .parse()
        .map_err(|_| format!("`{text}`: expected a duration like 250ms, 5s, 2m or 1h"))?;
    secs(n * scale)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_take_units_or_seconds() {
        let ms = Duration::from_millis;
        assert_eq!(parse_duration("250ms"), Ok(ms(250)));
        assert_eq!(parse_duration("5s"), Ok(ms(5000)));
        assert_eq!(parse_duration("1.5s"), Ok(ms(1500)));
        assert_eq!(parse_duration("2m"), Ok(ms(120_000)));
        assert_eq!(parse_duration("1h"), Ok(ms(3_600_000)));
        assert_eq!(parse_duration("7"), Ok(ms(7000)));
        for bad in ["", "s", "5x", "-1s", "1.2.3s", "5 s"] {
            assert!(parse_duration(bad).is_err(), "{bad}");
        }
        let d: Dur = serde_json::from_str("0.25").unwrap();
        assert_eq!(d.0, ms(250));
        let d: Dur = serde_json::from_str("\"2m\"").unwrap();
        assert_eq!(d.0, ms(120_000));
        assert!(serde_json::from_str::<Dur>("-1").is_err());
    }
}

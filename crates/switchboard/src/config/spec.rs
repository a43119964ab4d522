//! What `run` and `serve` start from: the gateway's options, the backends, and how their
//! lists are merged. `run` builds one from its flags; `serve` from a file, with the flags
//! given on its command line overriding the file.

use std::path::PathBuf;
use std::time::Duration;

use hyper::header::{HeaderName, HeaderValue};
use switchboard_core::BackendId;

use super::model::{ConflictResolution, FailureMode, ListSettings};
use crate::cli::{GatewayArgs, Isolation};
use crate::remote::TransportArg;

/// Everything a gateway is started from.
#[derive(Debug)]
pub(crate) struct ServeSpec {
    pub(crate) options: GatewayArgs,
    /// In configured order (never empty).
    pub(crate) backends: Vec<BackendSpec>,
    pub(crate) aggregation: AggregationSpec,
    /// `compositeTools`, compiled (they need the aggregating core).
    pub(crate) composites: Vec<std::sync::Arc<switchboard_core::workflow::Plan>>,
    /// Tool pins (`serve` only; `run` passes lists through).
    pub(crate) trust: super::trust::TrustSpec,
    /// The file this came from, watched for hot reload (`serve` only).
    pub(crate) watched: Option<crate::reload::Watched>,
    /// The gateway's guardrails (`guardrails`); webhook secret files made absolute.
    pub(crate) guardrails: Vec<switchboard_guard::RuleSpec>,
}

/// One backend. Holds expanded secrets (env values, headers, URL): never print it whole.
#[derive(Debug)]
pub(crate) struct BackendSpec {
    pub(crate) name: BackendId,
    pub(crate) kind: BackendKind,
    /// Its own request deadline (the core's per-backend deadline; with one backend, the
    /// gateway's `--request-timeout`).
    pub(crate) timeout: Option<Duration>,
    pub(crate) tools: ListSettings,
    pub(crate) prompts: ListSettings,
    /// Its guardrails, over the gateway's by name (`guardrails`).
    pub(crate) guardrails: Vec<switchboard_guard::RuleSpec>,
}

impl BackendSpec {
    /// Whether serving it needs the aggregating core (a transparent proxy would silently
    /// ignore filters and overrides, exposing what the operator meant to hide).
    pub(crate) fn needs_catalog(&self) -> bool {
        !self.tools.is_empty()
            || !self.prompts.is_empty()
            || matches!(&self.kind, BackendKind::Remote(r) if r.auth.acts_as_caller())
    }

    /// Whether it keeps tokens per principal (`auth: oauth`), which anonymous callers, all
    /// one principal, would share.
    pub(crate) fn per_user(&self) -> bool {
        matches!(&self.kind, BackendKind::Remote(r)
            if matches!(r.auth, switchboard_upstream::outgoing_auth::OutgoingAuth::OAuth(_)))
    }
}

#[derive(Debug)]
pub(crate) enum BackendKind {
    Stdio(StdioSpec),
    Remote(RemoteSpec),
    OpenApi(OpenApiSpec),
}

#[derive(Debug, Clone)]
pub(crate) struct StdioSpec {
    pub(crate) program: String,
    pub(crate) args: Vec<String>,
    pub(crate) env: Vec<(String, String)>,
    pub(crate) cwd: Option<PathBuf>,
    pub(crate) isolation: Isolation,
    /// How many processes of the command share its requests (`replicas`, 1 unless asked).
    pub(crate) replicas: usize,
    /// Where it runs contained (`sandbox:`); `None`: as the gateway's own child.
    pub(crate) sandbox: Option<std::sync::Arc<switchboard_upstream::sandbox::Sandbox>>,
}

#[derive(Debug)]
pub(crate) struct RemoteSpec {
    /// With references expanded: used, never shown.
    pub(crate) url: String,
    /// As written (`https://host/mcp?key=${KEY}`): what logs and messages show.
    pub(crate) shown_url: String,
    /// Where it was configured, for errors (`--url`, `backends[1].url`).
    pub(crate) label: String,
    pub(crate) transport: TransportArg,
    pub(crate) headers: Vec<(HeaderName, HeaderValue)>,
    /// What it sends as `Authorization` per call (`auth`, `--upstream-auth`).
    pub(crate) auth: switchboard_upstream::outgoing_auth::OutgoingAuth,
    /// `auth`'s settings as text, for the reload diff (a keyed digest of the secret, never it).
    pub(crate) auth_fingerprint: String,
}

/// A REST API whose operations are tools (`openapi:`).
#[derive(Debug)]
pub(crate) struct OpenApiSpec {
    /// Where the spec is read from.
    pub(crate) source: SpecSource,
    /// The spec as written (`specs/pets.yaml`, a URL with its `${VAR}`s): what messages show.
    pub(crate) shown_spec: String,
    /// With references expanded: used, never shown.
    pub(crate) base_url: String,
    /// The values of the references in the base URL: never to come back in a result.
    pub(crate) url_secrets: Vec<String>,
    pub(crate) headers: Vec<(HeaderName, HeaderValue)>,
    pub(crate) max_response_bytes: Option<usize>,
    /// A file's spec, read and converted with the config (so on every reload too); a URL's
    /// is fetched when the backend starts.
    pub(crate) loaded: Option<LoadedSpec>,
}

#[derive(Debug, Clone)]
pub(crate) enum SpecSource {
    File(PathBuf),
    /// Expanded (it may carry a `${VAR}`).
    Url(String),
}

/// A spec converted to tools.
#[derive(Debug, Clone)]
pub(crate) struct LoadedSpec {
    pub(crate) catalog: std::sync::Arc<switchboard_upstream::openapi::Catalog>,
    /// The operations left out, each naming itself, where it is and why.
    pub(crate) skipped: Vec<switchboard_upstream::openapi::Skipped>,
    /// A digest of the document, so a reload notices the spec changed.
    pub(crate) digest: String,
}

impl LoadedSpec {
    /// Converts `doc`; an error names the place in the spec (`#/paths/~1pets/get`).
    pub(crate) fn convert(
        doc: &serde_json::Value,
    ) -> Result<LoadedSpec, switchboard_upstream::openapi::SpecError> {
        use sha2::Digest as _;
        let (catalog, skipped) = switchboard_upstream::openapi::Catalog::from_document(doc)?;
        let digest = sha2::Sha256::digest(doc.to_string().as_bytes());
        Ok(LoadedSpec {
            catalog: std::sync::Arc::new(catalog),
            skipped,
            digest: digest.iter().map(|b| format!("{b:02x}")).collect(),
        })
    }
}

/// How many backends' lists become one (the aggregating core's input).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct AggregationSpec {
    pub(crate) conflict_resolution: ConflictResolution,
    pub(crate) prefix_format: String,
    /// Backend names, first wins (default: configured order).
    pub(crate) priority: Vec<BackendId>,
    pub(crate) failure_mode: FailureMode,
    pub(crate) list_cache_ttl: Duration,
    pub(crate) tool_search: bool,
}

impl AggregationSpec {
    /// The defaults, for `backends` in configured order.
    pub(crate) fn defaults(backends: &[BackendSpec]) -> Self {
        AggregationSpec {
            conflict_resolution: ConflictResolution::Conditional,
            prefix_format: "{backend}_".to_owned(),
            priority: backends.iter().map(|b| b.name.clone()).collect(),
            failure_mode: FailureMode::BestEffort,
            list_cache_ttl: Duration::from_secs(5),
            tool_search: false,
        }
    }

    /// From the file's `aggregation`, with the defaults where it is silent.
    pub(crate) fn from_file(
        file: Option<&super::model::Aggregation>,
        backends: &[BackendSpec],
    ) -> Self {
        let mut spec = Self::defaults(backends);
        let Some(a) = file else { return spec };
        spec.conflict_resolution = a.conflict_resolution.unwrap_or_default();
        if let Some(f) = &a.prefix_format {
            spec.prefix_format.clone_from(f);
        }
        if let Some(p) = &a.priority {
            // Named ones first (checked to exist), then the rest in configured order.
            let mut order: Vec<BackendId> = p.iter().filter_map(|n| n.parse().ok()).collect();
            for b in backends {
                if !order.contains(&b.name) {
                    order.push(b.name.clone());
                }
            }
            spec.priority = order;
        }
        spec.failure_mode = a.failure_mode.unwrap_or_default();
        if let Some(t) = a.list_cache_ttl {
            spec.list_cache_ttl = t.0;
        }
        spec.tool_search = a.tool_search.is_some_and(|s| s.0);
        spec
    }
}

impl crate::cli::RunArgs {
    /// `run`'s one backend: the command after `--` (the built-in fixture if none), or
    /// `--url`, named `default`.
    pub(crate) fn into_spec(self) -> anyhow::Result<ServeSpec> {
        let kind = match &self.remote.url {
            Some(url) => {
                let headers = self.remote.headers()?;
                let auth = self.remote.outgoing(&headers)?;
                BackendKind::Remote(RemoteSpec {
                    url: url.clone(),
                    shown_url: shown(url),
                    label: format!("--url {}", shown(url)),
                    transport: self.remote.transport,
                    headers,
                    auth: auth.auth,
                    auth_fingerprint: auth.fingerprint,
                })
            }
            None => {
                let (program, args) = match self.command.split_first() {
                    Some((program, rest)) => (program.clone(), rest.to_vec()),
                    None => (fixture_program()?, vec!["fixture".to_owned()]),
                };
                if let Some(dir) = &self.cwd {
                    // Checked here: a spawn error would only say "No such file or directory".
                    anyhow::ensure!(dir.is_dir(), "--cwd {}: not a directory", dir.display());
                }
                BackendKind::Stdio(StdioSpec {
                    program,
                    args,
                    env: self.env,
                    cwd: self.cwd,
                    isolation: self.gateway.isolation,
                    replicas: 1,
                    sandbox: None,
                })
            }
        };
        let backends = vec![BackendSpec {
            name: BackendId::default_id(),
            kind,
            timeout: None,
            tools: ListSettings::default(),
            prompts: ListSettings::default(),
            guardrails: Vec::new(),
        }];
        let aggregation = AggregationSpec::defaults(&backends);
        if self.gateway.trust.given() {
            // A transparent proxy passes lists through raw: there is no catalog to pin in.
            tracing::warn!("--trust/--trust-state apply to `serve` only; `run` does not pin tools");
        }
        Ok(ServeSpec {
            options: self.gateway,
            backends,
            aggregation,
            composites: Vec::new(),
            trust: Default::default(),
            watched: None,
            guardrails: match &self.guardrails {
                Some(path) => crate::guardrails::load_file(path)?,
                None => Vec::new(),
            },
        })
    }
}

/// A `--url` as logs and messages show it (without a query or user info).
pub(crate) use switchboard_upstream::remote::shown_url as shown;

/// This binary, which runs the built-in fixture as `switchboard fixture`.
fn fixture_program() -> anyhow::Result<String> {
    use anyhow::Context;
    let me = std::env::current_exe()
        .context("cannot locate the switchboard binary for the built-in fixture")?;
    Ok(me.to_string_lossy().into_owned())
}

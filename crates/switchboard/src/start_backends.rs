//! Starting the backends a spec names: each connected and handshaken (in parallel), with
//! what keeps it running (a supervised process, the gateway's own upstream session) and,
//! for one transparent backend, how sessions get their own.

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;

use switchboard_core::catalog::{self, BackendRules, Conflict, Strategy};
use switchboard_core::{
    Backend, BackendId, EraPolicy, FailureMode, Registry, SpawnBackend, VmcpConfig,
};
use switchboard_upstream::sandbox::Homes;
use switchboard_upstream::StdioConfig;

use crate::app::{FDS_PER_BACKEND, FDS_PER_REMOTE_SESSION};
use crate::cli::{GatewayArgs, Isolation};
use crate::config::model::{ConflictResolution, ListSettings};
use crate::config::spec::{AggregationSpec, BackendKind, BackendSpec, StdioSpec};

/// Every backend started, and what the app keeps to run and stop them.
pub(crate) struct StartedSet {
    /// In the order asked for (names distinct).
    pub(crate) backends: Vec<(BackendId, Backend)>,
    /// Shared processes by backend, for their supervisors.
    pub(crate) processes: Vec<(BackendId, Supervised)>,
    /// The gateway's own upstream sessions, ended on shutdown.
    pub(crate) internals: Vec<(BackendId, switchboard_upstream::UpstreamOwner)>,
    /// The backends whose sessions get their own upstream, and how each starts one (`run`:
    /// at most the one transparent backend).
    pub(crate) per_session: Vec<(BackendId, Arc<dyn SpawnBackend>)>,
    /// File descriptors one session may hold in backends of its own (all of them opened).
    pub(crate) fds_per_session: u64,
    /// The backends that did not start, with why, in the order asked for: the caller decides
    /// whether the set serves without them.
    pub(crate) failed: Vec<(BackendId, anyhow::Error)>,
}

/// Why a backend did not start, for `/status`: whether the remote refused the gateway's
/// credential, and fixed words (never a remote's text or a URL).
pub(crate) fn failure_words(e: &anyhow::Error) -> (bool, String) {
    use switchboard_core::CoreError;
    use switchboard_upstream::{remote::RemoteError, UpstreamError};
    for cause in e.chain() {
        let upstream = match cause.downcast_ref::<CoreError>() {
            Some(CoreError::Backend(u) | CoreError::OfBackend(_, u)) => Some(u),
            _ => cause.downcast_ref::<UpstreamError>(),
        };
        match upstream {
            Some(UpstreamError::Remote(RemoteError::Status { status, .. }))
                if matches!(status, 401 | 403) =>
            {
                return (
                    true,
                    format!("failed to start: remote answered HTTP {status}"),
                );
            }
            Some(u @ UpstreamError::Spawn { .. }) => return (false, u.to_string()),
            Some(u) => return (false, format!("failed to start: {}", u.client_text())),
            None => {}
        }
    }
    (false, "failed to start: it did not become ready".to_owned())
}

impl StartedSet {
    /// Stops what was started and will not be served (a refused reload): processes get
    /// their grace, the gateway's own upstream sessions are ended.
    pub(crate) async fn shutdown(
        processes: Vec<(BackendId, Supervised)>,
        internals: Vec<(BackendId, switchboard_upstream::UpstreamOwner)>,
    ) {
        for (_, internal) in internals {
            internal.shutdown(Duration::from_secs(2)).await;
        }
        for (_, p) in processes {
            p.process.shutdown(Duration::from_secs(2)).await;
        }
    }
}

/// Starts every backend, in parallel. `aggregate`: named by their configured names (else the
/// one backend is `default`), and refused where the aggregating core cannot serve them yet.
pub(crate) async fn start_all(
    args: &GatewayArgs,
    origins: Vec<(BackendId, Origin)>,
    aggregate: bool,
    registry: &Arc<Registry>,
) -> anyhow::Result<StartedSet> {
    let ids: Vec<BackendId> = origins
        .iter()
        .map(|(name, _)| {
            if aggregate {
                name.clone()
            } else {
                BackendId::default_id()
            }
        })
        .collect();
    let starts = origins.into_iter().map(|(name, origin)| async move {
        let id = if aggregate {
            name
        } else {
            BackendId::default_id()
        };
        let started = match origin {
            Origin::Stdio(stdio, isolation, 1) => {
                start_stdio(args, stdio, isolation, registry, &id).await
            }
            Origin::Stdio(stdio, _, replicas) => {
                crate::start_replicas::start(args, stdio, replicas, registry, &id).await
            }
            Origin::Remote(endpoint, transport, shown) => {
                start_remote(args, endpoint, transport, &shown, registry, &id).await
            }
            Origin::OpenApi(origin) => start_openapi(args, origin, &id).await,
        };
        started
            .with_context(|| format!("backend {id}"))
            .map(|s| (id, s))
    });
    let all = futures::future::join_all(starts).await;
    let mut processes = Vec::new();
    let mut internals = Vec::new();
    let mut per_session = Vec::new();
    let mut fds_per_session = 0;
    let mut list = Vec::new();
    let mut failed = Vec::new();
    for (one, id) in all.into_iter().zip(ids) {
        match one {
            Ok((id, started)) => list.push((id, started)),
            Err(e) => failed.push((id, e)),
        }
    }
    let mut backends = Vec::new();
    for (id, mut started) in list {
        println!(
            "switchboard: backend {id} ready: {} (protocol {}, era {})",
            started.backend.info.server_info,
            started.backend.info.protocol_version,
            started.backend.info.era
        );
        if aggregate {
            in_a_set(&mut started);
        }
        // A Modern-only backend answers no `initialize`: a session cannot open one of its
        // own, and a process per Legacy client would gain nothing. Legacy clients reach it as
        // in shared mode, through the gateway's envelope (and its input relay), statelessly.
        // A remote connected Modern first keeps its spawner: the first Legacy client asks
        // whether it speaks Legacy too (`per_session::legacy` in the core).
        let unprobed = started.backend.legacy_unprobed;
        if unprobed && started.per_session.is_some() {
            println!("switchboard: backend {id} speaks 2026-07-28; whether it also speaks 2025-11-25 is asked when the first Legacy client arrives");
        }
        if !started.backend.info.era.legacy && !unprobed && started.per_session.take().is_some() {
            println!("switchboard: backend {id} speaks only 2026-07-28: Legacy sessions share it through the gateway's relay, not a process or upstream session each");
        }
        if let Some(spawner) = started.per_session.take() {
            fds_per_session += started.fds_per_session;
            per_session.push((id.clone(), spawner));
        }
        internals.extend(started.internal.take().map(|i| (id.clone(), i)));
        for p in std::mem::take(&mut started.processes) {
            processes.push((id.clone(), p));
        }
        backends.push((id, started.backend));
    }
    Ok(StartedSet {
        backends,
        processes,
        internals,
        per_session,
        fds_per_session: fds_per_session.max(FDS_PER_BACKEND),
        failed,
    })
}

/// In a set, a remote that answers Modern requests is reached statelessly through one shared
/// handle (Legacy clients through the gateway's envelope); a Legacy-only remote and an
/// `isolation: per-session` process give each Legacy session its own upstream, opened on
/// first use, and each Modern caller a partition of its own.
fn in_a_set(started: &mut Started) {
    let era = started.backend.info.era;
    if started.remote && era.modern {
        started.per_session = None;
        started.backend.info.era.legacy = false;
    }
}

/// The aggregating core's settings from the file's.
pub(crate) fn vmcp_config(aggregation: &AggregationSpec, backends: &[BackendSpec]) -> VmcpConfig {
    let conflict = match aggregation.conflict_resolution {
        ConflictResolution::Conditional => Conflict::Conditional,
        ConflictResolution::Prefix => Conflict::Prefix,
        ConflictResolution::Priority => Conflict::Priority,
        ConflictResolution::Manual => Conflict::Manual,
    };
    VmcpConfig {
        strategy: Strategy {
            conflict,
            prefix_format: aggregation.prefix_format.clone(),
            priority: aggregation.priority.clone(),
        },
        rules: backends
            .iter()
            .map(|b| {
                let rules = BackendRules {
                    tools: filter(&b.tools),
                    prompts: filter(&b.prompts),
                };
                (b.name.clone(), rules)
            })
            .collect(),
        failure_mode: match aggregation.failure_mode {
            crate::config::model::FailureMode::BestEffort => FailureMode::BestEffort,
            crate::config::model::FailureMode::Fail => FailureMode::Fail,
        },
        list_ttl: aggregation.list_cache_ttl,
        tool_search: aggregation.tool_search,
        ..VmcpConfig::default()
    }
}

fn filter(settings: &ListSettings) -> catalog::Filter {
    catalog::Filter {
        allow: settings.allow.clone(),
        deny: settings.deny.clone(),
        default_visibility: settings.default_visibility.map(|v| match v {
            crate::config::model::Visibility::Allow => catalog::Visibility::Allow,
            crate::config::model::Visibility::Deny => catalog::Visibility::Deny,
        }),
        overrides: settings
            .overrides
            .iter()
            .map(|(name, o)| {
                let o = catalog::Override {
                    name: o.name.clone(),
                    title: o.title.clone(),
                    description: o.description.clone(),
                    annotations: o.annotations.clone().map(serde_json::Value::Object),
                };
                (name.clone(), o)
            })
            .collect(),
    }
}

/// What decides the defaults that depend on the backend: its isolation, and whether it is
/// remote (an upstream session costs the remote, not a process here).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Shape {
    pub(crate) isolation: Isolation,
    pub(crate) remote: bool,
}

impl Shape {
    fn of(backend: &BackendSpec) -> Shape {
        match &backend.kind {
            BackendKind::Stdio(s) => Shape {
                isolation: s.isolation,
                remote: false,
            },
            BackendKind::Remote(_) => Shape {
                isolation: Isolation::PerSession,
                remote: true,
            },
            // In process and stateless: one handle serves every session and caller.
            BackendKind::OpenApi(_) => Shape {
                isolation: Isolation::Shared,
                remote: false,
            },
        }
    }

    /// The shape of a spec's backends: one transparent backend's own; a set's is per-session
    /// when a process is started per session somewhere (the session bound then counts
    /// processes); else a remote's when it has one (a Legacy-only remote holds an upstream
    /// session per client session: its connections count, as in `run --url`); else shared.
    pub(crate) fn of_all(backends: &[BackendSpec], aggregate: bool) -> Shape {
        let shapes: Vec<Shape> = backends.iter().map(Shape::of).collect();
        let per_session = Shape {
            isolation: Isolation::PerSession,
            remote: false,
        };
        match shapes[..] {
            [one] if !aggregate => one,
            _ if shapes
                .iter()
                .any(|s| !s.remote && s.isolation == Isolation::PerSession) =>
            {
                per_session
            }
            _ if shapes.iter().any(|s| s.remote) => Shape {
                remote: true,
                ..per_session
            },
            _ => Shape {
                isolation: Isolation::Shared,
                remote: false,
            },
        }
    }
}

/// What the backend is: a local command or a remote URL (checked before anything starts).
pub(crate) enum Origin {
    /// The command, how sessions share it, and how many processes serve it (`replicas`).
    Stdio(StdioConfig, Isolation, usize),
    /// The endpoint, the transport to try, and the URL as configured (shown, never the
    /// expanded one).
    Remote(
        switchboard_upstream::remote::RemoteEndpoint,
        crate::remote::TransportArg,
        String,
    ),
    /// A REST API (`openapi:`).
    OpenApi(OpenApiOrigin),
}

/// What an OpenAPI backend starts from: its spec (converted, or a URL to fetch it from) and
/// where calls go.
pub(crate) struct OpenApiOrigin {
    loaded: Option<crate::config::spec::LoadedSpec>,
    source: crate::config::spec::SpecSource,
    shown_spec: String,
    config: switchboard_upstream::openapi::OpenApiConfig,
}

impl Origin {
    /// `homes`: every sandboxed backend's home (the others' are hidden in each sandbox).
    pub(crate) fn of(
        args: &GatewayArgs,
        backend: &BackendSpec,
        homes: &Homes,
    ) -> anyhow::Result<Origin> {
        let remote = match &backend.kind {
            BackendKind::Stdio(stdio) => {
                let mut config = stdio_config(args, stdio);
                config.homes = homes.clone();
                return Ok(Origin::Stdio(config, stdio.isolation, stdio.replicas));
            }
            BackendKind::OpenApi(o) => return Ok(Origin::OpenApi(openapi_origin(args, o))),
            BackendKind::Remote(r) => r,
        };
        // Progress restarts the gateway's request deadline (which then drops the call), so a
        // remote call itself is bounded only by the whole-request bound.
        let config = crate::remote::remote_config(
            remote,
            GatewayArgs::secs(args.max_request_time),
            GatewayArgs::secs(args.request_timeout),
        );
        let endpoint = switchboard_upstream::remote::RemoteEndpoint::new(config)
            .with_context(|| remote.label.clone())?;
        Ok(Origin::Remote(
            endpoint,
            remote.transport,
            remote.shown_url.clone(),
        ))
    }
}

/// A backend connected and ready to serve, and what keeps it so.
pub(crate) struct Started {
    pub(crate) backend: Backend,
    /// The shared processes (one, or `replicas`) and what their supervisors need to restart
    /// them.
    pub(crate) processes: Vec<Supervised>,
    /// The gateway's own upstream session (see `Backend::internal`), ended on shutdown.
    pub(crate) internal: Option<switchboard_upstream::UpstreamOwner>,
    /// How to open a session's own backend, when sessions get one.
    pub(crate) per_session: Option<Arc<dyn SpawnBackend>>,
    /// File descriptors one session's own backend may hold (for the connection bound).
    pub(crate) fds_per_session: u64,
    /// A remote MCP server (reached statelessly in a set when it answers Modern requests).
    pub(crate) remote: bool,
}

pub(crate) struct Supervised {
    pub(crate) handle: switchboard_upstream::StdioHandle,
    pub(crate) config: StdioConfig,
    pub(crate) sink: Arc<dyn switchboard_upstream::InboundSink>,
    pub(crate) process: switchboard_upstream::StdioProcess,
    /// Which of a replicated backend's processes it is.
    pub(crate) replica: Option<usize>,
}

/// A command backend's program and arguments as the startup line shows them.
pub(crate) fn command_line(stdio: &StdioConfig) -> String {
    std::iter::once(stdio.program.as_str())
        .chain(stdio.args.iter().map(String::as_str))
        .collect::<Vec<_>>()
        .join(" ")
}

async fn start_stdio(
    args: &GatewayArgs,
    stdio: StdioConfig,
    isolation: Isolation,
    registry: &Arc<Registry>,
    id: &BackendId,
) -> anyhow::Result<Started> {
    let shown = command_line(&stdio);
    println!("switchboard: starting backend: {shown}");
    if let Some(sandbox) = &stdio.sandbox {
        println!(
            "switchboard: backend {id} sandboxed: {}",
            sandbox.describe()
        );
    }
    // Per-session: the shared process serves callers too (sessionless and Modern requests),
    // so what it writes must not become the home every caller's own process starts from: it
    // gets a private home as they do, and the backend's home is only ever the seed.
    let stdio = StdioConfig {
        private_home: isolation == Isolation::PerSession,
        ..stdio
    };
    let sink = registry.sink_for(id);
    let (handle, process) = switchboard_upstream::spawn(&stdio, sink.clone())?;
    let upstream = switchboard_upstream::Upstream::Stdio(handle.clone());
    let timeout = GatewayArgs::secs(args.startup_timeout);
    let backend = match Backend::connect(upstream, timeout, EraPolicy::Auto).await {
        Ok(b) => b,
        Err(e) => {
            process.shutdown(Duration::from_secs(2)).await;
            let tail = handle.stderr_tail();
            if !tail.is_empty() {
                eprintln!("switchboard: the backend's last stderr lines:");
                for line in tail {
                    eprintln!("  | {line}");
                }
            }
            return Err(e).context("backend did not become ready");
        }
    };
    // Each of them serves one caller: a home of its own, as the shared process has.
    let per_session = (isolation == Isolation::PerSession)
        .then(|| Arc::new(Spawner(stdio.clone())) as Arc<dyn SpawnBackend>);
    Ok(Started {
        backend,
        internal: None,
        processes: vec![Supervised {
            handle,
            config: stdio,
            sink,
            process,
            replica: None,
        }],
        per_session,
        fds_per_session: FDS_PER_BACKEND,
        remote: false,
    })
}

async fn start_remote(
    args: &GatewayArgs,
    endpoint: switchboard_upstream::remote::RemoteEndpoint,
    transport: crate::remote::TransportArg,
    shown_url: &str,
    registry: &Arc<Registry>,
    id: &BackendId,
) -> anyhow::Result<Started> {
    println!("switchboard: connecting to remote: {shown_url}");
    let timeout = GatewayArgs::secs(args.startup_timeout);
    let (backend, internal, endpoint) =
        crate::remote::connect_with(endpoint, transport, &registry.sink_for(id), timeout).await?;
    Ok(Started {
        backend,
        processes: Vec::new(),
        internal,
        per_session: Some(Arc::new(crate::remote::RemoteSpawner(endpoint))),
        fds_per_session: FDS_PER_REMOTE_SESSION,
        remote: true,
    })
}

fn openapi_origin(args: &GatewayArgs, spec: &crate::config::spec::OpenApiSpec) -> OpenApiOrigin {
    let mut config = switchboard_upstream::openapi::OpenApiConfig::new(spec.base_url.clone());
    config.headers.clone_from(&spec.headers);
    config.secrets.clone_from(&spec.url_secrets);
    // Bounded by the whole-request bound, as a remote's calls are (the gateway's own
    // deadline cancels a call earlier).
    config.call_timeout = GatewayArgs::secs(args.max_request_time);
    // An answer is bounded as a stdio backend's line is.
    config.max_result_bytes = args.max_line_bytes;
    if let Some(limit) = spec.max_response_bytes {
        config.max_response_bytes = limit;
    }
    OpenApiOrigin {
        loaded: spec.loaded.clone(),
        source: spec.source.clone(),
        shown_spec: spec.shown_spec.clone(),
        config,
    }
}

/// Starts an OpenAPI backend: its spec fetched when it is a URL, its skipped operations
/// reported, then probed and handshaken like any backend (it answers both eras).
async fn start_openapi(
    args: &GatewayArgs,
    origin: OpenApiOrigin,
    id: &BackendId,
) -> anyhow::Result<Started> {
    println!(
        "switchboard: backend {id}: OpenAPI spec {}",
        origin.shown_spec
    );
    let timeout = GatewayArgs::secs(args.startup_timeout);
    let loaded = match load_spec(origin.loaded, &origin.source, &origin.shown_spec, timeout).await {
        Ok(loaded) => loaded,
        Err(e) => {
            // The spec as configured and the place in it: never an expanded secret.
            println!("switchboard: backend {id}: the OpenAPI spec cannot be served: {e:#}");
            tracing::warn!(backend = %id, "the OpenAPI spec cannot be served: {e:#}");
            return Err(e);
        }
    };
    for skipped in &loaded.skipped {
        println!("switchboard: backend {id}: operation skipped: {skipped}");
        tracing::warn!(backend = %id, operation = %skipped.operation, pointer = %skipped.pointer,
            why = %skipped.why, "OpenAPI operation skipped");
    }
    let upstream =
        switchboard_upstream::openapi::OpenApiUpstream::new(loaded.catalog, origin.config)?;
    let handle = switchboard_upstream::Upstream::OpenApi(upstream);
    let backend = Backend::connect(handle, timeout, EraPolicy::Auto)
        .await
        .context("backend did not become ready")?;
    Ok(Started {
        backend,
        processes: Vec::new(),
        internal: None,
        per_session: None,
        fds_per_session: FDS_PER_BACKEND,
        remote: false,
    })
}

/// A spec read with the config, or fetched and converted now.
async fn load_spec(
    loaded: Option<crate::config::spec::LoadedSpec>,
    source: &crate::config::spec::SpecSource,
    shown: &str,
    timeout: std::time::Duration,
) -> anyhow::Result<crate::config::spec::LoadedSpec> {
    use crate::config::spec::{LoadedSpec, SpecSource};
    match (loaded, source) {
        (Some(loaded), _) => Ok(loaded),
        (None, SpecSource::Url(url)) => {
            let text = switchboard_upstream::openapi::fetch(url, shown, timeout).await?;
            // Bounded, but up to seconds of CPU for a hostile spec: never on a runtime worker.
            let convert = move || {
                switchboard_upstream::openapi::parse(&text)
                    .and_then(|doc| LoadedSpec::convert(&doc))
            };
            tokio::task::spawn_blocking(convert)
                .await
                .context("converting the spec")?
                .map_err(|e| anyhow::anyhow!("{shown}{}: {}", e.pointer, e.message))
        }
        (None, SpecSource::File(path)) => {
            anyhow::bail!("the spec {} was not read", path.display())
        }
    }
}

/// Starts a session's own backend (per-session isolation) from the same command line.
#[derive(Debug)]
struct Spawner(StdioConfig);

impl SpawnBackend for Spawner {
    fn spawn(
        &self,
        sink: Arc<dyn switchboard_upstream::InboundSink>,
    ) -> Result<
        (
            switchboard_upstream::Upstream,
            switchboard_upstream::UpstreamOwner,
        ),
        switchboard_upstream::UpstreamError,
    > {
        switchboard_upstream::spawn_stdio(&self.0, sink)
    }
}

/// The homes of the sandboxed backends of `backends`.
pub(crate) fn sandbox_homes(backends: &[BackendSpec]) -> Vec<std::path::PathBuf> {
    backends
        .iter()
        .filter_map(|b| match &b.kind {
            BackendKind::Stdio(s) => s.sandbox.as_ref().map(|s| s.home.clone()),
            _ => None,
        })
        .collect()
}

pub(crate) fn stdio_config(args: &GatewayArgs, stdio: &StdioSpec) -> StdioConfig {
    let mut config = StdioConfig::new(stdio.program.clone(), stdio.args.clone());
    config.max_line_bytes = args.max_line_bytes;
    config.env.clone_from(&stdio.env);
    config.cwd.clone_from(&stdio.cwd);
    config.withheld = crate::config_vars::withheld();
    config.sandbox.clone_from(&stdio.sandbox);
    config
}

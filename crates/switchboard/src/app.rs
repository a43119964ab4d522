//! `switchboard run` and `serve`: start the backend, initialize it, serve, shut down in
//! order. Both start from a [`ServeSpec`]; one backend is served as a transparent proxy.

use std::time::Duration;

use anyhow::Context;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use switchboard_core::{Gateway, GatewayConfig};
use switchboard_http::{AppState, ConnLimits, HttpConfig, OriginPolicy};

use crate::cli::{GatewayArgs, Isolation, RunArgs};
use crate::config::ServeSpec;
use crate::reload::{Reloader, Served};
use crate::running::RunningSet;
use crate::start_backends::{Origin, Shape};

/// `switchboard run`: one backend from the command line.
pub(crate) async fn run(args: RunArgs) -> anyhow::Result<()> {
    let spec = args.into_spec()?;
    if needs_catalog(&spec)? {
        start_many(spec).await
    } else {
        start(spec).await
    }
}

/// `switchboard serve`: one backend is served exactly as `run` serves it; more need the
/// aggregating core (as does one whose lists are filtered or renamed).
pub(crate) async fn serve(spec: ServeSpec) -> anyhow::Result<()> {
    match spec.backends.as_slice() {
        [one] if !one.needs_catalog() && !needs_catalog(&spec)? => start(spec).await,
        _ => start_many(spec).await,
    }
}

/// Whether a setting of the whole spec needs the aggregating core even for one backend: a
/// transparent proxy cannot honour it, and a setting must never be silently ignored.
/// - trust: pins live in the catalog;
/// - composite tools and tool search: the gateway's own tools;
/// - a policy: it may name a tool's `backend` and `original` name, which only the catalog
///   knows, and a tool it hides must be answered exactly as a missing one, which only a
///   gateway that knows what exists can do (so `run --policy` aggregates its one backend too:
///   a missing name the policy permits would otherwise get the backend's own words).
fn needs_catalog(spec: &ServeSpec) -> anyhow::Result<bool> {
    let trusted =
        spec.trust.explicit && spec.trust.config.mode != switchboard_core::trust::TrustMode::Off;
    // The policy may come from the flag or from `--auth-config`'s file.
    let auth = spec.options.auth.resolve()?;
    let policy = spec.options.auth.policy_path(&auth).is_some();
    Ok(trusted || !spec.composites.is_empty() || spec.aggregation.tool_search || policy)
}

/// Many backends behind one endpoint (or one whose lists are filtered or renamed): the
/// aggregating core.
pub(crate) async fn start_many(spec: ServeSpec) -> anyhow::Result<()> {
    start_with(spec, true).await
}

/// Serves the spec's one backend as a transparent proxy.
async fn start(spec: ServeSpec) -> anyhow::Result<()> {
    anyhow::ensure!(
        spec.backends.len() == 1,
        "expected one backend, got {}",
        spec.backends.len()
    );
    start_with(spec, false).await
}

/// Who keeps the backends running while serving: the reload worker (a config file is
/// watched) or `serve` itself.
enum Keepers {
    Reloading(tokio::task::JoinHandle<RunningSet>),
    Fixed(RunningSet, Option<tokio::task::JoinHandle<()>>),
}

async fn start_with(spec: ServeSpec, aggregate: bool) -> anyhow::Result<()> {
    // Read once: the guardrails are built with the secrets a reload's key compares against.
    let secrets = crate::guardrails::secrets(&spec.guardrails, &spec.backends)?;
    let served = Served::of(&spec, &secrets);
    let ServeSpec {
        options: args,
        backends,
        aggregation,
        composites,
        trust,
        watched,
        guardrails,
    } = spec;
    let shape = Shape::of_all(&backends, aggregate);
    // Identity, policy and audit settings are checked before anything starts.
    let auth = args.auth.resolve()?;
    let per_user = backends
        .iter()
        .any(crate::config::spec::BackendSpec::per_user);
    args.auth.check_anonymous(&auth, &args.host, per_user)?;
    // What a reload that adds a per-user backend is told, where this identity and address
    // would let anonymous callers share one user's tokens (checked once: neither reloads).
    let per_user_refused = args
        .auth
        .check_anonymous(&auth, &args.host, true)
        .err()
        .map(|e| e.to_string());
    let (access, policy) = args.auth.access(&auth)?;
    // Every sandboxed backend's home, known to all before any starts (reloads add theirs).
    let homes = switchboard_upstream::sandbox::Homes::default();
    homes.add(crate::start_backends::sandbox_homes(&backends));
    let origins = backends
        .iter()
        .map(|b| Ok((b.name.clone(), Origin::of(&args, b, &homes)?)))
        .collect::<anyhow::Result<Vec<_>>>()?;
    // Installed before anything listens: from here a SIGHUP reloads (or is ignored), never
    // ends the process.
    let hangup = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup()).ok();
    // The address is claimed before any backend starts: a busy port is reported at once, and
    // leaves no backend process behind.
    let listener = bind(&args.host, args.port)
        .await
        .with_context(|| format!("cannot listen on {}:{}", args.host, args.port))?;
    let metrics_listener = match &args.ops.metrics_listen {
        Some(addr) => Some(
            TcpListener::bind(addr.as_str())
                .await
                .with_context(|| format!("cannot listen on {addr} (--metrics-listen)"))?,
        ),
        None => None,
    };
    let mut config = gateway_config(&args, shape);
    // With authentication on, one principal holds at most an eighth of the session table (or
    // of the connection bound, which its HTTP+SSE sessions' streams hold) unless
    // `--max-sessions-per-principal` says otherwise. Not without: anonymous callers are one
    // principal, and there they are every caller.
    if config.max_sessions_per_principal.is_none() && args.auth.authenticated(&auth) {
        let connections = args.max_connections.unwrap_or(DEFAULT_MAX_CONNECTIONS);
        let connections = usize::try_from(connections).unwrap_or(usize::MAX);
        let shared = config.max_sessions.min(connections);
        config.max_sessions_per_principal = Some((shared / 8).max(1));
    }
    let transparent_per_session = !aggregate && shape.isolation == Isolation::PerSession;
    let replica = crate::replica::Replica::of(&args)?;
    let replica_address = match &replica {
        Some(_) => Some(crate::replica::Replica::address(
            &args,
            listener.local_addr()?,
        )?),
        None => None,
    };
    let redis = crate::session_store::open(
        &args,
        transparent_per_session,
        replica.is_some(),
        config.session_ttl,
    )
    .await?;
    // Replicas holding a secret trust only the records and messages tagged under it.
    let redis = match &replica {
        Some(replica) => redis.map(|r| r.with_integrity(&replica.store_key)),
        None => redis,
    };
    // Callers' upstream tokens: one vault for the process (Redis with the sessions when a
    // key file is given), for per-user outgoing auth and the `/oauth/tokens` routes.
    let token_vault = crate::token_store::open(&args, redis.as_ref())?;
    // The per-user OAuth backends (built from the config before this) use the same vault.
    if !switchboard_upstream::outgoing_auth::oauth::install_vault(token_vault.clone()) {
        tracing::warn!(
            "the token vault was in use before startup finished; per-user OAuth keeps it"
        );
    }
    config.replica_id = replica.as_ref().map(|r| r.id.clone());
    config.store_fallback_memory = args.session_store_fallback == crate::cli::StoreFallback::Memory;
    config.session_store = redis
        .clone()
        .map(|s| std::sync::Arc::new(s) as std::sync::Arc<dyn switchboard_core::SessionRecords>);
    config.health = args.ops.health();
    let traces = crate::traces::install(&args.ops)?;
    config.traces = traces.is_some();
    let max_sessions = config.max_sessions;
    config.guardrails =
        crate::guardrails::build(&guardrails, &backends, access.audit.clone(), secrets)?;
    let guard_audit = access.audit.clone();
    config.access = access;
    if aggregate {
        config.workflows.plans = composites;
        let mut vmcp = crate::start_backends::vmcp_config(&aggregation, &backends);
        vmcp.trust = Some(trust.config.clone());
        vmcp.guardrails = config.guardrails.clone();
        config.vmcp = Some(vmcp);
    }
    let registry = config.registry();
    let mut set = crate::start_backends::start_all(&args, origins, aggregate, &registry).await?;
    // One backend that does not start stops only itself: the set serves without it and the
    // reload worker retries it. With nothing else to serve (or one transparent backend),
    // startup fails as before; what did start is stopped as the set is dropped.
    let failed = std::mem::take(&mut set.failed);
    if !failed.is_empty() && (!aggregate || set.backends.is_empty() || watched.is_none()) {
        let first = failed.into_iter().next().map(|(_, e)| e);
        return Err(first.unwrap_or_else(|| anyhow::anyhow!("a backend did not start")));
    }
    let served = served.without(failed.iter().map(|(id, _)| id));
    let fds_per_session = set.fds_per_session;
    if redis.is_some() && !set.per_session.is_empty() && replica.is_none() {
        // Their processes (and what they ask the client) live in one replica.
        anyhow::bail!("--session-store: backends that give each session an upstream of its own (isolation per-session, or a Legacy-only remote) keep it in one replica; give the replicas a shared secret (--replica-secret-file) so they forward its requests there");
    }
    let backends =
        switchboard_core::Backends::new(set.backends).context("backend names must be distinct")?;
    let drain_limit = config.max_request_time;
    let gateway = Gateway::new(backends, registry.clone(), config);
    for (id, e) in &failed {
        let (unauthenticated, words) = crate::start_backends::failure_words(e);
        warn!(backend = %id, "{words}; serving without it, retrying in the background");
        println!("switchboard: backend {id} did not start ({words}); serving the others, retrying it in the background");
        gateway.health().not_started(id, unauthenticated, words);
    }
    if aggregate && !set.per_session.is_empty() {
        let names: Vec<String> = set
            .per_session
            .iter()
            .map(|(id, _)| id.to_string())
            .collect();
        gateway.enable_per_session_backends(set.per_session);
        println!(
            "switchboard: sessions get their own upstream on: {} (opened on first use)",
            names.join(", ")
        );
    } else if let Some((_, spawner)) = set.per_session.into_iter().next() {
        gateway.enable_per_session(spawner);
        println!(
            "switchboard: isolation per-session (one upstream session or process per session)"
        );
    }
    let stop = CancellationToken::new();
    // Replicas on one Redis: messages for sessions whose stream another replica holds.
    let peers_stop = CancellationToken::new();
    let peers = redis
        .as_ref()
        .map(|store| crate::session_store::peers(store, &gateway, peers_stop.clone()));
    // Registered for forwarded requests until shutdown begins (`stop`).
    let registration = match (&replica, &redis, replica_address) {
        (Some(replica), Some(store), Some(address)) => {
            Some(replica.register(store, address, stop.clone()).await)
        }
        _ => None,
    };
    // Restarts shared backend processes after a crash; owns them and their shutdown.
    let mut running = RunningSet::new(gateway.clone(), stop.clone());
    running.adopt(set.processes, set.internals);
    let shutdown_gateway = gateway.clone();
    let reaper = tokio::spawn(gateway.clone().run_reaper(stop.child_token()));
    // The health probes: stopped (and awaited) before the backends are.
    let probe_stop = CancellationToken::new();
    let probes = tokio::spawn(gateway.clone().run_probes(probe_stop.clone()));
    gateway.warm_catalog().await;
    // A composite claiming more safety than its steps allows is refused here, once the
    // steps' tools (and their annotations) are known.
    if let Err(why) = gateway.check_composites().await {
        anyhow::bail!("{why}");
    }
    // Picks up `switchboard trust approve` while serving; stopped with the probes.
    let trust_watch = tokio::spawn(gateway.clone().run_trust_watch(probe_stop.clone()));
    if let Some(path) = trust.config.state_file.as_ref().filter(|_| aggregate) {
        println!(
            "switchboard: tool trust {:?}, pins in {}",
            trust.config.mode,
            path.display()
        );
    }
    show_renamed(&gateway).await;
    // Applies config changes while serving; owns the running set until shutdown.
    let reload_stop = CancellationToken::new();
    let keepers = match watched {
        Some(watched) => Keepers::Reloading(tokio::spawn(
            Reloader {
                watched,
                gateway: gateway.clone(),
                registry,
                running,
                policy,
                aggregate,
                drain_limit,
                served,
                hangup,
                missing: failed.into_iter().map(|(id, _)| id).collect(),
                per_user_refused,
                homes,
                audit: guard_audit,
            }
            .run(reload_stop.clone()),
        )),
        None => {
            let ignoring = hangup.map(|h| tokio::spawn(ignore_hangups(h, reload_stop.clone())));
            Keepers::Fixed(running, ignoring)
        }
    };
    let metrics_server = metrics_listener.map(|l| {
        if let Ok(addr) = l.local_addr() {
            println!("switchboard: metrics on http://{addr}/metrics");
        }
        let stop = stop.clone();
        tokio::spawn(switchboard_http::serve_metrics(
            l,
            gateway.clone(),
            async move { stop.cancelled().await },
        ))
    });

    let addr = listener.local_addr()?;
    let authenticator = std::sync::Arc::new(args.auth.authenticator(&auth, addr)?);
    println!("switchboard: listening on http://{addr}/mcp");
    println!("switchboard: HTTP+SSE (2024-11-05) on http://{addr}/sse");
    let http = HttpConfig {
        max_body_bytes: args.max_body_bytes,
        keep_alive: GatewayArgs::secs(args.keep_alive),
        origin: origin_policy(&args, addr.ip().is_loopback()),
        endpoint_prefix: args.endpoint_prefix.clone(),
        trust_forwarded_prefix: args.trust_forwarded_prefix,
        auth: authenticator,
        max_in_flight: args.max_in_flight,
        status_open: args.ops.status_open,
        metrics_here: args.ops.metrics_listen.is_none(),
        hop: replica.map(|r| r.hop),
        token_vault: Some(token_vault),
    };
    let limits = ConnLimits {
        send_timeout: GatewayArgs::secs(args.send_timeout),
        header_read_timeout: GatewayArgs::secs(args.header_read_timeout),
        idle_timeout: GatewayArgs::secs(args.idle_timeout),
        max_connections: max_connections(&args, shape, max_sessions, fds_per_session),
    };
    info!(max_connections = limits.max_connections, "connection bound");
    let mut server = tokio::spawn(switchboard_http::serve(
        listener,
        AppState::new(gateway, http),
        limits,
        shutdown_signal(stop.clone()),
    ));

    // Serve until a signal; then give in-flight requests the grace period.
    tokio::select! {
        r = &mut server => { r??; }
        () = stop.cancelled() => {
            println!("switchboard: shutting down");
            let grace = GatewayArgs::secs(args.shutdown_grace);
            if tokio::time::timeout(grace, &mut server).await.is_err() {
                warn!(?grace, "requests still in flight after the grace period; failing them");
            }
        }
    }
    probe_stop.cancel();
    let _ = probes.await;
    let _ = trust_watch.await;
    reload_stop.cancel();
    let running = match keepers {
        Keepers::Reloading(worker) => worker.await.ok(),
        Keepers::Fixed(running, ignoring) => {
            if let Some(task) = ignoring {
                let _ = task.await;
            }
            Some(running)
        }
    };
    // Closing the backends fails whatever is still pending, so every request gets an answer.
    shutdown_gateway.end_all_sessions().await;
    if let Some(running) = running {
        running.shutdown().await;
    }
    if !server.is_finished()
        && tokio::time::timeout(Duration::from_secs(1), &mut server)
            .await
            .is_err()
    {
        server.abort();
    }
    stop.cancel();
    let _ = reaper.await;
    if let Some(registration) = registration {
        let _ = registration.await;
    }
    peers_stop.cancel();
    if let Some(peers) = peers {
        let _ = peers.await;
    }
    if let Some(metrics) = metrics_server {
        let _ = metrics.await;
    }
    if let Some(traces) = traces {
        traces.shutdown();
    }
    info!("stopped");
    Ok(())
}

/// Without a config file to reload, `SIGHUP` is logged and otherwise ignored (its default
/// would end the process).
async fn ignore_hangups(mut hangup: tokio::signal::unix::Signal, stop: CancellationToken) {
    loop {
        tokio::select! {
            () = stop.cancelled() => return,
            got = hangup.recv() => match got {
                Some(()) => info!("SIGHUP ignored: no config file to reload (run, or serve without --config)"),
                None => return,
            },
        }
    }
}

/// Binds with a deep accept backlog: the default (128) overflows when many clients connect
/// at once (e.g. after a restart), and overflowed clients wait out a one-second SYN retry.
async fn bind(host: &str, port: u16) -> std::io::Result<TcpListener> {
    let mut last = None;
    for addr in tokio::net::lookup_host((host, port)).await? {
        let socket = if addr.is_ipv4() {
            tokio::net::TcpSocket::new_v4()?
        } else {
            tokio::net::TcpSocket::new_v6()?
        };
        socket.set_reuseaddr(true)?;
        match socket.bind(addr).and_then(|()| socket.listen(4096)) {
            Ok(listener) => return Ok(listener),
            Err(e) => last = Some(e),
        }
    }
    Err(last.unwrap_or_else(|| std::io::Error::other("no address to listen on")))
}

/// Loopback binds accept only loopback `Host`/`Origin` (DNS-rebinding protection) unless the
/// operator lists others; other binds accept any unless the operator restricts them.
fn origin_policy(args: &GatewayArgs, loopback: bool) -> OriginPolicy {
    let default = if loopback {
        OriginPolicy::loopback()
    } else {
        OriginPolicy::any()
    };
    let list = |given: &[String], fallback: Option<Vec<String>>| match given {
        [] => fallback,
        g if g.iter().any(|v| v == "*") => None,
        g => Some(g.iter().map(|v| v.trim().to_ascii_lowercase()).collect()),
    };
    OriginPolicy {
        hosts: list(&args.allowed_hosts, default.hosts),
        origins: list(&args.allowed_origins, default.origins),
    }
}

/// Most renamed names printed at startup (the rest are counted).
const SHOWN_RENAMES: usize = 100;

/// The virtual server's names that differ from their backends' own, printed once at startup
/// (`exposed = backend/original`), so logs, policies and clients can be read against them.
async fn show_renamed(gateway: &Gateway) {
    let renamed = gateway.renamed_names().await;
    for r in renamed.iter().take(SHOWN_RENAMES) {
        println!(
            "switchboard: {} {} = {}/{}",
            r.kind, r.exposed, r.backend, r.original
        );
    }
    if renamed.len() > SHOWN_RENAMES {
        println!(
            "switchboard: and {} more renamed names",
            renamed.len() - SHOWN_RENAMES
        );
    }
}

pub(crate) fn gateway_config(args: &GatewayArgs, shape: Shape) -> GatewayConfig {
    GatewayConfig {
        request_timeout: GatewayArgs::secs(args.request_timeout),
        max_request_time: GatewayArgs::secs(args.max_request_time),
        handshake_timeout: GatewayArgs::secs(args.startup_timeout),
        session_ttl: GatewayArgs::secs(args.session_ttl),
        max_sessions: args
            .max_sessions
            .unwrap_or(match (shape.isolation, shape.remote) {
                // An upstream session costs the remote, not a process here.
                (_, true) => 1024,
                (Isolation::Shared, false) => 100_000,
                (Isolation::PerSession, false) => 256,
            }),
        listen_grace: GatewayArgs::secs(args.listen_grace),
        partition_idle: GatewayArgs::secs(args.partition_idle),
        relay_state_ttl: std::time::Duration::from_secs(args.relay_state_ttl),
        max_sessions_per_principal: args
            .max_sessions_per_principal
            .map(|n| usize::try_from(n).unwrap_or(usize::MAX)),
        mrtr_per_principal: args
            .mrtr_per_principal
            .map(|n| usize::try_from(n).unwrap_or(usize::MAX)),
        ..GatewayConfig::default()
    }
}

/// File descriptors kept for what is not a client connection or a backend: the listener, the
/// runtime, stdio, the audit log, outgoing JWKS fetches.
const FD_RESERVE: u64 = 128;
/// A backend process holds its stdin, stdout and stderr pipes and a pidfd.
pub(crate) const FDS_PER_BACKEND: u64 = 4;
/// An upstream session holds its listen stream's connection and, while calling, pooled ones.
pub(crate) const FDS_PER_REMOTE_SESSION: u64 = 2;
const DEFAULT_MAX_CONNECTIONS: u64 = 10_000;
/// Below this the gateway could hardly serve anyone; a lower fd limit is warned about.
const MIN_CONNECTIONS: u64 = 32;

/// `--max-connections`, or a default below the open-file limit: when the process runs out of
/// descriptors, accepting fails and backends cannot be spawned, so the bound has to bite
/// first. The headroom counts every backend process the gateway may run (the shared one and a
/// restart's standby; one per session in per-session mode).
fn max_connections(
    args: &GatewayArgs,
    shape: Shape,
    max_sessions: usize,
    fds_per_session: u64,
) -> usize {
    let sessions = match (shape.isolation, shape.remote) {
        (Isolation::Shared, false) => 0,
        _ => u64::try_from(max_sessions).unwrap_or(u64::MAX),
    };
    let backends = sessions.saturating_add(2);
    let headroom = FDS_PER_BACKEND
        .saturating_mul(2)
        .saturating_add(fds_per_session.saturating_mul(sessions))
        .saturating_add(FD_RESERVE)
        .saturating_add(switchboard_http::EVICTION_SLACK as u64);
    // `None`: unlimited.
    let limit = rustix::process::getrlimit(rustix::process::Resource::Nofile).current;
    let fits = limit.map_or(u64::MAX, |l| l.saturating_sub(headroom));
    if let Some(n) = args.max_connections {
        if n > fits {
            warn!(max_connections = n, open_file_limit = ?limit, "--max-connections is above what the open-file limit leaves for connections; raise `ulimit -n`");
        }
        return usize::try_from(n).unwrap_or(usize::MAX);
    }
    if fits < MIN_CONNECTIONS {
        warn!(open_file_limit = ?limit, backends, "the open-file limit leaves little room for connections; raise `ulimit -n`");
    }
    let n = fits.clamp(MIN_CONNECTIONS, DEFAULT_MAX_CONNECTIONS);
    usize::try_from(n).unwrap_or(usize::MAX)
}

/// Resolves on SIGINT or SIGTERM, and cancels `stop` so the rest of the app follows.
async fn shutdown_signal(stop: CancellationToken) {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        _ = ctrl_c => {}
        () = term => {}
        () = stop.cancelled() => {}
    }
    stop.cancel();
}

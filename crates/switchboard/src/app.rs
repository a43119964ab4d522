//! `switchboard run`: start the backend, initialize it, serve, shut down in order.

use std::time::Duration;

use anyhow::Context;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use switchboard_core::{Backend, EraPolicy, Gateway, GatewayConfig, Registry};
use switchboard_http::{AppState, HttpConfig, OriginPolicy};
use switchboard_upstream::StdioConfig;

use crate::cli::RunArgs;

pub(crate) async fn run(args: RunArgs) -> anyhow::Result<()> {
    let stdio = stdio_config(&args)?;
    let shown = std::iter::once(stdio.program.as_str())
        .chain(stdio.args.iter().map(String::as_str))
        .collect::<Vec<_>>()
        .join(" ");
    println!("switchboard: starting backend: {shown}");
    let config = gateway_config(&args);
    let registry = Registry::new(&config);
    let (handle, process) = switchboard_upstream::spawn(&stdio, registry.sink())?;
    let backend = match Backend::connect(
        handle,
        RunArgs::secs(args.startup_timeout),
        EraPolicy::Auto,
    )
    .await
    {
        Ok(b) => b,
        Err(e) => {
            process.shutdown(Duration::from_secs(2)).await;
            return Err(e).context("backend did not become ready");
        }
    };
    println!(
        "switchboard: backend ready: {} (protocol {}, era {})",
        backend.info.server_info, backend.info.protocol_version, backend.info.era
    );
    let gateway = Gateway::new(backend, registry, config);
    let stop = CancellationToken::new();
    let reaper = tokio::spawn(gateway.clone().run_reaper(stop.child_token()));

    let listener = TcpListener::bind((args.host.as_str(), args.port))
        .await
        .with_context(|| format!("cannot listen on {}:{}", args.host, args.port))?;
    let addr = listener.local_addr()?;
    println!("switchboard: listening on http://{addr}/mcp");
    println!("switchboard: HTTP+SSE (2024-11-05) on http://{addr}/sse");
    let http = HttpConfig {
        max_body_bytes: args.max_body_bytes,
        keep_alive: RunArgs::secs(args.keep_alive),
        origin: origin_policy(&args, addr.ip().is_loopback()),
        endpoint_prefix: args.endpoint_prefix.clone(),
        trust_forwarded_prefix: args.trust_forwarded_prefix,
    };
    let router = switchboard_http::router(AppState::new(gateway, http));
    let mut server = tokio::spawn(switchboard_http::serve(
        listener,
        router,
        shutdown_signal(stop.clone()),
    ));

    // Serve until a signal; then give in-flight requests the grace period.
    tokio::select! {
        r = &mut server => { r??; }
        () = stop.cancelled() => {
            println!("switchboard: shutting down");
            let grace = RunArgs::secs(args.shutdown_grace);
            if tokio::time::timeout(grace, &mut server).await.is_err() {
                warn!(?grace, "requests still in flight after the grace period; failing them");
            }
        }
    }
    // Closing the backend fails whatever is still pending, so every request gets an answer.
    process.shutdown(Duration::from_secs(5)).await;
    if !server.is_finished()
        && tokio::time::timeout(Duration::from_secs(1), &mut server)
            .await
            .is_err()
    {
        server.abort();
    }
    stop.cancel();
    let _ = reaper.await;
    info!("stopped");
    Ok(())
}

fn stdio_config(args: &RunArgs) -> anyhow::Result<StdioConfig> {
    let mut config = match args.command.split_first() {
        Some((program, rest)) => StdioConfig::new(program.clone(), rest.to_vec()),
        None => {
            let me = std::env::current_exe()
                .context("cannot locate the switchboard binary for the built-in fixture")?;
            StdioConfig::new(
                me.to_string_lossy().into_owned(),
                vec!["fixture".to_owned()],
            )
        }
    };
    config.max_line_bytes = args.max_line_bytes;
    Ok(config)
}

/// Loopback binds accept only loopback `Host`/`Origin` (DNS-rebinding protection) unless the
/// operator lists others; other binds accept any unless the operator restricts them.
fn origin_policy(args: &RunArgs, loopback: bool) -> OriginPolicy {
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

fn gateway_config(args: &RunArgs) -> GatewayConfig {
    GatewayConfig {
        request_timeout: RunArgs::secs(args.request_timeout),
        session_ttl: RunArgs::secs(args.session_ttl),
        max_sessions: args.max_sessions,
    }
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

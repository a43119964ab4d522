//! Starting a replicated stdio backend (`replicas: N`): N processes of the same command, each
//! connected (probed and handshaken) on its own before any client request reaches it, behind
//! one handle that sends each request to the replica with the fewest calls in flight
//! (`switchboard_upstream::Replicated`). Each process gets its own supervisor, which restarts
//! it after a crash like a single shared process; while it is down the others take its
//! requests.

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use switchboard_core::{Backend, BackendId, EraPolicy, Registry};
use switchboard_upstream::{Replicated, StdioConfig, StdioHandle, Upstream};

use crate::app::FDS_PER_BACKEND;
use crate::cli::GatewayArgs;
use crate::start_backends::{Started, Supervised};

/// Starts `replicas` processes of `stdio` as backend `id`.
pub(crate) async fn start(
    args: &GatewayArgs,
    stdio: StdioConfig,
    replicas: usize,
    registry: &Arc<Registry>,
    id: &BackendId,
) -> anyhow::Result<Started> {
    let shown = crate::start_backends::command_line(&stdio);
    println!("switchboard: starting backend: {shown} ({replicas} replicas)");
    let mut processes = Vec::with_capacity(replicas);
    for i in 0..replicas {
        let sink = registry.sink_for(id);
        let spawned = switchboard_upstream::spawn(&stdio, sink.clone());
        let (handle, process) = match spawned {
            Ok(pair) => pair,
            Err(e) => {
                stop(processes).await;
                return Err(e).context(format!("replica {i}"));
            }
        };
        processes.push(Supervised {
            handle,
            config: stdio.clone(),
            sink,
            process,
            replica: Some(i),
        });
    }
    let timeout = GatewayArgs::secs(args.startup_timeout);
    let handles: Vec<StdioHandle> = processes.iter().map(|p| p.handle.clone()).collect();
    let connects = handles
        .iter()
        .map(|h| Backend::connect(Upstream::Stdio(h.clone()), timeout, EraPolicy::Auto));
    let mut connected = Vec::with_capacity(replicas);
    for (i, one) in futures::future::join_all(connects)
        .await
        .into_iter()
        .enumerate()
    {
        match one {
            Ok(b) => connected.push(b),
            Err(e) => {
                stop(processes).await;
                return Err(e).context(format!("replica {i} did not become ready"));
            }
        }
    }
    let set = Replicated::new(handles)?;
    let mut backend = connected.swap_remove(0);
    backend.handle = Upstream::Replicated(set);
    // Its tasks would live in one process and their follow-ups reach any: it keeps none, so
    // it offers none to clients.
    backend.info.without_tasks();
    Ok(Started {
        backend,
        internal: None,
        processes,
        per_session: None,
        fds_per_session: FDS_PER_BACKEND,
        remote: false,
    })
}

async fn stop(processes: Vec<Supervised>) {
    for p in processes {
        p.process.shutdown(Duration::from_secs(2)).await;
    }
}

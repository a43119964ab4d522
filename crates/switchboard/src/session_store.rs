//! `--session-store`: where Streamable HTTP sessions are kept beyond this process (Redis),
//! opened before anything listens. Redis not answering at start is a warning, not a refusal:
//! sessions this replica opens are refused until it answers (the store reconnects with
//! backoff), so a replica started before its Redis recovers by itself.

use std::os::unix::fs::PermissionsExt;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context};
use tracing::warn;

use switchboard_store::{Inbound, RedisStore};

use crate::cli::GatewayArgs;

/// The password's environment variable (instead of the URL or a file).
pub(crate) const PASSWORD_ENV: &str = "SWITCHBOARD_SESSION_STORE_PASSWORD";

/// The store `args` asks for; `None`: sessions stay in memory. `transparent_per_session`:
/// every session is its own backend process here (`--isolation per-session`), which no
/// other replica could serve without a hop to this one (`forwarding`).
pub(crate) async fn open(
    args: &GatewayArgs,
    transparent_per_session: bool,
    forwarding: bool,
    ttl: Duration,
) -> anyhow::Result<Option<RedisStore>> {
    let Some(url) = &args.session_store else {
        return Ok(None);
    };
    if transparent_per_session && !forwarding {
        bail!("--session-store: with --isolation per-session each session is a process of one replica; give the replicas a shared secret (--replica-secret-file) so they forward its requests there");
    }
    let password = password(args)?;
    let store = RedisStore::new(url, password, &args.session_store_prefix, ttl)
        .map_err(|e| anyhow::anyhow!("--session-store: {e}"))?;
    match store.ping().await {
        Ok(()) => println!("switchboard: sessions in {}", store.shown()),
        Err(e) => warn!(
            store = store.shown(),
            "session store not answering ({e}): new sessions are refused until it does"
        ),
    }
    Ok(Some(store))
}

/// Delivery across replicas on `store`, for `gateway`: the task that runs it (until `stop`).
pub(crate) fn peers(
    store: &RedisStore,
    gateway: &Arc<switchboard_core::Gateway>,
    stop: tokio_util::sync::CancellationToken,
) -> tokio::task::JoinHandle<()> {
    let receiver = gateway.clone();
    let (peers, task) = store.peers(
        move |inbound| match inbound {
            Inbound::Message(session, data) => {
                receiver.session_store().deliver_from_peer(session, data);
            }
            Inbound::Ended(session) => receiver.end_from_peer(session),
            Inbound::ListChanged(name) => receiver.session_store().list_changed_from_peer(name),
        },
        async move { stop.cancelled().await },
    );
    gateway
        .session_store()
        .enable_peer_delivery(Arc::new(peers));
    tokio::spawn(task)
}

fn password(args: &GatewayArgs) -> anyhow::Result<Option<String>> {
    if let Some(path) = &args.session_store_password_file {
        return private_first_line(path);
    }
    Ok(crate::config_vars::var(PASSWORD_ENV).filter(|p| !p.is_empty()))
}

/// The first line of a secret's file (trimmed; `None` when empty), refused unless only
/// its owner may read or write it.
pub(crate) fn private_first_line(path: &std::path::Path) -> anyhow::Result<Option<String>> {
    {
        let meta =
            std::fs::metadata(path).with_context(|| format!("cannot read {}", path.display()))?;
        let mode = meta.permissions().mode() & 0o777;
        if mode & 0o077 != 0 {
            bail!(
                "{} is readable or writable by group or others (mode {mode:o}); run `chmod 600 {}`",
                path.display(),
                path.display()
            );
        }
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("cannot read {}", path.display()))?;
        Ok(text
            .lines()
            .next()
            .map(|l| l.trim().to_owned())
            .filter(|p| !p.is_empty()))
    }
}

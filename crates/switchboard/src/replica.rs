//! Replicas that forward to each other (`--replica-secret-file`, with `--session-store`):
//! this replica's name, its side of the hop (`switchboard_http::Hop`), the address it
//! registers in the store, and the task that keeps it registered while it serves.

use std::net::SocketAddr;
use std::sync::Arc;

use anyhow::bail;
use switchboard_http::{Hop, MIN_SECRET_BYTES};
use switchboard_store::{RedisStore, REGISTRATION_TTL};

use crate::cli::GatewayArgs;

/// The secret's environment variable (instead of a file).
pub(crate) const SECRET_ENV: &str = "SWITCHBOARD_REPLICA_SECRET";

/// This replica, when it forwards to (and takes forwarded requests from) the others.
#[derive(Debug, Clone)]
pub(crate) struct Replica {
    pub(crate) id: String,
    pub(crate) hop: Arc<Hop>,
    /// What the session store tags records and messages with (`RedisStore::with_integrity`),
    /// derived from the secret (never the secret itself, which keys the hop).
    pub(crate) store_key: [u8; 32],
}

impl Replica {
    /// The replica `args` asks for; `None` without a shared secret. A secret without a
    /// session store is refused: there is nowhere to find the other replicas.
    pub(crate) fn of(args: &GatewayArgs) -> anyhow::Result<Option<Replica>> {
        let Some(secret) = secret(args)? else {
            if args.replica_url.is_some() {
                bail!("--replica-url needs --replica-secret-file (or {SECRET_ENV})");
            }
            return Ok(None);
        };
        if args.session_store.is_none() {
            bail!(
                "--replica-secret-file: replicas find each other through --session-store; give one"
            );
        }
        if secret.len() < MIN_SECRET_BYTES {
            bail!("the replica secret must be at least {MIN_SECRET_BYTES} bytes (e.g. `openssl rand -hex 32`)");
        }
        let id = switchboard_core::new_replica_id();
        // The home answers a call delivered as JSON when it ends, which progress may extend
        // past the request deadline up to `--max-request-time`.
        let longest = args.request_timeout.max(args.max_request_time);
        let timeout = std::time::Duration::try_from_secs_f64(longest)
            .unwrap_or(std::time::Duration::from_secs(60));
        let hop =
            Hop::new(id.clone(), secret.as_bytes(), timeout).map_err(|e| anyhow::anyhow!("{e}"))?;
        Ok(Some(Replica {
            id,
            hop: Arc::new(hop),
            store_key: store_key(secret.as_bytes()),
        }))
    }

    /// Where the other replicas reach this one: `--replica-url`, else the address it listens
    /// on when that names one host.
    pub(crate) fn address(args: &GatewayArgs, bound: SocketAddr) -> anyhow::Result<String> {
        if let Some(url) = &args.replica_url {
            let url = url.trim_end_matches('/');
            if !(url.starts_with("http://") || url.starts_with("https://")) {
                bail!("--replica-url must be an http:// or https:// URL");
            }
            return Ok(url.to_owned());
        }
        if bound.ip().is_unspecified() {
            bail!("--replica-url is needed when listening on {bound}: the other replicas need an address that reaches this one (e.g. http://$POD_IP:{})", bound.port());
        }
        Ok(format!("http://{bound}"))
    }

    /// Registers this replica at `address` now, then keeps it registered until `stop`
    /// (when it is removed, so the others stop forwarding here at once).
    pub(crate) async fn register(
        &self,
        store: &RedisStore,
        address: String,
        stop: tokio_util::sync::CancellationToken,
    ) -> tokio::task::JoinHandle<()> {
        // Signed afresh at every renewal: the others believe only what the secret signed.
        let hop = self.hop.clone();
        let registration = move || hop.registration(&address, REGISTRATION_TTL);
        match store.register_replica(&self.id, &registration()).await {
            Ok(()) => println!("switchboard: replica {} registered", self.id),
            Err(e) => tracing::warn!(error = %e, "replica not registered yet (retried)"),
        }
        let task = store.keep_registered(self.id.clone(), registration, async move {
            stop.cancelled().await;
        });
        tokio::spawn(task)
    }
}

/// The session store's integrity key: HMAC-SHA256 of a fixed label under the secret.
fn store_key(secret: &[u8]) -> [u8; 32] {
    use hmac::{Hmac, Mac};
    let mut mac = <Hmac<sha2::Sha256> as Mac>::new_from_slice(secret)
        .unwrap_or_else(|_| unreachable!("HMAC takes a key of any length"));
    mac.update(b"switchboard session store integrity v1");
    mac.finalize().into_bytes().into()
}

fn secret(args: &GatewayArgs) -> anyhow::Result<Option<String>> {
    if let Some(path) = &args.replica_secret_file {
        return crate::session_store::private_first_line(path);
    }
    Ok(crate::config_vars::var(SECRET_ENV).filter(|p| !p.is_empty()))
}

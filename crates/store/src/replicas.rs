//! Replicas that take forwarded requests: each registers its address (signed by the hop,
//! opaque here) as `PREFIX:replica:ID` with a short expiry and renews it while it runs, so a replica that
//! died (`kill -9`) is gone within [`REGISTRATION_TTL`], and one that stops removes itself at
//! once. A session whose home is gone is ended by the replica that finds it so.

use std::future::Future;
use std::time::Duration;

use crate::{bounded, RedisStore};
use switchboard_core::StoreError;

/// How long a registration outlives its last renewal.
pub const REGISTRATION_TTL: Duration = Duration::from_secs(15);
/// How often a running replica renews it (three tries within one TTL).
const RENEW_EVERY: Duration = Duration::from_secs(5);

impl RedisStore {
    fn replica_key(&self, id: &str) -> String {
        format!("{}:replica:{id}", self.prefix)
    }

    /// Registers (or renews) replica `id` with `registration` (its signed address).
    pub async fn register_replica(&self, id: &str, registration: &str) -> Result<(), StoreError> {
        let mut c = self.connection.clone();
        let key = self.replica_key(id);
        let ttl = u64::try_from(REGISTRATION_TTL.as_millis()).unwrap_or(u64::MAX);
        bounded("register", async move {
            redis::cmd("SET")
                .arg(&key)
                .arg(registration)
                .arg("PX")
                .arg(ttl)
                .query_async::<()>(&mut c)
                .await
        })
        .await
    }

    /// Removes replica `id`'s registration (a clean stop).
    pub async fn unregister_replica(&self, id: &str) -> Result<(), StoreError> {
        let mut c = self.connection.clone();
        let key = self.replica_key(id);
        bounded("unregister", async move {
            redis::cmd("DEL").arg(&key).query_async::<()>(&mut c).await
        })
        .await
    }

    /// Replica `id`'s registration, if it is registered.
    pub(crate) async fn lookup_replica(&self, id: &str) -> Result<Option<String>, StoreError> {
        let mut c = self.connection.clone();
        let key = self.replica_key(id);
        bounded("replica", async move {
            redis::cmd("GET").arg(&key).query_async(&mut c).await
        })
        .await
    }

    /// Keeps replica `id` registered (each renewal's value from `registration`) until `stop`
    /// completes, then removes it. A failed renewal is logged and retried at the next tick
    /// (Redis reconnects by itself).
    pub fn keep_registered(
        &self,
        id: String,
        registration: impl Fn() -> String + Send + Sync + 'static,
        stop: impl Future<Output = ()> + Send + 'static,
    ) -> impl Future<Output = ()> + Send + 'static {
        let store = self.clone();
        async move {
            let renewals = async {
                let mut tick = tokio::time::interval(RENEW_EVERY);
                loop {
                    tick.tick().await;
                    if let Err(e) = store.register_replica(&id, &registration()).await {
                        tracing::warn!(error = %e, "replica registration not renewed");
                    }
                }
            };
            tokio::select! {
                () = renewals => {}
                () = stop => {}
            }
            if let Err(e) = store.unregister_replica(&id).await {
                tracing::warn!(error = %e, "replica registration not removed (it expires)");
            }
        }
    }
}

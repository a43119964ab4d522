//! Legacy sessions kept in Redis (`--session-store redis://…`): the core's
//! [`SessionRecords`] over one multiplexed connection that reconnects with backoff
//! (`redis::aio::ConnectionManager`). Each session is one hash, `PREFIX:s:ID`, holding the
//! core's JSON record (`rec`) and its revision (`rev`), with the session TTL as its expiry; a confirmation slides the expiry
//! in the same round-trip (a pipeline). An ended session leaves `PREFIX:ended:ID` for a TTL, so a
//! replica still holding it ends it too rather than writing it again. Every call is bounded ([`switchboard_core::STORE_TIMEOUT`]):
//! with Redis down a request gets an error at once, never a hang.

use std::time::Duration;

mod integrity;
mod peers;
mod replicas;
mod tokens;
pub use peers::{Inbound, RedisPeers};
pub use replicas::REGISTRATION_TTL;
pub use tokens::{RedisTokenVault, MAX_LISTED, REFRESH_LOCK_TTL, REFRESH_RETENTION};

use futures::future::BoxFuture;
use futures::FutureExt;
use redis::aio::{ConnectionManager, ConnectionManagerConfig};

use switchboard_core::{Presence, SessionRecords, StoreError, STORE_TIMEOUT};

/// Sessions in Redis.
#[derive(Clone)]
pub struct RedisStore {
    client: redis::Client,
    connection: ConnectionManager,
    prefix: String,
    ttl_ms: u64,
    /// The URL without its password, for logs.
    shown: String,
    /// With a replica secret: records and published messages are tagged and checked.
    integrity: Option<integrity::Integrity>,
}

impl std::fmt::Debug for RedisStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "RedisStore({})", self.shown)
    }
}

impl RedisStore {
    /// A store at `url` (`redis://[:PASSWORD@]HOST:PORT[/DB]`, or `rediss://` with TLS
    /// where the client supports it), keys under `prefix`, records expiring `ttl` after
    /// their last use. Connects lazily; [`Self::ping`] tells whether Redis answers now.
    pub fn new(
        url: &str,
        password: Option<String>,
        prefix: &str,
        ttl: Duration,
    ) -> Result<Self, StoreError> {
        let mut info: redis::ConnectionInfo = url
            .parse()
            .map_err(|_| StoreError::Unavailable("not a redis:// URL".into()))?;
        if let Some(password) = password {
            let settings = info.redis_settings().clone().set_password(password);
            info = info.set_redis_settings(settings);
        }
        let shown = shown(url);
        let client = redis::Client::open(info)
            .map_err(|e| StoreError::Unavailable(format!("{shown}: {}", e.category())))?;
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(STORE_TIMEOUT))
            .set_response_timeout(Some(STORE_TIMEOUT))
            .set_number_of_retries(2)
            .set_max_delay(Duration::from_secs(2));
        let connection = ConnectionManager::new_lazy_with_config(client.clone(), config)
            .map_err(|e| StoreError::Unavailable(format!("{shown}: {}", e.category())))?;
        Ok(RedisStore {
            client,
            connection,
            prefix: prefix.to_owned(),
            ttl_ms: u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX).max(1),
            shown,
            integrity: None,
        })
    }

    /// Tags every record and published message under `key` (derived from the replica
    /// secret) and ignores those whose tag does not verify (`integrity`).
    pub fn with_integrity(mut self, key: &[u8]) -> Self {
        self.integrity = Some(integrity::Integrity::new(key));
        self
    }

    /// Whether Redis answers `PING` now.
    pub async fn ping(&self) -> Result<(), StoreError> {
        let mut c = self.connection.clone();
        bounded("ping", async move {
            redis::cmd("PING").query_async::<String>(&mut c).await
        })
        .await?;
        Ok(())
    }

    /// The URL as logs show it (no password).
    pub fn shown(&self) -> &str {
        &self.shown
    }

    fn key(&self, id: &str) -> String {
        format!("{}:s:{id}", self.prefix)
    }

    /// Marks a session ended (DELETE) for as long as a replica could still hold it: a
    /// replica that finds the record missing writes it again unless this is set.
    fn gone(&self, id: &str) -> String {
        format!("{}:ended:{id}", self.prefix)
    }
}

/// `url` without user info or query (a password must never reach a log).
fn shown(url: &str) -> String {
    let url = url.split(['?', '#']).next().unwrap_or_default();
    match (url.split_once("://"), url.rsplit_once('@')) {
        (Some((scheme, _)), Some((_, host))) => format!("{scheme}://{host}"),
        _ => url.to_owned(),
    }
}

/// One Redis call within [`STORE_TIMEOUT`], its error in fixed words; timed into the
/// `switchboard_session_store_duration_seconds{op,outcome}` histogram.
async fn bounded<T>(
    op: &'static str,
    call: impl std::future::Future<Output = redis::RedisResult<T>>,
) -> Result<T, StoreError> {
    let started = std::time::Instant::now();
    let result = match tokio::time::timeout(STORE_TIMEOUT, call).await {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(e)) => Err(StoreError::Unavailable(e.category().to_owned())),
        Err(_) => Err(StoreError::Unavailable(format!(
            "no answer within {STORE_TIMEOUT:?}"
        ))),
    };
    switchboard_core::record_store_call(op, result.is_ok(), started.elapsed());
    result
}

/// Writes a record unless the session was ended (its marker is set): a write racing a
/// DELETE on another replica must not bring the session back. 1: written, 0: ended.
const PUT_UNLESS_ENDED: &str = r"
if redis.call('EXISTS', KEYS[2]) == 1 then return 0 end
redis.call('HSET', KEYS[1], 'rec', ARGV[1], 'rev', ARGV[3])
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return 1
";

/// Takes a place in a principal's count of live sessions across replicas (a sorted set of
/// session ids per principal, `PREFIX:o:DIGEST`). A member counts while its session's record
/// exists (its expiry slides with use) or within a grace after its claim (the record is
/// written right after); others are dropped as they are met. 1: taken (or already held),
/// 0: the principal holds `max` already. Bounded by the principal's own members.
const CLAIM_OWNER: &str = r"
local now = tonumber(ARGV[1])
local members = redis.call('ZRANGE', KEYS[1], 0, -1, 'WITHSCORES')
local live = 0
for i = 1, #members, 2 do
  local m = members[i]
  if m == ARGV[4] then return 1 end
  if tonumber(members[i + 1]) > now or redis.call('EXISTS', ARGV[5] .. m) == 1 then
    live = live + 1
  else
    redis.call('ZREM', KEYS[1], m)
  end
end
if live >= tonumber(ARGV[3]) then return 0 end
redis.call('ZADD', KEYS[1], ARGV[2], ARGV[4])
redis.call('PEXPIRE', KEYS[1], ARGV[6])
return 1
";

/// How long a claimed place counts before its session's record must exist.
const CLAIM_GRACE_MS: u64 = 10_000;
/// How long a principal's set outlives its last claim or release.
const OWNER_SET_TTL_MS: u64 = 24 * 60 * 60 * 1000;

/// A stored revision (0 for one that does not parse: it differs from any written one, so
/// the record is read again).
fn revision(rev: Option<&str>) -> u64 {
    rev.and_then(|r| r.parse().ok()).unwrap_or(0)
}

impl SessionRecords for RedisStore {
    fn put<'a>(
        &'a self,
        id: &'a str,
        record: Vec<u8>,
        rev: u64,
    ) -> BoxFuture<'a, Result<bool, StoreError>> {
        let mut c = self.connection.clone();
        let (key, gone) = (self.key(id), self.gone(id));
        let ttl = self.ttl_ms;
        let record = match &self.integrity {
            Some(integrity) => integrity.seal_record(id, rev, &record),
            None => record,
        };
        async move {
            let written: i64 = bounded("put", async move {
                redis::Script::new(PUT_UNLESS_ENDED)
                    .key(&key)
                    .key(&gone)
                    .arg(record)
                    .arg(ttl)
                    .arg(rev.to_string())
                    .invoke_async(&mut c)
                    .await
            })
            .await?;
            Ok(written == 1)
        }
        .boxed()
    }

    fn get<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<Option<(Vec<u8>, u64)>, StoreError>> {
        let mut c = self.connection.clone();
        let key = self.key(id);
        async move {
            let (rec, rev): (Option<Vec<u8>>, Option<String>) = bounded("get", async move {
                redis::cmd("HMGET")
                    .arg(&key)
                    .arg("rec")
                    .arg("rev")
                    .query_async(&mut c)
                    .await
            })
            .await?;
            let rev = revision(rev.as_deref());
            let Some(integrity) = &self.integrity else {
                return Ok(rec.map(|r| (r, rev)));
            };
            let opened = rec.and_then(|r| {
                let opened = integrity.open_record(id, rev, &r).map(<[u8]>::to_vec);
                if opened.is_none() {
                    tracing::warn!("a session record in the store failed its integrity check (not written by a replica holding the secret): ignored");
                }
                opened
            });
            Ok(opened.map(|r| (r, rev)))
        }
        .boxed()
    }

    fn touch<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<Presence, StoreError>> {
        let mut c = self.connection.clone();
        let (key, gone) = (self.key(id), self.gone(id));
        let ttl = i64::try_from(self.ttl_ms).unwrap_or(i64::MAX);
        async move {
            let (ended, live, rev): (i64, i64, Option<String>) = bounded("touch", async move {
                redis::pipe()
                    .exists(&gone)
                    .pexpire(&key, ttl)
                    .hget(&key, "rev")
                    .query_async(&mut c)
                    .await
            })
            .await?;
            // Ended wins: a record rewritten after a DELETE is not a live session.
            Ok(match (ended, live) {
                (1, _) => Presence::Ended,
                (_, 1) => Presence::Live(revision(rev.as_deref())),
                _ => Presence::Lost,
            })
        }
        .boxed()
    }

    fn delete<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<(), StoreError>> {
        let mut c = self.connection.clone();
        let (key, gone) = (self.key(id), self.gone(id));
        let ttl = self.ttl_ms;
        async move {
            bounded("delete", async move {
                // One transaction: no replica sees the record gone without the marker.
                redis::pipe()
                    .atomic()
                    .del(&key)
                    .cmd("SET")
                    .arg(&gone)
                    .arg(1)
                    .arg("PX")
                    .arg(ttl)
                    .query_async::<()>(&mut c)
                    .await
            })
            .await
        }
        .boxed()
    }

    fn replica_address<'a>(
        &'a self,
        replica: &'a str,
    ) -> BoxFuture<'a, Result<Option<String>, StoreError>> {
        self.lookup_replica(replica).boxed()
    }

    fn claim_owner<'a>(
        &'a self,
        owner: &'a str,
        id: &'a str,
        max: usize,
    ) -> BoxFuture<'a, Result<bool, StoreError>> {
        let mut c = self.connection.clone();
        let set = format!("{}:o:{owner}", self.prefix);
        let records = format!("{}:s:", self.prefix);
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
        async move {
            let taken: i64 = bounded("claim_owner", async move {
                redis::Script::new(CLAIM_OWNER)
                    .key(&set)
                    .arg(now)
                    .arg(now.saturating_add(CLAIM_GRACE_MS))
                    .arg(max)
                    .arg(id)
                    .arg(records)
                    .arg(OWNER_SET_TTL_MS)
                    .invoke_async(&mut c)
                    .await
            })
            .await?;
            Ok(taken == 1)
        }
        .boxed()
    }

    fn release_owner<'a>(
        &'a self,
        owner: &'a str,
        id: &'a str,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        let mut c = self.connection.clone();
        let set = format!("{}:o:{owner}", self.prefix);
        async move {
            bounded("release_owner", async move {
                redis::cmd("ZREM")
                    .arg(&set)
                    .arg(id)
                    .query_async::<()>(&mut c)
                    .await
            })
            .await
        }
        .boxed()
    }
}

#[cfg(test)]
mod tests {
    use super::shown;

    #[test]
    fn a_password_never_reaches_the_shown_url() {
        assert_eq!(
            shown("redis://:hunter2@10.0.0.1:6379/0"),
            "redis://10.0.0.1:6379/0"
        );
        assert_eq!(shown("redis://user:pw@h:1"), "redis://h:1");
        assert_eq!(shown("redis://127.0.0.1:6379"), "redis://127.0.0.1:6379");
        assert_eq!(
            shown("redis+unix:///run/r.sock?pass=hunter2"),
            "redis+unix:///run/r.sock"
        );
    }
}

//! [`RedisTokenVault`]: the token vault in the session store's Redis, shared by replicas.
//!
//! - `PREFIX:tok:HEX(principal):HEX(backend)`: the sealed token (ciphertext only; the key
//!   is the AEAD associated data, so a value renamed to another key does not open). Its
//!   expiry: when the access token expires, or [`REFRESH_RETENTION`] later when a refresh
//!   token came with it (or no expiry is known).
//! - `PREFIX:tokidx:HEX(principal)`: the set of that principal's backends (hex), for a
//!   principal's list; members whose value expired are dropped as they are met.
//! - `PREFIX:toklock:HEX(principal):HEX(backend)`: the refresh lock, `SET NX PX` with a
//!   random owner id, released by compare-and-delete, expiring by itself if its holder dies.
//!
//! Every call is bounded ([`STORE_TIMEOUT`]); errors are fixed words.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use futures::future::BoxFuture;
use futures::FutureExt;
use redis::aio::ConnectionManager;

use switchboard_core::STORE_TIMEOUT;
use switchboard_upstream::outgoing_auth::{
    RefreshGuard, TokenSummary, TokenVault, UpstreamToken, VaultError, VaultKey, VaultKeyMaterial,
};

use crate::RedisStore;

/// How long a refreshable token (or one of unknown expiry) is kept beyond its expiry.
pub const REFRESH_RETENTION: Duration = Duration::from_secs(30 * 24 * 60 * 60);
/// How long a refresh lock lives if its holder never releases it (a crashed replica).
pub const REFRESH_LOCK_TTL: Duration = Duration::from_secs(30);
/// Most tokens `list(None)` returns (an operator's listing; SCAN in bounded steps).
pub const MAX_LISTED: usize = 100_000;
/// Keys asked for per SCAN step.
const SCAN_COUNT: usize = 500;
/// How often a waiter for a refresh lock looks again.
const LOCK_POLL: Duration = Duration::from_millis(50);

/// Stores the value with its expiry and indexes it under its principal; the index lives at
/// least as long as its longest-lived member.
const PUT: &str = r"
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
redis.call('SADD', KEYS[2], ARGV[3])
if redis.call('PTTL', KEYS[2]) < tonumber(ARGV[2]) then
  redis.call('PEXPIRE', KEYS[2], ARGV[2])
end
return 1
";

/// [`PUT`] only if the stored value is still `ARGV[4]` (what the caller read and checked).
const REPLACE: &str = r"
if redis.call('GET', KEYS[1]) ~= ARGV[4] then
  return 0
end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
redis.call('SADD', KEYS[2], ARGV[3])
if redis.call('PTTL', KEYS[2]) < tonumber(ARGV[2]) then
  redis.call('PEXPIRE', KEYS[2], ARGV[2])
end
return 1
";

/// Deletes the value and its index entry only if the value is still `ARGV[1]`.
const REMOVE_IF: &str = r"
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return 0
end
redis.call('DEL', KEYS[1])
redis.call('SREM', KEYS[2], ARGV[2])
return 1
";

/// Deletes the lock only if this holder still owns it.
const RELEASE: &str = r"
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
";

/// Sealed tokens in Redis; clones share the connection.
#[derive(Clone)]
pub struct RedisTokenVault {
    connection: ConnectionManager,
    prefix: String,
    key: VaultKeyMaterial,
    shown: String,
}

impl std::fmt::Debug for RedisTokenVault {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "RedisTokenVault({})", self.shown)
    }
}

fn hex(s: &str) -> String {
    use std::fmt::Write;
    s.bytes()
        .fold(String::with_capacity(s.len() * 2), |mut out, b| {
            let _ = write!(out, "{b:02x}");
            out
        })
}

fn unhex(s: &str) -> Option<String> {
    if !s.len().is_multiple_of(2) {
        return None;
    }
    let bytes = (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect::<Option<Vec<u8>>>()?;
    String::from_utf8(bytes).ok()
}

fn now_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// How long `token`'s value is kept, in milliseconds (at least 1).
fn keep_ms(token: &UpstreamToken, now: u64) -> u64 {
    let retention = REFRESH_RETENTION.as_secs();
    let secs = match token.expires_at {
        Some(at) if token.refreshable() => at.saturating_sub(now).saturating_add(retention),
        Some(at) => at.saturating_sub(now),
        None => retention,
    };
    secs.saturating_mul(1000).max(1)
}

/// One Redis call within [`STORE_TIMEOUT`], its error in fixed words.
async fn bounded<T>(
    op: &'static str,
    call: impl std::future::Future<Output = redis::RedisResult<T>>,
) -> Result<T, VaultError> {
    let started = std::time::Instant::now();
    let result = match tokio::time::timeout(STORE_TIMEOUT, call).await {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(e)) => {
            tracing::debug!(op, category = e.category(), "token store call failed");
            Err(VaultError::Unavailable("Redis refused or dropped the call"))
        }
        Err(_) => Err(VaultError::Unavailable("Redis did not answer in time")),
    };
    switchboard_core::record_store_call(op, result.is_ok(), started.elapsed());
    result
}

impl RedisTokenVault {
    /// The vault in `store`'s Redis (its connection and key prefix), sealing with `key`.
    /// Every replica sharing the store must use the same key.
    pub fn new(store: &RedisStore, key: VaultKeyMaterial) -> Self {
        RedisTokenVault {
            connection: store.connection.clone(),
            prefix: store.prefix.clone(),
            key,
            shown: store.shown.clone(),
        }
    }

    /// The Redis key `key`'s sealed value is stored under.
    pub fn storage_key(&self, key: &VaultKey) -> String {
        format!(
            "{}:tok:{}:{}",
            self.prefix,
            hex(&key.principal),
            hex(&key.backend)
        )
    }

    fn index_key(&self, principal: &str) -> String {
        format!("{}:tokidx:{}", self.prefix, hex(principal))
    }

    fn lock_key(&self, key: &VaultKey) -> String {
        format!(
            "{}:toklock:{}:{}",
            self.prefix,
            hex(&key.principal),
            hex(&key.backend)
        )
    }

    /// The principal and backend a storage key names.
    fn parse_storage_key(&self, name: &str) -> Option<VaultKey> {
        let rest = name.strip_prefix(&self.prefix)?.strip_prefix(":tok:")?;
        let (p, b) = rest.split_once(':')?;
        Some(VaultKey::new(unhex(p)?, unhex(b)?))
    }

    async fn get_now(&self, key: &VaultKey) -> Result<Option<UpstreamToken>, VaultError> {
        let mut c = self.connection.clone();
        let name = self.storage_key(key);
        let sealed: Option<Vec<u8>> = bounded("token_get", async move {
            redis::cmd("GET").arg(&name).query_async(&mut c).await
        })
        .await?;
        sealed.map(|s| self.key.open(key, &s)).transpose()
    }

    async fn put_now(&self, key: &VaultKey, token: &UpstreamToken) -> Result<(), VaultError> {
        let sealed = self.key.seal(key, token)?;
        let mut c = self.connection.clone();
        let (name, index) = (self.storage_key(key), self.index_key(&key.principal));
        let ttl = keep_ms(token, now_secs());
        let member = hex(&key.backend);
        bounded("token_put", async move {
            redis::Script::new(PUT)
                .key(&name)
                .key(&index)
                .arg(sealed)
                .arg(ttl)
                .arg(member)
                .invoke_async::<i64>(&mut c)
                .await
        })
        .await?;
        Ok(())
    }

    /// The sealed value stored under `key` (at `name`), if the token in it is still the one
    /// whose access token is `stale`: what a compare-and-set compares against.
    async fn sealed_if(
        &self,
        key: &VaultKey,
        name: &str,
        stale: &str,
    ) -> Result<Option<Vec<u8>>, VaultError> {
        let mut c = self.connection.clone();
        let read = name.to_owned();
        let current: Option<Vec<u8>> = bounded("token_get", async move {
            redis::cmd("GET").arg(&read).query_async(&mut c).await
        })
        .await?;
        let Some(current) = current else {
            return Ok(None);
        };
        let same = self.key.open(key, &current)?.access_token == stale;
        Ok(same.then_some(current))
    }

    async fn replace_now(
        &self,
        key: &VaultKey,
        stale: &str,
        token: &UpstreamToken,
    ) -> Result<bool, VaultError> {
        let name = self.storage_key(key);
        let Some(current) = self.sealed_if(key, &name, stale).await? else {
            return Ok(false);
        };
        let sealed = self.key.seal(key, token)?;
        let mut c = self.connection.clone();
        let index = self.index_key(&key.principal);
        let ttl = keep_ms(token, now_secs());
        let member = hex(&key.backend);
        let written: i64 = bounded("token_replace", async move {
            redis::Script::new(REPLACE)
                .key(&name)
                .key(&index)
                .arg(sealed)
                .arg(ttl)
                .arg(member)
                .arg(current)
                .invoke_async(&mut c)
                .await
        })
        .await?;
        Ok(written == 1)
    }

    async fn remove_if_now(&self, key: &VaultKey, stale: &str) -> Result<bool, VaultError> {
        let name = self.storage_key(key);
        let Some(current) = self.sealed_if(key, &name, stale).await? else {
            return Ok(false);
        };
        self.remove_sealed(key, name, current).await
    }

    async fn remove_unopenable_now(&self, key: &VaultKey) -> Result<bool, VaultError> {
        let mut c = self.connection.clone();
        let name = self.storage_key(key);
        let read = name.clone();
        let current: Option<Vec<u8>> = bounded("token_get", async move {
            redis::cmd("GET").arg(&read).query_async(&mut c).await
        })
        .await?;
        let Some(current) = current else {
            return Ok(false);
        };
        if !matches!(self.key.open(key, &current), Err(VaultError::Open)) {
            return Ok(false);
        }
        self.remove_sealed(key, name, current).await
    }

    /// Compare-and-delete: removes `key`'s value (at `name`) only if it is still `current`,
    /// the bytes read; a token written since stays.
    async fn remove_sealed(
        &self,
        key: &VaultKey,
        name: String,
        current: Vec<u8>,
    ) -> Result<bool, VaultError> {
        let mut c = self.connection.clone();
        let index = self.index_key(&key.principal);
        let member = hex(&key.backend);
        let removed: i64 = bounded("token_remove_if", async move {
            redis::Script::new(REMOVE_IF)
                .key(&name)
                .key(&index)
                .arg(current)
                .arg(member)
                .invoke_async(&mut c)
                .await
        })
        .await?;
        Ok(removed == 1)
    }

    async fn remove_now(&self, key: &VaultKey) -> Result<bool, VaultError> {
        let mut c = self.connection.clone();
        let (name, index) = (self.storage_key(key), self.index_key(&key.principal));
        let member = hex(&key.backend);
        let (removed, _): (i64, i64) = bounded("token_remove", async move {
            redis::pipe()
                .atomic()
                .del(&name)
                .srem(&index, member)
                .query_async(&mut c)
                .await
        })
        .await?;
        Ok(removed > 0)
    }

    /// Opens `(key, value)` pairs into summaries; a value that no longer opens (another key
    /// sealed it) is left out and counted in a warning.
    fn summaries(&self, found: Vec<(VaultKey, Option<Vec<u8>>)>) -> Vec<TokenSummary> {
        let mut unopened = 0usize;
        let mut out: Vec<TokenSummary> = found
            .into_iter()
            .filter_map(|(k, v)| match self.key.open(&k, &v?) {
                Ok(t) => Some(t.summary(&k)),
                Err(_) => {
                    unopened += 1;
                    None
                }
            })
            .collect();
        if unopened > 0 {
            tracing::warn!(
                unopened,
                "stored tokens that this encryption key does not open were left out"
            );
        }
        out.sort_by(|a, b| (&a.principal, &a.backend).cmp(&(&b.principal, &b.backend)));
        out
    }

    async fn list_principal(&self, principal: &str) -> Result<Vec<TokenSummary>, VaultError> {
        let mut c = self.connection.clone();
        let index = self.index_key(principal);
        let members: Vec<String> = {
            let (mut c, index) = (c.clone(), index.clone());
            bounded("token_list", async move {
                redis::cmd("SMEMBERS").arg(&index).query_async(&mut c).await
            })
            .await?
        };
        let keys: Vec<VaultKey> = members
            .iter()
            .filter_map(|m| Some(VaultKey::new(principal, unhex(m)?)))
            .collect();
        if keys.is_empty() {
            return Ok(Vec::new());
        }
        let names: Vec<String> = keys.iter().map(|k| self.storage_key(k)).collect();
        let values: Vec<Option<Vec<u8>>> = bounded("token_list", async {
            redis::cmd("MGET").arg(&names).query_async(&mut c).await
        })
        .await?;
        let gone: Vec<String> = keys
            .iter()
            .zip(&values)
            .filter(|(_, v)| v.is_none())
            .map(|(k, _)| hex(&k.backend))
            .collect();
        if !gone.is_empty() {
            // Expired values: their index members go too.
            bounded("token_list", async {
                redis::cmd("SREM")
                    .arg(&index)
                    .arg(&gone)
                    .query_async::<i64>(&mut c)
                    .await
            })
            .await?;
        }
        Ok(self.summaries(keys.into_iter().zip(values).collect()))
    }

    async fn list_all(&self) -> Result<Vec<TokenSummary>, VaultError> {
        let mut c = self.connection.clone();
        let pattern = format!("{}:tok:*", self.prefix);
        let mut cursor: u64 = 0;
        let mut found = Vec::new();
        loop {
            let (next, names): (u64, Vec<String>) = bounded("token_list", async {
                redis::cmd("SCAN")
                    .arg(cursor)
                    .arg("MATCH")
                    .arg(&pattern)
                    .arg("COUNT")
                    .arg(SCAN_COUNT)
                    .query_async(&mut c)
                    .await
            })
            .await?;
            let keys: Vec<(String, VaultKey)> = names
                .into_iter()
                .filter_map(|n| self.parse_storage_key(&n).map(|k| (n, k)))
                .collect();
            if !keys.is_empty() {
                let names: Vec<&String> = keys.iter().map(|(n, _)| n).collect();
                let values: Vec<Option<Vec<u8>>> = bounded("token_list", async {
                    redis::cmd("MGET").arg(&names).query_async(&mut c).await
                })
                .await?;
                found.extend(keys.into_iter().map(|(_, k)| k).zip(values));
            }
            cursor = next;
            if cursor == 0 || found.len() >= MAX_LISTED {
                break;
            }
        }
        found.truncate(MAX_LISTED);
        Ok(self.summaries(found))
    }

    async fn lock(
        &self,
        key: &VaultKey,
        wait: Duration,
    ) -> Result<Option<RefreshGuard>, VaultError> {
        let mut id = [0u8; 16];
        getrandom::fill(&mut id).map_err(|_| VaultError::Random)?;
        let owner: String = id.iter().map(|b| format!("{b:02x}")).collect();
        let name = self.lock_key(key);
        let ttl = u64::try_from(REFRESH_LOCK_TTL.as_millis()).unwrap_or(u64::MAX);
        let mut c = self.connection.clone();
        let taken: Option<String> = bounded("token_lock", async {
            redis::cmd("SET")
                .arg(&name)
                .arg(&owner)
                .arg("NX")
                .arg("PX")
                .arg(ttl)
                .query_async(&mut c)
                .await
        })
        .await?;
        if taken.is_some() {
            return Ok(Some(self.guard(name, owner)));
        }
        // Another holder: wait (polling, bounded by `wait`) until its lock is gone.
        let deadline = tokio::time::Instant::now() + wait;
        while tokio::time::Instant::now() < deadline {
            tokio::time::sleep_until(deadline.min(tokio::time::Instant::now() + LOCK_POLL)).await;
            let held: i64 = bounded("token_lock", async {
                redis::cmd("EXISTS").arg(&name).query_async(&mut c).await
            })
            .await?;
            if held == 0 {
                break;
            }
        }
        Ok(None)
    }

    /// The guard that releases `name` if `owner` still holds it (on the runtime it is
    /// dropped in; without one the lock expires by itself).
    fn guard(&self, name: String, owner: String) -> RefreshGuard {
        let connection = self.connection.clone();
        RefreshGuard::new(move || {
            let Ok(runtime) = tokio::runtime::Handle::try_current() else {
                return;
            };
            let mut c = connection;
            runtime.spawn(async move {
                let released = bounded("token_unlock", async {
                    redis::Script::new(RELEASE)
                        .key(&name)
                        .arg(&owner)
                        .invoke_async::<i64>(&mut c)
                        .await
                })
                .await;
                if let Err(e) = released {
                    tracing::warn!("refresh lock not released ({e}); it expires by itself");
                }
            });
        })
    }
}

impl TokenVault for RedisTokenVault {
    fn get<'a>(
        &'a self,
        key: &'a VaultKey,
    ) -> BoxFuture<'a, Result<Option<UpstreamToken>, VaultError>> {
        self.get_now(key).boxed()
    }

    fn put<'a>(
        &'a self,
        key: &'a VaultKey,
        token: &'a UpstreamToken,
    ) -> BoxFuture<'a, Result<(), VaultError>> {
        self.put_now(key, token).boxed()
    }

    fn replace<'a>(
        &'a self,
        key: &'a VaultKey,
        stale: &'a str,
        token: &'a UpstreamToken,
    ) -> BoxFuture<'a, Result<bool, VaultError>> {
        Box::pin(self.replace_now(key, stale, token))
    }

    fn remove_if<'a>(
        &'a self,
        key: &'a VaultKey,
        stale: &'a str,
    ) -> BoxFuture<'a, Result<bool, VaultError>> {
        Box::pin(self.remove_if_now(key, stale))
    }

    fn remove_unopenable<'a>(
        &'a self,
        key: &'a VaultKey,
    ) -> BoxFuture<'a, Result<bool, VaultError>> {
        Box::pin(self.remove_unopenable_now(key))
    }

    fn remove<'a>(&'a self, key: &'a VaultKey) -> BoxFuture<'a, Result<bool, VaultError>> {
        self.remove_now(key).boxed()
    }

    fn list<'a>(
        &'a self,
        principal: Option<&'a str>,
    ) -> BoxFuture<'a, Result<Vec<TokenSummary>, VaultError>> {
        match principal {
            Some(p) => self.list_principal(p).boxed(),
            None => self.list_all().boxed(),
        }
    }

    fn refresh_lock<'a>(
        &'a self,
        key: &'a VaultKey,
        wait: Duration,
    ) -> BoxFuture<'a, Result<Option<RefreshGuard>, VaultError>> {
        self.lock(key, wait).boxed()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn storage_keys_roundtrip_whatever_the_names_hold() {
        for (p, b) in [("3:iss:sub", "github"), ("a:b:c", "x:y"), ("", "")] {
            assert_eq!(unhex(&hex(p)).as_deref(), Some(p));
            assert_eq!(unhex(&hex(b)).as_deref(), Some(b));
        }
        assert_eq!(unhex("zz"), None);
        assert_eq!(unhex("abc"), None);
    }

    #[test]
    fn refreshable_tokens_outlive_their_expiry() {
        let mut t = UpstreamToken {
            access_token: "a".into(),
            refresh_token: None,
            expires_at: Some(1_100),
            issued_at: None,
            scope: None,
            issuer: "i".into(),
            resource: "r".into(),
            client_id: "c".into(),
            client_secret: None,
            client_auth: None,
        };
        assert_eq!(keep_ms(&t, 1_000), 100_000);
        assert_eq!(keep_ms(&t, 2_000), 1, "expired: gone at once");
        t.refresh_token = Some("r".into());
        assert_eq!(
            keep_ms(&t, 1_000),
            (100 + REFRESH_RETENTION.as_secs()) * 1000
        );
        t.expires_at = None;
        assert_eq!(keep_ms(&t, 1_000), REFRESH_RETENTION.as_secs() * 1000);
    }
}

//! [`MemoryVault`]: sealed tokens in this process (lost on restart; one process only).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use tokio::sync::watch;

use super::{
    BoxFuture, RefreshGuard, TokenSummary, TokenVault, UpstreamToken, VaultError, VaultKey,
    VaultKeyMaterial,
};

/// Most tokens a [`MemoryVault`] holds; a `put` of a new key beyond it is refused.
pub const MAX_MEMORY_TOKENS: usize = 100_000;

/// Tokens held sealed (ciphertext) in memory, with in-process single-flight refresh.
#[derive(Clone)]
pub struct MemoryVault {
    inner: Arc<Inner>,
}

struct Inner {
    key: VaultKeyMaterial,
    /// Sealed values by key.
    values: Mutex<HashMap<VaultKey, Vec<u8>>>,
    /// Keys being refreshed: the holder's sender, dropped on release (which wakes waiters).
    refreshing: Mutex<HashMap<VaultKey, watch::Sender<()>>>,
}

impl std::fmt::Debug for MemoryVault {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemoryVault")
            .field("tokens", &self.inner.values.lock().len())
            .finish_non_exhaustive()
    }
}

impl MemoryVault {
    /// An empty vault sealing with `key`.
    pub fn new(key: VaultKeyMaterial) -> Self {
        MemoryVault {
            inner: Arc::new(Inner {
                key,
                values: Mutex::new(HashMap::new()),
                refreshing: Mutex::new(HashMap::new()),
            }),
        }
    }

    /// The sealed value stored under `key` (for tests that check it is ciphertext).
    pub fn sealed(&self, key: &VaultKey) -> Option<Vec<u8>> {
        self.inner.values.lock().get(key).cloned()
    }

    /// Stores `sealed` under `key` as it is (a value sealed elsewhere, for tests).
    #[cfg(test)]
    pub(crate) fn put_sealed(&self, key: &VaultKey, sealed: Vec<u8>) {
        self.inner.values.lock().insert(key.clone(), sealed);
    }

    /// How many callers wait on `key`'s refresh lock.
    #[cfg(test)]
    pub(crate) fn inner_waiters(&self, key: &VaultKey) -> usize {
        self.inner
            .refreshing
            .lock()
            .get(key)
            .map_or(0, |h| h.receiver_count())
    }

    fn get_now(&self, key: &VaultKey) -> Result<Option<UpstreamToken>, VaultError> {
        let sealed = self.inner.values.lock().get(key).cloned();
        sealed.map(|s| self.inner.key.open(key, &s)).transpose()
    }

    fn put_now(&self, key: &VaultKey, token: &UpstreamToken) -> Result<(), VaultError> {
        let sealed = self.inner.key.seal(key, token)?;
        let mut values = self.inner.values.lock();
        if values.len() >= MAX_MEMORY_TOKENS && !values.contains_key(key) {
            return Err(VaultError::Full);
        }
        values.insert(key.clone(), sealed);
        Ok(())
    }

    fn replace_now(
        &self,
        key: &VaultKey,
        stale: &str,
        token: &UpstreamToken,
    ) -> Result<bool, VaultError> {
        let sealed = self.inner.key.seal(key, token)?;
        let mut values = self.inner.values.lock();
        let Some(current) = values.get(key) else {
            return Ok(false);
        };
        if self.inner.key.open(key, current)?.access_token != stale {
            return Ok(false);
        }
        values.insert(key.clone(), sealed);
        Ok(true)
    }

    fn remove_if_now(&self, key: &VaultKey, stale: &str) -> Result<bool, VaultError> {
        let mut values = self.inner.values.lock();
        let Some(current) = values.get(key) else {
            return Ok(false);
        };
        if self.inner.key.open(key, current)?.access_token != stale {
            return Ok(false);
        }
        values.remove(key);
        Ok(true)
    }

    fn remove_unopenable_now(&self, key: &VaultKey) -> Result<bool, VaultError> {
        let mut values = self.inner.values.lock();
        let Some(current) = values.get(key) else {
            return Ok(false);
        };
        if !matches!(self.inner.key.open(key, current), Err(VaultError::Open)) {
            return Ok(false);
        }
        values.remove(key);
        Ok(true)
    }

    fn list_now(&self, principal: Option<&str>) -> Result<Vec<TokenSummary>, VaultError> {
        let chosen: Vec<(VaultKey, Vec<u8>)> = self
            .inner
            .values
            .lock()
            .iter()
            .filter(|(k, _)| principal.is_none_or(|p| k.principal == p))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        let mut out = chosen
            .iter()
            .map(|(k, v)| self.inner.key.open(k, v).map(|t| t.summary(k)))
            .collect::<Result<Vec<_>, _>>()?;
        out.sort_by(|a, b| (&a.principal, &a.backend).cmp(&(&b.principal, &b.backend)));
        Ok(out)
    }

    async fn lock(&self, key: &VaultKey, wait: Duration) -> Option<RefreshGuard> {
        let mut held = {
            let mut refreshing = self.inner.refreshing.lock();
            match refreshing.get(key) {
                Some(holder) => holder.subscribe(),
                None => {
                    let (tx, _) = watch::channel(());
                    refreshing.insert(key.clone(), tx);
                    let inner = Arc::downgrade(&self.inner);
                    let key = key.clone();
                    return Some(RefreshGuard::new(move || {
                        if let Some(inner) = inner.upgrade() {
                            inner.refreshing.lock().remove(&key);
                        }
                    }));
                }
            }
        };
        // Another holder: wait for its release (its sender dropped), at most `wait`.
        let _ = tokio::time::timeout(wait, held.changed()).await;
        None
    }
}

impl TokenVault for MemoryVault {
    fn get<'a>(
        &'a self,
        key: &'a VaultKey,
    ) -> BoxFuture<'a, Result<Option<UpstreamToken>, VaultError>> {
        Box::pin(async move { self.get_now(key) })
    }

    fn put<'a>(
        &'a self,
        key: &'a VaultKey,
        token: &'a UpstreamToken,
    ) -> BoxFuture<'a, Result<(), VaultError>> {
        Box::pin(async move { self.put_now(key, token) })
    }

    fn replace<'a>(
        &'a self,
        key: &'a VaultKey,
        stale: &'a str,
        token: &'a UpstreamToken,
    ) -> BoxFuture<'a, Result<bool, VaultError>> {
        Box::pin(async move { self.replace_now(key, stale, token) })
    }

    fn remove<'a>(&'a self, key: &'a VaultKey) -> BoxFuture<'a, Result<bool, VaultError>> {
        Box::pin(async move { Ok(self.inner.values.lock().remove(key).is_some()) })
    }

    fn remove_if<'a>(
        &'a self,
        key: &'a VaultKey,
        stale: &'a str,
    ) -> BoxFuture<'a, Result<bool, VaultError>> {
        Box::pin(async move { self.remove_if_now(key, stale) })
    }

    fn remove_unopenable<'a>(
        &'a self,
        key: &'a VaultKey,
    ) -> BoxFuture<'a, Result<bool, VaultError>> {
        Box::pin(async move { self.remove_unopenable_now(key) })
    }

    fn list<'a>(
        &'a self,
        principal: Option<&'a str>,
    ) -> BoxFuture<'a, Result<Vec<TokenSummary>, VaultError>> {
        Box::pin(async move { self.list_now(principal) })
    }

    fn refresh_lock<'a>(
        &'a self,
        key: &'a VaultKey,
        wait: Duration,
    ) -> BoxFuture<'a, Result<Option<RefreshGuard>, VaultError>> {
        Box::pin(async move { Ok(self.lock(key, wait).await) })
    }
}

//! A principal's token for the backend, in the vault: read (refreshed first when it is about
//! to expire), kept after a callback or a refresh, forgotten when the backend refuses it. A
//! refresh is single-flight per (principal, backend) through the vault's refresh lock (across
//! replicas for a shared vault); a refused one forgets the token, so the next call asks for
//! consent again, while an authorization server that cannot answer now fails that one call
//! and keeps the token for the next. A refreshed token is written only over the one it
//! replaces (compare-and-set), so a revoke during a refresh is final.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use hyper::header::HeaderValue;
use serde_json::Value;
use tracing::info;

use super::registration::Registration;
use super::{discovery, token_request, Backend};
use crate::outgoing_auth::vault::{UpstreamToken, VaultError, VaultKey};
use crate::outgoing_auth::OutgoingAuthError;

/// How long a call waits for another's refresh of the same token.
const REFRESH_WAIT: Duration = Duration::from_secs(10);

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// Whether `token` is still used as it is: until 30 s before it expires, then refreshed. A
/// token without a refresh token, which would be dropped then (consent asked again), is used
/// until half its lifetime when that is shorter (a 10 s one for 5 s): otherwise one living
/// under 30 s would never be used at all. A token of unknown age gets the 30 s.
pub(super) fn fresh(token: &UpstreamToken) -> bool {
    let Some(at) = token.expires_at else {
        return true;
    };
    let lifetime = match (&token.refresh_token, token.issued_at) {
        (None, Some(issued)) => at.saturating_sub(issued),
        _ => u64::MAX,
    };
    let margin = crate::outgoing_auth::cache::refresh_margin(Duration::from_secs(lifetime));
    now() + margin.as_secs() < at
}

/// `Authorization: Bearer <token>`, marked sensitive.
fn header_of(token: &UpstreamToken) -> Option<HeaderValue> {
    let mut value = HeaderValue::from_str(&format!("Bearer {}", token.access_token)).ok()?;
    value.set_sensitive(true);
    Some(value)
}

/// A refresh failure that says nothing about the refresh token (it may work next time): the
/// authorization server unreachable, slow, failing with a 5xx or asking to slow down (429).
fn transient(e: &OutgoingAuthError) -> bool {
    match e {
        OutgoingAuthError::Unreachable | OutgoingAuthError::Timeout => true,
        OutgoingAuthError::Status { status } => *status >= 500 || *status == 429,
        _ => false,
    }
}

fn vault_error(e: VaultError) -> OutgoingAuthError {
    info!(error = %e, "token vault unavailable");
    OutgoingAuthError::Discovery("the token store is unavailable")
}

/// The token a token endpoint answered with (checked as any token answer), to keep.
pub(crate) fn token_from(
    json: &Value,
    registration: &Registration,
    resource: &str,
    asked: Option<String>,
    old_refresh: Option<&str>,
) -> Result<UpstreamToken, OutgoingAuthError> {
    let issued = crate::outgoing_auth::token_endpoint::issued(json, false)?;
    let access = json
        .get("access_token")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let refresh = json
        .get("refresh_token")
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
        .or(old_refresh);
    let issued_at = now();
    let expires_at = json
        .get("expires_in")
        .is_some_and(|v| !v.is_null())
        .then(|| issued_at + issued.lifetime.as_secs());
    Ok(UpstreamToken {
        access_token: access.to_owned(),
        refresh_token: refresh.map(str::to_owned),
        expires_at,
        issued_at: Some(issued_at),
        scope: json
            .get("scope")
            .and_then(Value::as_str)
            .map(str::to_owned)
            .or(asked),
        issuer: registration.issuer.clone(),
        resource: resource.to_owned(),
        client_id: registration.client_id.clone(),
        client_secret: registration
            .secret
            .as_ref()
            .filter(|_| registration.dynamic)
            .map(|s| s.expose().to_owned()),
        client_auth: registration
            .dynamic
            .then(|| registration.auth.name().to_owned()),
    })
}

impl Backend {
    pub(super) fn key(&self, principal: &str) -> VaultKey {
        VaultKey::new(principal, self.config.backend.as_str())
    }

    /// Whether `token` was issued for this backend as it is configured now: its RFC 8707
    /// resource is one discovery accepts for the server URL (the URL itself, or its origin),
    /// and its issuer the configured `authorizationServer` where there is one.
    /// The vault is keyed by backend name only, so a token kept before a reload pointed the
    /// name at another server must not follow the name there.
    pub(crate) fn bound_here(&self, token: &UpstreamToken) -> bool {
        let server = self.config.server_url.as_str();
        let pinned = self.config.client.authorization_server.as_deref();
        if pinned.is_some_and(|issuer| issuer != token.issuer) {
            return false;
        }
        discovery::same_resource(&token.resource, server)
            || discovery::resource_candidates(server, None)
                .iter()
                .any(|(_, expected)| discovery::same_resource(&token.resource, expected))
    }

    /// `key`'s token in the vault, when it is bound here ([`Backend::bound_here`]); one that
    /// is not is forgotten.
    async fn kept(&self, key: &VaultKey) -> Result<Option<UpstreamToken>, VaultError> {
        let Some(token) = self.openable(key).await? else {
            return Ok(None);
        };
        if self.bound_here(&token) {
            return Ok(Some(token));
        }
        info!(backend = %self.config.backend, "a kept token was issued for another server or by another authorization server; forgotten, consent is needed again");
        self.forget_if(key, &token).await;
        Ok(None)
    }

    /// `key`'s token in the vault. One that does not open (sealed with another key, altered,
    /// or moved there) is removed, as if there were none: kept, it would fail every call of
    /// its principal before a 401 could lead to consent again, and the principal could not
    /// delete it either (`revoke` reads it first).
    async fn openable(&self, key: &VaultKey) -> Result<Option<UpstreamToken>, VaultError> {
        match self.vault.get(key).await {
            Err(VaultError::Open) => {
                info!(backend = %self.config.backend, "a kept token could not be opened (another encryption key, or altered); removed, consent is needed again");
                // Only if it still does not open: a consent completed meanwhile stays.
                self.vault.remove_unopenable(key).await?;
                Ok(None)
            }
            // A newer build's (a rolling upgrade): not used here, and left for it.
            Err(VaultError::Format) => Ok(None),
            read => read,
        }
    }

    /// `principal`'s token for this backend, refreshed first when it is about to expire;
    /// `None` when there is none (the call goes out without one, and the backend's 401 leads
    /// to consent).
    pub(crate) async fn token(
        &self,
        principal: &str,
    ) -> Result<Option<HeaderValue>, OutgoingAuthError> {
        let key = self.key(principal);
        let Some(token) = self.kept(&key).await.map_err(vault_error)? else {
            return Ok(None);
        };
        if fresh(&token) {
            return Ok(header_of(&token));
        }
        self.refresh(&key, &token).await
    }

    /// The backend answered 401 to `sent`, `principal`'s token: whether to retry with another
    /// (one a concurrent refresh made, or one refreshed now). Otherwise the token is forgotten.
    pub(crate) async fn refused(&self, principal: &str, sent: &HeaderValue) -> bool {
        let key = self.key(principal);
        let Ok(Some(token)) = self.kept(&key).await else {
            return false;
        };
        if header_of(&token).is_some_and(|h| h != *sent) {
            return true;
        }
        matches!(self.refresh(&key, &token).await, Ok(Some(_)))
    }

    /// Forgets `principal`'s token here.
    pub(crate) async fn forget(&self, principal: &str) {
        if let Err(e) = self.vault.remove(&self.key(principal)).await {
            info!(error = %e, "token vault unavailable");
        }
    }

    /// Forgets `stale`, `key`'s token, if it is still the one kept: a token written
    /// meanwhile (a consent completed between the read and now) stays.
    async fn forget_if(&self, key: &VaultKey, stale: &UpstreamToken) {
        if let Err(e) = self.vault.remove_if(key, &stale.access_token).await {
            info!(error = %e, "token vault unavailable");
        }
    }

    /// Keeps `token` for `principal`.
    pub(crate) async fn keep(
        &self,
        principal: &str,
        token: &UpstreamToken,
    ) -> Result<(), OutgoingAuthError> {
        self.vault
            .put(&self.key(principal), token)
            .await
            .map_err(vault_error)
    }

    /// Whether `principal` is known to hold no token here (none kept, or one kept for
    /// another server); `false` when the vault cannot say. Read only: a token is forgotten
    /// by a call's look-up (`kept`), never by this check.
    pub(crate) async fn revoked(&self, principal: &str) -> bool {
        match self.vault.get(&self.key(principal)).await {
            Ok(None) => true,
            Ok(Some(token)) => !self.bound_here(&token),
            // No token this build can use is held: whatever a session carries was withdrawn
            // (a value put there in another shape is not a consent).
            Err(VaultError::Open | VaultError::Format) => true,
            Err(_) => false,
        }
    }

    /// Whether `principal` holds a token here.
    pub async fn has_token(&self, principal: &str) -> bool {
        matches!(self.vault.get(&self.key(principal)).await, Ok(Some(t)) if self.bound_here(&t))
    }

    /// A fresh token for `key` in place of `stale`: one another holder of the refresh lock
    /// made meanwhile, or one the refresh grant gives now. `Ok(None)`: consent is needed
    /// again (no refresh token, the authorization server refused the grant, or the token was
    /// revoked while it was being refreshed: the new one is then not kept). `Err`: the
    /// authorization server could not be asked now (unreachable, no answer, a server error);
    /// the token is kept for the next try, and this call fails with that reason.
    async fn refresh(
        &self,
        key: &VaultKey,
        stale: &UpstreamToken,
    ) -> Result<Option<HeaderValue>, OutgoingAuthError> {
        if stale.refresh_token.is_none() {
            self.forget_if(key, stale).await;
            return Ok(None);
        }
        let guard = (self.vault.refresh_lock(key, REFRESH_WAIT).await).map_err(vault_error)?;
        let Some(current) = self.kept(key).await.map_err(vault_error)? else {
            return Ok(None);
        };
        let replaced = current.access_token != stale.access_token;
        if replaced && fresh(&current) {
            return Ok(header_of(&current));
        }
        if guard.is_none() {
            // Another holder is still refreshing after the wait: this call fails, the token
            // stays (no consent is asked for what is only slow).
            return Err(OutgoingAuthError::Timeout);
        }
        match self.refresh_grant(&current).await {
            Ok(token) => {
                // Compare-and-set: a revoke during the grant wins; the new token is dropped.
                let kept = self.vault.replace(key, &current.access_token, &token).await;
                drop(guard);
                match kept.map_err(vault_error)? {
                    true => Ok(header_of(&token)),
                    // Revoked, or replaced by another holder: what is there now, if usable.
                    false => {
                        let now = self.kept(key).await;
                        if matches!(now, Ok(None)) {
                            // Revoked during the grant: the token it gave is revoked too.
                            self.revoke_at_issuer(&token).await;
                        }
                        let now = now.ok().flatten().filter(fresh);
                        Ok(now.and_then(|t| header_of(&t)))
                    }
                }
            }
            Err(e) if transient(&e) => {
                info!(backend = %self.config.backend, error = %e, "token refresh could not be done now; the token is kept for the next try");
                Err(e)
            }
            Err(e) => {
                info!(backend = %self.config.backend, error = %e, "token refresh failed; consent is needed again");
                // Only the token that was refused: one another replica refreshed meanwhile
                // (its lock having run out) stays.
                if let Err(e) = self.vault.remove_if(key, &current.access_token).await {
                    info!(error = %e, "token vault unavailable");
                }
                Ok(None)
            }
        }
    }

    /// The refresh grant for `old` (its RFC 8707 resource kept), at its issuer's token
    /// endpoint, with the registration made there.
    async fn refresh_grant(&self, old: &UpstreamToken) -> Result<UpstreamToken, OutgoingAuthError> {
        let refresh = old.refresh_token.as_deref().unwrap_or_default();
        let known = self.servers.lock().get(&old.issuer).cloned();
        let server = match known {
            Some(s) => s,
            None => discovery::server_metadata(&self.http, &old.issuer).await?,
        };
        let registration =
            self.client_of(&server, old)
                .await
                .ok_or(OutgoingAuthError::Discovery(
                    "the token was issued to another client registration",
                ))?;
        let mut form = vec![
            ("grant_type", "refresh_token".to_owned()),
            ("refresh_token", refresh.to_owned()),
            ("resource", old.resource.clone()),
        ];
        let auth = registration.authenticate(&mut form);
        let json = token_request(&self.http, &server.token_endpoint, &form, auth).await?;
        token_from(
            &json,
            &registration,
            &old.resource,
            old.scope.clone(),
            Some(refresh),
        )
    }

    /// The client `token` was issued to, as it authenticates at `server`: the registration
    /// this process holds for that issuer, else the configured client, else the one the token
    /// recorded (a dynamic registration made by another replica, or before a restart). `None`
    /// when none of those is that client. Never a new registration.
    pub(super) async fn client_of(
        &self,
        server: &discovery::ServerMetadata,
        token: &UpstreamToken,
    ) -> Option<Registration> {
        let cached = self.registrations.lock().get(&server.issuer).cloned();
        if let Some(r) = cached.filter(|r| r.client_id == token.client_id) {
            return Some(r);
        }
        let configured = matches!(
            super::registration::choose(&self.config.client, server),
            Ok(super::registration::Choice::PreRegistered
                | super::registration::Choice::MetadataDocument(_))
        );
        if configured {
            let configured = self.registration(server).await.ok();
            if let Some(r) = configured.filter(|r| r.client_id == token.client_id) {
                return Some(r);
            }
        }
        token
            .client_auth
            .is_some()
            .then(|| Registration::of_token(token))
    }
}

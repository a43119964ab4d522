//! A principal's revoke of its token for a backend: the token leaves the vault first (the
//! gateway never sends it again, whatever happens next), then the authorization server that
//! issued it is asked to revoke it (RFC 7009) when its metadata names a
//! `revocation_endpoint`: the refresh token first (which, at most servers, ends the grant),
//! then the access token.

use tracing::info;

use super::registration::Registration;
use super::{discovery, Backend};
use crate::outgoing_auth::OutgoingAuthError;

/// What a revoke did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Revoked {
    /// A token was kept for the principal and is gone now.
    pub removed: bool,
    /// What the authorization server said; `None` when there was nothing to revoke there
    /// (no token, or its server offers no revocation endpoint).
    pub upstream: Option<bool>,
}

impl Backend {
    /// Forgets `principal`'s token here and asks its authorization server to revoke it.
    /// `Err` only when the vault could not be read or written (nothing changed then).
    pub async fn revoke(&self, principal: &str) -> Result<Revoked, OutgoingAuthError> {
        let key = self.key(principal);
        let vault_error = |e| {
            info!(error = %e, "token vault unavailable");
            OutgoingAuthError::Discovery("the token store is unavailable")
        };
        let token = self.vault.get(&key).await.map_err(vault_error)?;
        let removed = self.vault.remove(&key).await.map_err(vault_error)?;
        let Some(token) = token.filter(|_| removed) else {
            return Ok(Revoked {
                removed,
                upstream: None,
            });
        };
        let upstream = match self.revoke_upstream(&token).await {
            Ok(done) => done,
            Err(e) => {
                info!(backend = %self.config.backend, error = %e, "the authorization server could not revoke the token; it is forgotten here");
                Some(false)
            }
        };
        Ok(Revoked { removed, upstream })
    }

    /// RFC 7009 at `token`'s issuer: `Ok(None)` when it offers no revocation endpoint.
    async fn revoke_upstream(
        &self,
        token: &crate::outgoing_auth::vault::UpstreamToken,
    ) -> Result<Option<bool>, OutgoingAuthError> {
        let known = self.servers.lock().get(&token.issuer).cloned();
        let server = match known {
            Some(s) => s,
            None => discovery::server_metadata(&self.http, &token.issuer).await?,
        };
        let Some(endpoint) = server.revocation_endpoint.clone() else {
            return Ok(None);
        };
        let registration = self.revoking_client(&server, &token.client_id).await;
        let mut all = true;
        let tokens = [
            (token.refresh_token.as_deref(), "refresh_token"),
            (Some(token.access_token.as_str()), "access_token"),
        ];
        for (value, hint) in tokens {
            let Some(value) = value else { continue };
            let mut form = vec![
                ("token", value.to_owned()),
                ("token_type_hint", hint.to_owned()),
            ];
            let auth = registration.authenticate(&mut form);
            let body = form_urlencoded::Serializer::new(String::new())
                .extend_pairs(form.iter().map(|(k, v)| (*k, v.as_str())))
                .finish();
            let answer = self
                .http
                .post(&endpoint, "application/x-www-form-urlencoded", body, auth)
                .await?;
            // RFC 7009 §2.2: 200 whether or not the token was still valid; a server that
            // cannot revoke that kind of token (a self-contained JWT access token, which
            // expires on its own) says `unsupported_token_type`.
            let unsupported = answer.status == 400
                && answer.json.as_ref().and_then(|v| v.get("error"))
                    == Some(&serde_json::Value::from("unsupported_token_type"));
            all &= answer.status == 200 || unsupported;
        }
        Ok(Some(all))
    }

    /// The client the token was issued to, as it authenticates at `server`: the registration
    /// this process made or was configured with when it is that client; otherwise a public
    /// client naming itself (a registration made by another replica is not known here, and a
    /// new one must not be made only to revoke).
    async fn revoking_client(
        &self,
        server: &discovery::ServerMetadata,
        client_id: &str,
    ) -> Registration {
        let cached = self.registrations.lock().get(&server.issuer).cloned();
        let configured = self.config.client.client_id.is_some()
            || self.config.client.client_metadata_url.is_some();
        let known = match cached {
            Some(r) => Some(r),
            None if configured => match self.redirect_uri() {
                Ok(uri) => self.registration(server, &uri).await.ok(),
                Err(_) => None,
            },
            None => None,
        };
        known
            .filter(|r| r.client_id == client_id)
            .unwrap_or_else(|| Registration::public(&server.issuer, client_id))
    }
}

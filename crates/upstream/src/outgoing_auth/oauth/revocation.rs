//! A principal's revoke of its token for a backend: the token leaves the vault first (the
//! gateway never sends it again, whatever happens next), then the authorization server that
//! issued it is asked to revoke it (RFC 7009) when its metadata names a
//! `revocation_endpoint`: the refresh token first (which, at most servers, ends the grant),
//! then the access token.

use std::time::Duration;

use tracing::info;

use super::registration::Registration;
use super::{discovery, Backend};
use crate::outgoing_auth::vault::{UpstreamToken, VaultError};
use crate::outgoing_auth::OutgoingAuthError;

/// The most a revocation at the authorization server may take (discovery and both requests):
/// the token is already forgotten here, so the caller is not kept waiting on a slow server.
const REVOKE_DEADLINE: Duration = Duration::from_secs(10);
/// Reads of a token that a concurrent refresh keeps replacing before the revoke gives up.
const REMOVE_TRIES: usize = 3;

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
        // Exactly the token read is removed (compare-and-delete): one a refresh wrote in
        // between is read again, so the one revoked upstream is the one forgotten here (the
        // last try removes whatever is there).
        let mut taken = None;
        for attempt in 1..=REMOVE_TRIES {
            let read = match self.vault.get(&key).await {
                // Not openable: nothing to revoke upstream, but it is the principal's to
                // remove.
                Err(VaultError::Open | VaultError::Format) => {
                    self.vault.remove(&key).await.map_err(vault_error)?;
                    return Ok(Revoked {
                        removed: true,
                        upstream: None,
                    });
                }
                read => read.map_err(vault_error)?,
            };
            let Some(token) = read else {
                break;
            };
            let gone = if attempt == REMOVE_TRIES {
                self.vault.remove(&key).await
            } else {
                self.vault.remove_if(&key, &token.access_token).await
            };
            if gone.map_err(vault_error)? {
                taken = Some(token);
                break;
            }
        }
        let Some(token) = taken else {
            return Ok(Revoked {
                removed: false,
                upstream: None,
            });
        };
        Ok(Revoked {
            removed: true,
            upstream: self.revoke_at_issuer(&token).await,
        })
    }

    /// Asks `token`'s issuer to revoke it, within [`REVOKE_DEADLINE`]: whether it did, `None`
    /// when it offers no revocation endpoint. A token issued for another server than this
    /// backend is configured for now (kept before a reload) is not sent anywhere.
    pub(super) async fn revoke_at_issuer(&self, token: &UpstreamToken) -> Option<bool> {
        if !self.bound_here(token) {
            return None;
        }
        let asked = tokio::time::timeout(REVOKE_DEADLINE, self.revoke_upstream(token)).await;
        match asked {
            Ok(Ok(done)) => done,
            Ok(Err(e)) => {
                info!(backend = %self.config.backend, error = %e, "the authorization server could not revoke the token; it is forgotten here");
                Some(false)
            }
            Err(_) => {
                info!(backend = %self.config.backend, "the authorization server did not answer the revocation in time; the token is forgotten here");
                Some(false)
            }
        }
    }

    /// RFC 7009 at `token`'s issuer: `Ok(None)` when it offers no revocation endpoint.
    async fn revoke_upstream(
        &self,
        token: &UpstreamToken,
    ) -> Result<Option<bool>, OutgoingAuthError> {
        let known = self.servers.lock().get(&token.issuer).cloned();
        let server = match known {
            Some(s) => s,
            None => discovery::server_metadata(&self.http, &token.issuer).await?,
        };
        let Some(endpoint) = server.revocation_endpoint.clone() else {
            return Ok(None);
        };
        // Not a client this process knows (a token kept by an older build): revoked as a
        // public client naming itself, which a server may refuse.
        let registration = self
            .client_of(&server, token)
            .await
            .unwrap_or_else(|| Registration::public(&server.issuer, &token.client_id));
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
}

//! The caller's own upstream tokens (the token vault, `HttpConfig::token_vault`):
//! `GET /oauth/tokens` lists them (no secret: backend, expiry, scope, issuer, whether
//! refreshable) and `DELETE /oauth/tokens/{backend}` removes one, answering
//! `{"removed": bool, "revokedUpstream": bool | null}`: a per-user OAuth backend's token is
//! also revoked at the authorization server that issued it (RFC 7009; `null` when there was
//! nothing to revoke there or it offers no revocation endpoint). Both are admitted like `/mcp`, and act on the authenticated caller's
//! own principal only: no parameter names another. An anonymous caller has no tokens of its
//! own to manage (every unauthenticated caller is the same principal): 401.

use std::sync::Arc;

use axum::extract::{Path, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Extension;
use serde_json::json;

use switchboard_core::Principal;
use switchboard_upstream::outgoing_auth::{principal_key, TokenVault, VaultKey};

use crate::AppState;

/// Why a token route answers with an error (fixed words).
#[derive(Debug, thiserror::Error)]
pub(crate) enum TokensError {
    #[error("authenticate to manage your upstream tokens (anonymous callers have none)")]
    Anonymous,
    #[error("this gateway keeps no upstream tokens")]
    NoVault,
    #[error("the token store is unavailable")]
    Unavailable,
    #[error("{0}")]
    Vault(#[from] switchboard_upstream::outgoing_auth::VaultError),
}

impl IntoResponse for TokensError {
    fn into_response(self) -> Response {
        let status = match &self {
            TokensError::Anonymous => StatusCode::UNAUTHORIZED,
            TokensError::NoVault => StatusCode::NOT_FOUND,
            TokensError::Vault(_) | TokensError::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
        };
        json_answer(status, json!({ "error": self.to_string() }))
    }
}

fn json_answer(status: StatusCode, body: serde_json::Value) -> Response {
    (
        status,
        [
            (header::CONTENT_TYPE, "application/json"),
            (header::CACHE_CONTROL, "no-store"),
        ],
        body.to_string(),
    )
        .into_response()
}

/// The vault and the caller's principal key, or why not.
fn caller_vault<'a>(
    state: &'a AppState,
    caller: &Principal,
) -> Result<(&'a Arc<dyn TokenVault>, String), TokensError> {
    if caller.is_anonymous() {
        return Err(TokensError::Anonymous);
    }
    let vault = state
        .config
        .token_vault
        .as_ref()
        .ok_or(TokensError::NoVault)?;
    Ok((vault, principal_key(&caller.issuer, &caller.subject)))
}

/// `GET /oauth/tokens`: the caller's own tokens, without secrets.
pub(crate) async fn list(
    State(state): State<AppState>,
    Extension(caller): Extension<Arc<Principal>>,
) -> Response {
    let answer = async {
        let (vault, principal) = caller_vault(&state, &caller)?;
        let tokens = vault.list(Some(&principal)).await?;
        Ok::<_, TokensError>(json!({ "tokens": tokens }))
    };
    match answer.await {
        Ok(body) => json_answer(StatusCode::OK, body),
        Err(e) => e.into_response(),
    }
}

/// `DELETE /oauth/tokens/{backend}`: removes the caller's own token for `backend`.
pub(crate) async fn revoke(
    State(state): State<AppState>,
    Extension(caller): Extension<Arc<Principal>>,
    Path(backend): Path<String>,
) -> Response {
    let answer = async {
        let (vault, principal) = caller_vault(&state, &caller)?;
        if let Some(oauth) = switchboard_core::oauth::site().backend(&backend) {
            let revoked = oauth
                .revoke(&principal)
                .await
                .map_err(|_| TokensError::Unavailable)?;
            return Ok(json!({ "removed": revoked.removed, "revokedUpstream": revoked.upstream }));
        }
        let removed = vault.remove(&VaultKey::new(principal, backend)).await?;
        Ok::<_, TokensError>(json!({ "removed": removed, "revokedUpstream": null }))
    };
    match answer.await {
        Ok(body) => json_answer(StatusCode::OK, body),
        Err(e) => e.into_response(),
    }
}

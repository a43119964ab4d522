//! Outgoing identity per remote backend: what the gateway sends as `Authorization` when it
//! calls a remote, resolved per call from the caller's [`Credential`], never per backend
//! alone.
//!
//! - [`OutgoingAuth::Static`]: only the configured headers (the default).
//! - [`OutgoingAuth::Passthrough`]: the caller's own verified token, as presented
//!   (`forwardCallerToken`; discouraged: its audience is the gateway, not the remote). A
//!   caller with no token of its own is refused, as by an exchange: the static headers alone
//!   (which may hold a gateway credential) would act for it with the gateway's identity.
//! - [`OutgoingAuth::TokenExchange`]: RFC 8693. The caller's verified bearer token is the
//!   `subject_token`; the token service issues one for the backend's audience, which is cached
//!   per (subject token, backend) under a SHA-256 key until shortly before it expires. A
//!   caller with no token of its own (API key, anonymous) is refused. The gateway's own
//!   requests (list fetches, probes, handshakes of its own sessions) carry no user's token.
//! - [`OutgoingAuth::ClientCredentials`]: RFC 6749 §4.4, the gateway's own token for the
//!   backend, for every request, cached and fetched again before it expires and once when the
//!   backend answers 401.
//!
//! A failed fetch is remembered per key for a few seconds (its error answers meanwhile), the
//! calls waiting on one fetch take its outcome, and a backend's token service gets at most
//! [`MAX_TOKEN_REQUESTS`] requests at once: a refusing, slow or unreachable token service is
//! not asked again by every call.
//!
//! Secrets (the client secret, every token) are [`Secret`]s or sensitive header values: never
//! printed. Errors carry fixed words and at most the token service's `error` code.

mod cache;
mod error;
pub mod oauth;
mod token_endpoint;
pub mod vault;

use std::sync::Arc;
use std::time::Duration;

use hyper::header::HeaderValue;
use sha2::{Digest, Sha256};

pub use error::OutgoingAuthError;
pub use token_endpoint::check_token_endpoint;
pub use vault::{
    principal_key, MemoryVault, RefreshGuard, TokenSummary, TokenVault, UpstreamToken, VaultError,
    VaultKey, VaultKeyMaterial,
};

use crate::Credential;
use cache::TokenCache;
use token_endpoint::{TokenEndpoint, ACCESS_TOKEN_TYPE};

/// Most exchanged tokens kept per backend.
pub const MAX_CACHED_TOKENS: usize = 4096;
/// Most requests to one backend's token service at once.
pub const MAX_TOKEN_REQUESTS: usize = 16;
const TOKEN_EXCHANGE: &str = "urn:ietf:params:oauth:grant-type:token-exchange";

/// A secret read from a file: never printed, compared or logged.
#[derive(Clone)]
pub struct Secret(Arc<str>);

impl Secret {
    /// Wraps `value` (trailing line breaks are the file's, not the secret's).
    pub fn new(value: &str) -> Self {
        Secret(value.trim_end_matches(['\r', '\n']).into())
    }

    pub(crate) fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret(<redacted>)")
    }
}

/// `auth: {type: tokenExchange, …}`.
#[derive(Debug, Clone)]
pub struct TokenExchangeConfig {
    /// The backend's name (part of every cache key).
    pub backend: String,
    /// The token service's token endpoint.
    pub token_endpoint: String,
    /// The gateway's client id there (`client_secret_basic`).
    pub client_id: String,
    /// Its client secret.
    pub client_secret: Secret,
    /// The requested `audience` (RFC 8693 §2.1), if any.
    pub audience: Option<String>,
    /// The requested `scope`s, sent space-separated (none: no `scope`).
    pub scopes: Vec<String>,
    /// The requested `resource` (RFC 8707), if any.
    pub resource: Option<String>,
    /// Deadline of one request to the token service.
    pub timeout: Duration,
}

/// `auth: {type: clientCredentials, …}`.
#[derive(Debug, Clone)]
pub struct ClientCredentialsConfig {
    /// The authorization server's token endpoint.
    pub token_endpoint: String,
    /// The gateway's client id there.
    pub client_id: String,
    /// Its client secret.
    pub client_secret: Secret,
    /// The requested `scope`s (none: no `scope`).
    pub scopes: Vec<String>,
    /// Deadline of one request to the token endpoint.
    pub timeout: Duration,
}

/// How the gateway authenticates to one remote backend; cloning shares its token cache.
#[derive(Debug, Clone, Default)]
pub enum OutgoingAuth {
    /// Only the configured static headers.
    #[default]
    Static,
    /// The caller's own verified bearer token, unchanged; callers without one are refused.
    Passthrough,
    /// RFC 8693 token exchange of the caller's token.
    TokenExchange(Arc<Exchange>),
    /// The gateway's own token from the client credentials grant.
    ClientCredentials(Arc<GatewayToken>),
    /// Per-user OAuth: each principal's own token for the backend, after its consent.
    OAuth(Arc<oauth::Backend>),
}

impl OutgoingAuth {
    /// Token exchange as `config` says (the token endpoint checked; connects lazily).
    pub fn token_exchange(config: TokenExchangeConfig) -> Result<Self, OutgoingAuthError> {
        let endpoint = TokenEndpoint::new(
            &config.token_endpoint,
            &config.client_id,
            &config.client_secret,
            config.timeout,
        )?;
        let scope = config.scopes.join(" ");
        Ok(OutgoingAuth::TokenExchange(Arc::new(Exchange {
            endpoint,
            backend: config.backend,
            audience: config.audience,
            scope: (!scope.is_empty()).then_some(scope),
            resource: config.resource,
            cache: TokenCache::new(MAX_CACHED_TOKENS),
        })))
    }

    /// The client credentials grant as `config` says (checked; connects lazily).
    pub fn client_credentials(config: ClientCredentialsConfig) -> Result<Self, OutgoingAuthError> {
        let endpoint = TokenEndpoint::new(
            &config.token_endpoint,
            &config.client_id,
            &config.client_secret,
            config.timeout,
        )?;
        let scope = config.scopes.join(" ");
        Ok(OutgoingAuth::ClientCredentials(Arc::new(GatewayToken {
            endpoint,
            scope: (!scope.is_empty()).then_some(scope),
            cache: TokenCache::new(1),
        })))
    }

    /// Whether requests carry the caller's identity (its token, or one exchanged for it).
    pub fn acts_as_caller(&self) -> bool {
        matches!(
            self,
            OutgoingAuth::Passthrough | OutgoingAuth::TokenExchange(_) | OutgoingAuth::OAuth(_)
        )
    }

    /// The `Authorization` a request on behalf of `caller` carries (`None`: the gateway's own
    /// request), or `None` for the static headers alone.
    pub(crate) async fn authorization(
        &self,
        caller: Option<&Credential>,
    ) -> Result<Option<HeaderValue>, OutgoingAuthError> {
        match self {
            OutgoingAuth::Static => Ok(None),
            OutgoingAuth::Passthrough => match caller {
                // The gateway's own request: the static headers only.
                None => Ok(None),
                // A caller without a token of its own is refused, as by an exchange: the
                // static headers alone would be the gateway acting for it.
                Some(c) => c
                    .header()
                    .cloned()
                    .map(Some)
                    .ok_or(OutgoingAuthError::NoSubjectToken),
            },
            OutgoingAuth::TokenExchange(x) => match caller {
                // The gateway's own request: no user's credential, ever.
                None => Ok(None),
                Some(c) => x.token_for(c).await.map(Some),
            },
            OutgoingAuth::ClientCredentials(g) => g.token().await.map(Some),
            OutgoingAuth::OAuth(o) => match caller {
                // The gateway's own request: no user's token, ever.
                None => Ok(None),
                Some(c) => o.token(c.principal()).await,
            },
        }
    }

    /// Whether `principal`'s consent here is known to be gone: a per-user OAuth backend's
    /// vault holds no token for it. A vault that cannot answer says nothing (the session's
    /// token is kept, as a call keeps it through such an outage); other kinds are judged at
    /// each call.
    pub(crate) async fn revoked(&self, principal: &str) -> bool {
        match self {
            OutgoingAuth::OAuth(o) => o.revoked(principal).await,
            _ => false,
        }
    }

    /// The backend answered `status` with `challenge` (its `WWW-Authenticate`) to a call for
    /// `caller`: for a per-user OAuth backend, the error that asks the user's consent (401, or
    /// 403 `insufficient_scope`), or why it cannot be asked. `None`: not this kind of refusal.
    pub(crate) async fn challenged(
        &self,
        caller: Option<&Credential>,
        status: u16,
        challenge: Option<&str>,
    ) -> Option<OutgoingAuthError> {
        let (OutgoingAuth::OAuth(o), Some(caller)) = (self, caller) else {
            return None;
        };
        let parsed = challenge
            .and_then(oauth::challenge::parse)
            .unwrap_or_default();
        if !(status == 401 || (status == 403 && parsed.insufficient_scope())) {
            return None;
        }
        Some(match o.consent(caller.principal(), &parsed).await {
            Ok(consent) => OutgoingAuthError::ConsentRequired(Box::new(consent)),
            Err(e) => {
                tracing::info!(backend = %o.name(), error = %e, "cannot ask for authorization");
                e
            }
        })
    }

    /// The backend answered 401 to `sent`, which this gave for `caller`: whether to fetch a
    /// token again and retry once (the token is forgotten first).
    pub(crate) async fn refused(&self, caller: Option<&Credential>, sent: &HeaderValue) -> bool {
        match self {
            OutgoingAuth::Static | OutgoingAuth::Passthrough => false,
            OutgoingAuth::TokenExchange(x) => match caller.and_then(|c| x.key(c)) {
                Some(key) => {
                    x.cache.forget(&key, sent).await;
                    true
                }
                None => false,
            },
            OutgoingAuth::ClientCredentials(g) => {
                g.cache.forget(&GatewayToken::KEY, sent).await;
                true
            }
            // Retried with a refreshed token when there is one; else the 401's challenge
            // leads to consent (`challenged`).
            OutgoingAuth::OAuth(o) => match caller {
                Some(c) => o.refused(c.principal(), sent).await,
                None => false,
            },
        }
    }
}

/// Token exchange for one backend: its token service and its cache of exchanged tokens.
pub struct Exchange {
    endpoint: TokenEndpoint,
    backend: String,
    audience: Option<String>,
    scope: Option<String>,
    resource: Option<String>,
    cache: TokenCache,
}

impl std::fmt::Debug for Exchange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Exchange")
            .field("backend", &self.backend)
            .field("endpoint", &self.endpoint)
            .field("audience", &self.audience)
            .finish_non_exhaustive()
    }
}

impl Exchange {
    /// The cache key of `caller`'s token at this backend: SHA-256 over the backend and the
    /// subject token (never the token itself, which a printed map would show).
    fn key(&self, caller: &Credential) -> Option<cache::Key> {
        let token = caller.token()?;
        let mut digest = Sha256::new();
        digest.update(b"switchboard-token-exchange\0");
        digest.update(self.backend.as_bytes());
        digest.update([0]);
        digest.update(token.as_bytes());
        Some(digest.finalize().into())
    }

    /// The exchanged token for `caller` (cached, or exchanged now).
    async fn token_for(&self, caller: &Credential) -> Result<HeaderValue, OutgoingAuthError> {
        let (Some(subject), Some(key)) = (caller.token(), self.key(caller)) else {
            return Err(OutgoingAuthError::NoSubjectToken);
        };
        let issued = self
            .cache
            .get_or_fetch(&key, || async {
                let mut form = vec![
                    ("grant_type", TOKEN_EXCHANGE),
                    ("subject_token", subject),
                    ("subject_token_type", ACCESS_TOKEN_TYPE),
                ];
                if let Some(a) = &self.audience {
                    form.push(("audience", a));
                }
                if let Some(r) = &self.resource {
                    form.push(("resource", r));
                }
                if let Some(s) = &self.scope {
                    form.push(("scope", s));
                }
                let issued = self.endpoint.request(&form, true).await;
                if let Err(e) = &issued {
                    tracing::info!(backend = %self.backend, error = %e, "token exchange failed");
                }
                issued
            })
            .await?;
        Ok(issued.header)
    }
}

/// The gateway's own token for one backend (client credentials), kept until shortly before
/// it expires.
pub struct GatewayToken {
    endpoint: TokenEndpoint,
    scope: Option<String>,
    cache: TokenCache,
}

impl std::fmt::Debug for GatewayToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GatewayToken")
            .field("endpoint", &self.endpoint)
            .finish_non_exhaustive()
    }
}

impl GatewayToken {
    const KEY: cache::Key = [0; 32];

    async fn token(&self) -> Result<HeaderValue, OutgoingAuthError> {
        let issued = self
            .cache
            .get_or_fetch(&Self::KEY, || async {
                let mut form = vec![("grant_type", "client_credentials")];
                if let Some(s) = &self.scope {
                    form.push(("scope", s));
                }
                let issued = self.endpoint.request(&form, false).await;
                if let Err(e) = &issued {
                    tracing::warn!(error = %e, "client credentials grant failed");
                }
                issued
            })
            .await?;
        Ok(issued.header)
    }
}

#[cfg(test)]
pub(crate) mod tests;

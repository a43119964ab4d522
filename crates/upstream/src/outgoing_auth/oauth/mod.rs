//! Per-user OAuth to a remote backend (`auth: {type: oauth}`): the gateway is an OAuth client
//! of the backend's authorization server, on behalf of each principal separately.
//!
//! A principal's call goes out with that principal's token for the backend, or with none.
//! When the backend answers 401 (or 403 `insufficient_scope`), [`Backend::consent`] runs
//! discovery (`discovery`), picks or makes the client registration (`registration`), and
//! records an authorization request (`flows`: PKCE S256, `state` bound to the principal and
//! this backend, single use, expiring); the call then fails with
//! [`OutgoingAuthError::ConsentRequired`], which carries the authorization URL the user must
//! open. The browser comes back to the gateway's callback, where [`complete`] checks `state`
//! and `iss` (RFC 9207), redeems the code with the verifier and the RFC 8707 `resource`, and
//! keeps the token for that principal and backend only. Tokens are refreshed shortly before
//! they expire when a refresh token came; a failed refresh asks for consent again.
//!
//! Secrets (tokens, codes, verifiers, client secrets) never reach an error, a log line or a
//! `Debug` output.

mod authorization;
pub mod challenge;
mod discovery;
mod flows;
mod http;
mod pkce;
mod registration;
#[cfg(test)]
mod tests;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use hyper::header::HeaderValue;
use parking_lot::Mutex;
use serde_json::Value;
use tracing::{debug, info};

pub use challenge::Challenge;
pub use flows::{site, Flows, FLOW_LIFETIME, MAX_FLOWS};
pub use registration::{client_metadata, ClientSettings, TokenAuth};

use super::{OutgoingAuthError, Secret};
use crate::credential::Owner;
use registration::Registration;

/// How many step-up re-authorizations one principal gets in a row (after the first
/// authorization): a server that keeps asking for more scope is not asked forever.
pub const MAX_STEP_UPS: u32 = 2;
/// Most principals whose tokens one backend keeps.
pub const MAX_TOKENS: usize = 65_536;
/// A token is refreshed (or, with no refresh token, dropped) this long before it expires.
const EXPIRY_MARGIN: Duration = Duration::from_secs(30);

/// `auth: {type: oauth, …}` of one backend.
#[derive(Debug, Clone)]
pub struct OAuthConfig {
    /// The backend's name.
    pub backend: String,
    /// The MCP server's URL (the resource).
    pub server_url: String,
    /// Scopes to ask for when neither the challenge nor the metadata names any.
    pub scopes: Vec<String>,
    /// The client registration settings.
    pub client: ClientSettings,
    /// Deadline of one request to a metadata, registration or token endpoint.
    pub timeout: Duration,
}

/// Why the user must act: open `url` and consent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Consent {
    /// The backend that needs it.
    pub backend: String,
    /// The authorization URL.
    pub url: String,
    /// A fresh id for the URL elicitation.
    pub elicitation_id: String,
}

/// A principal's token for this backend.
#[derive(Clone)]
struct Stored {
    header: HeaderValue,
    refresh: Option<Secret>,
    expires: Option<Instant>,
    scope: Option<String>,
    registration: Registration,
    token_endpoint: String,
    resource: String,
}

/// One oauth backend: its settings, its registrations (per issuer), and its principals'
/// tokens.
pub struct Backend {
    config: OAuthConfig,
    http: http::Http,
    flows: Arc<Flows>,
    registrations: Mutex<HashMap<String, Registration>>,
    tokens: Mutex<HashMap<Owner, Stored>>,
    /// Per principal: the scope last asked for and the step-ups in a row.
    asked: Mutex<HashMap<Owner, (Option<String>, u32)>>,
}

impl std::fmt::Debug for Backend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OAuthBackend")
            .field("backend", &self.config.backend)
            .field("principals", &self.tokens.lock().len())
            .finish_non_exhaustive()
    }
}

impl Backend {
    /// A backend per `config`, its flows recorded in `flows` (shared by every oauth backend:
    /// the callback is one).
    pub fn new(config: OAuthConfig, flows: Arc<Flows>) -> Result<Arc<Self>, OutgoingAuthError> {
        if let Some(url) = &config.client.client_metadata_url {
            if !url.starts_with("https://")
                || discovery::split(url).is_none_or(|(_, p)| p.is_empty())
            {
                return Err(OutgoingAuthError::Config(
                    "clientMetadataUrl must be an https URL with a path",
                ));
            }
        }
        if let Some(url) = &config.client.client_metadata_url {
            flows.set_metadata_url(url);
        }
        Ok(Arc::new(Backend {
            http: http::Http::new(config.timeout),
            config,
            flows,
            registrations: Mutex::new(HashMap::new()),
            tokens: Mutex::new(HashMap::new()),
            asked: Mutex::new(HashMap::new()),
        }))
    }

    /// The backend's name.
    pub fn name(&self) -> &str {
        &self.config.backend
    }

    /// `owner`'s token for this backend, refreshed first when it is about to expire; `None`
    /// when there is none (the call goes out without one, and the backend's 401 leads to
    /// consent).
    pub(crate) async fn token(
        &self,
        owner: &Owner,
    ) -> Result<Option<HeaderValue>, OutgoingAuthError> {
        let stored = self.tokens.lock().get(owner).cloned();
        let Some(stored) = stored else {
            return Ok(None);
        };
        let fresh = stored
            .expires
            .is_none_or(|at| Instant::now() + EXPIRY_MARGIN < at);
        if fresh {
            return Ok(Some(stored.header));
        }
        self.forget(owner);
        match &stored.refresh {
            Some(refresh) => match self.refresh(owner, &stored, refresh).await {
                Ok(header) => Ok(Some(header)),
                Err(e) => {
                    info!(backend = %self.config.backend, error = %e, "token refresh failed; consent is needed again");
                    Ok(None)
                }
            },
            None => Ok(None),
        }
    }

    /// Forgets `owner`'s token (the backend refused it).
    pub(crate) fn forget(&self, owner: &Owner) {
        self.tokens.lock().remove(owner);
    }

    /// Whether `owner` holds a token here.
    pub fn has_token(&self, owner: &Owner) -> bool {
        self.tokens.lock().contains_key(owner)
    }

    async fn refresh(
        &self,
        owner: &Owner,
        old: &Stored,
        refresh: &Secret,
    ) -> Result<HeaderValue, OutgoingAuthError> {
        let mut form = vec![
            ("grant_type", "refresh_token".to_owned()),
            ("refresh_token", refresh.expose().to_owned()),
            ("resource", old.resource.clone()),
        ];
        let auth = old.registration.authenticate(&mut form);
        let json = token_request(&self.http, &old.token_endpoint, &form, auth).await?;
        let stored = stored_from(
            &json,
            old.registration.clone(),
            &old.token_endpoint,
            &old.resource,
            old.scope.clone(),
            Some(refresh),
        )?;
        let header = stored.header.clone();
        self.keep(*owner, stored);
        Ok(header)
    }

    fn keep(&self, owner: Owner, stored: Stored) {
        let mut tokens = self.tokens.lock();
        if tokens.len() >= MAX_TOKENS && !tokens.contains_key(&owner) {
            let now = Instant::now();
            tokens.retain(|_, s| s.expires.is_none_or(|at| at > now) || s.refresh.is_some());
        }
        if tokens.len() < MAX_TOKENS || tokens.contains_key(&owner) {
            tokens.insert(owner, stored);
        }
    }

    /// The backend refused `owner`'s call (401, or 403 `insufficient_scope`) with
    /// `challenge`: a new authorization request, whose URL the user must open.
    pub(crate) async fn consent(
        self: &Arc<Self>,
        owner: &Owner,
        challenge: &Challenge,
    ) -> Result<Consent, OutgoingAuthError> {
        let step_up = challenge.insufficient_scope();
        let previous = {
            let mut asked = self.asked.lock();
            let entry = asked.entry(*owner).or_insert((None, 0));
            if step_up {
                if entry.1 >= MAX_STEP_UPS {
                    return Err(OutgoingAuthError::StepUpLimit);
                }
                entry.1 += 1;
            } else {
                entry.1 = 0;
            }
            entry.0.clone()
        };
        self.forget(owner);
        let resource = discovery::resource_metadata(
            &self.http,
            &self.config.server_url,
            challenge.resource_metadata.as_deref(),
        )
        .await?;
        let server = discovery::server_metadata(&self.http, &resource.issuer).await?;
        let redirect_uri = self.flows.redirect_uri().ok_or(OutgoingAuthError::Config(
            "the gateway's public URL is not known yet",
        ))?;
        let registration = self.registration(&server, &redirect_uri).await?;
        let scope = authorization::select_scope(
            challenge.scope.as_deref(),
            resource.scopes_supported.as_deref(),
            &self.config.scopes,
            if step_up { previous.as_deref() } else { None },
            server.scopes_supported.as_deref(),
        );
        let verifier = pkce::random_token()?;
        let state = pkce::random_token()?;
        let url = authorization::url(&authorization::Request {
            endpoint: &server.authorization_endpoint,
            client_id: &registration.client_id,
            redirect_uri: &redirect_uri,
            challenge: &pkce::challenge_of(&verifier),
            state: &state,
            resource: &resource.resource,
            scope: scope.as_deref(),
        });
        if let Some(entry) = self.asked.lock().get_mut(owner) {
            entry.0 = scope.clone();
        }
        self.flows.insert(
            state,
            flows::Flow {
                owner: *owner,
                backend: self.clone(),
                registration,
                verifier: Secret::new(&verifier),
                token_endpoint: server.token_endpoint.clone(),
                resource: resource.resource.clone(),
                redirect_uri: redirect_uri.clone(),
                scope,
                issuer: server.issuer.clone(),
                iss_required: server.iss_supported,
                created: Instant::now(),
            },
        )?;
        Ok(Consent {
            backend: self.config.backend.clone(),
            url,
            elicitation_id: pkce::random_token()?,
        })
    }

    /// The registration at `server`: the configured client, the metadata document, or the
    /// dynamic registration made there (kept per issuer, never used at another).
    async fn registration(
        &self,
        server: &discovery::ServerMetadata,
        redirect_uri: &str,
    ) -> Result<Registration, OutgoingAuthError> {
        if let Some(r) = self.registrations.lock().get(&server.issuer) {
            return Ok(r.clone());
        }
        let made =
            registration::register(&self.http, &self.config.client, server, redirect_uri).await?;
        debug!(backend = %self.config.backend, "client registration ready");
        self.registrations
            .lock()
            .insert(server.issuer.clone(), made.clone());
        Ok(made)
    }
}

/// Why a callback was refused: fixed words, never what the request carried.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CallbackError {
    /// No live authorization request has this `state` (wrong, used, expired, or none).
    #[error("this authorization link is unknown, was already used, or has expired; start again from your MCP client")]
    UnknownState,
    /// `iss` is not the issuer the request was sent to (RFC 9207): a mix-up.
    #[error("the authorization answer came from another issuer than the one asked (iss mismatch); it was not used")]
    IssuerMismatch,
    /// The server promised `iss` and the answer has none.
    #[error("the authorization answer lacks the iss its server promises; it was not used")]
    IssuerMissing,
    /// The user or the server declined (`error` in the answer).
    #[error("the authorization was declined: {0}")]
    Denied(String),
    /// Neither a `code` nor an `error`.
    #[error("the authorization answer carries no code")]
    NoCode,
    /// Redeeming the code failed.
    #[error("redeeming the authorization failed: {0}")]
    Token(OutgoingAuthError),
}

/// The callback's query (`state`, `code`, `iss`, `error`): checks and redeems it, keeping the
/// token for the principal and backend the request was made for. Returns the backend's name.
pub async fn complete(flows: &Flows, query: &str) -> Result<String, CallbackError> {
    let mut params: HashMap<String, String> = HashMap::new();
    for (k, v) in form_urlencoded::parse(query.as_bytes()) {
        // A repeated parameter makes the answer ambiguous: refused as a wrong state would be.
        if params.insert(k.into_owned(), v.into_owned()).is_some() {
            return Err(CallbackError::UnknownState);
        }
    }
    let state = params.get("state").ok_or(CallbackError::UnknownState)?;
    let flow = flows.take(state).ok_or(CallbackError::UnknownState)?;
    // RFC 9207: before anything in the answer is acted on, even an error.
    match (params.get("iss"), flow.iss_required) {
        (Some(iss), _) if *iss != flow.issuer => return Err(CallbackError::IssuerMismatch),
        (None, true) => return Err(CallbackError::IssuerMissing),
        _ => {}
    }
    if let Some(code) = params.get("error") {
        let code = code.as_str();
        let known = [
            "access_denied",
            "invalid_request",
            "unauthorized_client",
            "invalid_scope",
            "server_error",
            "temporarily_unavailable",
        ];
        return Err(CallbackError::Denied(
            known
                .iter()
                .find(|k| **k == code)
                .copied()
                .unwrap_or("error")
                .to_owned(),
        ));
    }
    let code = params
        .get("code")
        .filter(|c| !c.is_empty())
        .ok_or(CallbackError::NoCode)?;
    let backend = flow.backend.clone();
    let mut form = vec![
        ("grant_type", "authorization_code".to_owned()),
        ("code", code.clone()),
        ("redirect_uri", flow.redirect_uri.clone()),
        ("code_verifier", flow.verifier.expose().to_owned()),
        ("resource", flow.resource.clone()),
    ];
    let auth = flow.registration.authenticate(&mut form);
    let json = token_request(&backend.http, &flow.token_endpoint, &form, auth)
        .await
        .map_err(CallbackError::Token)?;
    let stored = stored_from(
        &json,
        flow.registration,
        &flow.token_endpoint,
        &flow.resource,
        flow.scope,
        None,
    )
    .map_err(CallbackError::Token)?;
    backend.keep(flow.owner, stored);
    info!(backend = %backend.config.backend, "authorization completed; token kept for its principal");
    Ok(backend.config.backend.clone())
}

/// POSTs a token request; the JSON of a successful answer.
async fn token_request(
    http: &http::Http,
    endpoint: &str,
    form: &[(&'static str, String)],
    auth: Option<HeaderValue>,
) -> Result<Value, OutgoingAuthError> {
    let body = form_urlencoded::Serializer::new(String::new())
        .extend_pairs(form.iter().map(|(k, v)| (*k, v.as_str())))
        .finish();
    let answer = http
        .post(endpoint, "application/x-www-form-urlencoded", body, auth)
        .await?;
    if !(200..300).contains(&answer.status) {
        return Err(match answer.json.as_ref().and_then(|v| v.get("error")) {
            Some(code) => OutgoingAuthError::refused(code.as_str()),
            None => OutgoingAuthError::Status {
                status: answer.status,
            },
        });
    }
    answer.json.ok_or(OutgoingAuthError::Malformed("not JSON"))
}

/// The token in a token answer, to keep.
fn stored_from(
    json: &Value,
    registration: Registration,
    token_endpoint: &str,
    resource: &str,
    asked: Option<String>,
    old_refresh: Option<&Secret>,
) -> Result<Stored, OutgoingAuthError> {
    let issued = super::token_endpoint::issued(json, false)?;
    let refresh = json
        .get("refresh_token")
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
        .map(Secret::new)
        .or_else(|| old_refresh.cloned());
    let expires = json
        .get("expires_in")
        .is_some_and(|v| !v.is_null())
        .then(|| Instant::now() + issued.lifetime);
    Ok(Stored {
        header: issued.header,
        refresh,
        expires,
        scope: json
            .get("scope")
            .and_then(Value::as_str)
            .map(str::to_owned)
            .or(asked),
        registration,
        token_endpoint: token_endpoint.to_owned(),
        resource: resource.to_owned(),
    })
}

/// Whether `url`'s host is a loopback address or `localhost`.
pub(crate) fn is_loopback_url(url: &str) -> bool {
    let Some((origin, _)) = discovery::split(url) else {
        return false;
    };
    let authority = origin.split("://").nth(1).unwrap_or("");
    let host = match authority.strip_prefix('[') {
        Some(v6) => v6.split(']').next().unwrap_or(""),
        None => authority.split(':').next().unwrap_or(""),
    };
    host.eq_ignore_ascii_case("localhost")
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

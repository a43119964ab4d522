//! Per-user OAuth to a remote backend (`auth: {type: oauth}`): the gateway is an OAuth client
//! of the backend's authorization server, on behalf of each principal separately.
//!
//! A principal's call goes out with that principal's token for the backend, or with none.
//! When the backend answers 401 (or 403 `insufficient_scope`), [`Backend::consent`] runs
//! discovery (`discovery`), picks or makes the client registration (`registration`), and
//! records an authorization request (`flows`: PKCE S256, `state` bound to the principal and
//! this backend, single use, expiring); the call then fails with
//! [`OutgoingAuthError::ConsentRequired`], which carries the URL the user must open: the
//! gateway's start page (`start`), whose click binds the flow to that browser and sends it
//! on to the authorization server. The browser comes back to the gateway's callback (a
//! dynamic client's redirect URI is its issuer's own, `/oauth/i/<tag>/callback`), where
//! [`complete`] checks `state`, the browser's cookie, that the answer came back to its flow's
//! redirect URI and `iss` (RFC 9207; mix-up, RFC 9700 §4.4), redeems the code with the
//! verifier and the RFC 8707 `resource`, and
//! keeps the token for that principal and backend only. Tokens are refreshed shortly before
//! they expire when a refresh token came; a failed refresh asks for consent again.
//!
//! Secrets (tokens, codes, verifiers, client secrets) never reach an error, a log line or a
//! `Debug` output.

mod authorization;
pub mod challenge;
mod discovery;
mod flows;
pub(crate) mod http;
mod pkce;
mod registration;
mod revocation;
mod start;
#[cfg(test)]
mod tests;
mod tokens;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use hyper::header::HeaderValue;
use parking_lot::Mutex;
use serde_json::Value;
use tracing::{debug, info};

pub use challenge::Challenge;
pub use flows::{issuer_tag, site, Flows, FLOW_LIFETIME, MAX_FLOWS, MAX_FLOWS_PER_PRINCIPAL};
pub use revocation::Revoked;
pub use start::{ClickFrom, Cookie, StartError, StartPage, Started};

/// The process's one token vault: the one the binary built from `tokenStore` (Redis shared by
/// replicas, or memory) and handed to [`install_vault`] at startup, before any request; a
/// process that installed none (a test, a tool) gets one in memory, sealed under a random key
/// of this process (tokens do not survive a restart).
static VAULT: std::sync::OnceLock<Arc<dyn TokenVault>> = std::sync::OnceLock::new();

/// Makes `vault` the process's token vault for every per-user OAuth backend. False when one
/// was already in use (installed before, or the in-memory one already handed out).
pub fn install_vault(vault: Arc<dyn TokenVault>) -> bool {
    VAULT.set(vault).is_ok()
}

/// A handle on the process's token vault, resolved at first use: a backend built from the
/// config before the binary installs the configured vault still uses that one.
pub fn default_vault() -> Result<Arc<dyn TokenVault>, OutgoingAuthError> {
    Ok(Arc::new(ProcessVault))
}

fn process_vault() -> Result<&'static Arc<dyn TokenVault>, super::vault::VaultError> {
    if let Some(v) = VAULT.get() {
        return Ok(v);
    }
    let key = super::vault::VaultKeyMaterial::ephemeral()?;
    let vault: Arc<dyn TokenVault> = Arc::new(super::vault::MemoryVault::new(key));
    Ok(VAULT.get_or_init(|| vault))
}

/// [`default_vault`]'s handle: every call goes to the process's vault.
#[derive(Debug)]
struct ProcessVault;

impl TokenVault for ProcessVault {
    fn get<'a>(
        &'a self,
        key: &'a super::vault::VaultKey,
    ) -> futures::future::BoxFuture<
        'a,
        Result<Option<super::vault::UpstreamToken>, super::vault::VaultError>,
    > {
        match process_vault() {
            Ok(v) => v.get(key),
            Err(e) => Box::pin(async move { Err(e) }),
        }
    }
    fn put<'a>(
        &'a self,
        key: &'a super::vault::VaultKey,
        token: &'a super::vault::UpstreamToken,
    ) -> futures::future::BoxFuture<'a, Result<(), super::vault::VaultError>> {
        match process_vault() {
            Ok(v) => v.put(key, token),
            Err(e) => Box::pin(async move { Err(e) }),
        }
    }
    fn replace<'a>(
        &'a self,
        key: &'a super::vault::VaultKey,
        stale: &'a str,
        token: &'a super::vault::UpstreamToken,
    ) -> futures::future::BoxFuture<'a, Result<bool, super::vault::VaultError>> {
        match process_vault() {
            Ok(v) => v.replace(key, stale, token),
            Err(e) => Box::pin(async move { Err(e) }),
        }
    }
    fn remove<'a>(
        &'a self,
        key: &'a super::vault::VaultKey,
    ) -> futures::future::BoxFuture<'a, Result<bool, super::vault::VaultError>> {
        match process_vault() {
            Ok(v) => v.remove(key),
            Err(e) => Box::pin(async move { Err(e) }),
        }
    }
    fn remove_if<'a>(
        &'a self,
        key: &'a super::vault::VaultKey,
        stale: &'a str,
    ) -> futures::future::BoxFuture<'a, Result<bool, super::vault::VaultError>> {
        match process_vault() {
            Ok(v) => v.remove_if(key, stale),
            Err(e) => Box::pin(async move { Err(e) }),
        }
    }
    fn remove_unopenable<'a>(
        &'a self,
        key: &'a super::vault::VaultKey,
    ) -> futures::future::BoxFuture<'a, Result<bool, super::vault::VaultError>> {
        match process_vault() {
            Ok(v) => v.remove_unopenable(key),
            Err(e) => Box::pin(async move { Err(e) }),
        }
    }
    fn list<'a>(
        &'a self,
        principal: Option<&'a str>,
    ) -> futures::future::BoxFuture<
        'a,
        Result<Vec<super::vault::TokenSummary>, super::vault::VaultError>,
    > {
        match process_vault() {
            Ok(v) => v.list(principal),
            Err(e) => Box::pin(async move { Err(e) }),
        }
    }
    fn refresh_lock<'a>(
        &'a self,
        key: &'a super::vault::VaultKey,
        wait: Duration,
    ) -> futures::future::BoxFuture<
        'a,
        Result<Option<super::vault::RefreshGuard>, super::vault::VaultError>,
    > {
        match process_vault() {
            Ok(v) => v.refresh_lock(key, wait),
            Err(e) => Box::pin(async move { Err(e) }),
        }
    }
}

pub use registration::{client_metadata, ClientSettings, TokenAuth};

use super::vault::TokenVault;
use super::{OutgoingAuthError, Secret};
use registration::Registration;

/// How many step-up re-authorizations one principal gets in a row (after the first
/// authorization): a server that keeps asking for more scope is not asked forever.
pub const MAX_STEP_UPS: u32 = 2;
/// Most principals whose tokens one backend keeps.
pub const MAX_TOKENS: usize = 65_536;
/// Most authorization servers whose metadata and registrations one backend keeps: a remote
/// that names a new issuer at every 401 does not grow them without end.
pub const MAX_ISSUERS: usize = 16;

/// Keeps `value` for `issuer` in `map`, making room (one other issuer forgotten) when it
/// holds [`MAX_ISSUERS`] already.
fn per_issuer<V>(map: &mut HashMap<String, V>, issuer: &str, value: V) {
    if map.len() >= MAX_ISSUERS && !map.contains_key(issuer) {
        if let Some(other) = map.keys().next().cloned() {
            map.remove(&other);
        }
    }
    map.insert(issuer.to_owned(), value);
}

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

/// One oauth backend: its settings, its registrations and server metadata (per issuer), and
/// where its principals' tokens are (the vault, keyed by principal and this backend).
pub struct Backend {
    config: OAuthConfig,
    http: http::Http,
    flows: Arc<Flows>,
    vault: Arc<dyn TokenVault>,
    registrations: Mutex<HashMap<String, Registration>>,
    servers: Mutex<HashMap<String, discovery::ServerMetadata>>,
    /// Per principal: the scope last asked for and the step-ups in a row.
    asked: Mutex<HashMap<String, (Option<String>, u32)>>,
}

impl std::fmt::Debug for Backend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OAuthBackend")
            .field("backend", &self.config.backend)
            .finish_non_exhaustive()
    }
}

impl Backend {
    /// A backend per `config`, its flows recorded in `flows` (shared by every oauth backend:
    /// the callback is one), its principals' tokens kept in `vault`.
    pub fn new(
        config: OAuthConfig,
        flows: Arc<Flows>,
        vault: Arc<dyn TokenVault>,
    ) -> Result<Arc<Self>, OutgoingAuthError> {
        if let Some(url) = &config.client.client_metadata_url {
            if !url.starts_with("https://")
                || discovery::split(url).is_none_or(|(_, p)| p.is_empty())
            {
                return Err(OutgoingAuthError::Config(
                    "clientMetadataUrl must be an https URL with a path",
                ));
            }
            flows.set_metadata_url(url);
        }
        if config.client.client_id.is_some() && config.client.authorization_server.is_none() {
            return Err(OutgoingAuthError::Config(
                "a pre-registered clientId needs its authorizationServer",
            ));
        }
        let backend = Arc::new(Backend {
            http: http::Http::new(config.timeout, &config.server_url),
            config,
            flows: flows.clone(),
            vault,
            registrations: Mutex::new(HashMap::new()),
            servers: Mutex::new(HashMap::new()),
            asked: Mutex::new(HashMap::new()),
        });
        flows.register(&backend);
        Ok(backend)
    }

    /// The backend's name.
    pub fn name(&self) -> &str {
        &self.config.backend
    }

    fn redirect_uri(&self) -> Result<String, OutgoingAuthError> {
        self.flows.redirect_uri().ok_or(OutgoingAuthError::Config(
            "the gateway's public URL is not known yet",
        ))
    }

    fn issuer_redirect_uri(&self, issuer: &str) -> Result<String, OutgoingAuthError> {
        (self.flows.issuer_redirect_uri(issuer)).ok_or(OutgoingAuthError::Config(
            "the gateway's public URL is not known yet",
        ))
    }

    /// The backend refused `owner`'s call (401, or 403 `insufficient_scope`) with
    /// `challenge`: a new authorization request, whose URL the user must open.
    pub(crate) async fn consent(
        self: &Arc<Self>,
        principal: &str,
        challenge: &Challenge,
    ) -> Result<Consent, OutgoingAuthError> {
        let step_up = challenge.insufficient_scope();
        let previous = {
            let mut asked = self.asked.lock();
            if asked.len() >= MAX_TOKENS && !asked.contains_key(principal) {
                asked.clear();
            }
            let entry = asked.entry(principal.to_owned()).or_insert((None, 0));
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
        self.forget(principal).await;
        let resource = discovery::resource_metadata(
            &self.http,
            &self.config.server_url,
            challenge.resource_metadata.as_deref(),
            self.config.client.authorization_server.as_deref(),
        )
        .await?;
        let server = discovery::server_metadata(&self.http, &resource.issuer).await?;
        per_issuer(&mut self.servers.lock(), &server.issuer, server.clone());
        let registration = self.registration(&server).await?;
        // A dynamic client has its issuer's own redirect URI (the one it registered); a
        // configured one and the metadata document's share `<base>/oauth/callback`, where
        // only `iss` tells issuers apart (see `complete`).
        let redirect_uri = match registration.dynamic {
            true => self.issuer_redirect_uri(&server.issuer)?,
            false => self.redirect_uri()?,
        };
        let scope = authorization::select_scope(
            challenge.scope.as_deref(),
            resource.scopes_supported.as_deref(),
            &self.config.scopes,
            if step_up { previous.as_deref() } else { None },
            server.scopes_supported.as_deref(),
        );
        let verifier = pkce::random_token()?;
        let state = pkce::random_token()?;
        let start = pkce::random_token()?;
        let authorize_url = authorization::url(&authorization::Request {
            endpoint: &server.authorization_endpoint,
            client_id: &registration.client_id,
            redirect_uri: &redirect_uri,
            challenge: &pkce::challenge_of(&verifier),
            state: &state,
            resource: &resource.resource,
            scope: scope.as_deref(),
        });
        if let Some(entry) = self.asked.lock().get_mut(principal) {
            entry.0 = scope.clone();
        }
        self.flows.insert(
            state,
            flows::Flow {
                principal: principal.to_owned(),
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
                start: start.clone(),
                csrf: Secret::new(&pkce::random_token()?),
                authorize_url,
                browser: None,
            },
        )?;
        // The client gets the gateway's start page, never the authorization server's URL.
        let url = self
            .flows
            .start_url(&start)
            .ok_or(OutgoingAuthError::Config(
                "the gateway's public URL is not known yet",
            ))?;
        Ok(Consent {
            backend: self.config.backend.clone(),
            url,
            elicitation_id: pkce::random_token()?,
        })
    }

    /// The registration at `server`: the configured client, the metadata document, or the
    /// dynamic registration made there (kept per issuer, never used at another), which
    /// registers that issuer's own redirect URI.
    async fn registration(
        &self,
        server: &discovery::ServerMetadata,
    ) -> Result<Registration, OutgoingAuthError> {
        if let Some(r) = self.registrations.lock().get(&server.issuer) {
            return Ok(r.clone());
        }
        let redirect_uri = self.issuer_redirect_uri(&server.issuer)?;
        let made =
            registration::register(&self.http, &self.config.client, server, &redirect_uri).await?;
        debug!(backend = %self.config.backend, "client registration ready");
        per_issuer(&mut self.registrations.lock(), &server.issuer, made.clone());
        Ok(made)
    }
}

/// Why a callback was refused: fixed words, never what the request carried.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CallbackError {
    /// No live authorization request has this `state` (wrong, used, expired, or none).
    #[error("this authorization link is unknown, was already used, or has expired; start again from your MCP client")]
    UnknownState,
    /// The answer came back to another redirect URI than its request named (each issuer's
    /// dynamic client has its own): another issuer's answer, a mix-up (RFC 9700 §4.4).
    #[error("the authorization answer came back to another address than its request named (mix-up); it was not used")]
    WrongRedirect,
    /// `iss` is not the issuer the request was sent to (RFC 9207): a mix-up.
    #[error("the authorization answer came from another issuer than the one asked (iss mismatch); it was not used")]
    IssuerMismatch,
    /// The server promised `iss`, or the flow's redirect URI is shared by several issuers
    /// (the metadata document's), and the answer has none.
    #[error("the authorization answer lacks the iss it must carry; it was not used")]
    IssuerMissing,
    /// The browser is not the one that started the flow on the gateway's start page (no
    /// or another cookie): the authorization server's URL was opened elsewhere.
    #[error("this authorization was not started in this browser; open the link your MCP client gave you, in the browser you sign in with")]
    OtherBrowser,
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

/// The callback's request path, its query (`state`, `code`, `iss`, `error`) and the browser's
/// `Cookie` header: checks them and redeems the code, keeping the token for the principal and
/// backend the request was made for. Returns the backend's name.
pub async fn complete(
    flows: &Flows,
    path: &str,
    query: &str,
    cookies: Option<&str>,
) -> Result<String, CallbackError> {
    let mut params: HashMap<String, String> = HashMap::new();
    for (k, v) in form_urlencoded::parse(query.as_bytes()) {
        // A repeated parameter makes the answer ambiguous: refused as a wrong state would be.
        if params.insert(k.into_owned(), v.into_owned()).is_some() {
            return Err(CallbackError::UnknownState);
        }
    }
    let state = params.get("state").ok_or(CallbackError::UnknownState)?;
    let flow = flows.take_in_browser(state, cookies)?;
    // Mix-up defence (RFC 9700 §4.4), before anything in the answer is acted on, even an
    // error: the answer must come back where its request said (the flow is consumed).
    if !flows::arrived_at(&flow.redirect_uri, path) {
        return Err(CallbackError::WrongRedirect);
    }
    // The metadata document's one redirect URI serves every issuer: where another could
    // answer there, only `iss` tells this flow's issuer's answer from theirs.
    let metadata_document =
        !flow.registration.dynamic && flow.backend.config.client.client_id.is_none();
    let iss_required =
        flow.iss_required || (metadata_document && flows.shared_by_issuers(&flow.issuer));
    // RFC 9207: likewise.
    match (params.get("iss"), iss_required) {
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
    let token = tokens::token_from(&json, &flow.registration, &flow.resource, flow.scope, None)
        .map_err(CallbackError::Token)?;
    backend
        .keep(&flow.principal, &token)
        .await
        .map_err(CallbackError::Token)?;
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
    // A server error (or "slow down") says nothing about the grant, whatever its body says.
    if answer.status >= 500 || answer.status == 429 {
        return Err(OutgoingAuthError::Status {
            status: answer.status,
        });
    }
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

//! Incoming authentication: who is calling.
//!
//! Every MCP route (`/mcp`, `/sse`, `/messages`) runs [`guard`], which turns the request's
//! credential into a [`Principal`] (a request extension the handlers read) or answers 401 with
//! `WWW-Authenticate: Bearer resource_metadata="…"` pointing at the RFC 9728 document served by
//! [`metadata`]. Credentials, tried in order:
//!
//! - **none configured**: every caller is the anonymous principal (the binary allows that only
//!   on loopback binds unless told otherwise);
//! - **static API keys** (`Authorization: Bearer <key>`): the SHA-256 digest of the presented
//!   key is compared in constant time (`subtle`) with every configured digest; the principal
//!   is `api-key` / the key's name;
//! - **OAuth 2.1 bearer JWTs** (`jsonwebtoken`, pure-Rust crypto): signature against the
//!   issuer's JWKS, `iss`, `aud`, `exp`, `nbf` (with leeway) and an algorithm allow-list of
//!   asymmetric algorithms (`none` and HMAC are never accepted). The JWKS is fetched lazily,
//!   cached, refetched when older than its max age, and refetched at once on an unknown `kid`
//!   — at most once per cooldown, so forged `kid`s cannot make the gateway hammer the issuer.
//!
//! Tokens never reach a log line, an error message or the audit log: failures are logged by
//! kind only, and audited (`outcome: "unauthenticated"`) by kind, HTTP method and path.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::extract::{Request, State};
use axum::http::{header, HeaderMap};

use axum::response::{IntoResponse, Response};
use jsonwebtoken::jwk::{AlgorithmParameters, JwkSet, PublicKeyUse};
use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use serde_json::{json, Map, Value};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;
use tracing::{debug, warn};

use switchboard_core::{Principal, Unauthenticated};

use crate::error::HttpError;
use crate::AppState;

/// Deadline of one JWKS fetch.
const JWKS_TIMEOUT: Duration = Duration::from_secs(10);
/// After a failed key set fetch, the cached keys (stale or not) serve without another fetch
/// for this long: an issuer that is down is not asked again by every request, each waiting
/// behind the one before (up to [`JWKS_TIMEOUT`] each).
const FAILED_FETCH_BACKOFF: Duration = Duration::from_secs(30);

type JwksClient = crate::outbound::Client<http_body_util::Empty<bytes::Bytes>>;

fn jwks_client() -> JwksClient {
    crate::outbound::client(JWKS_TIMEOUT)
}

/// Largest JWKS document accepted.
const MAX_JWKS_BYTES: usize = 1024 * 1024;

/// Issuer of principals authenticated by a static API key.
pub const API_KEY_ISSUER: &str = "api-key";

/// Issuer of the principal of callers without a credential (`Principal::anonymous`).
pub const ANONYMOUS_ISSUER: &str = "anonymous";

/// Why a JWT issuer may not be `issuer`: the gateway names its own principals with it, so a
/// token's `sub` would be the same principal as an API key's name (or the anonymous caller),
/// owning its sessions and matching its policies. `None` when it may.
pub fn reserved_issuer(issuer: &str) -> Option<String> {
    let whose = match issuer {
        API_KEY_ISSUER => "API-key principals",
        ANONYMOUS_ISSUER => "callers without a credential",
        _ => return None,
    };
    Some(format!(
        "\"{issuer}\" is reserved: it is the issuer of {whose}; give the token issuer's own `iss`"
    ))
}

/// OAuth JWT validation settings.
#[derive(Debug, Clone)]
pub struct JwtConfig {
    /// Expected `iss`, exactly.
    pub issuer: String,
    /// Accepted `aud` values (the token must name at least one).
    pub audiences: Vec<String>,
    /// Where the issuer publishes its keys (http or https).
    pub jwks_url: String,
    /// Accepted signature algorithms (asymmetric only).
    pub algorithms: Vec<Algorithm>,
    /// Clock skew tolerated on `exp` / `nbf`.
    pub leeway: Duration,
    /// The cached key set is refetched when older than this.
    pub jwks_max_age: Duration,
    /// Least time between two fetches caused by unknown `kid`s.
    pub jwks_refresh_cooldown: Duration,
}

impl JwtConfig {
    /// Defaults for an issuer: RS256/ES256 family algorithms, 30 s leeway, 10 min key cache,
    /// 10 s refetch cooldown.
    pub fn new(issuer: String, audiences: Vec<String>, jwks_url: String) -> Self {
        JwtConfig {
            issuer,
            audiences,
            jwks_url,
            algorithms: vec![
                Algorithm::RS256,
                Algorithm::RS384,
                Algorithm::RS512,
                Algorithm::PS256,
                Algorithm::PS384,
                Algorithm::PS512,
                Algorithm::ES256,
                Algorithm::ES384,
                Algorithm::EdDSA,
            ],
            leeway: Duration::from_secs(30),
            jwks_max_age: Duration::from_secs(600),
            jwks_refresh_cooldown: Duration::from_secs(10),
        }
    }
}

/// Parses an algorithm name for the allow-list. HMAC (shared secrets) and `none` are refused:
/// a gateway validating an issuer's tokens only ever needs public keys.
pub fn parse_algorithm(name: &str) -> Result<Algorithm, String> {
    let alg: Algorithm = name
        .trim()
        .parse()
        .map_err(|_| format!("unknown JWT algorithm {name:?}"))?;
    match alg {
        Algorithm::HS256 | Algorithm::HS384 | Algorithm::HS512 => Err(format!(
            "{name}: shared-secret algorithms are not accepted; use the issuer's public keys"
        )),
        a => Ok(a),
    }
}

/// How callers authenticate.
#[derive(Debug)]
pub struct Authenticator {
    /// (name, SHA-256 of the key).
    api_keys: Vec<(String, [u8; 32])>,
    jwt: Option<JwtValidator>,
    /// The RFC 9728 document's URL (for `WWW-Authenticate`).
    metadata_url: String,
    /// This gateway's public base URL (`scheme://host[:port][/prefix]`).
    public_url: String,
    /// The one principal of every unauthenticated caller, shared rather than built per
    /// request (nothing tells anonymous callers apart, so nothing is lost).
    anonymous: Arc<Principal>,
}

impl Authenticator {
    /// Everyone is the anonymous principal.
    pub fn anonymous() -> Self {
        Authenticator {
            api_keys: Vec::new(),
            jwt: None,
            metadata_url: String::new(),
            public_url: String::new(),
            anonymous: Arc::new(Principal::anonymous()),
        }
    }

    /// Requires a credential: one of `api_keys` (name, key) or a JWT per `jwt`.
    /// `public_url` is where clients reach the gateway (metadata and `WWW-Authenticate`).
    pub fn new(
        api_keys: Vec<(String, String)>,
        jwt: Option<JwtConfig>,
        public_url: &str,
    ) -> Result<Self, String> {
        if api_keys.iter().any(|(_, k)| k.len() < 16) {
            return Err("API keys must be at least 16 characters".into());
        }
        if let Some(j) = &jwt {
            if let Some(why) = reserved_issuer(&j.issuer) {
                return Err(format!("JWT issuer (--jwt-issuer, auth.jwt.issuer): {why}"));
            }
            if j.audiences.is_empty() {
                return Err("a JWT issuer needs at least one audience".into());
            }
            if j.algorithms.is_empty() {
                return Err("the JWT algorithm allow-list is empty".into());
            }
            if !(j.jwks_url.starts_with("http://") || j.jwks_url.starts_with("https://")) {
                return Err("the JWKS URL must be http:// or https://".into());
            }
        }
        let public_url = public_url.trim_end_matches('/').to_owned();
        Ok(Authenticator {
            api_keys: api_keys
                .into_iter()
                .map(|(name, key)| (name, Sha256::digest(key.as_bytes()).into()))
                .collect(),
            jwt: jwt.map(JwtValidator::new),
            metadata_url: format!("{public_url}/.well-known/oauth-protected-resource"),
            public_url,
            anonymous: Arc::new(Principal::anonymous()),
        })
    }

    /// Whether callers must present a credential.
    pub fn required(&self) -> bool {
        !self.api_keys.is_empty() || self.jwt.is_some()
    }

    /// The caller's principal, or why not.
    async fn authenticate(&self, headers: &HeaderMap) -> Result<Arc<Principal>, AuthFailure> {
        if !self.required() {
            return Ok(self.anonymous.clone());
        }
        let mut values = headers.get_all(header::AUTHORIZATION).iter();
        let (Some(value), None) = (values.next(), values.next()) else {
            return Err(AuthFailure::Missing);
        };
        let token = value
            .to_str()
            .ok()
            .and_then(|v| {
                let (scheme, token) = v.split_once(' ')?;
                scheme.eq_ignore_ascii_case("bearer").then(|| token.trim())
            })
            .filter(|t| !t.is_empty())
            .ok_or(AuthFailure::Invalid("not a bearer credential"))?;
        if let Some(name) = self.api_key(token) {
            return Ok(Arc::new(Principal {
                issuer: API_KEY_ISSUER.to_owned(),
                subject: name.to_owned(),
                claims: Map::new(),
                // A gateway secret, never a remote's: a backend acting as the caller refuses.
                credential: Some(switchboard_core::Credential::without_token(
                    API_KEY_ISSUER,
                    name,
                )),
            }));
        }
        match &self.jwt {
            Some(jwt) => jwt.validate(token).await.map(Arc::new),
            None => Err(AuthFailure::Invalid("unknown API key")),
        }
    }

    /// The name of the API key `token` is, comparing against every key in constant time.
    fn api_key(&self, token: &str) -> Option<&str> {
        if self.api_keys.is_empty() {
            return None;
        }
        let digest: [u8; 32] = Sha256::digest(token.as_bytes()).into();
        let mut found = None;
        for (name, key) in &self.api_keys {
            if bool::from(key.ct_eq(&digest)) {
                found = Some(name.as_str());
            }
        }
        found
    }

    /// The RFC 9728 protected-resource metadata for `resource`.
    fn metadata(&self, resource: &str) -> Value {
        let mut doc = json!({
            "resource": resource,
            "bearer_methods_supported": ["header"],
            "resource_name": "Switchboard MCP gateway",
        });
        if let Some(jwt) = &self.jwt {
            doc["authorization_servers"] = json!([jwt.config.issuer]);
            doc["resource_signing_alg_values_supported"] = json!(jwt
                .config
                .algorithms
                .iter()
                .map(|a| format!("{a:?}"))
                .collect::<Vec<_>>());
        }
        doc
    }
}

/// Why a request was not authenticated.
#[derive(Debug, Clone, Copy)]
pub(crate) enum AuthFailure {
    /// No `Authorization` header (or more than one).
    Missing,
    /// A credential that is not valid; the reason is for debug logs only.
    Invalid(&'static str),
}

/// The admission step authenticating every request to an MCP route: the caller's
/// [`Principal`], or 401.
// `&mut`: a shared borrow of a request (its body is not `Sync`) would make the future `!Send`.
pub(crate) async fn admit(
    state: &AppState,
    request: &mut Request,
) -> Result<Arc<Principal>, HttpError> {
    let auth = &state.config.auth;
    match auth.authenticate(request.headers()).await {
        Ok(principal) => Ok(principal),
        Err(failure) => {
            let audited = match failure {
                AuthFailure::Missing => Unauthenticated::Missing,
                AuthFailure::Invalid(reason) => {
                    debug!(reason, "bearer credential rejected");
                    Unauthenticated::Invalid(reason)
                }
            };
            // Audited by kind, method and path only: never the credential, any header, or
            // the query (`/messages?session_id=`). An unauthenticated client can cause these
            // lines without limit; the audit queue is bounded and drops (and counts) what
            // its writer cannot keep up with, so a flood neither blocks nor grows anything.
            // No remote address: the server is not started with connection info.
            state.gateway.access().record_unauthenticated(
                audited,
                request.method().as_str(),
                request.uri().path(),
            );
            Err(HttpError::Unauthorized {
                metadata_url: auth.metadata_url.clone(),
                invalid_token: matches!(failure, AuthFailure::Invalid(_)),
            })
        }
    }
}

/// `GET /.well-known/oauth-protected-resource[/mcp]`: RFC 9728 metadata. The root document
/// describes the whole gateway (`resource` = its base URL, so `/mcp` and `/sse` are both
/// covered); the path-suffixed one describes `/mcp`.
pub(crate) async fn metadata(State(state): State<AppState>, uri: axum::http::Uri) -> Response {
    let auth = &state.config.auth;
    let resource = if uri.path().ends_with("/mcp") {
        format!("{}/mcp", auth.public_url)
    } else {
        auth.public_url.clone()
    };
    (
        [
            (header::CONTENT_TYPE, "application/json"),
            (header::CACHE_CONTROL, "max-age=300"),
        ],
        auth.metadata(&resource).to_string(),
    )
        .into_response()
}

/// Validates JWTs against one issuer's JWKS.
#[derive(Debug)]
struct JwtValidator {
    config: JwtConfig,
    http: JwksClient,
    keys: parking_lot::RwLock<KeyCache>,
    /// Serialises fetches (single flight).
    fetching: tokio::sync::Mutex<()>,
}

#[derive(Debug, Default)]
struct KeyCache {
    /// By `kid` (`None`: a key without one).
    keys: HashMap<Option<String>, CachedKey>,
    fetched_at: Option<Instant>,
    /// Last fetch attempt caused by an unknown `kid` (for the cooldown).
    last_forced: Option<Instant>,
    /// When the last fetch failed (cleared by one that succeeds): see [`FAILED_FETCH_BACKOFF`].
    failed_at: Option<Instant>,
}

#[derive(Clone)]
struct CachedKey {
    key: DecodingKey,
    /// The JWK's `alg`, when it names one: tokens must then use exactly it.
    alg: Option<String>,
}

impl std::fmt::Debug for CachedKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CachedKey").field("alg", &self.alg).finish()
    }
}

impl JwtValidator {
    fn new(config: JwtConfig) -> Self {
        let http = jwks_client();
        JwtValidator {
            config,
            http,
            keys: parking_lot::RwLock::new(KeyCache::default()),
            fetching: tokio::sync::Mutex::new(()),
        }
    }

    async fn validate(&self, token: &str) -> Result<Principal, AuthFailure> {
        let header = jsonwebtoken::decode_header(token)
            .map_err(|_| AuthFailure::Invalid("malformed JWT"))?;
        if !self.config.algorithms.contains(&header.alg) {
            return Err(AuthFailure::Invalid("JWT algorithm not allowed"));
        }
        let kid = header.kid;
        let key = self
            .key(kid.as_deref())
            .await
            .ok_or(AuthFailure::Invalid("no key for the JWT's kid"))?;
        if key
            .alg
            .as_deref()
            .is_some_and(|a| a != format!("{:?}", header.alg))
        {
            return Err(AuthFailure::Invalid("JWT algorithm does not match its key"));
        }
        let mut validation = Validation::new(header.alg);
        validation.set_issuer(&[&self.config.issuer]);
        validation.set_audience(&self.config.audiences);
        validation.set_required_spec_claims(&["exp", "iss", "aud", "sub"]);
        validation.validate_nbf = true;
        validation.leeway = self.config.leeway.as_secs();
        let data = jsonwebtoken::decode::<Map<String, Value>>(token, &key.key, &validation)
            .map_err(|e| {
                use jsonwebtoken::errors::ErrorKind as K;
                AuthFailure::Invalid(match e.kind() {
                    K::ExpiredSignature => "JWT expired",
                    K::ImmatureSignature => "JWT not yet valid",
                    K::InvalidAudience => "JWT audience not accepted",
                    K::InvalidIssuer => "JWT issuer not accepted",
                    K::InvalidSignature => "JWT signature invalid",
                    K::MissingRequiredClaim(_) => "JWT lacks a required claim",
                    _ => "JWT invalid",
                })
            })?;
        let claims = data.claims;
        let subject = claims
            .get("sub")
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
            .ok_or(AuthFailure::Invalid("JWT sub is not a string"))?
            .to_owned();
        let credential = switchboard_core::Credential::bearer(token, &self.config.issuer, &subject)
            .or_else(|| {
                Some(switchboard_core::Credential::without_token(
                    &self.config.issuer,
                    &subject,
                ))
            });
        Ok(Principal {
            issuer: self.config.issuer.clone(),
            subject,
            claims,
            credential,
        })
    }

    /// The key for `kid`, fetching the key set when it is stale, or when `kid` is unknown and
    /// the cooldown allows.
    async fn key(&self, kid: Option<&str>) -> Option<CachedKey> {
        let lookup = |cache: &KeyCache| -> Option<CachedKey> {
            match kid {
                Some(k) => cache.keys.get(&Some(k.to_owned())).cloned(),
                // A token without `kid` is accepted only when the set has exactly one key.
                None if cache.keys.len() == 1 => cache.keys.values().next().cloned(),
                None => None,
            }
        };
        let fresh = |cache: &KeyCache| {
            cache
                .fetched_at
                .is_some_and(|t| t.elapsed() < self.config.jwks_max_age)
        };
        let backing_off = |cache: &KeyCache| {
            (cache.failed_at).is_some_and(|t| t.elapsed() < FAILED_FETCH_BACKOFF)
        };
        {
            let cache = self.keys.read();
            if fresh(&cache) || backing_off(&cache) {
                if let Some(key) = lookup(&cache) {
                    return Some(key);
                }
            }
        }
        let _single = match self.fetching.try_lock() {
            Ok(single) => single,
            Err(_) => {
                // A fetch is under way. Where the last one failed (the issuer may be down),
                // the stale key serves rather than a wait of up to `JWKS_TIMEOUT`; with a
                // healthy issuer, the fetch's outcome decides.
                let stale = {
                    let cache = self.keys.read();
                    lookup(&cache).filter(|_| cache.failed_at.is_some())
                };
                if stale.is_some() {
                    return stale;
                }
                self.fetching.lock().await
            }
        };
        let forced = {
            let cache = self.keys.read();
            if backing_off(&cache) && !fresh(&cache) {
                // Failed while this request waited: the stale keys, or nothing, until the
                // back-off passes.
                return lookup(&cache);
            }
            if fresh(&cache) {
                if let Some(key) = lookup(&cache) {
                    // Someone else fetched while we waited.
                    return Some(key);
                }
                // Fresh but without this kid: a forced refetch, subject to the cooldown.
                if cache
                    .last_forced
                    .is_some_and(|t| t.elapsed() < self.config.jwks_refresh_cooldown)
                {
                    return None;
                }
                true
            } else {
                false
            }
        };
        if forced {
            self.keys.write().last_forced = Some(Instant::now());
        }
        match self.fetch().await {
            Ok(keys) => {
                let mut cache = self.keys.write();
                cache.keys = keys;
                cache.fetched_at = Some(Instant::now());
                cache.failed_at = None;
                lookup(&cache)
            }
            Err(e) => {
                let url = switchboard_upstream::remote::shown_url(&self.config.jwks_url);
                warn!(error = %e, %url, "JWKS fetch failed; keeping the cached keys");
                // Stale keys are better than none while the issuer is unreachable.
                let mut cache = self.keys.write();
                cache.failed_at = Some(Instant::now());
                lookup(&cache)
            }
        }
    }

    async fn fetch(&self) -> Result<HashMap<Option<String>, CachedKey>, String> {
        use http_body_util::BodyExt;
        let request = axum::http::Request::get(&self.config.jwks_url)
            .header(header::ACCEPT, "application/json")
            .body(http_body_util::Empty::<bytes::Bytes>::new())
            .map_err(|e| error_chain(&e))?;
        let body = tokio::time::timeout(JWKS_TIMEOUT, async {
            let response = self
                .http
                .request(request)
                .await
                .map_err(|e| error_chain(&e))?;
            if !response.status().is_success() {
                return Err(format!("HTTP {}", response.status()));
            }
            http_body_util::Limited::new(response.into_body(), MAX_JWKS_BYTES)
                .collect()
                .await
                .map(|b| b.to_bytes())
                .map_err(|e| format!("reading the JWKS: {e}"))
        })
        .await
        .map_err(|_| "JWKS fetch timed out".to_owned())??;
        let set: JwkSet = serde_json::from_slice(&body).map_err(|e| e.to_string())?;
        let mut keys = HashMap::new();
        for jwk in &set.keys {
            if matches!(
                jwk.common.public_key_use,
                Some(PublicKeyUse::Encryption | PublicKeyUse::Other(_))
            ) {
                continue;
            }
            // Shared secrets never come from a public key set.
            if matches!(jwk.algorithm, AlgorithmParameters::OctetKey(_)) {
                continue;
            }
            let Ok(key) = DecodingKey::from_jwk(jwk) else {
                continue;
            };
            let alg = jwk.common.key_algorithm.map(|a| a.to_string());
            keys.insert(jwk.common.key_id.clone(), CachedKey { key, alg });
        }
        debug!(keys = keys.len(), "JWKS fetched");
        Ok(keys)
    }
}

/// An error with its sources (reqwest's own message rarely says what went wrong).
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        out.push_str(": ");
        out.push_str(&s.to_string());
        source = s.source();
    }
    out
}

#[cfg(test)]
mod tests;

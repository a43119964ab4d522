//! One authorization request: the scope it asks for and its URL (RFC 6749 §4.1.1 with PKCE
//! S256, RFC 8707 `resource`, and `state`; `prompt=consent` with `offline_access`).

use crate::outgoing_auth::token_endpoint::form;

/// The scope to request: the challenge's (authoritative for the operation), else the
/// resource's `scopes_supported`, else the configured scopes, else none; joined with what was
/// asked before for this principal (a step-up keeps what it had); `offline_access` added when
/// the authorization server lists it (so that a refresh token may come).
pub(crate) fn select_scope(
    challenge: Option<&str>,
    resource_supported: Option<&[String]>,
    configured: &[String],
    previous: Option<&str>,
    server_supported: Option<&[String]>,
) -> Option<String> {
    let mut scopes: Vec<String> = match (challenge, resource_supported) {
        (Some(c), _) => c.split_whitespace().map(str::to_owned).collect(),
        (None, Some(s)) if !s.is_empty() => s.to_vec(),
        _ => configured.to_vec(),
    };
    for s in previous.unwrap_or("").split_whitespace() {
        if !scopes.iter().any(|have| have == s) {
            scopes.push(s.to_owned());
        }
    }
    let offline = server_supported.is_some_and(|s| s.iter().any(|s| s == "offline_access"));
    if offline && !scopes.iter().any(|s| s == "offline_access") {
        scopes.push("offline_access".to_owned());
    }
    (!scopes.is_empty()).then(|| scopes.join(" "))
}

/// What goes into an authorization URL.
pub(crate) struct Request<'a> {
    pub(crate) endpoint: &'a str,
    pub(crate) client_id: &'a str,
    pub(crate) redirect_uri: &'a str,
    pub(crate) challenge: &'a str,
    pub(crate) state: &'a str,
    pub(crate) resource: &'a str,
    pub(crate) scope: Option<&'a str>,
}

/// The authorization URL (the endpoint's own query kept).
pub(crate) fn url(r: &Request<'_>) -> String {
    let mut params = vec![
        ("response_type", "code"),
        ("client_id", r.client_id),
        ("redirect_uri", r.redirect_uri),
        ("code_challenge", r.challenge),
        ("code_challenge_method", "S256"),
        ("state", r.state),
        ("resource", r.resource),
    ];
    if let Some(scope) = r.scope {
        params.push(("scope", scope));
        // OpenID Connect Core §11: a provider ignores `offline_access` (and so issues no
        // refresh token) unless `prompt` contains `consent`. A server that is not an OpenID
        // provider ignores the parameter (RFC 6749 §3.1).
        if scope.split(' ').any(|s| s == "offline_access") {
            params.push(("prompt", "consent"));
        }
    }
    let query = params
        .iter()
        .map(|(k, v)| format!("{k}={}", form(v)))
        .collect::<Vec<_>>()
        .join("&");
    let endpoint = r.endpoint.split('#').next().unwrap_or(r.endpoint);
    let joiner = if endpoint.contains('?') { '&' } else { '?' };
    format!("{endpoint}{joiner}{query}")
}

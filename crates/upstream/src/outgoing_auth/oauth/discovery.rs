//! Where the authorization server is, as the MCP authorization spec tells a client to find
//! it: the protected-resource metadata (RFC 9728: the challenge's `resource_metadata`, else the
//! path-aware well-known, else the root one), whose `resource` must be this server, then the
//! authorization server's metadata (RFC 8414 and OpenID Connect Discovery, path insertion for
//! an issuer with a path), whose `issuer` must be the one it was looked up by, and which must
//! offer PKCE S256.
//!
//! URLs are handled as strings split at the origin: an issuer is compared exactly as written
//! (`http://as` is not `http://as/`).

use serde_json::Value;

use super::http::Http;
use crate::outgoing_auth::OutgoingAuthError;

/// What the protected-resource metadata said, validated.
#[derive(Debug, Clone)]
pub(crate) struct ResourceMetadata {
    /// Its `resource`, the RFC 8707 `resource` of every request.
    pub(crate) resource: String,
    /// The authorization server's issuer (the first named).
    pub(crate) issuer: String,
    /// Its `scopes_supported`.
    pub(crate) scopes_supported: Option<Vec<String>>,
}

/// What the authorization server's metadata said, validated.
#[derive(Debug, Clone)]
pub(crate) struct ServerMetadata {
    pub(crate) issuer: String,
    pub(crate) authorization_endpoint: String,
    pub(crate) token_endpoint: String,
    pub(crate) registration_endpoint: Option<String>,
    /// RFC 7009, when offered (and an https URL, or http to a loopback host).
    pub(crate) revocation_endpoint: Option<String>,
    pub(crate) scopes_supported: Option<Vec<String>>,
    pub(crate) token_endpoint_auth_methods: Option<Vec<String>>,
    pub(crate) cimd_supported: bool,
    pub(crate) iss_supported: bool,
}

/// `url` split into its origin (`scheme://authority`) and its path (no query, no trailing
/// slash; empty for the root).
pub(crate) fn split(url: &str) -> Option<(&str, &str)> {
    let scheme_end = url.find("://")? + 3;
    let path_start = url[scheme_end..]
        .find(['/', '?', '#'])
        .map_or(url.len(), |i| scheme_end + i);
    let origin = &url[..path_start];
    let rest = &url[path_start..];
    let path = rest.split(['?', '#']).next().unwrap_or("");
    Some((origin, path.trim_end_matches('/')))
}

/// The protected-resource metadata URLs to try for `server`, in order, each with the
/// `resource` the document there must name (`None`: the server URL itself, for the one the
/// challenge gave).
pub(crate) fn resource_candidates(
    server: &str,
    from_challenge: Option<&str>,
) -> Vec<(String, String)> {
    let mut out = Vec::new();
    if let Some(url) = from_challenge {
        out.push((url.to_owned(), server.to_owned()));
    }
    if let Some((origin, path)) = split(server) {
        if !path.is_empty() {
            out.push((
                format!("{origin}/.well-known/oauth-protected-resource{path}"),
                format!("{origin}{path}"),
            ));
        }
        out.push((
            format!("{origin}/.well-known/oauth-protected-resource"),
            origin.to_owned(),
        ));
    }
    out
}

/// The authorization server metadata URLs to try for `issuer`, in the spec's order.
pub(crate) fn server_candidates(issuer: &str) -> Vec<String> {
    let Some((origin, path)) = split(issuer) else {
        return Vec::new();
    };
    if path.is_empty() {
        return vec![
            format!("{origin}/.well-known/oauth-authorization-server"),
            format!("{origin}/.well-known/openid-configuration"),
        ];
    }
    vec![
        format!("{origin}/.well-known/oauth-authorization-server{path}"),
        format!("{origin}/.well-known/openid-configuration{path}"),
        format!("{origin}{path}/.well-known/openid-configuration"),
    ]
}

/// Whether a metadata `resource` names the identifier it must: exactly, or but for one
/// trailing slash.
pub(crate) fn same_resource(named: &str, expected: &str) -> bool {
    named.trim_end_matches('/') == expected.trim_end_matches('/')
}

/// The protected-resource metadata of `server`; its authorization server is `pinned` (which
/// it must name among its `authorization_servers`), else the first it names.
pub(crate) async fn resource_metadata(
    http: &Http,
    server: &str,
    from_challenge: Option<&str>,
    pinned: Option<&str>,
) -> Result<ResourceMetadata, OutgoingAuthError> {
    for (url, expected) in resource_candidates(server, from_challenge) {
        let Some(doc) = http.get_json(&url).await? else {
            continue;
        };
        let resource = doc.get("resource").and_then(Value::as_str);
        // RFC 9728 §3.3: a document naming another resource is not used, and the
        // authorization server it names is never contacted.
        let Some(resource) = resource.filter(|r| same_resource(r, &expected)) else {
            return Err(OutgoingAuthError::Discovery(
                "the protected-resource metadata names another resource",
            ));
        };
        let issuer = issuer_of(&doc, pinned)?;
        return Ok(ResourceMetadata {
            resource: resource.to_owned(),
            issuer: issuer.to_owned(),
            scopes_supported: strings(&doc, "scopes_supported"),
        });
    }
    Err(OutgoingAuthError::Discovery(
        "the server publishes no protected-resource metadata",
    ))
}

/// The authorization server of a protected-resource metadata document: `pinned`, which it
/// must name, else the first it names.
pub(crate) fn issuer_of<'a>(
    doc: &'a Value,
    pinned: Option<&str>,
) -> Result<&'a str, OutgoingAuthError> {
    let mut named = doc
        .get("authorization_servers")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str);
    match pinned {
        None => named.next().ok_or(OutgoingAuthError::Discovery(
            "the protected-resource metadata names no authorization server",
        )),
        Some(pinned) => named.find(|n| *n == pinned).ok_or(OutgoingAuthError::Discovery(
            "the protected-resource metadata does not name the configured authorizationServer; no other is used",
        )),
    }
}

/// The metadata of the authorization server `issuer`.
pub(crate) async fn server_metadata(
    http: &Http,
    issuer: &str,
) -> Result<ServerMetadata, OutgoingAuthError> {
    for url in server_candidates(issuer) {
        let Some(doc) = http.get_json(&url).await? else {
            continue;
        };
        return validate_server(&doc, issuer);
    }
    Err(OutgoingAuthError::Discovery(
        "the authorization server publishes no metadata",
    ))
}

/// `doc` as the metadata of `issuer`: the same issuer, exactly; the endpoints; PKCE S256.
pub(crate) fn validate_server(
    doc: &Value,
    issuer: &str,
) -> Result<ServerMetadata, OutgoingAuthError> {
    if doc.get("issuer").and_then(Value::as_str) != Some(issuer) {
        return Err(OutgoingAuthError::Discovery(
            "the authorization server metadata names another issuer",
        ));
    }
    let endpoint = |name: &'static str| doc.get(name).and_then(Value::as_str).map(str::to_owned);
    let s256 = strings(doc, "code_challenge_methods_supported")
        .is_some_and(|m| m.iter().any(|m| m == "S256"));
    if !s256 {
        return Err(OutgoingAuthError::Discovery(
            "the authorization server does not offer PKCE S256",
        ));
    }
    let authorization_endpoint =
        endpoint("authorization_endpoint").ok_or(OutgoingAuthError::Discovery(
            "the authorization server metadata has no authorization_endpoint",
        ))?;
    // Relayed to the user as a link to open: never javascript:, data: or cleartext http to
    // another host (the code and state would cross in the clear).
    if crate::outgoing_auth::check_token_endpoint(&authorization_endpoint).is_err() {
        return Err(OutgoingAuthError::Discovery(
            "the authorization endpoint is not an https URL (or http to a loopback host)",
        ));
    }
    Ok(ServerMetadata {
        issuer: issuer.to_owned(),
        authorization_endpoint,
        token_endpoint: endpoint("token_endpoint").ok_or(OutgoingAuthError::Discovery(
            "the authorization server metadata has no token_endpoint",
        ))?,
        registration_endpoint: endpoint("registration_endpoint"),
        revocation_endpoint: endpoint("revocation_endpoint")
            .filter(|url| crate::outgoing_auth::check_token_endpoint(url).is_ok()),
        scopes_supported: strings(doc, "scopes_supported"),
        token_endpoint_auth_methods: strings(doc, "token_endpoint_auth_methods_supported"),
        cimd_supported: doc.get("client_id_metadata_document_supported")
            == Some(&Value::Bool(true)),
        iss_supported: doc.get("authorization_response_iss_parameter_supported")
            == Some(&Value::Bool(true)),
    })
}

fn strings(doc: &Value, name: &str) -> Option<Vec<String>> {
    let list = doc.get(name)?.as_array()?;
    Some(
        list.iter()
            .filter_map(Value::as_str)
            .map(str::to_owned)
            .collect(),
    )
}

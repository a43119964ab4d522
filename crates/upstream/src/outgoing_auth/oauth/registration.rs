//! Which client the gateway is at an authorization server, in the spec's order: the
//! pre-registered `clientId` (and secret), else its Client ID Metadata Document (its URL is the
//! `client_id`) where the server supports those, else RFC 7591 dynamic registration. A dynamic
//! registration belongs to the issuer that made it and is never presented to another; how the
//! client authenticates at the token endpoint follows the registration and the server's
//! `token_endpoint_auth_methods_supported`.

use base64::Engine;
use hyper::header::HeaderValue;
use serde_json::{json, Value};

use super::discovery::ServerMetadata;
use super::http::Http;
use crate::outgoing_auth::token_endpoint::form;
use crate::outgoing_auth::vault::UpstreamToken;
use crate::outgoing_auth::{OutgoingAuthError, Secret};

/// How the client authenticates at the token endpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TokenAuth {
    /// `client_secret_basic`: the id and secret in `Authorization: Basic`.
    Basic,
    /// `client_secret_post`: the id and secret in the form.
    Post,
    /// `none`: a public client, its id in the form.
    None,
}

impl TokenAuth {
    /// The RFC 7591 name.
    pub fn name(self) -> &'static str {
        match self {
            TokenAuth::Basic => "client_secret_basic",
            TokenAuth::Post => "client_secret_post",
            TokenAuth::None => "none",
        }
    }

    /// The method `name` names, if one of these.
    pub fn parse(name: &str) -> Option<Self> {
        match name {
            "client_secret_basic" => Some(TokenAuth::Basic),
            "client_secret_post" => Some(TokenAuth::Post),
            "none" => Some(TokenAuth::None),
            _ => None,
        }
    }
}

/// Longest `client_id` or `client_secret` a dynamic registration may give.
const MAX_CLIENT_FIELD: usize = 4096;

/// The gateway's client at one authorization server.
#[derive(Debug, Clone)]
pub(crate) struct Registration {
    /// The issuer it belongs to.
    pub(crate) issuer: String,
    pub(crate) client_id: String,
    pub(crate) secret: Option<Secret>,
    pub(crate) auth: TokenAuth,
    /// Made by dynamic registration (RFC 7591): known only to the process that made it, so
    /// the tokens issued to it carry it (sealed). A configured client is not copied there:
    /// its rotation or removal in the config must take effect.
    pub(crate) dynamic: bool,
}

impl Registration {
    /// A public client named `client_id` at `issuer` (no secret).
    pub(crate) fn public(issuer: &str, client_id: &str) -> Self {
        Registration {
            issuer: issuer.to_owned(),
            client_id: client_id.to_owned(),
            secret: None,
            auth: TokenAuth::None,
            dynamic: false,
        }
    }

    /// The client `token` was issued to, as the token recorded it (sealed in the vault).
    pub(crate) fn of_token(token: &UpstreamToken) -> Self {
        let auth = token.client_auth.as_deref().and_then(TokenAuth::parse);
        Registration {
            issuer: token.issuer.clone(),
            client_id: token.client_id.clone(),
            secret: token.client_secret.as_deref().map(Secret::new),
            auth: auth.unwrap_or(TokenAuth::None),
            dynamic: true,
        }
    }

    /// The token request's client authentication: an `Authorization` value, or form fields.
    pub(crate) fn authenticate(
        &self,
        form_fields: &mut Vec<(&'static str, String)>,
    ) -> Option<HeaderValue> {
        match (self.auth, &self.secret) {
            (TokenAuth::Basic, Some(secret)) => {
                let pair = format!("{}:{}", form(&self.client_id), form(secret.expose()));
                let encoded = base64::engine::general_purpose::STANDARD.encode(pair);
                let mut value = HeaderValue::from_str(&format!("Basic {encoded}")).ok()?;
                value.set_sensitive(true);
                Some(value)
            }
            (TokenAuth::Post, Some(secret)) => {
                form_fields.push(("client_id", self.client_id.clone()));
                form_fields.push(("client_secret", secret.expose().to_owned()));
                None
            }
            _ => {
                form_fields.push(("client_id", self.client_id.clone()));
                None
            }
        }
    }
}

/// What the operator configured about the client.
#[derive(Debug, Clone, Default)]
pub struct ClientSettings {
    /// A pre-registered client id.
    pub client_id: Option<String>,
    /// Its secret.
    pub client_secret: Option<Secret>,
    /// The public https URL of the gateway's Client ID Metadata Document.
    pub client_metadata_url: Option<String>,
    /// A token endpoint auth method to use (else chosen from the server's).
    pub token_endpoint_auth: Option<TokenAuth>,
    /// The issuer of the only authorization server to use (required with `client_id`: the
    /// client's credentials go to no other).
    pub authorization_server: Option<String>,
}

/// How the gateway will be a client at the server `meta` describes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Choice {
    PreRegistered,
    MetadataDocument(String),
    Dynamic(String),
}

/// The spec's order: pre-registered, metadata document (when supported), dynamic registration.
pub(crate) fn choose(
    settings: &ClientSettings,
    meta: &ServerMetadata,
) -> Result<Choice, OutgoingAuthError> {
    if settings.client_id.is_some() {
        if settings
            .authorization_server
            .as_deref()
            .is_some_and(|pinned| pinned != meta.issuer)
        {
            return Err(OutgoingAuthError::Discovery(
                "the pre-registered client belongs to another authorization server",
            ));
        }
        return Ok(Choice::PreRegistered);
    }
    if let (Some(url), true) = (&settings.client_metadata_url, meta.cimd_supported) {
        return Ok(Choice::MetadataDocument(url.clone()));
    }
    match &meta.registration_endpoint {
        Some(endpoint) => Ok(Choice::Dynamic(endpoint.clone())),
        None => Err(OutgoingAuthError::Discovery(
            "the authorization server offers no way to register (configure clientId, or clientMetadataUrl where it supports metadata documents)",
        )),
    }
}

/// The method to use with a secret (`has_secret`) at a server supporting `supported`
/// (RFC 8414 §2: absent means `client_secret_basic`).
pub(crate) fn method_for(
    configured: Option<TokenAuth>,
    supported: Option<&[String]>,
    has_secret: bool,
) -> TokenAuth {
    if let Some(m) = configured {
        return m;
    }
    if !has_secret {
        return TokenAuth::None;
    }
    let supports = |m: TokenAuth| match supported {
        None => m == TokenAuth::Basic,
        Some(list) => list.iter().any(|s| s == m.name()),
    };
    [TokenAuth::Basic, TokenAuth::Post]
        .into_iter()
        .find(|m| supports(*m))
        .unwrap_or(TokenAuth::Basic)
}

/// The method a dynamic registration asks for.
fn requested_method(configured: Option<TokenAuth>, supported: Option<&[String]>) -> TokenAuth {
    if let Some(m) = configured {
        return m;
    }
    let Some(list) = supported else {
        return TokenAuth::Basic;
    };
    [TokenAuth::Basic, TokenAuth::Post, TokenAuth::None]
        .into_iter()
        .find(|m| list.iter().any(|s| s == m.name()))
        .unwrap_or(TokenAuth::None)
}

/// The gateway's client metadata (the metadata document's content, and the body of a
/// dynamic registration).
pub fn client_metadata(redirect_uri: &str, client_id: Option<&str>, auth: TokenAuth) -> Value {
    let native = super::is_loopback_url(redirect_uri);
    let mut doc = json!({
        "client_name": "Switchboard MCP gateway",
        "redirect_uris": [redirect_uri],
        "grant_types": ["authorization_code", "refresh_token"],
        "response_types": ["code"],
        "token_endpoint_auth_method": auth.name(),
        "application_type": if native { "native" } else { "web" },
    });
    if let (Some(id), Some(map)) = (client_id, doc.as_object_mut()) {
        map.insert("client_id".into(), Value::String(id.to_owned()));
    }
    doc
}

/// The registration to use at `meta`'s server (a dynamic one is made now).
pub(crate) async fn register(
    http: &Http,
    settings: &ClientSettings,
    meta: &ServerMetadata,
    redirect_uri: &str,
) -> Result<Registration, OutgoingAuthError> {
    let supported = meta.token_endpoint_auth_methods.as_deref();
    let issuer = meta.issuer.clone();
    match choose(settings, meta)? {
        Choice::PreRegistered => Ok(Registration {
            issuer,
            client_id: settings.client_id.clone().unwrap_or_default(),
            secret: settings.client_secret.clone(),
            auth: method_for(
                settings.token_endpoint_auth,
                supported,
                settings.client_secret.is_some(),
            ),
            dynamic: false,
        }),
        Choice::MetadataDocument(url) => Ok(Registration {
            issuer,
            client_id: url,
            secret: None,
            auth: TokenAuth::None,
            dynamic: false,
        }),
        Choice::Dynamic(endpoint) => {
            let asked = requested_method(settings.token_endpoint_auth, supported);
            let body = client_metadata(redirect_uri, None, asked).to_string();
            let answer = http.post(&endpoint, "application/json", body, None).await?;
            let json = match answer.status {
                200..=299 => answer.json.ok_or(OutgoingAuthError::Malformed(
                    "registration answer is not JSON",
                ))?,
                _ => {
                    let code = answer
                        .json
                        .as_ref()
                        .and_then(|j| j.get("error"))
                        .and_then(Value::as_str);
                    return Err(OutgoingAuthError::RegistrationRefused(
                        code.filter(|c| {
                            c.len() <= 40 && c.bytes().all(|b| b.is_ascii_lowercase() || b == b'_')
                        })
                        .unwrap_or("invalid_response")
                        .to_owned(),
                    ));
                }
            };
            let client_id = json
                .get("client_id")
                .and_then(Value::as_str)
                .filter(|s| !s.is_empty())
                .ok_or(OutgoingAuthError::Malformed(
                    "registration answer has no client_id",
                ))?;
            // Both travel with every token issued to this client: a server cannot make them
            // the bulk of what the vault keeps.
            let secret = json
                .get("client_secret")
                .and_then(Value::as_str)
                .filter(|s| !s.is_empty());
            if client_id.len() > MAX_CLIENT_FIELD
                || secret.is_some_and(|s| s.len() > MAX_CLIENT_FIELD)
            {
                return Err(OutgoingAuthError::Malformed(
                    "registration answer's client_id or client_secret is too long",
                ));
            }
            let secret = secret.map(Secret::new);
            let registered = json
                .get("token_endpoint_auth_method")
                .and_then(Value::as_str)
                .and_then(TokenAuth::parse);
            let auth = match (registered, &secret) {
                (_, None) => TokenAuth::None,
                (Some(m), Some(_)) => m,
                (None, Some(_)) => method_for(
                    Some(asked).filter(|m| *m != TokenAuth::None),
                    supported,
                    true,
                ),
            };
            Ok(Registration {
                issuer,
                client_id: client_id.to_owned(),
                secret,
                auth,
                dynamic: true,
            })
        }
    }
}

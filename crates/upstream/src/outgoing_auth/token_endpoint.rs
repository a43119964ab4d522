//! One OAuth token endpoint, as the gateway's own client: a form POST (RFC 6749 §3.2) with
//! `client_secret_basic` authentication (§2.3.1: id and secret form-encoded, then base64), on
//! the remote module's connection pool (rustls with the ring provider, the system's roots),
//! bounded in time and size. Its answer is either a token (`access_token`, `token_type`
//! Bearer, `expires_in`) or an RFC 6749 §5.2 error, of which only the `error` code is kept.

use std::time::Duration;

use base64::Engine;
use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper::header::{HeaderValue, ACCEPT, AUTHORIZATION, CONTENT_TYPE};
use hyper::{Method, Request, Uri};
use serde_json::Value;
use tracing::debug;

use super::{OutgoingAuthError, Secret};

/// Largest token endpoint answer read.
const MAX_BODY: usize = 64 * 1024;
/// A token's lifetime when the answer names none (RFC 6749 leaves it to the server).
pub(crate) const DEFAULT_LIFETIME: Duration = Duration::from_secs(300);
/// The longest lifetime believed (a token is fetched again at least this often).
const MAX_LIFETIME: Duration = Duration::from_secs(24 * 3600);

/// RFC 8693 token type URNs.
pub(crate) const ACCESS_TOKEN_TYPE: &str = "urn:ietf:params:oauth:token-type:access_token";
const JWT_TYPE: &str = "urn:ietf:params:oauth:token-type:jwt";

/// A token the endpoint issued: the `Authorization` value to send, and how long it lives.
#[derive(Clone)]
pub(crate) struct Issued {
    pub(crate) header: HeaderValue,
    pub(crate) lifetime: Duration,
}

impl std::fmt::Debug for Issued {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Issued")
            .field("header", &"<redacted>")
            .field("lifetime", &self.lifetime)
            .finish()
    }
}

/// One token endpoint and the gateway's client credentials there.
pub(crate) struct TokenEndpoint {
    uri: Uri,
    client: crate::remote::Client,
    /// `Basic base64(form(client_id) ":" form(secret))`, marked sensitive.
    basic: HeaderValue,
    timeout: Duration,
    /// At most [`MAX_TOKEN_REQUESTS`](super::MAX_TOKEN_REQUESTS) requests at once: however
    /// many callers need a token, the token service is not flooded.
    permits: tokio::sync::Semaphore,
}

impl std::fmt::Debug for TokenEndpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TokenEndpoint")
            .field("host", &self.uri.host())
            .field("timeout", &self.timeout)
            .finish_non_exhaustive()
    }
}

impl TokenEndpoint {
    /// Checks `url` ([`check_token_endpoint`]) and prepares the client authentication.
    /// Connects lazily.
    pub(crate) fn new(
        url: &str,
        client_id: &str,
        secret: &Secret,
        timeout: Duration,
    ) -> Result<Self, OutgoingAuthError> {
        let uri = check_token_endpoint(url)?;
        if client_id.is_empty() {
            return Err(OutgoingAuthError::Config("clientId is empty"));
        }
        let pair = format!("{}:{}", form(client_id), form(secret.expose()));
        let encoded = base64::engine::general_purpose::STANDARD.encode(pair);
        let mut basic = HeaderValue::from_str(&format!("Basic {encoded}"))
            .map_err(|_| OutgoingAuthError::Config("client credentials are not usable"))?;
        basic.set_sensitive(true);
        let client =
            hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
                .pool_idle_timeout(Duration::from_secs(90))
                .pool_max_idle_per_host(crate::remote::MAX_IDLE_CONNECTIONS)
                .build(crate::remote::connector(timeout));
        Ok(TokenEndpoint {
            uri,
            client,
            basic,
            timeout,
            permits: tokio::sync::Semaphore::new(super::MAX_TOKEN_REQUESTS),
        })
    }

    /// POSTs `params` as a form and reads the token it answers. `exchange`: the answer must
    /// name the issued token's type (RFC 8693 §2.2.1), an access token or a JWT. Waits its
    /// turn among this endpoint's requests first (the call's own deadline bounds the wait).
    pub(crate) async fn request(
        &self,
        params: &[(&str, &str)],
        exchange: bool,
    ) -> Result<Issued, OutgoingAuthError> {
        // Never closed; were it, no request could be made.
        let _permit = self
            .permits
            .acquire()
            .await
            .map_err(|_| OutgoingAuthError::Unreachable)?;
        let body = params
            .iter()
            .map(|(k, v)| format!("{}={}", form(k), form(v)))
            .collect::<Vec<_>>()
            .join("&");
        let request = Request::builder()
            .method(Method::POST)
            .uri(self.uri.clone())
            .header(CONTENT_TYPE, "application/x-www-form-urlencoded")
            .header(ACCEPT, "application/json")
            .header(AUTHORIZATION, self.basic.clone())
            .body(Full::new(Bytes::from(body)))
            .map_err(|_| OutgoingAuthError::Config("tokenEndpoint is not usable"))?;
        let exchange_once = async {
            let response = self.client.request(request).await.map_err(|e| {
                debug!(error = %e, "token endpoint unreachable");
                OutgoingAuthError::Unreachable
            })?;
            let status = response.status();
            let body = Limited::new(response.into_body(), MAX_BODY)
                .collect()
                .await
                .map_err(|_| OutgoingAuthError::Malformed("body unreadable or too large"))?
                .to_bytes();
            Ok::<_, OutgoingAuthError>((status, body))
        };
        let (status, body) = tokio::time::timeout(self.timeout, exchange_once)
            .await
            .map_err(|_| OutgoingAuthError::Timeout)??;
        // As written (`plain`): no string parsed again behind serde_json's RawValue key.
        let json: Option<Value> = switchboard_wire::plain::parse(&body).ok();
        if !status.is_success() {
            // RFC 6749 §5.2: only the `error` code is kept; the description may quote anything
            // the server was sent.
            return Err(match json.as_ref().and_then(|v| v.get("error")) {
                Some(code) => OutgoingAuthError::refused(code.as_str()),
                None => OutgoingAuthError::Status {
                    status: status.as_u16(),
                },
            });
        }
        let json = json.ok_or(OutgoingAuthError::Malformed("not JSON"))?;
        issued(&json, exchange)
    }
}

/// Why a plain http token endpoint is refused.
const CLEARTEXT: &str = "must be https: plain http is allowed only to a loopback host (127.0.0.0/8, ::1, localhost), since the client secret and the callers' tokens sent to it would cross the network in cleartext";

/// `url` as a token endpoint: an absolute URL without user-info, `https`, or plain `http` to a
/// loopback host only (a token endpoint is sent the gateway's client secret and, for an
/// exchange, every caller's token).
pub fn check_token_endpoint(url: &str) -> Result<Uri, OutgoingAuthError> {
    let (uri, had_user_info) = crate::remote::url::parse_noting(url)
        .map_err(|_| OutgoingAuthError::Config("not an absolute http(s) URL with a host"))?;
    if had_user_info {
        return Err(OutgoingAuthError::Config(
            "must not carry user-info: the client secret comes from clientSecretFile",
        ));
    }
    if uri.scheme_str() != Some("https") && !uri.host().is_some_and(is_loopback) {
        return Err(OutgoingAuthError::Config(CLEARTEXT));
    }
    Ok(uri)
}

/// Whether `host` (as a URI spells it: an IPv6 address in brackets) is a loopback address or
/// `localhost`.
fn is_loopback(host: &str) -> bool {
    let bare = host.trim_start_matches('[').trim_end_matches(']');
    match bare.parse::<std::net::IpAddr>() {
        Ok(ip) => ip.is_loopback(),
        Err(_) => host.eq_ignore_ascii_case("localhost"),
    }
}

/// The token in a successful answer.
pub(crate) fn issued(json: &Value, exchange: bool) -> Result<Issued, OutgoingAuthError> {
    let token = json
        .get("access_token")
        .and_then(Value::as_str)
        .filter(|t| !t.is_empty())
        .ok_or(OutgoingAuthError::Malformed("no access_token"))?;
    let bearer = json
        .get("token_type")
        .and_then(Value::as_str)
        .is_some_and(|t| t.eq_ignore_ascii_case("bearer"));
    if !bearer {
        return Err(OutgoingAuthError::Malformed("token_type is not Bearer"));
    }
    if exchange {
        let issued_type = json.get("issued_token_type").and_then(Value::as_str);
        if !matches!(issued_type, Some(ACCESS_TOKEN_TYPE | JWT_TYPE)) {
            return Err(OutgoingAuthError::Malformed(
                "issued_token_type is not an access token",
            ));
        }
    }
    // RFC 6750 b64token: a token that cannot be a bearer credential is refused, not sent.
    let usable = token
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b"-._~+/=".contains(&b));
    if !usable {
        return Err(OutgoingAuthError::Malformed(
            "access_token is not a bearer token",
        ));
    }
    let mut header = HeaderValue::from_str(&format!("Bearer {token}"))
        .map_err(|_| OutgoingAuthError::Malformed("access_token is not a bearer token"))?;
    header.set_sensitive(true);
    let lifetime = match json.get("expires_in") {
        None | Some(Value::Null) => DEFAULT_LIFETIME,
        Some(v) => lifetime(v).ok_or(OutgoingAuthError::Malformed(
            "expires_in is not a number of seconds",
        ))?,
    };
    Ok(Issued { header, lifetime })
}

/// `expires_in`: a number of seconds, or a string of one (some services quote it); a fraction
/// is floored, and more than [`MAX_LIFETIME`] is that. `None`: not a lifetime (negative, not
/// finite, not a number).
fn lifetime(v: &Value) -> Option<Duration> {
    let secs = match v {
        Value::Number(n) => n.as_f64()?,
        Value::String(s) => s.trim().parse::<f64>().ok()?,
        _ => return None,
    };
    if !secs.is_finite() || secs < 0.0 {
        return None;
    }
    let secs = secs.floor().min(MAX_LIFETIME.as_secs_f64());
    Duration::try_from_secs_f64(secs).ok()
}

/// `application/x-www-form-urlencoded` encoding of one name or value.
pub(crate) fn form(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for b in value.bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'*' => {
                out.push(char::from(b))
            }
            b' ' => out.push('+'),
            _ => out.push_str(&format!("%{b:02X}")),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn form_encoding_escapes_everything_but_the_unreserved() {
        assert_eq!(form("a b&c=d/é"), "a+b%26c%3Dd%2F%C3%A9");
        assert_eq!(form("Az09-._*"), "Az09-._*");
    }

    #[test]
    fn a_token_answer_is_checked() {
        let ok = json!({"access_token":"abc.def","token_type":"bearer","expires_in":60,
            "issued_token_type": ACCESS_TOKEN_TYPE});
        let t = issued(&ok, true).unwrap();
        assert_eq!(t.header.to_str().unwrap(), "Bearer abc.def");
        assert!(t.header.is_sensitive());
        assert_eq!(t.lifetime, Duration::from_secs(60));
        assert!(!format!("{t:?}").contains("abc"));
        // Client credentials need no issued_token_type; a missing lifetime is the default.
        let cc = json!({"access_token":"x","token_type":"Bearer"});
        assert_eq!(issued(&cc, false).unwrap().lifetime, DEFAULT_LIFETIME);
        let string_lifetime = json!({"access_token":"x","token_type":"Bearer","expires_in":"7"});
        assert_eq!(
            issued(&string_lifetime, false).unwrap().lifetime,
            Duration::from_secs(7)
        );
        // A fractional lifetime is floored (RFC 6749 says seconds; some services send more).
        for (given, secs) in [
            (json!(60.7), 60),
            (json!("59.9"), 59),
            (json!(0.5), 0),
            (json!(1e300), 24 * 3600),
        ] {
            let answer = json!({"access_token":"x","token_type":"Bearer","expires_in": given});
            assert_eq!(
                issued(&answer, false).unwrap().lifetime,
                Duration::from_secs(secs),
                "{given}"
            );
        }
        for bad in [
            json!({"token_type":"Bearer"}),
            json!({"access_token":"x","token_type":"mac"}),
            json!({"access_token":"x"}),
            json!({"access_token":"x y","token_type":"Bearer"}),
            json!({"access_token":"x","token_type":"Bearer","expires_in":-1}),
            json!({"access_token":"x","token_type":"Bearer","expires_in":-0.5}),
            json!({"access_token":"x","token_type":"Bearer","expires_in":"soon"}),
            json!({"access_token":"x","token_type":"Bearer","expires_in":"NaN"}),
            json!({"access_token":"x","token_type":"Bearer","expires_in":"inf"}),
        ] {
            assert!(issued(&bad, false).is_err(), "{bad}");
        }
        let id_token = json!({"access_token":"x","token_type":"Bearer",
            "issued_token_type":"urn:ietf:params:oauth:token-type:id_token"});
        assert!(issued(&id_token, true).is_err());
        assert!(
            issued(&cc, true).is_err(),
            "an exchange names what it issued"
        );
    }
}

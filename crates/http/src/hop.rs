//! The hop to the replica that serves a session (`--replica-secret-file`): a request this
//! replica cannot serve itself — its session's own upstreams live in another replica's
//! process, or its `Last-Event-ID` names events in another replica's memory — is sent on,
//! unchanged, to the address that replica registered, and its answer (a stream included)
//! comes back as it is.
//!
//! The client's own credentials travel with it: the home authenticates and authorizes the
//! request again exactly as if the client had come straight to it, so the hop grants no
//! identity. What the hop header proves (an HMAC-SHA256 over the sending replica, a
//! timestamp, the method, the path and the session id, under the secret all replicas share)
//! is only that a replica sent it: a request carrying it is served where it lands and never
//! forwarded again (no loops), and one whose header does not verify is refused, so a client
//! cannot pose as a replica.
//!
//! A replica's registration in the store (its address) is signed under the same secret and
//! carries its expiry ([`Hop::registration`]): one written by anything else — whoever can
//! write to Redis but lacks the secret — is not a replica, and nothing is ever sent to it
//! (the clients' credentials travel with a forwarded request).

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::body::Body;
use axum::http::{header, HeaderMap, HeaderValue, Method, Request, StatusCode};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use hmac::{Hmac, Mac};
use http_body_util::Full;
use sha2::Sha256;

use switchboard_core::{CoreError, Gone, ReplicaAt};
use switchboard_wire::{encode_error, RequestId};

use crate::error::HttpError;
use crate::{headers, AppState};

/// The header a forwarded request carries: `v1.SENDER.UNIX_MS.HEX_TAG`.
pub const HOP_HEADER: &str = "switchboard-hop";
/// How far a hop's timestamp may be from this replica's clock.
const MAX_SKEW_MS: u64 = 60_000;
/// Connecting to a replica, at most (an answer itself may take as long as the request).
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
/// Beyond the request deadline, how long the serving replica may take to start its answer
/// (its own deadline answers first; this bounds one that is frozen or unreachable).
const ANSWER_SLACK: Duration = Duration::from_secs(5);
/// The shortest shared secret accepted.
pub const MIN_SECRET_BYTES: usize = 32;

type HmacSha256 = Hmac<Sha256>;

/// Headers that describe one connection, not the request: never forwarded either way.
const HOP_BY_HOP: [&str; 9] = [
    "connection",
    "keep-alive",
    "proxy-connection",
    "transfer-encoding",
    "te",
    "trailer",
    "upgrade",
    "content-length",
    HOP_HEADER,
];

/// This replica's side of the hop: its name, the shared key, and the client it forwards
/// with.
pub struct Hop {
    replica: String,
    keyed: HmacSha256,
    client: crate::outbound::Client<Full<Bytes>>,
    /// How long a forwarded request may wait for its answer to start.
    answer_within: Duration,
}

impl std::fmt::Debug for Hop {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Hop({})", self.replica)
    }
}

/// Why a hop could not be made.
#[derive(Debug, thiserror::Error)]
pub enum HopError {
    /// The shared secret is shorter than [`MIN_SECRET_BYTES`].
    #[error("the replica secret must be at least {MIN_SECRET_BYTES} bytes")]
    SecretTooShort,
}

/// How forwarding failed.
#[derive(Debug)]
pub(crate) enum HopFailure {
    /// Nothing listens at the home's address: it is gone.
    Refused,
    /// It did not answer (a timeout, a reset, a bad address).
    Unreachable,
}

/// The request being forwarded.
pub(crate) struct Forward<'a> {
    pub(crate) method: Method,
    pub(crate) path: &'a str,
    pub(crate) headers: &'a HeaderMap,
    pub(crate) body: Bytes,
}

/// Why a stored registration names no replica to forward to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum NotRegistered {
    /// Not signed under the secret for that replica (or not a registration at all).
    Forged,
    /// Signed, but past its expiry by more than the skew allowed.
    Expired,
}

impl Hop {
    /// The hop of replica `replica`, keyed with the secret every replica shares; a hop waits
    /// for its answer's head up to `longest` (the longest a request may run) and a slack.
    pub fn new(replica: String, secret: &[u8], longest: Duration) -> Result<Hop, HopError> {
        if secret.len() < MIN_SECRET_BYTES {
            return Err(HopError::SecretTooShort);
        }
        let keyed = HmacSha256::new_from_slice(secret).map_err(|_| HopError::SecretTooShort)?;
        Ok(Hop {
            replica,
            keyed,
            client: crate::outbound::client(CONNECT_TIMEOUT),
            answer_within: longest + ANSWER_SLACK,
        })
    }

    /// This replica's registration at `address`, valid for `ttl`: the value stored for it
    /// (`v1.UNTIL_MS.HEX_TAG.ADDRESS`), signed over its name, expiry and address.
    pub fn registration(&self, address: &str, ttl: Duration) -> String {
        let ttl = u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX);
        let until = unix_ms().saturating_add(ttl).to_string();
        let tag = self.registration_mac(&self.replica, &until, address);
        format!("v1.{until}.{}.{address}", hex(&tag.finalize().into_bytes()))
    }

    /// The address in replica `replica`'s stored registration, if a replica holding the
    /// secret signed it for that name and it has not expired (its expiry read with the same
    /// clock skew allowed as a hop's, [`MAX_SKEW_MS`]: Redis expires the key itself).
    pub(crate) fn registered_address<'a>(
        &self,
        replica: &str,
        value: &'a str,
    ) -> Result<&'a str, NotRegistered> {
        let mut parts = value.splitn(4, '.');
        let (Some("v1"), Some(until), Some(tag), Some(address)) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return Err(NotRegistered::Forged);
        };
        let signed = unhex(tag).is_some_and(|tag| {
            self.registration_mac(replica, until, address)
                .verify_slice(&tag)
                .is_ok()
        });
        if !signed {
            return Err(NotRegistered::Forged);
        }
        let live = (until.parse::<u64>()).is_ok_and(|u| u.saturating_add(MAX_SKEW_MS) >= unix_ms());
        live.then_some(address).ok_or(NotRegistered::Expired)
    }

    fn registration_mac(&self, replica: &str, until: &str, address: &str) -> HmacSha256 {
        let mut mac = self.keyed.clone();
        for field in ["switchboard-registration-v1", replica, until, address] {
            mac.update(&(field.len() as u64).to_be_bytes());
            mac.update(field.as_bytes());
        }
        mac
    }

    fn mac(&self, sender: &str, at: &str, method: &str, path: &str, session: &str) -> HmacSha256 {
        let mut mac = self.keyed.clone();
        // Length-prefixed: no two different requests feed the same bytes.
        for field in ["switchboard-hop-v1", sender, at, method, path, session] {
            mac.update(&(field.len() as u64).to_be_bytes());
            mac.update(field.as_bytes());
        }
        mac
    }

    fn sign(&self, method: &str, path: &str, session: &str) -> Option<HeaderValue> {
        let at = unix_ms().to_string();
        let tag = self
            .mac(&self.replica, &at, method, path, session)
            .finalize()
            .into_bytes();
        HeaderValue::from_str(&format!("v1.{}.{at}.{}", self.replica, hex(&tag))).ok()
    }

    /// Whether `request`'s hop header was made by a replica holding the shared secret, for
    /// this very method, path and session, within [`MAX_SKEW_MS`] (constant-time).
    pub(crate) fn verify<B>(&self, request: &Request<B>) -> bool {
        let Some(value) = request
            .headers()
            .get(HOP_HEADER)
            .and_then(|v| v.to_str().ok())
        else {
            return false;
        };
        let mut parts = value.split('.');
        let (Some("v1"), Some(sender), Some(at), Some(tag), None) = (
            parts.next(),
            parts.next(),
            parts.next(),
            parts.next(),
            parts.next(),
        ) else {
            return false;
        };
        let fresh = at
            .parse::<u64>()
            .is_ok_and(|t| t.abs_diff(unix_ms()) <= MAX_SKEW_MS);
        let path = request.uri().path_and_query().map_or("/", |p| p.as_str());
        let session = headers::session_id(request.headers()).unwrap_or_default();
        let method = request.method().as_str();
        fresh
            && unhex(tag).is_some_and(|tag| {
                self.mac(sender, at, method, path, session)
                    .verify_slice(&tag)
                    .is_ok()
            })
    }

    /// Sends `req` to the replica at `to` (`http://host:port`) and returns its answer,
    /// streamed as it comes.
    pub(crate) async fn forward(&self, to: &str, req: Forward<'_>) -> Result<Response, HopFailure> {
        let uri = format!("{}{}", to.trim_end_matches('/'), req.path);
        let session = headers::session_id(req.headers).unwrap_or_default();
        let signed = self
            .sign(req.method.as_str(), req.path, session)
            .ok_or(HopFailure::Unreachable)?;
        let mut out = Request::builder().method(req.method).uri(uri);
        if let Some(headers) = out.headers_mut() {
            copy_end_to_end(req.headers, headers);
            headers.insert(HOP_HEADER, signed);
        }
        let out = out
            .body(Full::new(req.body))
            .map_err(|_| HopFailure::Unreachable)?;
        let answer = tokio::time::timeout(self.answer_within, self.client.request(out)).await;
        let Ok(answer) = answer else {
            tracing::warn!(to, "hop to the serving replica: no answer in time");
            return Err(HopFailure::Unreachable);
        };
        match answer {
            Ok(answer) => {
                let (mut parts, body) = answer.into_parts();
                strip_hop_by_hop(&mut parts.headers);
                Ok(Response::from_parts(parts, Body::new(body)))
            }
            Err(e) if refused(&e) => Err(HopFailure::Refused),
            Err(e) => {
                tracing::warn!(to, error = %e, "hop to the serving replica failed");
                Err(HopFailure::Unreachable)
            }
        }
    }
}

/// The answer to a request another replica serves (at `to.0`): that replica's own answer,
/// forwarded — unless this request was itself forwarded here (never forwarded twice) or no
/// hop is configured, when for this client no replica holds what it names (404). A home
/// that refuses the connection is gone, and what lived there (`to.1`) with it: a session
/// homed there ends here too (404, and the client opens a new one); a request's state means
/// the call starts again (400). One that does not answer is a retryable 503.
pub(crate) async fn serve_elsewhere(
    state: &AppState,
    to: (&ReplicaAt, Gone),
    req: Forward<'_>,
    id: Option<RequestId>,
) -> Response {
    let (at, gone) = to;
    let hopped = req.headers.contains_key(HOP_HEADER);
    let Some(hop) = state.config.hop.as_ref().filter(|_| !hopped) else {
        // Forwarded here already, or no hop: for this client, nothing holds it.
        return unavailable(gone, id);
    };
    let forwarded = match hop.registered_address(&at.replica, &at.registration) {
        Ok(address) => hop.forward(address, req).await,
        // Its replica is gone (a registration outlives a `kill -9` by its expiry).
        Err(NotRegistered::Expired) => Err(HopFailure::Refused),
        // Not written by a replica holding the secret: nothing is ever sent there, and
        // nothing ends for it either (the home writes its own again within seconds).
        Err(NotRegistered::Forged) => {
            tracing::warn!(replica = %at.replica, "a replica registration that does not verify");
            Err(HopFailure::Unreachable)
        }
    };
    match forwarded {
        Ok(answer) => {
            switchboard_core::record_hop("forwarded");
            answer
        }
        Err(HopFailure::Refused) => {
            switchboard_core::record_hop("home_gone");
            if let Gone::Session(session) = &gone {
                state
                    .gateway
                    .session_store()
                    .end_unreachable_home(session)
                    .await;
            }
            unavailable(gone, id)
        }
        Err(HopFailure::Unreachable) => {
            switchboard_core::record_hop("unreachable");
            HttpError::ReplicaUnreachable(id).into_response()
        }
    }
}

/// The answer to a request whose state no reachable replica holds, by what that state was.
fn unavailable(gone: Gone, id: Option<RequestId>) -> Response {
    match gone {
        Gone::Session(_) | Gone::Stream => {
            HttpError::Core(id, CoreError::SessionNotFound).into_response()
        }
        Gone::RequestState => HttpError::ReplicaGone(id).into_response(),
        Gone::Question => HttpError::ClientResponse.into_response(),
        Gone::Task { modern: true } => {
            HttpError::Rpc(id, switchboard_core::unknown_task()).into_response()
        }
        Gone::Task { modern: false } => {
            let body = encode_error(id.as_ref(), &switchboard_core::unknown_task());
            let json = [(header::CONTENT_TYPE, "application/json")];
            (StatusCode::OK, json, body).into_response()
        }
    }
}

/// A listen stream resumed at the replica that holds its events (at `to`), when this
/// request was not itself forwarded and that replica answers with a stream; `None`: start
/// it afresh here.
pub(crate) async fn resume_elsewhere(
    state: &AppState,
    at: &ReplicaAt,
    path: &str,
    headers: &HeaderMap,
) -> Option<Response> {
    let hop = state
        .config
        .hop
        .as_ref()
        .filter(|_| !headers.contains_key(HOP_HEADER))?;
    let to = hop.registered_address(&at.replica, &at.registration).ok()?;
    let req = Forward {
        method: Method::GET,
        path,
        headers,
        body: Bytes::new(),
    };
    match hop.forward(to, req).await {
        Ok(answer) if answer.status().is_success() => {
            switchboard_core::record_hop("forwarded");
            Some(answer)
        }
        Ok(_) | Err(_) => {
            switchboard_core::record_hop("unreachable");
            None
        }
    }
}

fn copy_end_to_end(from: &HeaderMap, to: &mut HeaderMap) {
    let named = connection_named(from);
    for (name, value) in from {
        if !HOP_BY_HOP.contains(&name.as_str()) && !named.contains(&name.as_str()) {
            to.append(name.clone(), value.clone());
        }
    }
}

fn strip_hop_by_hop(headers: &mut HeaderMap) {
    let named: Vec<String> = connection_named(headers)
        .into_iter()
        .map(str::to_owned)
        .collect();
    for name in named.iter().map(String::as_str).chain(HOP_BY_HOP) {
        if name != header::CONTENT_LENGTH.as_str() {
            headers.remove(name);
        }
    }
}

/// The headers a `Connection` header names: about this connection only (RFC 9110 §7.6.1).
fn connection_named(headers: &HeaderMap) -> Vec<&str> {
    headers
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(str::trim)
        .filter(|n| !n.is_empty())
        .collect()
}

/// Whether the connection itself was refused (nothing listens there).
fn refused(e: &hyper_util::client::legacy::Error) -> bool {
    let mut source: Option<&(dyn std::error::Error + 'static)> = std::error::Error::source(e);
    while let Some(err) = source {
        if let Some(io) = err.downcast_ref::<std::io::Error>() {
            return io.kind() == std::io::ErrorKind::ConnectionRefused;
        }
        source = err.source();
    }
    false
}

fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(text: &str) -> Option<Vec<u8>> {
    if text.len() != 64 {
        return None;
    }
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(text.get(i..i + 2)?, 16).ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hop(name: &str, secret: &[u8]) -> Hop {
        Hop::new(name.to_owned(), secret, Duration::from_secs(1)).unwrap()
    }

    fn request(method: &str, path: &str, session: &str, value: Option<HeaderValue>) -> Request<()> {
        let mut b = Request::builder().method(method).uri(path);
        if !session.is_empty() {
            b = b.header("mcp-session-id", session);
        }
        if let Some(v) = value {
            b = b.header(HOP_HEADER, v);
        }
        b.body(()).unwrap()
    }

    const SECRET: &[u8] = b"0123456789abcdef0123456789abcdef";

    #[test]
    fn a_hop_verifies_only_for_its_own_request_and_secret() {
        let (a, b) = (hop("aaaa", SECRET), hop("bbbb", SECRET));
        let signed = a.sign("POST", "/mcp", "s1");
        assert!(b.verify(&request("POST", "/mcp", "s1", signed.clone())));
        // Another session, method or path: the same header does not verify.
        assert!(!b.verify(&request("POST", "/mcp", "s2", signed.clone())));
        assert!(!b.verify(&request("DELETE", "/mcp", "s1", signed.clone())));
        assert!(!b.verify(&request("POST", "/mcp?x=1", "s1", signed.clone())));
        // Another secret, or none at all.
        let other = hop("cccc", b"another secret of thirty-two bytes!!");
        assert!(!other.verify(&request("POST", "/mcp", "s1", signed)));
        assert!(!b.verify(&request("POST", "/mcp", "s1", None)));
    }

    #[test]
    fn a_stale_or_malformed_hop_is_refused() {
        let b = hop("bbbb", SECRET);
        let old = (unix_ms() - 2 * MAX_SKEW_MS).to_string();
        let tag = hex(&b
            .mac("aaaa", &old, "GET", "/mcp", "s")
            .finalize()
            .into_bytes());
        let stale = HeaderValue::from_str(&format!("v1.aaaa.{old}.{tag}")).unwrap();
        assert!(!b.verify(&request("GET", "/mcp", "s", Some(stale))));
        for bad in ["", "v1", "v1.a.1.zz", "v2.aaaa.1.00", "v1.aaaa.x.00.extra"] {
            let v = HeaderValue::from_str(bad).unwrap();
            assert!(!b.verify(&request("GET", "/mcp", "s", Some(v))), "{bad}");
        }
    }

    #[test]
    fn a_short_secret_is_refused() {
        assert!(Hop::new("a".into(), b"short", Duration::from_secs(1)).is_err());
    }

    #[test]
    fn a_registration_opens_only_for_its_replica_under_the_secret_while_live() {
        use super::NotRegistered::{Expired, Forged};
        let (a, b) = (hop("aaaa", SECRET), hop("bbbb", SECRET));
        let value = a.registration("http://10.0.0.1:8080", Duration::from_secs(15));
        assert_eq!(
            b.registered_address("aaaa", &value),
            Ok("http://10.0.0.1:8080")
        );
        // Filed under another replica's name, or signed with another secret: not a replica.
        assert_eq!(b.registered_address("cccc", &value), Err(Forged));
        let other = hop("aaaa", b"another secret of thirty-two bytes!!");
        let forged = other.registration("http://attacker:80", Duration::from_secs(15));
        assert_eq!(b.registered_address("aaaa", &forged), Err(Forged));
        // The address swapped in a signed value, a bare address.
        let swapped = value.replace("10.0.0.1", "10.6.6.6");
        assert_eq!(b.registered_address("aaaa", &swapped), Err(Forged));
        assert_eq!(
            b.registered_address("aaaa", "http://10.0.0.1:8080"),
            Err(Forged)
        );
        // Expired by less than the skew a clock may have (review LOW: a replica whose clock
        // ran 10 s ahead found every registration expired, and ended the sessions homed
        // there), and by more.
        let signed_until = |until: u64| {
            let until = until.to_string();
            let tag = a.registration_mac("aaaa", &until, "http://10.0.0.1:8080");
            format!(
                "v1.{until}.{}.http://10.0.0.1:8080",
                hex(&tag.finalize().into_bytes())
            )
        };
        let skewed = signed_until(unix_ms() - 10_000);
        assert_eq!(
            b.registered_address("aaaa", &skewed),
            Ok("http://10.0.0.1:8080")
        );
        let expired = signed_until(unix_ms() - 2 * MAX_SKEW_MS);
        assert_eq!(b.registered_address("aaaa", &expired), Err(Expired));
    }

    #[test]
    fn headers_a_connection_header_names_are_not_forwarded() {
        let mut from = HeaderMap::new();
        from.insert(
            header::CONNECTION,
            HeaderValue::from_static("close, x-private"),
        );
        from.insert("x-private", HeaderValue::from_static("1"));
        from.insert("x-public", HeaderValue::from_static("2"));
        from.insert(HOP_HEADER, HeaderValue::from_static("v1"));
        let mut to = HeaderMap::new();
        copy_end_to_end(&from, &mut to);
        assert_eq!(to.len(), 1, "{to:?}");
        assert_eq!(to["x-public"], "2");
    }
}

//! The OAuth client's HTTP: GETs of metadata documents and POSTs to the registration and
//! token endpoints, on the remote module's connection pool, bounded in time and size. Every
//! URL must be `https`, or plain `http` to a loopback host (as a token endpoint must be:
//! codes, verifiers and secrets cross it). What a server wrote is never put in an error.

use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper::header::{HeaderValue, ACCEPT, AUTHORIZATION, CONTENT_TYPE};
use hyper::{Method, Request};
use serde_json::Value;
use tracing::debug;

use crate::outgoing_auth::{check_token_endpoint, OutgoingAuthError};

/// Largest document or answer read.
const MAX_BODY: usize = 256 * 1024;

/// The pool and the deadline of one request.
#[derive(Clone)]
pub(crate) struct Http {
    client: crate::remote::Client,
    timeout: Duration,
}

impl std::fmt::Debug for Http {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Http")
            .field("timeout", &self.timeout)
            .finish()
    }
}

/// An answer: its status and its body as JSON (`None`: not JSON).
pub(crate) struct Answer {
    pub(crate) status: u16,
    pub(crate) json: Option<Value>,
}

impl Http {
    pub(crate) fn new(timeout: Duration) -> Self {
        let client =
            hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
                .pool_idle_timeout(Duration::from_secs(90))
                .build(crate::remote::connector(timeout));
        Http { client, timeout }
    }

    /// The JSON document at `url`; `None` when there is none (any 4xx, or not JSON).
    pub(crate) async fn get_json(&self, url: &str) -> Result<Option<Value>, OutgoingAuthError> {
        let answer = self.send(Method::GET, url, None, None).await?;
        match answer.status {
            200..=299 => Ok(answer.json.filter(Value::is_object)),
            400..=499 => Ok(None),
            status => Err(OutgoingAuthError::Status { status }),
        }
    }

    /// POSTs `body` (`content_type`) to `url`, with `authorization` if given.
    pub(crate) async fn post(
        &self,
        url: &str,
        content_type: &'static str,
        body: String,
        authorization: Option<HeaderValue>,
    ) -> Result<Answer, OutgoingAuthError> {
        self.send(Method::POST, url, Some((content_type, body)), authorization)
            .await
    }

    async fn send(
        &self,
        method: Method,
        url: &str,
        body: Option<(&'static str, String)>,
        authorization: Option<HeaderValue>,
    ) -> Result<Answer, OutgoingAuthError> {
        let uri = check_token_endpoint(url).map_err(|_| {
            OutgoingAuthError::Discovery(
                "an OAuth endpoint is not an https URL (or http to a loopback host)",
            )
        })?;
        let mut request = Request::builder()
            .method(method)
            .uri(uri)
            .header(ACCEPT, "application/json");
        if let Some(value) = authorization {
            request = request.header(AUTHORIZATION, value);
        }
        let (content_type, body) = body.unwrap_or(("", String::new()));
        if !content_type.is_empty() {
            request = request.header(CONTENT_TYPE, content_type);
        }
        let request = request
            .body(Full::new(Bytes::from(body)))
            .map_err(|_| OutgoingAuthError::Discovery("an OAuth endpoint URL is not usable"))?;
        let once = async {
            let response = self.client.request(request).await.map_err(|e| {
                debug!(error = %e, "OAuth endpoint unreachable");
                OutgoingAuthError::Unreachable
            })?;
            let status = response.status().as_u16();
            let bytes = Limited::new(response.into_body(), MAX_BODY)
                .collect()
                .await
                .map_err(|_| OutgoingAuthError::Malformed("body unreadable or too large"))?
                .to_bytes();
            Ok::<_, OutgoingAuthError>(Answer {
                status,
                json: serde_json::from_slice(&bytes).ok(),
            })
        };
        tokio::time::timeout(self.timeout, once)
            .await
            .map_err(|_| OutgoingAuthError::Timeout)?
    }
}

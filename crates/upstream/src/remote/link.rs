//! The transport client of one upstream session: Streamable HTTP, or an HTTP+SSE stream
//! opened at the session's first exchange (which keeps its caller's `Authorization`).

use std::sync::Arc;

use bytes::Bytes;
use hyper::header::{HeaderName, HeaderValue};
use parking_lot::Mutex;

use super::{ListenHandle, Outgoing, RemoteClient, RemoteError, RemoteSink, SseClient};

/// The transport client of one upstream session.
#[derive(Debug)]
pub(super) enum Link {
    Streamable(RemoteClient),
    /// Connected at the first exchange (the SSE stream *is* the session).
    Sse {
        config: Box<super::RemoteConfig>,
        sink: Arc<dyn RemoteSink>,
        /// The stream, and whether it was opened with a caller's `Authorization`.
        conn: tokio::sync::OnceCell<(SseClient, bool)>,
        /// The `Authorization` to connect with (the session's caller's, or one obtained for
        /// it): the stream is the session, so it is the one the session keeps.
        auth: Mutex<Option<HeaderValue>>,
    },
    /// Stateless requests cannot reach an HTTP+SSE remote: every session is a stream.
    NoSession,
}

impl Link {
    pub(super) async fn call(
        &self,
        out: Outgoing<'_>,
        challenge: &mut Option<String>,
    ) -> Result<super::RemoteResponse, RemoteError> {
        match self {
            Link::Streamable(c) => c.call_noting(out, challenge).await,
            Link::Sse { auth, .. } => {
                let mut out = out;
                out.headers.extend(current(auth));
                self.sse().await?.call(out).await
            }
            Link::NoSession => Err(NO_SESSION),
        }
    }

    /// `auth`: a per-request `Authorization` (a stateless handle's); a session sends its own.
    /// `headers`: the line's standard headers.
    pub(super) async fn send(
        &self,
        line: Bytes,
        auth: Option<HeaderValue>,
        mut headers: Vec<(HeaderName, HeaderValue)>,
    ) -> Result<(), RemoteError> {
        match self {
            Link::Streamable(c) => {
                headers.extend(auth.map(|v| (hyper::header::AUTHORIZATION, v)));
                c.send_with(line, &headers).await
            }
            Link::Sse { auth, .. } => {
                let headers: Vec<_> = current(auth).into_iter().collect();
                self.sse().await?.send(line, &headers).await
            }
            Link::NoSession => Err(NO_SESSION),
        }
    }

    pub(super) async fn sse(&self) -> Result<&SseClient, RemoteError> {
        let Link::Sse {
            config,
            sink,
            conn,
            auth,
        } = self
        else {
            return Err(NO_SESSION);
        };
        let (client, with_auth) = conn
            .get_or_try_init(|| async {
                let mut config = super::RemoteConfig::clone(config);
                let caller = auth.lock().clone();
                let with_auth = caller.is_some();
                if let Some(auth) = caller {
                    config
                        .headers
                        .retain(|(n, _)| n != hyper::header::AUTHORIZATION);
                    config.headers.push((hyper::header::AUTHORIZATION, auth));
                }
                Ok::<_, RemoteError>((SseClient::connect(config, sink.clone()).await?, with_auth))
            })
            .await?;
        // Opened with a token its caller no longer holds (revoked while it connected): its
        // POSTs would carry that token as a fixed header. The session ends instead.
        if *with_auth && auth.lock().is_none() {
            client.close();
            return Err(RemoteError::SessionLost);
        }
        Ok(client)
    }

    /// A session's `Authorization`, kept for everything the session sends.
    pub(super) fn set_caller_auth(&self, auth: &HeaderValue) {
        match self {
            Link::Streamable(c) => c.set_caller_auth(auth),
            Link::Sse { auth: slot, .. } => *slot.lock() = Some(auth.clone()),
            Link::NoSession => {}
        }
    }

    /// The caller's `Authorization` the session carries now.
    pub(super) fn caller_auth(&self) -> Option<HeaderValue> {
        match self {
            Link::Streamable(c) => c.caller_auth(),
            Link::Sse { auth, .. } => auth.lock().clone(),
            Link::NoSession => None,
        }
    }

    /// The session's owner holds no token any more (revoked), as a lookup made while the
    /// session carried `seen` said: nothing it sends carries one. Compare and clear: a
    /// token set since (its owner consented again, and a later call's lookup found it) stays.
    /// An HTTP+SSE session's stream was opened with it, and its POSTs would carry it as a
    /// fixed header: the session ends instead (its caller opens another).
    pub(super) fn clear_caller_auth_if(&self, seen: &HeaderValue) {
        match self {
            Link::Streamable(c) => c.clear_caller_auth_if(seen),
            Link::Sse {
                auth: slot, conn, ..
            } => {
                let cleared = {
                    let mut slot = slot.lock();
                    let same = slot.as_ref() == Some(seen);
                    if same {
                        *slot = None;
                    }
                    same
                };
                if cleared {
                    if let Some((c, _)) = conn.get() {
                        c.close();
                    }
                }
            }
            Link::NoSession => {}
        }
    }

    pub(super) fn set_protocol_version(&self, version: &str) {
        if let Link::Streamable(c) = self {
            c.set_protocol_version(version);
        }
    }

    /// The session's own stream for what the remote sends unprompted, where it needs opening.
    pub(super) fn listen(&self) -> Option<ListenHandle> {
        match self {
            Link::Streamable(c) => Some(c.listen()),
            Link::Sse { .. } | Link::NoSession => None,
        }
    }

    pub(super) async fn end_session(&self) -> Result<(), RemoteError> {
        match self {
            Link::Streamable(c) => c.end_session().await,
            Link::Sse { conn, .. } => {
                if let Some((c, _)) = conn.get() {
                    c.close();
                }
                Ok(())
            }
            Link::NoSession => Ok(()),
        }
    }
}

/// An HTTP+SSE session's `Authorization` now, for one POST: the one its caller's latest
/// request obtained (a refreshed or newly exchanged token replaces the one it connected with).
fn current(slot: &Mutex<Option<HeaderValue>>) -> Option<(HeaderName, HeaderValue)> {
    let auth = slot.lock().clone()?;
    Some((hyper::header::AUTHORIZATION, auth))
}

const NO_SESSION: RemoteError =
    RemoteError::Refused("an HTTP+SSE remote serves only requests within a session");

//! Sending one request to a backend and waiting for its one answer: the route key minted
//! per request, the client's progress token replaced, the breaker's flight, the deadline, and
//! the client's id restored. [`Sender`] holds exactly what that needs (the registry's
//! progress, listener and session tables, each backend's health, traces, the deadlines, whether
//! a policy is configured and whether the gateway aggregates); the gateway builds it once and
//! features take `&Sender` to reach a backend (the "outbound" layer, ARCHITECTURE.md).

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use opentelemetry::trace::FutureExt as _;
use serde_json::value::RawValue;
use serde_json::{json, Value};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use switchboard_upstream::BackendResponse;
use switchboard_upstream::Credential;
use switchboard_wire::{
    encode_request, has_member, object_member, restore_response, with_meta_member, Message,
    RequestId,
};

use crate::destination::{Name, Route};
use crate::health::Health;
use crate::in_flight::{CancelOnDrop, InFlightGuard};
use crate::progress;
use crate::route::RouteKey;
use crate::session::SessionId;
use crate::tasks::TaskAsk;
use crate::trace::Traces;
use crate::{BackendId, Backends, CoreError, Exchange, Registry};

/// One request on its way to the backend.
#[derive(Debug)]
pub(crate) struct Outgoing<'a> {
    /// The caller's Legacy session, for cancellation by client id.
    pub(crate) session: Option<&'a SessionId>,
    /// The client's id (restored by the caller; used to name in-flight requests).
    pub(crate) id: &'a RequestId,
    pub(crate) name: &'a str,
    pub(crate) params: Option<&'a RawValue>,
    /// The request's stream for related notifications.
    pub(crate) stream: Option<mpsc::Sender<Bytes>>,
    /// `Some` for a Modern `subscriptions/listen` passed through to a Modern backend, with
    /// who listens (judged again when the policy changes).
    pub(crate) listen: Option<(crate::modern_listen::Filter, &'a crate::Principal)>,
    /// Where it goes (from `resolve`).
    pub(crate) route: &'a Route,
    /// The caller's own credential, for a remote that forwards it (`forward_caller_token`);
    /// `None` for the gateway's own requests.
    pub(crate) credential: Option<&'a switchboard_upstream::Credential>,
}

/// Sends requests to backends and waits for their answers (built by `Gateway::new`).
#[derive(Debug)]
pub(crate) struct Sender {
    /// Progress tokens, Modern listeners, sessions' in-flight requests, tasks' owners.
    pub(crate) registry: Arc<Registry>,
    /// Each backend's breaker and counts (a request's `health::Flight`).
    pub(crate) health: Arc<Health>,
    /// `Some` when traces are on: a span per backend call, continued at the backend.
    pub(crate) traces: Option<Arc<Traces>>,
    /// How long a request waits for its answer without progress.
    pub(crate) request_timeout: Duration,
    /// How long a request may take however much progress it reports.
    pub(crate) max_request_time: Duration,
    /// Whether an authorization policy is configured (a Modern listen is then watched).
    pub(crate) has_policy: bool,
    /// Whether the backends are aggregated (a failure then names its backend).
    pub(crate) aggregating: bool,
}

impl Sender {
    /// The plain adapter: a Legacy request forwarded under a fresh route key, the client's id
    /// restored; a task it creates is recorded as its owner's.
    pub(crate) async fn pass(
        &self,
        ex: Exchange<'_>,
        id: &RequestId,
        name: &str,
        route: &Route,
        task: &TaskAsk,
    ) -> Result<Vec<u8>, CoreError> {
        let credential = ex.caller.credential.as_ref();
        let session = ex.session();
        let answer =
            (self.call_backend(session, id, name, ex.msg, (ex.stream, credential), route)).await?;
        let keeps = route.keeps_tasks();
        if let (Some(owner), true, false, true) =
            (&task.owner, task.asked, answer.is_error(), keeps)
        {
            let tables = self.registry.tables(&route.backend);
            // The params as the backend got them: they name the tool by its own name.
            let renamed = route.name.apply(ex.msg.params);
            let sent = (name, renamed.as_deref().or(ex.msg.params));
            (tables.tasks).record_answer(&self.registry.sessions, owner, &answer, sent);
        }
        Ok(restore(id, &answer))
    }

    /// Forwards one request under a fresh route key (and a fresh progress token) and waits for
    /// its answer, the deadline, or cancellation.
    pub(crate) async fn call_backend(
        &self,
        session: Option<&SessionId>,
        id: &RequestId,
        name: &str,
        msg: &Message<'_>,
        (stream, credential): (Option<mpsc::Sender<Bytes>>, Option<&Credential>),
        route: &Route,
    ) -> Result<BackendResponse, CoreError> {
        self.send(Outgoing {
            session,
            id,
            name,
            params: msg.params,
            stream,
            listen: None,
            route,
            credential,
        })
        .await
    }

    /// Sends one request and waits for its answer. See [`Outgoing`]. Fails fast while the
    /// backend's breaker is open; the outcome feeds its health (`health::Flight`).
    pub(crate) async fn send(&self, out: Outgoing<'_>) -> Result<BackendResponse, CoreError> {
        // A Modern listen lives as long as its client wants: it must never be the breaker's
        // one half-open trial (everyone else would be refused meanwhile), nor counted.
        if out.listen.is_some() {
            return self.send_unguarded(out).await;
        }
        let mut flight = (self.health.flight(out.route, out.name))
            .map_err(|e| self.attributed(&out.route.backend, e))?;
        flight.forwarded = out.credential.is_some_and(Credential::has_token);
        let Some(traces) = &self.traces else {
            return flight.finish(self.send_unguarded(out).await);
        };
        let cx = traces.backend_call(out.name, &out.route.backend);
        let answer = self.send_unguarded(out).with_context(cx.clone()).await;
        crate::trace::finish(&cx, &answer);
        flight.finish(answer)
    }

    async fn send_unguarded(&self, out: Outgoing<'_>) -> Result<BackendResponse, CoreError> {
        let route = out.route;
        let backend = &route.upstream;
        let name = out.name;
        // Aggregating: the backend's own name for an exposed one (`params.name`, or a
        // completion's `ref.name`), every other byte of params kept.
        let renamed = route.name.apply(out.params);
        if renamed.is_none() && route.name != Name::AsClient {
            // Never the exposed name at the backend (routing proved params an object).
            return Err(CoreError::InvalidParams("params must be an object"));
        }
        let out_params = renamed.as_deref().or(out.params);
        let key = RouteKey::mint();
        // The client's progress token is always replaced: the backend must never see a value
        // the client chose, or a client could name another request's token.
        // Most requests carry no token: a walk that validates nothing says so first.
        let original = out_params
            .filter(|p| has_member(p.get(), &["_meta", "progressToken"]))
            .and_then(|p| object_member(p, "_meta"))
            .and_then(|m| object_member(m, "progressToken"));
        let mut rewritten = None;
        let alive = progress::Liveness::default();
        // Registered with or without a stream: progress keeps the request's deadline alive
        // even when the answer goes back as plain JSON and the notes themselves go nowhere.
        let _progress = match (original, out_params) {
            (Some(original), Some(params)) => {
                let token = progress::mint_token();
                rewritten = with_meta_member(params, "progressToken", &token);
                self.registry
                    .progress
                    .register(&token, original, out.stream.clone(), &alive)
            }
            _ => self.registry.progress.none(),
        };
        if original.is_some() && rewritten.is_none() {
            // Never the client's own token at the backend.
            return Err(CoreError::InvalidParams("params._meta must be an object"));
        }
        // A Modern listen is addressed by its request id, i.e. by this key: register the route
        // before the backend can answer.
        let _listen = match (out.listen, out.stream.clone()) {
            (Some((filter, watcher)), Some(tx)) => {
                let guard = (self.registry.listeners).register(&key, out.id, filter, tx, true);
                if self.has_policy {
                    self.registry.listeners.watched_by(&guard, watcher);
                }
                Some(guard)
            }
            _ => None,
        };
        let params = rewritten.as_deref().or(out_params);
        // Traced: the backend continues this call's span, not the client's.
        let traced = self.traces.as_ref().and_then(|t| t.inject(params));
        let params = traced.as_deref().or(params);
        let line = encode_request(&key.to_request_id(), name, params);
        let cancel = CancellationToken::new();
        let _in_flight = out.session.map(|s| {
            let stream = out.stream.clone();
            InFlightGuard::register(
                &self.registry.sessions,
                s,
                (out.id, &route.backend),
                &key,
                &cancel,
                stream,
            )
        });
        let mut upstream_cancel = CancelOnDrop {
            backend,
            key: &key,
            reason: "client went away",
            armed: true,
        };
        let exchange = async {
            let call = backend.call_as(key.as_str(), line, out.credential).await?;
            tokio::select! {
                // An answer that is already there wins over a cancellation that raced it (a
                // session ending because its backend died must not hide why the call failed).
                biased;
                answer = call => Ok(answer?),
                () = cancel.cancelled() => Err(CoreError::Cancelled),
            }
        };
        // A listen stream lives until the client closes it; everything else has a deadline.
        let answer = if _listen.is_some() {
            Ok(exchange.await)
        } else {
            let (idle, total) = (self.request_timeout, self.max_request_time);
            progress::within(exchange, idle, total, &alive).await
        };
        match answer {
            Ok(result) => {
                // Answered, failed, or cancelled by the client (whose cancellation was already
                // forwarded): nothing more to tell the backend.
                upstream_cancel.armed = false;
                result.map_err(|e| self.attributed(&route.backend, e))
            }
            Err(expired) => {
                upstream_cancel.reason = "request timed out at the gateway";
                Err(self.attributed(&route.backend, CoreError::Timeout(expired.limit())))
            }
        }
    }

    /// Aggregating, a backend's failure names the backend (one of several is down; the
    /// client must know which).
    pub(crate) fn attributed(&self, backend: &BackendId, e: CoreError) -> CoreError {
        match e {
            CoreError::Backend(e) if self.aggregating => CoreError::OfBackend(backend.clone(), e),
            CoreError::Timeout(limit) if self.aggregating => {
                CoreError::TimeoutOf(backend.clone(), limit)
            }
            CoreError::Unavailable {
                backend,
                failures,
                retry_in,
                ..
            } => CoreError::Unavailable {
                backend,
                failures,
                retry_in,
                aggregated: self.aggregating,
            },
            e => e,
        }
    }

    /// A request of the gateway's own (no client) to `backend` of `backends`, e.g. an
    /// unsubscribe on session cleanup, on the gateway's own route (`Route::internal`).
    pub(crate) async fn internal_call(
        &self,
        backends: &Backends,
        backend: &BackendId,
        name: &str,
        params: Value,
    ) -> Result<BackendResponse, CoreError> {
        let params = RawValue::from_string(params.to_string())
            .map_err(|_| CoreError::InvalidParams("params"))?;
        let Some(entry) = backends.get(backend) else {
            return Err(CoreError::UnknownBackend(backend.clone()));
        };
        let route = Route::internal(&entry);
        let key = RouteKey::mint();
        let line = encode_request(&key.to_request_id(), name, Some(&params));
        // A replicated backend: an unsubscribe reaches the replica that has the subscription.
        let upstream = route.upstream.for_request(name, Some(&params));
        let call = upstream.call(key.as_str(), line).await?;
        let deadline = self.request_timeout;
        tokio::time::timeout(deadline, call)
            .await
            .map_err(|_| CoreError::Timeout(deadline))?
            .map_err(CoreError::from)
    }

    /// One page of `backend`'s list `method` (from `cursor`), through the gateway's own
    /// route and in the backend's era; the backend's error text, bounded, is for the log.
    /// Also what the aggregating gateway fetches its lists with (`vmcp`).
    pub(crate) async fn list_page(
        &self,
        backends: &Backends,
        backend: &BackendId,
        method: &str,
        cursor: Option<&str>,
    ) -> Result<Value, String> {
        let modern = backends.get(backend).is_some_and(|b| b.modern_now());
        let mut params = if modern {
            json!({ "_meta": crate::backend::gateway_envelope() })
        } else {
            json!({})
        };
        if let Some(c) = cursor {
            params["cursor"] = json!(c);
        }
        let answer = self.internal_call(backends, backend, method, params).await;
        // Never the backend's words: this goes to the log, and they may quote a secret.
        crate::backend::list_page(method, answer)
    }
}

pub(crate) fn restore(id: &RequestId, answer: &BackendResponse) -> Vec<u8> {
    restore_response(id, answer.member(), answer.payload())
}

//! Progress-token routing.
//!
//! A client's `progressToken` is replaced, on the way to the backend, by a gateway-minted
//! token; a backend `notifications/progress` is delivered only if its token is one the gateway
//! minted for a request still in flight, and only to that request's own stream, with the
//! client's token restored exactly. A client cannot name another request's token: its own
//! token is never what the backend sees.
//!
//! Attributed progress also tells its request that the backend is still working
//! ([`Liveness`]): the request's idle deadline starts again, bounded by its overall limit.
//! Only the minted token's own request is told, and it is told whether or not it has a
//! stream to carry the note (a request answered as plain JSON keeps its deadline alive too).

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use parking_lot::Mutex;
use serde_json::value::RawValue;
use tokio::sync::{mpsc, Notify};
use tokio::time::Instant;

use switchboard_wire::{encode_notification, method, with_member};

use crate::route::random_hex;

/// Capacity of a request stream's notification queue; when full, progress is dropped (a
/// progress update is superseded by the next one anyway).
pub const REQUEST_STREAM_QUEUE: usize = 32;
/// Bytes a request stream may hold for a client that is not reading, with the same policy as
/// the event bound: a note that does not fit is dropped. Why: a backend line may be 16 MiB,
/// so 32 queued notes could pin half a gigabyte per stalled request.
pub const REQUEST_STREAM_BYTES: usize = 4 << 20;
/// Both bounds of the queue in front of a streamed answer (`http` keeps it; the answer itself
/// is never refused).
pub const REQUEST_STREAM: crate::stream_queue::Limits = crate::stream_queue::Limits {
    events: REQUEST_STREAM_QUEUE,
    bytes: REQUEST_STREAM_BYTES,
};

#[derive(Debug)]
struct Route {
    /// The client's token, raw JSON.
    original: Box<RawValue>,
    /// The request's stream, when its answer is streamed.
    sink: Option<mpsc::Sender<Bytes>>,
    /// Woken by every progress note for this request (resets its idle deadline).
    alive: Arc<Notify>,
}

/// Minted progress token → the request stream it belongs to.
#[derive(Debug, Default)]
pub(crate) struct ProgressRoutes {
    /// Keyed by tokens the gateway minted (random): a fast hasher is safe here.
    routes: Mutex<foldhash::HashMap<String, Route>>,
    /// What checks each backend message before it is delivered (the guardrails): kept here,
    /// the registry part every backend's sink reaches, for progress and every other channel
    /// ([`ProgressRoutes::vet`]). Replaced whole by a reload; without guardrails, reading it
    /// is the whole cost.
    guards: arc_swap::ArcSwapOption<Box<dyn NoteCheck>>,
}

/// Checks a backend message on its way to a client — a notification's or a server request's
/// `params`, anything but an answer — before delivery (`guardrails` implements it; named here
/// so this base layer names no feature).
pub(crate) trait NoteCheck: Send + Sync + std::fmt::Debug {
    fn check(&self, method: &str, params: &RawValue) -> Vetted;
    /// A client's answer (its `result` or `error`) to `backend`'s question, on its way to
    /// the backend: checked by the backend's request rules.
    fn answer(&self, backend: &str, answer: &RawValue) -> Vetted;
}

/// What becomes of a backend message on its way to a client.
#[derive(Debug)]
pub(crate) enum Vetted {
    /// Deliver it as it is.
    Pass,
    /// Deliver it with these `params` instead.
    Replaced(Box<RawValue>),
    /// Not delivered: refused by this guardrail (a request is answered with its error).
    Refused(Arc<str>),
}

/// The JSON-RPC error (`-32603`) that takes the place of a refused answer or backend
/// message: names the guardrail, never the match.
pub(crate) fn refusal(guardrail: &str) -> switchboard_wire::ErrorObject {
    switchboard_wire::ErrorObject::new(
        switchboard_wire::codes::INTERNAL_ERROR,
        switchboard_guard::rejected_message(guardrail),
    )
    .with_data(serde_json::json!({"guardrail": guardrail}))
}

/// Removes a route when its request ends, whichever way it ends.
#[derive(Debug)]
pub(crate) struct ProgressGuard<'a> {
    routes: &'a ProgressRoutes,
    token: Option<String>,
}

impl Drop for ProgressGuard<'_> {
    fn drop(&mut self) {
        if let Some(token) = self.token.take() {
            self.routes.routes.lock().remove(&token);
        }
    }
}

/// A fresh gateway progress token, as JSON text.
pub(crate) fn mint_token() -> String {
    format!("\"sbp-{}\"", random_hex())
}

impl ProgressRoutes {
    /// Routes progress for `token` (a minted token's JSON text) to `sink` (if the request
    /// has a stream), restoring `original`, and wakes `alive` for each note. The route lives
    /// as long as the returned guard.
    pub(crate) fn register(
        &self,
        token: &str,
        original: &RawValue,
        sink: Option<mpsc::Sender<Bytes>>,
        alive: &Liveness,
    ) -> ProgressGuard<'_> {
        let key = token.trim_matches('"').to_owned();
        let route = Route {
            original: original.to_owned(),
            sink,
            alive: alive.0.clone(),
        };
        self.routes.lock().insert(key.clone(), route);
        ProgressGuard {
            routes: self,
            token: Some(key),
        }
    }

    /// Checks every backend message with `guards` from now on (`None`: with nothing).
    pub(crate) fn guard(&self, guards: Option<Box<dyn NoteCheck>>) {
        self.guards.store(guards.map(Arc::new));
    }

    /// Whether some guardrail checks backend messages now.
    pub(crate) fn guarded(&self) -> bool {
        self.guards.load().is_some()
    }

    /// A backend message other than an answer (`method`, its `params`) on its way to a
    /// client, checked by the guardrails (if any).
    pub(crate) fn vet(&self, method: &str, params: Option<&RawValue>) -> Vetted {
        match (&*self.guards.load(), params) {
            (Some(guards), Some(params)) => guards.check(method, params),
            _ => Vetted::Pass,
        }
    }

    /// A client's answer to `backend`'s question checked on its way there
    /// ([`NoteCheck::answer`]); `Pass` without guardrails.
    pub(crate) fn vet_answer(&self, backend: &str, answer: &RawValue) -> Vetted {
        match &*self.guards.load() {
            Some(guards) => guards.answer(backend, answer),
            None => Vetted::Pass,
        }
    }

    /// A guard that routes nothing (the request asked for no progress).
    pub(crate) fn none(&self) -> ProgressGuard<'_> {
        ProgressGuard {
            routes: self,
            token: None,
        }
    }

    /// Delivers a backend progress notification to its request (its deadline, and its stream
    /// if it has one). Returns false when the token is not a live minted token, or the
    /// request's stream had no room (the notification is then dropped).
    pub(crate) fn route(&self, params: Option<&RawValue>) -> bool {
        let Some(params) = params else { return false };
        let Some(token) = switchboard_wire::object_member(params, "progressToken") else {
            return false;
        };
        let Some(token) = token
            .get()
            .strip_prefix('"')
            .and_then(|t| t.strip_suffix('"'))
        else {
            return false;
        };
        let (sink, original) = {
            let routes = self.routes.lock();
            let Some(route) = routes.get(token) else {
                return false;
            };
            route.alive.notify_one();
            let Some(sink) = &route.sink else {
                return true;
            };
            (sink.clone(), route.original.clone())
        };
        // Checked outside the lock: a message may be long.
        let checked = match self.vet(method::PROGRESS, Some(params)) {
            Vetted::Pass => None,
            Vetted::Replaced(params) => Some(params),
            // A note a guardrail refuses is not delivered (the call goes on).
            Vetted::Refused(_) => return true,
        };
        let params = checked.as_deref().unwrap_or(params);
        let Some(params) = with_member(params, "progressToken", original.get()) else {
            return false;
        };
        let line = encode_notification(method::PROGRESS, Some(&params));
        sink.try_send(Bytes::from(line)).is_ok()
    }

    /// Live routes (for leak tests).
    pub(crate) fn len(&self) -> usize {
        self.routes.lock().len()
    }
}

/// What a request's progress notes wake: its deadline (see [`within`]).
#[derive(Debug, Default)]
pub(crate) struct Liveness(Arc<Notify>);

impl Liveness {
    /// Resolves at the next progress note (or at once if one came since the last wait).
    pub(crate) async fn progressed(&self) {
        self.0.notified().await;
    }
}

/// Why [`within`] gave up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Expired {
    /// No answer and no progress for the idle deadline.
    Idle(Duration),
    /// The overall limit, progress or not.
    Total(Duration),
}

impl Expired {
    pub(crate) fn limit(self) -> Duration {
        match self {
            Expired::Idle(d) | Expired::Total(d) => d,
        }
    }
}

/// Runs `fut` until it finishes, `idle` passes without progress on `alive`, or `total` passes
/// since the start. Progress restarts the idle deadline (as an SDK client's
/// `resetTimeoutOnProgress` does), so a long call that reports progress is not cut off, while
/// `total` still bounds a backend that reports progress forever.
pub(crate) async fn within<F: Future>(
    fut: F,
    idle: Duration,
    total: Duration,
    alive: &Liveness,
) -> Result<F::Output, Expired> {
    // A limit beyond the clock's range is as good as none: a century away.
    let after = |d: Duration| {
        let now = Instant::now();
        now.checked_add(d)
            .or_else(|| now.checked_add(Duration::from_secs(100 * 365 * 86_400)))
            .unwrap_or(now)
    };
    let hard = after(total);
    tokio::pin!(fut);
    let mut until = after(idle).min(hard);
    loop {
        tokio::select! {
            biased;
            out = &mut fut => return Ok(out),
            () = alive.progressed() => {
                until = after(idle).min(hard);
            }
            () = tokio::time::sleep_until(until) => {
                return Err(if until >= hard { Expired::Total(total) } else { Expired::Idle(idle) });
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raw(s: &str) -> Box<RawValue> {
        RawValue::from_string(s.to_owned()).unwrap()
    }

    #[test]
    fn routes_only_live_minted_tokens_and_restores_the_client_token() {
        let routes = ProgressRoutes::default();
        let (tx, mut rx) = mpsc::channel(4);
        let token = mint_token();
        let alive = Liveness::default();
        let guard = routes.register(&token, &raw("1"), Some(tx), &alive);
        let params = raw(&format!(
            r#"{{"progressToken":{token},"progress":1,"total":3}}"#
        ));
        assert!(routes.route(Some(&params)));
        let line = rx.try_recv().unwrap();
        assert_eq!(
            std::str::from_utf8(&line).unwrap(),
            r#"{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":1,"progress":1,"total":3}}"#
        );
        // The client's own token is not a route.
        assert!(!routes.route(Some(&raw(r#"{"progressToken":1,"progress":2}"#))));
        drop(guard);
        assert!(
            !routes.route(Some(&params)),
            "the route dies with its request"
        );
        assert_eq!(routes.len(), 0);
    }

    /// Progress restarts only its own request's idle deadline, and never past the total.
    #[tokio::test(start_paused = true)]
    async fn progress_extends_only_its_own_request_up_to_the_total() {
        let routes = ProgressRoutes::default();
        let (mine, other) = (Liveness::default(), Liveness::default());
        let token = mint_token();
        let _guard = routes.register(&token, &raw("1"), None, &mine);
        let note = raw(&format!(r#"{{"progressToken":{token},"progress":1}}"#));
        let idle = Duration::from_secs(1);
        let total = Duration::from_secs(3);
        let ticker = async {
            loop {
                tokio::time::sleep(Duration::from_millis(300)).await;
                assert!(routes.route(Some(&note)), "attributed without a stream");
            }
        };
        let forever = std::future::pending::<()>();
        let watched = async {
            tokio::join!(
                within(forever, idle, total, &mine),
                within(std::future::pending::<()>(), idle, total, &other),
            )
        };
        let (mine_out, other_out) = tokio::select! {
            out = watched => out,
            () = ticker => unreachable!(),
        };
        assert_eq!(mine_out, Err(Expired::Total(total)));
        assert_eq!(
            other_out,
            Err(Expired::Idle(idle)),
            "another request's progress"
        );
    }
}

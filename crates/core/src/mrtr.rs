//! The MRTR bridge: a Modern client's call on a Legacy-only backend that asks for input.
//!
//! A Legacy backend asks for sampling, elicitation or roots with real server→client requests
//! while a call is open; a Modern (2026-07-28) client can only be asked through an
//! `input_required` result and answers by retrying with `inputResponses`. The bridge turns one
//! into the other, which needs every server request to be attributable to exactly one call:
//!
//! - **Per-session mode only.** Each bridged `tools/call`, `prompts/get` or `resources/read`
//!   that declares an input capability runs where whatever the backend asks belongs to this
//!   call: on the caller's warm partition (`partition`), handshaken with exactly the
//!   capabilities this request's `clientCapabilities` declare, while it holds the partition's
//!   one lease; else (the lease is taken, or the call asks for logs) on a dedicated process
//!   spawned for it (`dedicated`, the per-session `SpawnBackend`). In shared mode a server request cannot be attributed, so it keeps
//!   getting -32601 (`dispatch`).
//! - A request for a capability the request did not declare → -32021 (HTTP 400), call ended.
//! - Otherwise the requests that arrive together (within [`SETTLE`] of each other) become one
//!   `input_required` result keyed by the backend's key hint ([`KEY_HINT`], when it sends one)
//!   or a gateway-chosen key, with a sealed `requestState` (see `state`); the process and its
//!   pending call are parked in a bounded, expiring table.
//! - The retry is verified (principal, method, params, expiry, single use), its
//!   `inputResponses` answer the backend's pending requests (missing ones are asked again,
//!   extra keys ignored), and the call continues: final result → stamped like any bridged
//!   result, process shut down; more requests → another round.
//!
//! Invariant 4 holds except for what MRTR makes explicit: a parked call is state the client
//! asked for (it holds the token), bounded by [`state::MAX_HELD`] and [`state::HELD_TTL`], and
//! gone when the call completes, fails, expires, or the client abandons a round.

mod bridge;
mod dedicated;
mod digest;
mod partition;
mod plain;
mod share;
mod sink;
mod state;

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use serde_json::value::RawValue;
use serde_json::{json, Map, Value};
use tokio::sync::mpsc;
use tokio::time::Instant;

use switchboard_upstream::{PendingCall, Upstream, UpstreamOwner};
use switchboard_wire::classify::{META_CLIENT_CAPABILITIES, META_LOG_LEVEL, META_SERVER_INFO};
use switchboard_wire::{
    codes, encode_request, encode_result, with_meta_member, ErrorObject, Message, RequestId,
};

use crate::backends::{Backends, Presented};
use crate::per_session::Spawner;
use crate::reaper::Background;
use crate::registry::Registry;
use crate::route::RouteKey;
pub(crate) use crate::session::capability_of;
use crate::Answer;
use crate::{CoreError, Principal};
use sink::Asked;

pub(crate) use bridge::{Bridge, Limits};
pub(crate) use partition::{acknowledge, Key as PartitionKey, Partitions};
pub(crate) use plain::Plain;
pub(crate) use share::{default_share, SharePermit, Shares};
pub(crate) use state::replica_of_token;

/// Where a call's backend process puts its requests for input (see `sink::CallSink`).
pub(crate) type AskedSlot = Arc<parking_lot::Mutex<Option<mpsc::Sender<Asked>>>>;
pub(crate) use digest::params_digest;
pub(crate) use state::{unix_now, HeldTable, Refused, Sealer, MAX_HELD};

/// The methods on which a server may answer `input_required`.
pub(crate) const METHODS: &[&str] = switchboard_wire::method::INPUT_CAPABLE;

/// `_meta` key a Legacy backend may put on a server request to name the `inputRequests` key
/// it stands for (the fixture does; so can any server written MRTR-style behind a legacy
/// shim). Used when it is a non-empty string not already taken; stripped before the client.
pub(crate) const KEY_HINT: &str = "switchboard/inputKey";

/// Server requests arriving within this long of each other form one round. A Legacy backend
/// has no way to say "that is all I will ask for now"; one that asks for several things at
/// once writes them back to back.
const SETTLE: Duration = Duration::from_millis(50);

/// Most server requests queued per call; more are refused to the backend.
const ASKED_QUEUE: usize = 64;

/// How long a retired call's process gets to exit after its stdin closes.
const GRACE: Duration = Duration::from_secs(2);

/// A request the client has been asked (and not yet answered).
#[derive(Debug)]
struct Outstanding {
    key: String,
    backend_id: RequestId,
    method: String,
    params: Value,
}

/// A call on its own backend process, or holding its partition's lease. Dropping it withdraws
/// the call: a process of its own is shut down in the background; on a partition, whatever
/// the backend still waits for is refused and the call is cancelled upstream.
#[derive(Debug)]
pub(crate) struct Dedicated {
    handle: Upstream,
    process: Option<UpstreamOwner>,
    asked: mpsc::Receiver<Asked>,
    pending: Option<PendingCall>,
    /// The minted progress token the backend saw (JSON text), if the call carried one.
    progress_token: Option<String>,
    log: Arc<parking_lot::Mutex<Option<mpsc::Sender<Bytes>>>>,
    outstanding: Vec<Outstanding>,
    next_key: u64,
    /// One of the bounded dedicated-process slots (none on a partition), released when the
    /// call is dropped.
    _slot: Option<tokio::sync::OwnedSemaphorePermit>,
    /// One unit of the caller's share of the bridge, released with it.
    share: SharePermit,
    /// Set when the call runs on its principal's warm partition.
    lease: Option<partition::Lease>,
    /// The key the call went out under (to cancel it on a partition).
    key: Option<RouteKey>,
}

/// The part of a request MRTR looks at.
struct Incoming<'a> {
    caller: &'a Principal,
    /// The backend the call goes to, and its name there.
    route: &'a crate::resolve::Route,
    id: &'a RequestId,
    name: &'a str,
    msg: &'a Message<'a>,
    params: Value,
    stream: Option<mpsc::Sender<Bytes>>,
}

fn invalid_params(id: &RequestId, message: &str, data: Value) -> Answer {
    Answer::error(
        id,
        &ErrorObject::new(codes::INVALID_PARAMS, message.to_owned()).with_data(data),
    )
}

pub(crate) fn refused(id: &RequestId, why: state::Refused) -> Answer {
    invalid_params(
        id,
        "Invalid or expired requestState",
        json!({"reason": why.reason()}),
    )
}

/// The bridge at work on one request: its own state ([`Bridge`]) and what it reads of the
/// rest of the gateway, given explicitly (the gateway builds one per request).
pub(crate) struct Calls<'a> {
    pub(crate) bridge: &'a Bridge,
    /// How a backend starts a process of a call's or a partition's own.
    pub(crate) spawner: &'a Spawner,
    /// Progress routes; the processes it starts deliver what they send into it.
    pub(crate) registry: &'a Arc<Registry>,
    /// Where processes are stopped and a listen's subscriptions undone.
    pub(crate) background: &'a Background,
    /// The backend set (what a partition's backend can feed a listen).
    pub(crate) backends: &'a Backends,
    /// A policy is in force: a listen is judged again when it changes.
    pub(crate) watched: bool,
    /// What the gateway presents as its server (`serverInfo` on the bridge's results).
    pub(crate) presented: Presented,
}

/// Whether a Modern request to `backend` goes through the MRTR bridge (the backend is
/// Legacy-only, checked by the caller).
pub(crate) fn applies(spawner: &Spawner, backend: &crate::BackendId, name: &str) -> bool {
    spawner.for_backend(backend).is_some() && METHODS.contains(&name)
}

impl Calls<'_> {
    /// A bridged call that may need client input. See the module docs.
    pub(crate) async fn mrtr(
        &self,
        (caller, route): (&Principal, &crate::resolve::Route),
        id: &RequestId,
        name: &str,
        msg: &Message<'_>,
        stream: Option<mpsc::Sender<Bytes>>,
    ) -> Result<Answer, CoreError> {
        let params: Value = msg
            .params
            .and_then(|p| serde_json::from_str(p.get()).ok())
            .unwrap_or_else(|| json!({}));
        let responses = match params.get("inputResponses") {
            None => Map::new(),
            Some(Value::Object(m)) => m.clone(),
            Some(_) => {
                return Ok(invalid_params(
                    id,
                    "inputResponses must be an object",
                    json!({"reason": "invalid_input_responses"}),
                ))
            }
        };
        let digest = params_digest(msg.params.map_or("{}", |p| p.get()));
        let binding = state::Binding {
            caller,
            method: name,
            digest: &digest,
        };
        let call = match params.get("requestState") {
            None | Some(Value::Null) => None,
            Some(Value::String(token)) => {
                let held = self
                    .bridge
                    .sealer
                    .open(token, &binding)
                    .and_then(|h| self.bridge.held.take(&h).ok_or(state::Refused::Unknown));
                match held {
                    Ok(call) => Some(call),
                    Err(why) => return Ok(refused(id, why)),
                }
            }
            Some(_) => return Ok(refused(id, state::Refused::Malformed)),
        };
        let incoming = Incoming {
            caller,
            route,
            id,
            name,
            msg,
            params,
            stream,
        };
        let call = match call {
            Some(call) => {
                let limit = self.bridge.limits.request_timeout;
                call.share.until(std::time::Instant::now() + limit);
                call
            }
            None => self.start_call(&incoming).await?,
        };
        self.round(&incoming, call, &responses, &binding).await
    }

    /// Starts a call: on the caller's partition when its lease is free, else on a process of
    /// its own; then sends it the request.
    async fn start_call(&self, req: &Incoming<'_>) -> Result<Dedicated, CoreError> {
        // The caller's share first: a caller over it is told so (429) even while the pool has
        // room, so what it is refused never depends on what others are doing.
        let until = std::time::Instant::now() + self.bridge.limits.request_timeout;
        let share = (self.bridge.shares)
            .try_take(&req.caller.key(), until)
            .map_err(|retry_after| CoreError::BridgeShareExhausted {
                limit: self.bridge.shares.limit(),
                retry_after,
            })?;
        if !self.bridge.held.has_room() {
            return Err(CoreError::BridgeFull(MAX_HELD));
        }
        let key = PartitionKey::of(req.caller, req.msg, &req.route.backend);
        let wants_logs = req.params["_meta"].get(META_LOG_LEVEL).is_some();
        // A partition runs at the log level of no single request: such a call gets a process
        // handshaken (and set to its level) for it alone.
        let leased = if wants_logs || !key.input_capable() {
            None
        } else {
            match self.partition(&key, req.caller.credential.as_ref()).await {
                Ok(using) => using.lease(),
                // No room for another partition: the call still gets a process of its own.
                Err(CoreError::TooManyPartitions(_) | CoreError::PartitionShare(_)) => None,
                Err(e) => return Err(e),
            }
        };
        let mut call = match leased {
            Some((lease, asked)) => Dedicated {
                handle: lease.handle(),
                process: None,
                asked,
                pending: None,
                progress_token: None,
                log: lease.log(),
                outstanding: Vec::new(),
                next_key: 0,
                _slot: None,
                share,
                lease: Some(lease),
                key: None,
            },
            // Another input-capable call holds the partition: what the backend asks could be
            // either's, so this one runs where everything asked is its own.
            None => self.dedicated(req, share).await?,
        };
        self.send_call(&mut call, req).await?;
        Ok(call)
    }

    /// Sends the call's request to its process.
    async fn send_call(&self, call: &mut Dedicated, req: &Incoming<'_>) -> Result<(), CoreError> {
        // The backend sees the call as a Legacy request: no reserved `_meta`, no MRTR members,
        // and a minted progress token in place of the client's.
        let mut forwarded = req.params.clone();
        if let Some(obj) = forwarded.as_object_mut() {
            obj.remove("inputResponses");
            obj.remove("requestState");
            if let Some(meta) = obj.get_mut("_meta").and_then(Value::as_object_mut) {
                meta.retain(|k, _| !k.starts_with(switchboard_wire::classify::RESERVED_PREFIX));
            }
        }
        // Aggregating: the backend's own name for the exposed one.
        req.route.name.apply_to(&mut forwarded);
        let forwarded = RawValue::from_string(forwarded.to_string())
            .map_err(|_| CoreError::InvalidParams("params"))?;
        let mut params = forwarded;
        if req.msg.meta("progressToken").is_some() {
            let token = crate::progress::mint_token();
            if let Some(p) = with_meta_member(&params, "progressToken", &token) {
                params = p;
                call.progress_token = Some(token);
            }
        }
        let key = RouteKey::mint();
        let line = encode_request(&key.to_request_id(), req.name, Some(&params));
        // The call's own process, or its caller's partition: on the caller's behalf.
        let credential = req.caller.credential.as_ref();
        call.pending = Some(call.handle.call_as(key.as_str(), line, credential).await?);
        call.key = Some(key);
        Ok(())
    }

    /// One round: answer what the client answered, then wait for the call's next event.
    async fn round(
        &self,
        req: &Incoming<'_>,
        mut call: Dedicated,
        responses: &Map<String, Value>,
        binding: &state::Binding<'_>,
    ) -> Result<Answer, CoreError> {
        let id = req.id;
        // This round's stream carries the call's progress and (if asked for) its logs.
        let original = req.msg.meta("progressToken");
        // Progress restarts this round's deadline (bounded by --max-request-time), stream or not.
        let alive = crate::progress::Liveness::default();
        let _progress = match (&call.progress_token, original) {
            (Some(token), Some(original)) => {
                self.registry
                    .progress
                    .register(token, original, req.stream.clone(), &alive)
            }
            _ => self.registry.progress.none(),
        };
        let wants_logs = req.params["_meta"].get(META_LOG_LEVEL).is_some();
        *call.log.lock() = req.stream.clone().filter(|_| wants_logs);

        // Keys this round has used, so a response answers at most one backend request.
        let mut used: Vec<String> = Vec::new();
        for o in std::mem::take(&mut call.outstanding) {
            match responses.get(&o.key) {
                Some(Value::Object(_)) => {
                    call.answer(&o.backend_id, &responses[&o.key]).await?;
                    used.push(o.key);
                }
                Some(_) => return Ok(not_a_result(id, &o.key)),
                None => call.outstanding.push(o),
            }
        }

        let (idle, total) = (
            self.bridge.limits.request_timeout,
            self.bridge.limits.max_request_time,
        );
        let started = Instant::now();
        let hard = started.checked_add(total).unwrap_or(started + idle);
        let mut deadline = (started + idle).min(hard);
        let mut asked_open = true;
        loop {
            let wait = if call.outstanding.is_empty() {
                deadline
            } else {
                (Instant::now() + SETTLE).min(deadline)
            };
            let Some(pending) = call.pending.as_mut() else {
                return Err(CoreError::UnexpectedResponse);
            };
            tokio::select! {
                biased;
                answer = pending => {
                    call.pending = None;
                    *call.log.lock() = None;
                    let answer = answer?;
                    return Ok(crate::modern::complete(id, req.name, &answer, &self.presented));
                }
                asked = call.asked.recv(), if asked_open => {
                    let Some(asked) = asked else {
                        asked_open = false;
                        continue;
                    };
                    let cap = capability_of(&asked.method).unwrap_or("roots");
                    // Checked against *this* request's declaration (a retry may declare less
                    // than the request that started the call).
                    if !declares(&req.params, cap) {
                        call.refuse(&asked.id);
                        return Ok(missing_capability(id, cap));
                    }
                    let mut params: Value = asked
                        .params
                        .as_deref()
                        .and_then(|p| serde_json::from_str(p.get()).ok())
                        .unwrap_or_else(|| json!({}));
                    let key = call.key_for(&asked, &params, &used);
                    strip_hint(&mut params);
                    match responses.get(&key) {
                        // Answered ahead (the client already knows this key): no round trip.
                        Some(answer @ Value::Object(_)) => {
                            call.answer(&asked.id, answer).await?;
                            used.push(key);
                        }
                        Some(_) => return Ok(not_a_result(id, &key)),
                        None => call.outstanding.push(Outstanding {
                            key,
                            backend_id: asked.id,
                            method: asked.method,
                            params,
                        }),
                    }
                }
                () = alive.progressed() => {
                    deadline = (Instant::now() + idle).min(hard);
                }
                () = tokio::time::sleep_until(wait) => {
                    if call.outstanding.is_empty() {
                        let limit = if deadline >= hard { total } else { idle };
                        return Err(CoreError::Timeout(limit));
                    }
                    return self.park(id, call, binding);
                }
            }
        }
    }

    /// Parks the call and answers `input_required` with what it waits for.
    fn park(
        &self,
        id: &RequestId,
        call: Dedicated,
        binding: &state::Binding<'_>,
    ) -> Result<Answer, CoreError> {
        *call.log.lock() = None;
        let requests: Map<String, Value> = call
            .outstanding
            .iter()
            .map(|o| {
                (
                    o.key.clone(),
                    json!({"method": o.method, "params": o.params}),
                )
            })
            .collect();
        let (held_id, token) = self.bridge.sealer.seal(binding, state::HELD_TTL);
        let expires = std::time::Instant::now() + state::HELD_TTL;
        call.share.until(expires);
        let (held, expired) = self.bridge.held.hold(held_id, expires, call);
        drop(expired);
        if held.is_err() {
            // The same answer as a full dedicated pool (503 naming it), not a 200 error.
            return Err(CoreError::BridgeFull(MAX_HELD));
        }
        let result = json!({
            "resultType": "input_required",
            "inputRequests": requests,
            "requestState": token,
            "_meta": { META_SERVER_INFO: self.presented.server_info },
        });
        Ok(Answer {
            body: encode_result(id, &result.to_string()),
            error_code: None,
        })
    }
}

/// Whether a request's `clientCapabilities` declare `capability`.
fn declares(params: &Value, capability: &str) -> bool {
    params["_meta"][META_CLIENT_CAPABILITIES]
        .get(capability)
        .is_some_and(|v| !v.is_null())
}

/// Removes the key hint from a server request's `_meta` (dropping `_meta` if it empties).
fn strip_hint(params: &mut Value) {
    let Some(obj) = params.as_object_mut() else {
        return;
    };
    let empty = match obj.get_mut("_meta").and_then(Value::as_object_mut) {
        Some(meta) => {
            meta.remove(KEY_HINT);
            meta.is_empty()
        }
        None => false,
    };
    if empty {
        obj.remove("_meta");
    }
}

pub(crate) fn missing_capability(id: &RequestId, cap: &str) -> Answer {
    let mut required = Map::new();
    required.insert(cap.to_owned(), json!({}));
    let err = ErrorObject::new(
        codes::MISSING_CLIENT_CAPABILITY,
        format!("Server requires the {cap} capability for this request"),
    )
    .with_data(json!({ "requiredCapabilities": required }));
    Answer::error(id, &err)
}

fn not_a_result(id: &RequestId, key: &str) -> Answer {
    invalid_params(
        id,
        &format!("inputResponses.{key} must be a result object"),
        json!({"reason": "invalid_input_response", "key": key}),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_hint_is_stripped_and_meta_dropped_when_empty() {
        let mut p = json!({"message": "m", "_meta": {KEY_HINT: "k"}});
        strip_hint(&mut p);
        assert_eq!(p, json!({"message": "m"}));
        let mut p = json!({"_meta": {KEY_HINT: "k", "other": 1}});
        strip_hint(&mut p);
        assert_eq!(p, json!({"_meta": {"other": 1}}));
    }

    #[test]
    fn capability_errors_name_an_object() {
        let a = missing_capability(&RequestId::from_string("x"), "sampling");
        let v: Value = serde_json::from_slice(&a.body).unwrap();
        assert_eq!(v["error"]["code"], -32021);
        assert_eq!(
            v["error"]["data"]["requiredCapabilities"],
            json!({"sampling": {}})
        );
    }
}

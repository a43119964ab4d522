//! Stage 4 of the request path, "answer locally": what the virtual server answers itself,
//! or prepares before routing: merged lists, `ping`, `server/discover`, `logging/setLevel`
//! to every backend, tool search's own tools, composites, and the merged lists a
//! name-routed request needs. It composes `vmcp`, `tool_search`, `workflow` and `send`,
//! as [`LocalAnswers`]: the gateway's parts it reads, and the virtual server (it exists only
//! when aggregating).

use std::sync::Arc;

use switchboard_wire::{encode_result, method, Message, RequestId};

use serde_json::json;
use tracing::warn;

use crate::access::Origins;
use crate::catalog::{self, Kind};
use crate::resolve::{From, Via};
use crate::tool_search::Searched;
use crate::vmcp::{kinds_for, list_kind, routable};
use crate::vmcp::{CapSet, FailureMode, Vmcp};
use crate::{CoreError, Exchange, Gateway, Principal};

/// A composite's `tool` steps go through the whole request path (`Gateway::handle`).
impl crate::workflow::Steps for Arc<Gateway> {
    fn call<'a>(
        &'a self,
        ex: Exchange<'a>,
    ) -> futures::future::BoxFuture<'a, Result<crate::Answer, CoreError>> {
        Box::pin(self.handle(ex))
    }
}

/// The pipeline's "answer locally" stage: what the aggregating gateway answers itself, and
/// the merged lists it prepares before routing. Built per request from the gateway
/// ([`LocalAnswers::of`]); `None` when the gateway is not aggregating.
#[derive(Clone, Copy)]
pub(crate) struct LocalAnswers<'a> {
    gateway: &'a Gateway,
    vmcp: &'a Vmcp,
}

impl<'a> LocalAnswers<'a> {
    /// The stage for `gateway`, when it aggregates (`switchboard serve`).
    pub(crate) fn of(gateway: &'a Gateway) -> Option<Self> {
        let vmcp = gateway.vmcp()?;
        Some(Self { gateway, vmcp })
    }

    /// The merged list of `kind` (`Vmcp::view`).
    async fn view(&self, kind: Kind) -> Result<Arc<crate::catalog::View>, CoreError> {
        let g = self.gateway;
        self.vmcp.view(kind, &g.sender, &g.backends).await
    }

    /// What a composite's run takes from the gateway (`workflow::Context`): `steps` is the
    /// gateway itself, shared, since a step re-enters the request path.
    fn composites(&self, steps: &'a Arc<Gateway>) -> crate::workflow::Context<'a> {
        let g = self.gateway;
        crate::workflow::Context {
            steps,
            access: &g.config.access,
            vmcp: Some(self.vmcp),
            asks: &g.asks,
            backends: &g.backends,
        }
    }

    /// What lists tailored to a caller's capabilities are fetched with (`by_caps`).
    fn tailoring(&self) -> crate::vmcp::Tailoring<'a> {
        let g = self.gateway;
        crate::vmcp::Tailoring {
            backends: &g.backends,
            per_session: &g.per_session,
            request_timeout: g.config.request_timeout,
            handshake_timeout: g.config.handshake_timeout,
        }
    }

    /// Tool search's own `tools/call`s (`find_tools`, a malformed `call_tool`), when it is on.
    async fn own_tool_call(
        &self,
        caller: &Principal,
        msg: &Message<'_>,
        modern: bool,
    ) -> Option<Result<Vec<u8>, CoreError>> {
        let search = self.vmcp.tool_search()?;
        let composites = || self.gateway.workflows.composite_tools();
        let searched = Searched {
            view: self.view(crate::catalog::Kind::Tools),
            composites: &composites,
            origins: Some(self.vmcp as &dyn Origins),
            access: &self.gateway.config.access,
        };
        search.own_tool_call(caller, msg, modern, searched).await
    }

    /// A Legacy request the aggregating gateway answers itself (`Some`), or `None` when it
    /// is routed to a backend (whose lists are then ready for `resolve`).
    pub(crate) async fn aggregated(
        &self,
        steps: &'a Arc<Gateway>,
        call: &Exchange<'_>,
        id: &RequestId,
        name: &str,
    ) -> Option<Result<Vec<u8>, CoreError>> {
        if let Some(kind) = list_kind(name) {
            let cursor = cursor_of(call.msg);
            return Some(match cursor {
                Ok(cursor) => {
                    let set = crate::vmcp::caps_of(&self.gateway.asks, call);
                    Box::pin(self.list(id, kind, cursor.as_deref(), (false, set))).await
                }
                Err(e) => Err(e),
            });
        }
        // What the gateway answers itself is boxed: a `tools/call` routed to a backend
        // passes here, and its future should not carry theirs.
        if self.vmcp.tool_search().is_some() {
            if let Some(answer) = Box::pin(self.own_tool_call(call.caller, call.msg, false)).await {
                return Some(answer);
            }
        }
        if let Some(run) = self
            .gateway
            .workflows
            .legacy(self.composites(steps), call, id)
        {
            return Some(Box::pin(run).await);
        }
        match name {
            method::PING => Some(Ok(encode_result(id, "{}"))),
            method::SET_LEVEL => Some(Box::pin(self.set_level_everywhere(call, id)).await),
            _ => self.prepare(call.msg).await.err().map(Err),
        }
    }

    /// A list request: the merged list, or with tool search on, the gateway's own tools.
    async fn list(
        &self,
        id: &RequestId,
        kind: crate::catalog::Kind,
        cursor: Option<&str>,
        (modern, set): (bool, CapSet),
    ) -> Result<Vec<u8>, CoreError> {
        if kind == crate::catalog::Kind::Tools && self.vmcp.tool_search().is_some() {
            let ttl = Some(self.vmcp.list_ttl());
            return crate::tool_search::own_tool_list(id, cursor, modern, ttl);
        }
        self.merged_list(id, kind, cursor, (modern, set)).await
    }

    /// After routing `msg` failed with `err`, whether the lists it routes by were fetched
    /// again so that it may be routed once more: a name not found (`refresh_names`), or lists
    /// a reload cleared between its admission and its routing (`prepare`). False for any
    /// other error, or when a list could not be fetched.
    pub(crate) async fn relisted(&self, err: &CoreError, msg: &Message<'_>, set: CapSet) -> bool {
        let method = msg.method.unwrap_or_default();
        match err {
            CoreError::UnknownName(..) => self.refresh_names(method, set).await,
            CoreError::ListsNotBuilt => self.prepare(msg).await.is_ok(),
            _ => false,
        }
    }

    /// After a name `method` routes by was not found: the lists it reads, fetched again where
    /// stale (a tool added since the last fetch, or one offered only to callers declaring
    /// `set`), so the caller resolves once more. At most one fetch per TTL however many
    /// unknown names arrive. False when a list could not be fetched.
    async fn refresh_names(&self, method: &str, set: CapSet) -> bool {
        let vmcp = self.vmcp;
        for kind in kinds_for(method) {
            if vmcp.refresh_set(*kind, set, self.tailoring()).await {
                vmcp.forget_view(*kind);
            }
            if self.view(*kind).await.is_err() {
                return false;
            }
        }
        true
    }

    /// Builds the merged lists `msg`'s routing reads, when they are missing.
    pub(crate) async fn prepare(&self, msg: &Message<'_>) -> Result<(), CoreError> {
        let vmcp = self.vmcp;
        let Some(name) = msg.method else {
            return Ok(());
        };
        let kinds = lists_read_by(name);
        if kinds.is_empty() || kinds.iter().all(|k| vmcp.current(*k).is_some()) {
            return Ok(());
        }
        for kind in kinds {
            self.view(*kind).await?;
        }
        Ok(())
    }

    /// `logging/setLevel`: every backend the session uses that does logging runs at the level
    /// it asks for (each reconciled as in the one-backend case); the others never see it. The
    /// first backend's answer is the answer; with no backend that logs, `-32601` (the virtual
    /// server then declares no logging either).
    async fn set_level_everywhere(
        &self,
        call: &Exchange<'_>,
        id: &RequestId,
    ) -> Result<Vec<u8>, CoreError> {
        let Some(sid) = call.session() else {
            return Err(CoreError::SessionRequired(method::SET_LEVEL));
        };
        let level = call
            .msg
            .param("level")
            .and_then(|l| serde_json::from_str::<String>(l.get()).ok())
            .and_then(|l| crate::logging::rank(&l))
            .ok_or(CoreError::InvalidParams("level must be a logging level"))?;
        // Kept first: a session's own upstream opened later starts at this level.
        self.gateway
            .registry
            .sessions
            .set_log_level(sid.as_str(), level)?;
        let logs =
            |e: &crate::backends::BackendEntry| e.info().capabilities.get("logging").is_some();
        let backends: Vec<_> = self.gateway.backends.iter().collect();
        if !backends.iter().any(|e| logs(e)) {
            return Err(CoreError::Unsupported(method::SET_LEVEL.to_owned()));
        }
        let mut answer = None;
        // A Modern-only backend has no log level to set (the gateway answers it for them).
        for entry in backends.iter().filter(|e| e.info().era.legacy && logs(e)) {
            let from = From::Fanout(Some(sid), &entry.id);
            // `None`: the session has not opened its own upstream there yet.
            let Some(route) = self
                .gateway
                .resolve(from, method::SET_LEVEL, call.msg.params)?
            else {
                continue;
            };
            let one = if route.via == Via::Own {
                let answer = self
                    .gateway
                    .sender
                    .call_backend(
                        Some(sid),
                        id,
                        method::SET_LEVEL,
                        call.msg,
                        (None, None),
                        &route,
                    )
                    .await?;
                crate::send::restore(id, &answer)
            } else {
                (self.gateway.session_ops())
                    .set_level(sid, id, call.msg, &route)
                    .await?
            };
            answer.get_or_insert(one);
        }
        Ok(answer.unwrap_or_else(|| encode_result(id, "{}")))
    }

    /// A Modern request the aggregating gateway answers itself.
    pub(crate) async fn aggregated_modern(
        &self,
        steps: &'a Arc<Gateway>,
        caller: &crate::Principal,
        msg: &Message<'_>,
        stream: Option<&tokio::sync::mpsc::Sender<bytes::Bytes>>,
    ) -> Option<Result<crate::Answer, CoreError>> {
        let (Some(id), Some(name)) = (msg.id.as_ref(), msg.method) else {
            return None;
        };
        if name == method::DISCOVER {
            return Some(Ok(crate::modern::discover(id, &self.gateway.presented())));
        }
        if name == crate::modern::LISTEN {
            let Some(stream) = stream.cloned() else {
                return Some(Ok(crate::modern::listen_needs_stream(id)));
            };
            if let Err(e) = self.prepare(msg).await {
                return Some(Err(e));
            }
            let access = &self.gateway.config.access;
            let may_subscribe =
                |uri: &str| access.may_watch(Some(self.vmcp as &dyn Origins), caller, uri);
            let may_use = |b: &crate::BackendId| access.shows_any_of(self.vmcp, caller, b);
            let listen = self.gateway.modern();
            let judge = (may_subscribe, may_use);
            let listening = listen.aggregated_listen(caller, (id, msg), stream, judge);
            return Some(Box::pin(listening).await);
        }
        if let Some(kind) = list_kind(name) {
            let answer = match cursor_of(msg) {
                Ok(cursor) => {
                    let set = CapSet::of_modern(msg);
                    Box::pin(self.list(id, kind, cursor.as_deref(), (true, set))).await
                }
                Err(e) => Err(e),
            };
            return Some(answer.map(crate::Answer::ok));
        }
        if self.vmcp.tool_search().is_some() {
            if let Some(answer) = Box::pin(self.own_tool_call(caller, msg, true)).await {
                return Some(answer.map(crate::Answer::ok));
            }
        }
        // Before `prepare`: a removed method (`resources/subscribe` too, which routes by URI
        // in the Legacy era) or one no backend is chosen for is 404/-32601, as a Modern
        // backend answers it through the one-backend proxy, not an unknown-name -32602.
        if crate::modern::removed(name) || !routable(name) {
            return Some(Ok(crate::modern::method_not_found(id, name)));
        }
        let composites = self.composites(steps);
        if let Some(run) = self.gateway.workflows.modern(composites, caller, msg, id) {
            return Some(Ok(Box::pin(run).await));
        }
        self.prepare(msg).await.err().map(Err)
    }
}

/// The merged lists `method`'s routing or admission reads: a listen's URIs are judged and
/// subscribed where `resources/read` would route them.
fn lists_read_by(method: &str) -> &'static [crate::catalog::Kind] {
    use crate::catalog::Kind;
    if method == crate::modern::LISTEN {
        return &[Kind::Resources, Kind::ResourceTemplates];
    }
    kinds_for(method)
}

/// A list request's `cursor`: absent, or a string (anything else is `-32602`).
fn cursor_of(msg: &Message<'_>) -> Result<Option<String>, CoreError> {
    match msg.param("cursor") {
        None => Ok(None),
        Some(raw) => serde_json::from_str::<Option<String>>(raw.get())
            .map_err(|_| CoreError::InvalidParams("cursor")),
    }
}

impl<'a> LocalAnswers<'a> {
    /// Where `msg`'s targets are served, for its admission.
    /// The merged lists the request routes by are built first when they are missing or do not
    /// name its target (as routing would build them), so admission sees the backend of a
    /// name added since the last fetch; a failure to build them is the routing step's to
    /// answer (the policy then sees no origin, and routing refuses what it cannot confirm).
    pub(crate) async fn origins_for(&self, msg: &Message<'_>) -> &'a dyn Origins {
        if let Err(e) = self.prepare(msg).await {
            tracing::debug!("merged lists not ready before admission: {e}");
        }
        self.vmcp
    }

    /// A client's list request, answered from the merged list: one page from `cursor`
    /// (`-32602` for a cursor this list did not issue). `modern` stamps it as a Modern
    /// result.
    async fn merged_list(
        &self,
        id: &RequestId,
        kind: Kind,
        cursor: Option<&str>,
        (modern, set): (bool, CapSet),
    ) -> Result<Vec<u8>, CoreError> {
        let vmcp = self.vmcp;
        if vmcp.refresh_set(kind, set, self.tailoring()).await {
            vmcp.forget_view(kind);
        }
        let view = self.view(kind).await?;
        if vmcp.shape().config.failure_mode == FailureMode::Fail {
            if let Some((backend, why)) = view.down.first() {
                warn!(%backend, "list failed (failureMode: fail): {why}");
                return Err(CoreError::OfBackend(
                    backend.clone(),
                    switchboard_upstream::UpstreamError::Closed("its list is unavailable".into()),
                ));
            }
        }
        let visible = vmcp.visible_to(&view.visible, kind, set, self.tailoring());
        let page = catalog::page(&visible, cursor, vmcp.shape().config.page_size)
            .map_err(|_| CoreError::InvalidParams("cursor"))?;
        let mut items = page.items_json().get().to_owned();
        if kind == Kind::Tools && page.next.is_none() {
            // Composite tools come after the backends' tools, on the last page.
            items = self.gateway.workflows.with_composites(&items);
        }
        let mut result = format!(r#"{{"{}":{}"#, kind.result_key(), items);
        if let Some(next) = &page.next {
            result.push_str(&format!(r#","nextCursor":{}"#, json!(next)));
        }
        if modern {
            let info = json!({ switchboard_wire::classify::META_SERVER_INFO: self.gateway.presented().server_info });
            // The caller may keep the list as long as the gateway keeps its backends' lists
            // (a `list_changed` on its listen stream says when to drop it sooner); private:
            // the list was filtered for this caller.
            let ttl = u64::try_from(vmcp.shape().config.list_ttl.as_millis()).unwrap_or(u64::MAX);
            result.push_str(&format!(
                r#","resultType":"complete","ttlMs":{ttl},"cacheScope":"private","_meta":{info}"#
            ));
        }
        result.push('}');
        Ok(encode_result(id, &result))
    }
}

#[cfg(test)]
mod tests;

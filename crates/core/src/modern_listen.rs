//! Modern `subscriptions/listen` streams.
//!
//! Each listen request is registered under the route key it was forwarded with (or, when the
//! gateway serves it itself for a Legacy backend, a key it minted). Notifications reach a
//! listen stream only when they match its filter, tagged with
//! `_meta["io.modelcontextprotocol/subscriptionId"]` = the client's own listen request id:
//! - a Modern backend tags its notifications with the id it saw (our key): the tag is looked
//!   up here and rewritten to the client's id; untagged or unknown tags reach nobody;
//! - for a Legacy backend the gateway fans its untagged list changes and resource updates out
//!   to the matching listeners itself.

use std::collections::HashMap;
use std::sync::Arc;

use bytes::Bytes;
use parking_lot::Mutex;
use serde_json::value::RawValue;
use serde_json::{json, Value};
use tokio::sync::mpsc;

use switchboard_wire::classify::META_SUBSCRIPTION_ID;
use switchboard_wire::{encode_notification, method, object_member, with_meta_member, RequestId};

use crate::route::RouteKey;
use crate::session::{MAX_SUBSCRIPTIONS, MAX_URI_BYTES};
use crate::CoreError;

/// What a listen stream asked for (`params.notifications`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Filter {
    pub(crate) tools: bool,
    pub(crate) prompts: bool,
    pub(crate) resources: bool,
    pub(crate) uris: Vec<String>,
}

impl Filter {
    /// Parses `params.notifications`; unknown members are ignored, wrong types count as absent.
    /// Of `resourceSubscriptions`, the first [`MAX_SUBSCRIPTIONS`] URIs of at most
    /// [`MAX_URI_BYTES`] each are taken (the acknowledgement names what was).
    pub(crate) fn parse(params: Option<&RawValue>) -> Filter {
        let v: Value = params
            .and_then(|p| object_member(p, "notifications"))
            .and_then(|n| serde_json::from_str(n.get()).ok())
            .unwrap_or(Value::Null);
        let flag = |k: &str| v.get(k).and_then(Value::as_bool).unwrap_or(false);
        Filter {
            tools: flag("toolsListChanged"),
            prompts: flag("promptsListChanged"),
            resources: flag("resourcesListChanged"),
            uris: v
                .get("resourceSubscriptions")
                .and_then(Value::as_array)
                .map(|a| {
                    a.iter()
                        .filter_map(Value::as_str)
                        .filter(|u| u.len() <= MAX_URI_BYTES)
                        .take(MAX_SUBSCRIPTIONS)
                        .map(str::to_owned)
                        .collect()
                })
                .unwrap_or_default(),
        }
    }

    /// The acknowledged subset, as the ack's `notifications` object.
    pub(crate) fn to_json(&self) -> Value {
        let mut out = serde_json::Map::new();
        for (k, on) in [
            ("toolsListChanged", self.tools),
            ("promptsListChanged", self.prompts),
            ("resourcesListChanged", self.resources),
        ] {
            if on {
                out.insert(k.into(), json!(true));
            }
        }
        if !self.uris.is_empty() {
            out.insert("resourceSubscriptions".into(), json!(self.uris));
        }
        Value::Object(out)
    }

    fn wants_list(&self, name: &str) -> bool {
        match name {
            method::TOOLS_LIST_CHANGED => self.tools,
            method::PROMPTS_LIST_CHANGED => self.prompts,
            method::RESOURCES_LIST_CHANGED => self.resources,
            _ => false,
        }
    }
}

#[derive(Debug)]
struct Listener {
    client_id: RequestId,
    sink: mpsc::Sender<Bytes>,
    filter: Filter,
    /// The backend serves this listen itself (Modern backend); the gateway only re-tags.
    passthrough: bool,
    /// Who listens (credential dropped), for judging its resource subscriptions again when
    /// the policy changes; `None`: nobody to judge (no policy). While set, a passthrough
    /// listen's backend gets `resources/updated` through only for a URI still in the filter.
    watcher: Option<Arc<crate::Principal>>,
}

/// Live listen streams by key.
#[derive(Debug, Default)]
pub(crate) struct ModernListeners {
    inner: Mutex<HashMap<String, Listener>>,
    /// Listens open per principal, whatever serves them (`hold`).
    open: Mutex<HashMap<(String, String), usize>>,
}

/// Most `subscriptions/listen` streams one principal holds open at once (the anonymous
/// principal, every caller of a gateway without authentication, excepted): each holds a
/// connection and an in-flight place for as long as it lives.
pub(crate) const MAX_LISTENS_PER_PRINCIPAL: usize = 64;

/// One open listen in its principal's count; given back on drop.
#[derive(Debug)]
pub(crate) struct ListenHeld<'a> {
    listeners: &'a ModernListeners,
    owner: Option<(String, String)>,
}

impl Drop for ListenHeld<'_> {
    fn drop(&mut self) {
        let Some(owner) = self.owner.take() else {
            return;
        };
        let mut open = self.listeners.open.lock();
        if let Some(n) = open.get_mut(&owner) {
            *n -= 1;
            if *n == 0 {
                open.remove(&owner);
            }
        }
    }
}

impl ModernListeners {
    /// A place for one more listen of `caller`'s, held while the returned guard lives;
    /// `TooManyListens` past [`MAX_LISTENS_PER_PRINCIPAL`].
    pub(crate) fn hold(&self, caller: &crate::Principal) -> Result<ListenHeld<'_>, CoreError> {
        if caller.is_anonymous() {
            return Ok(ListenHeld {
                listeners: self,
                owner: None,
            });
        }
        let owner = (caller.issuer.clone(), caller.subject.clone());
        let mut open = self.open.lock();
        let n = open.entry(owner.clone()).or_default();
        if *n >= MAX_LISTENS_PER_PRINCIPAL {
            return Err(CoreError::TooManyListens(MAX_LISTENS_PER_PRINCIPAL));
        }
        *n += 1;
        Ok(ListenHeld {
            listeners: self,
            owner: Some(owner),
        })
    }
}

/// Removes a listener when its stream ends.
#[derive(Debug)]
pub(crate) struct ListenerGuard<'a> {
    listeners: &'a ModernListeners,
    key: String,
}

impl Drop for ListenerGuard<'_> {
    fn drop(&mut self) {
        self.listeners.inner.lock().remove(&self.key);
    }
}

impl ModernListeners {
    pub(crate) fn register(
        &self,
        key: &RouteKey,
        client_id: &RequestId,
        filter: Filter,
        sink: mpsc::Sender<Bytes>,
        passthrough: bool,
    ) -> ListenerGuard<'_> {
        let listener = Listener {
            client_id: client_id.clone(),
            sink,
            filter,
            passthrough,
            watcher: None,
        };
        self.inner.lock().insert(key.as_str().to_owned(), listener);
        ListenerGuard {
            listeners: self,
            key: key.as_str().to_owned(),
        }
    }

    /// Remembers who listens on `guard`'s stream, so a changed policy can judge its resource
    /// subscriptions again ([`Self::rejudge`]).
    pub(crate) fn watched_by(&self, guard: &ListenerGuard<'_>, watcher: &crate::Principal) {
        if let Some(l) = self.inner.lock().get_mut(&guard.key) {
            l.watcher = Some(Arc::new(crate::Principal {
                credential: None,
                ..watcher.clone()
            }));
        }
    }

    /// Judges every watched URI again (`allowed(watcher, uri)`): one no longer allowed stops
    /// receiving updates. Returns how many were revoked.
    pub(crate) fn rejudge(&self, allowed: impl Fn(&crate::Principal, &str) -> bool) -> usize {
        let mut revoked = 0;
        for l in self.inner.lock().values_mut() {
            let Some(watcher) = l.watcher.clone() else {
                continue;
            };
            let before = l.filter.uris.len();
            l.filter.uris.retain(|u| allowed(&watcher, u));
            revoked += before - l.filter.uris.len();
        }
        revoked
    }

    /// A notification a Modern backend tagged with a subscription id: delivered, re-tagged
    /// with the client's id, only to the listen stream the tag names. Returns false if the tag
    /// names no live passthrough listener.
    pub(crate) fn route_tagged(&self, name: &str, params: &RawValue, tag: &RawValue) -> bool {
        let Some(key) = serde_json::from_str::<String>(tag.get()).ok() else {
            return false;
        };
        let inner = self.inner.lock();
        let Some(l) = inner.get(&key).filter(|l| l.passthrough) else {
            return false;
        };
        if name == method::RESOURCE_UPDATED && l.watcher.is_some() {
            // Under a policy, only a URI the listen still watches (schemes folded, as the
            // policy judges them): a revoked one, or one the backend adds, is withheld.
            let uri = object_member(params, "uri")
                .and_then(|u| serde_json::from_str::<String>(u.get()).ok());
            let watched = uri.is_some_and(|u| {
                let u = crate::catalog::canonical_scheme(&u);
                l.filter
                    .uris
                    .iter()
                    .any(|w| crate::catalog::canonical_scheme(w) == u)
            });
            if !watched {
                return true;
            }
        }
        let Some(params) = with_meta_member(params, META_SUBSCRIPTION_ID, l.client_id.as_json())
        else {
            return false;
        };
        l.sink
            .try_send(Bytes::from(encode_notification(name, Some(&params))))
            .is_ok()
    }

    /// Fans an (untagged) list change from a Legacy backend out to the listeners that asked.
    pub(crate) fn list_changed(&self, name: &str) {
        for l in self
            .inner
            .lock()
            .values()
            .filter(|l| !l.passthrough && l.filter.wants_list(name))
        {
            let _ = l.sink.try_send(tagged(name, &l.client_id, None));
        }
    }

    /// Fans a resource update from a Legacy backend out to the listeners watching `uri`.
    pub(crate) fn resource_updated(&self, uri: &str) {
        for l in self
            .inner
            .lock()
            .values()
            .filter(|l| !l.passthrough && l.filter.uris.iter().any(|u| u == uri))
        {
            let _ = l
                .sink
                .try_send(tagged(method::RESOURCE_UPDATED, &l.client_id, Some(uri)));
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.inner.lock().len()
    }
}

/// A payload-free notification tagged for one listen stream.
pub(crate) fn tagged(name: &str, client_id: &RequestId, uri: Option<&str>) -> Bytes {
    let tag: Value = serde_json::from_str(client_id.as_json()).unwrap_or(Value::Null);
    let mut params = json!({ "_meta": { META_SUBSCRIPTION_ID: tag } });
    if let Some(uri) = uri {
        params["uri"] = json!(uri);
    }
    let params = RawValue::from_string(params.to_string()).ok();
    Bytes::from(encode_notification(name, params.as_deref()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raw(s: &str) -> Box<RawValue> {
        RawValue::from_string(s.to_owned()).unwrap()
    }

    #[test]
    fn filter_parsing_and_ack() {
        let f = Filter::parse(Some(&raw(
            r#"{"notifications":{"toolsListChanged":true,"promptsListChanged":"yes","resourceSubscriptions":["a",1]}}"#,
        )));
        assert_eq!(
            f,
            Filter {
                tools: true,
                prompts: false,
                resources: false,
                uris: vec!["a".into()]
            }
        );
        assert_eq!(
            f.to_json(),
            json!({"toolsListChanged":true,"resourceSubscriptions":["a"]})
        );
        assert_eq!(Filter::parse(None), Filter::default());
    }

    /// A principal holds at most `MAX_LISTENS_PER_PRINCIPAL` listens open at once, each
    /// place given back when its guard drops; another principal, and the anonymous one, are
    /// not held by it (review LOW: one caller's listens took every in-flight place).
    #[test]
    fn a_principal_holds_a_bounded_number_of_listens() {
        let listeners = ModernListeners::default();
        let who = |subject: &str| crate::Principal {
            issuer: "api-key".into(),
            subject: subject.into(),
            ..crate::Principal::anonymous()
        };
        let bob = who("bob");
        let held: Vec<_> = (0..MAX_LISTENS_PER_PRINCIPAL)
            .map(|_| listeners.hold(&bob).expect("within the bound"))
            .collect();
        assert!(matches!(
            listeners.hold(&bob),
            Err(CoreError::TooManyListens(MAX_LISTENS_PER_PRINCIPAL))
        ));
        assert!(listeners.hold(&who("alice")).is_ok());
        let anonymous = crate::Principal::anonymous();
        let many: Vec<_> = (0..=MAX_LISTENS_PER_PRINCIPAL)
            .map(|_| listeners.hold(&anonymous))
            .collect();
        assert!(many.iter().all(Result::is_ok));
        drop(held);
        assert!(listeners.hold(&bob).is_ok());
        assert!(listeners.open.lock().is_empty(), "every place given back");
    }

    /// A listen watches at most 1024 URIs of at most 8 KiB each; its acknowledgement names
    /// those (review MEDIUM: a listen held every URI its body carried).
    #[test]
    fn a_listen_watches_a_bounded_set_of_uris() {
        let long = "x".repeat(MAX_URI_BYTES + 1);
        let uris: Vec<String> = std::iter::once(long)
            .chain((0..MAX_SUBSCRIPTIONS + 10).map(|i| format!("file:///{i}")))
            .collect();
        let params = json!({"notifications": {"resourceSubscriptions": uris}}).to_string();
        let f = Filter::parse(Some(&raw(&params)));
        assert_eq!(f.uris.len(), MAX_SUBSCRIPTIONS);
        assert_eq!(f.uris[0], "file:///0");
        let acked = f.to_json()["resourceSubscriptions"]
            .as_array()
            .map(Vec::len);
        assert_eq!(acked, Some(MAX_SUBSCRIPTIONS));
    }

    #[test]
    fn tagged_routing_restores_the_client_id_and_ignores_unknown_tags() {
        let ls = ModernListeners::default();
        let (tx, mut rx) = mpsc::channel(4);
        let key = RouteKey::mint();
        let id = RequestId::from_raw(&raw("9007199254740993")).unwrap();
        let guard = ls.register(&key, &id, Filter::default(), tx, true);
        let tag = raw(&format!("\"{}\"", key.as_str()));
        let params = raw(&format!(
            r#"{{"_meta":{{"{META_SUBSCRIPTION_ID}":"{}"}}}}"#,
            key.as_str()
        ));
        assert!(ls.route_tagged(method::TOOLS_LIST_CHANGED, &params, &tag));
        let got = String::from_utf8(rx.try_recv().unwrap().to_vec()).unwrap();
        assert!(
            got.contains(r#""io.modelcontextprotocol/subscriptionId":9007199254740993"#),
            "{got}"
        );
        assert!(!ls.route_tagged(method::TOOLS_LIST_CHANGED, &params, &raw(r#""sb-other""#)));
        drop(guard);
        assert!(!ls.route_tagged(method::TOOLS_LIST_CHANGED, &params, &tag));
        assert_eq!(ls.len(), 0);
    }

    #[test]
    fn a_revoked_uri_stops_reaching_a_listen_of_either_kind() {
        let ls = ModernListeners::default();
        let who = crate::Principal::anonymous();
        let watch = Filter {
            uris: vec!["a://x".into(), "b://y".into()],
            ..Filter::default()
        };
        // Served by the gateway: the revoked URI leaves the filter.
        let (tx, mut rx) = mpsc::channel(8);
        let g1 = ls.register(
            &RouteKey::mint(),
            &RequestId::from_string("l"),
            watch.clone(),
            tx,
            false,
        );
        ls.watched_by(&g1, &who);
        // Passed through: the backend still sends it; it is withheld.
        let (ptx, mut prx) = mpsc::channel(8);
        let key = RouteKey::mint();
        let g2 = ls.register(&key, &RequestId::from_string("p"), watch, ptx, true);
        ls.watched_by(&g2, &who);
        assert_eq!(ls.rejudge(|_, uri| uri != "a://x"), 2);
        ls.resource_updated("a://x");
        ls.resource_updated("b://y");
        let got = String::from_utf8(rx.try_recv().unwrap().to_vec()).unwrap();
        assert!(got.contains("b://y"), "{got}");
        assert!(rx.try_recv().is_err(), "a://x was not delivered");
        let tag = raw(&format!("\"{}\"", key.as_str()));
        for uri in ["a://x", "A://x", "c://never-asked", "b://y"] {
            let params = raw(&format!(r#"{{"uri":"{uri}"}}"#));
            assert!(ls.route_tagged(method::RESOURCE_UPDATED, &params, &tag));
        }
        let got = String::from_utf8(prx.try_recv().unwrap().to_vec()).unwrap();
        assert!(got.contains("b://y"), "{got}");
        assert!(prx.try_recv().is_err(), "a://x was withheld");
    }

    #[test]
    fn gateway_served_fan_out_honours_filters() {
        let ls = ModernListeners::default();
        let (tx, mut rx) = mpsc::channel(8);
        let id = RequestId::from_string("l1");
        let f = Filter {
            tools: true,
            uris: vec!["file:///x".into()],
            ..Filter::default()
        };
        let _g = ls.register(&RouteKey::mint(), &id, f, tx, false);
        ls.list_changed(method::PROMPTS_LIST_CHANGED);
        ls.resource_updated("file:///other");
        ls.list_changed(method::TOOLS_LIST_CHANGED);
        ls.resource_updated("file:///x");
        let a: Value = serde_json::from_slice(&rx.try_recv().unwrap()).unwrap();
        let b: Value = serde_json::from_slice(&rx.try_recv().unwrap()).unwrap();
        assert!(rx.try_recv().is_err());
        assert_eq!(a["method"], method::TOOLS_LIST_CHANGED);
        assert_eq!(a["params"]["_meta"][META_SUBSCRIPTION_ID], "l1");
        assert_eq!(b["params"]["uri"], "file:///x");
    }
}

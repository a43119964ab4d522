//! Task status on a Modern `subscriptions/listen` stream: the Tasks extension's
//! `notifications/tasks`, asked for with `notifications.taskIds`. The gateway serves it itself,
//! the same way for every backend era and through the virtual server: a backend never sees
//! the task ids (`listen_without_task_ids`), and what the stream carries comes from the
//! caller's own `tasks/get` (the pipeline polls it: `pipeline/tasks.rs`), so a handle that
//! is not the caller's names nothing here either.
//!
//! A [`TaskWatch`] is one listen's: the handles asked for (at most [`MAX_WATCHED`]), those
//! agreed (a `tasks/get` answered for them: they go into the acknowledgement), and the last
//! state seen of each. A state that differs from the last one is sent as the extension's
//! `DetailedTask`, tagged with the listen (each watched task's state is sent once right after
//! the acknowledgement); a task that ended is sent once more and no longer watched.

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use bytes::Bytes;
use parking_lot::Mutex;
use serde_json::value::RawValue;
use serde_json::{json, Map, Value};
use tokio::time::Interval;

use switchboard_wire::classify::META_SUBSCRIPTION_ID;
use switchboard_wire::{encode_notification, keys_fold_equal, object_member, Message, RequestId};

/// Most task handles one listen watches; more are not acknowledged.
pub(crate) const MAX_WATCHED: usize = 16;
/// Most listens watching tasks at once per principal; another one's task ids are not
/// acknowledged (it is served without task status).
const MAX_WATCHING: usize = 4;
/// The acknowledgement of a listen.
const ACKNOWLEDGED: &str = "notifications/subscriptions/acknowledged";

/// What one poll of a watched task found.
#[derive(Debug)]
pub(crate) enum Polled {
    /// The caller's `tasks/get` result.
    Task(Box<RawValue>),
    /// The unknown-task answer: not (or no longer) the caller's.
    Gone,
    /// Any other failure (refused, rate-limited, timed out, the backend down).
    Failed,
}

/// How many listens each principal has watching tasks (one per gateway), bounded by
/// [`MAX_WATCHING`].
#[derive(Debug, Default)]
pub(crate) struct Watchers {
    by_principal: Mutex<HashMap<(String, String), usize>>,
}

/// A listen's place among its principal's watching ones; dropping it frees the place.
#[derive(Debug)]
pub(crate) struct Watching<'a> {
    watchers: &'a Watchers,
    principal: (String, String),
}

impl Watchers {
    /// A place for one more listen watching tasks for `principal`, if it has fewer than
    /// [`MAX_WATCHING`].
    pub(crate) fn take(&self, principal: &crate::Principal) -> Option<Watching<'_>> {
        let key = (principal.issuer.clone(), principal.subject.clone());
        let mut by = self.by_principal.lock();
        let count = by.entry(key.clone()).or_default();
        if *count >= MAX_WATCHING {
            return None;
        }
        *count += 1;
        Some(Watching {
            watchers: self,
            principal: key,
        })
    }
}

impl Drop for Watching<'_> {
    fn drop(&mut self) {
        let mut by = self.watchers.by_principal.lock();
        if let Some(count) = by.get_mut(&self.principal) {
            *count = count.saturating_sub(1);
            if *count == 0 {
                by.remove(&self.principal);
            }
        }
    }
}
/// Whether `line` is a listen's acknowledgement (which `TaskWatch::acknowledged` rewrites).
pub(crate) fn is_acknowledgement(line: &[u8]) -> bool {
    Message::parse(line).is_ok_and(|m| m.method == Some(ACKNOWLEDGED))
}

/// Shortest and longest wait between two polls (the task's own `pollIntervalMs`, bounded):
/// each poll is a request of the caller's, admitted and audited like one.
const EVERY_MS: (u64, u64) = (1000, 10_000);

/// One listen's watched tasks.
#[derive(Debug, Default)]
pub(crate) struct TaskWatch {
    asked: Vec<String>,
    /// Agreed handle → the last state seen (the `DetailedTask`, as sent).
    watched: Vec<(String, String)>,
    every: Duration,
}

impl TaskWatch {
    /// The task handles a listen's params ask to watch (`notifications.taskIds`, strings,
    /// each once, at most [`MAX_WATCHED`]); `None` when it asks for none.
    pub(crate) fn asked(params: Option<&RawValue>) -> Option<Self> {
        let ids = params
            .and_then(|p| object_member(p, "notifications"))
            .and_then(|n| object_member(n, "taskIds"))
            .and_then(|t| serde_json::from_str::<Vec<Value>>(t.get()).ok())?;
        let mut asked: Vec<String> = Vec::new();
        for id in ids.iter().filter_map(Value::as_str) {
            if asked.len() < MAX_WATCHED && !asked.iter().any(|a| a == id) {
                asked.push(id.to_owned());
            }
        }
        Some(TaskWatch {
            asked,
            watched: Vec::new(),
            every: Duration::from_millis(EVERY_MS.1),
        })
    }

    /// The handles asked for.
    pub(crate) fn asked_handles(&self) -> Vec<String> {
        self.asked.clone()
    }

    /// `handle` is watched: the caller's `tasks/get` answered `task` for it.
    pub(crate) fn agree(&mut self, handle: &str, task: &RawValue) {
        let state = detailed(task, handle);
        let poll = state["pollIntervalMs"].as_u64().unwrap_or(EVERY_MS.0);
        let every = Duration::from_millis(poll.clamp(EVERY_MS.0, EVERY_MS.1));
        self.every = self.every.min(every);
        self.watched.push((handle.to_owned(), state.to_string()));
    }

    /// The state of each watched task as agreed, sent right after the acknowledgement (so a
    /// client learns where each task is without a poll of its own); a task that had ended
    /// already is no longer watched.
    pub(crate) fn initial(&mut self, listen: &RequestId) -> Vec<Box<RawValue>> {
        let notes = (self.watched.iter())
            .filter_map(|(_, state)| serde_json::from_str::<Value>(state).ok())
            .filter_map(|state| notification(state, listen))
            .collect();
        self.watched.retain(|(_, state)| !ended(state));
        notes
    }

    /// How long to wait between two polls.
    pub(crate) fn every(&self) -> Duration {
        match self.every.is_zero() {
            true => Duration::from_millis(EVERY_MS.1),
            false => self.every,
        }
    }

    /// The handles still watched.
    pub(crate) fn handles(&self) -> Vec<String> {
        self.watched.iter().map(|(h, _)| h.clone()).collect()
    }

    /// Watches nothing any more (the caller's token expired).
    pub(crate) fn stop(&mut self) {
        self.watched.clear();
    }

    /// Whether nothing is watched any more.
    pub(crate) fn is_empty(&self) -> bool {
        self.watched.is_empty()
    }

    /// `line`, when it is an acknowledgement, naming exactly the watched handles in its
    /// `notifications.taskIds` (any other spelling, and whatever the backend put there, removed;
    /// an acknowledgement whose `notifications` is no object gets one). `None`: not an
    /// acknowledgement.
    pub(crate) fn acknowledged(&self, line: &[u8]) -> Option<Bytes> {
        let msg = Message::parse(line).ok()?;
        if msg.method != Some(ACKNOWLEDGED) {
            return None;
        }
        let params = msg.params.map_or("{}", RawValue::get);
        let mut params: Value = serde_json::from_str(params).unwrap_or_else(|_| json!({}));
        if !params.is_object() {
            params = json!({});
        }
        let handles: Vec<&str> = self.watched.iter().map(|(h, _)| h.as_str()).collect();
        let members = params.as_object_mut()?;
        members.retain(|k, _| k == "notifications" || !keys_fold_equal(k, "notifications"));
        let notifications = members.entry("notifications").or_insert_with(|| json!({}));
        if !notifications.is_object() {
            *notifications = json!({});
        }
        let notifications = notifications.as_object_mut()?;
        notifications.retain(|k, _| !keys_fold_equal(k, "taskIds"));
        if !handles.is_empty() {
            notifications.insert("taskIds".into(), json!(handles));
        }
        let params = RawValue::from_string(params.to_string()).ok()?;
        Some(Bytes::from(encode_notification(
            ACKNOWLEDGED,
            Some(&params),
        )))
    }

    /// What the caller's `tasks/get` of `handle` answered: the notification to send when the
    /// task changed, tagged with the listen `listen`. A task that ended, or that is no longer
    /// the caller's (the unknown-task answer), is no longer watched; a poll that failed
    /// otherwise (a refusal, a timeout) changes nothing, and the next one tries again.
    pub(crate) fn observed(
        &mut self,
        handle: &str,
        polled: &Polled,
        listen: &RequestId,
    ) -> Option<Box<RawValue>> {
        let at = self.watched.iter().position(|(h, _)| h == handle)?;
        let task = match polled {
            Polled::Task(task) => task,
            Polled::Gone => {
                self.watched.remove(at);
                return None;
            }
            Polled::Failed => return None,
        };
        let state = detailed(task, handle);
        let text = state.to_string();
        let changed = self.watched[at].1 != text;
        match ended(&text) {
            true => {
                self.watched.remove(at);
            }
            false => self.watched[at].1 = text,
        }
        changed.then(|| notification(state, listen)).flatten()
    }
}

/// A round of a watched listen's polls: each handle polled, with what the caller's `tasks/get`
/// found. It borrows neither the watch nor the listen (only the gateway and the request), so
/// the listen goes on being read while it runs.
pub(crate) type Round<'r> = Pin<Box<dyn Future<Output = Vec<(String, Polled)>> + Send + 'r>>;

/// The round of a watched listen's polls in flight, if any.
#[derive(Default)]
pub(crate) struct InFlight<'r>(Option<Round<'r>>);

impl std::fmt::Debug for InFlight<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("InFlight").field(&self.0.is_some()).finish()
    }
}

impl InFlight<'_> {
    /// What the round in flight found, once it completes; pending while none is. Dropped
    /// before then, the round stays in flight.
    pub(crate) async fn done(&mut self) -> Vec<(String, Polled)> {
        let Some(round) = self.0.as_mut() else {
            return std::future::pending().await;
        };
        let polled = round.await;
        self.0 = None;
        polled
    }
}

/// A watched listen while it runs: its watch (agreed on at its first acknowledgement), its
/// place among its principal's watching listens, the timer of its polls and the round of them
/// in flight (one at most). The round runs beside the listen: a slow `tasks/get` never stops
/// the listen's own messages (`pipeline/tasks.rs`, `watched_listen`).
#[derive(Debug)]
pub(crate) struct Watched<'r> {
    pub(crate) watch: TaskWatch,
    /// The listen was accepted (its first acknowledgement came).
    pub(crate) acked: bool,
    /// When the next round is due.
    pub(crate) tick: Interval,
    pub(crate) round: InFlight<'r>,
    /// Whether it got a place (it may watch at all).
    may: bool,
    place: Option<Watching<'r>>,
}

impl<'r> Watched<'r> {
    /// A listen not accepted yet, watching nothing; `place`: its principal's place for it, if
    /// it got one (without, it is served without task status).
    pub(crate) fn new(place: Option<Watching<'r>>) -> Self {
        let watch = TaskWatch::default();
        Watched {
            tick: polls_every(watch.every()),
            watch,
            acked: false,
            round: InFlight::default(),
            may: place.is_some(),
            place,
        }
    }

    /// Whether it may watch (it holds its principal's place).
    pub(crate) fn may(&self) -> bool {
        self.may
    }

    /// The watch was agreed on: its polls are every [`TaskWatch::every`] from now (the first
    /// a full wait from now).
    pub(crate) fn agreed(&mut self) {
        self.tick = polls_every(self.watch.every());
    }

    /// Whether a round may start on a tick: accepted, watching something, none in flight.
    pub(crate) fn due(&self) -> bool {
        self.acked && !self.watch.is_empty() && self.round.0.is_none()
    }

    /// `round` is in flight; `None`: the caller's token has lapsed, and it watches nothing
    /// from then on.
    pub(crate) fn start(&mut self, round: Option<Round<'r>>) {
        match round {
            Some(round) => self.round.0 = Some(round),
            None => self.stop(),
        }
    }

    /// The status to send of each task a completed round found changed (`TaskWatch::observed`),
    /// tagged with `listen`; none when the caller's token lapsed meanwhile (`expired`): it
    /// watches nothing from then on. The next round is due a full wait after this one ended,
    /// however long it took.
    pub(crate) fn observed(
        &mut self,
        polled: Vec<(String, Polled)>,
        expired: bool,
        listen: &RequestId,
    ) -> Vec<Box<RawValue>> {
        self.tick.reset();
        if expired {
            self.stop();
            return Vec::new();
        }
        let notes = (polled.iter())
            .filter_map(|(h, p)| self.watch.observed(h, p, listen))
            .collect();
        self.settle();
        notes
    }

    /// Watching nothing (any more), it holds none of its principal's places: given back.
    pub(crate) fn settle(&mut self) {
        if self.watch.is_empty() {
            self.place.take();
        }
    }

    fn stop(&mut self) {
        self.watch.stop();
        self.settle();
    }
}

/// The timer of a watched listen's polls, every `every`, the first a full wait from now (the
/// watch was just agreed on with a poll of each task: polling again at once would ask twice).
fn polls_every(every: Duration) -> Interval {
    let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tick
}

/// A `subscriptions/listen`'s params for a Modern backend, without any request for task
/// status (`notifications.taskIds`, in any spelling a loose parser would read as that): the
/// gateway offers no `notifications/tasks`, and a backend told a task id by a client would
/// send that task's status to that client's stream whoever owns it (and the id would be the
/// backend's own, never a handle). `None`: not an object.
pub(crate) fn listen_without_task_ids(params: &RawValue) -> Option<Box<RawValue>> {
    let mut v: Value = serde_json::from_str(params.get()).ok()?;
    let members = v.as_object_mut()?;
    members.retain(|k, _| k == "notifications" || !keys_fold_equal(k, "notifications"));
    if let Some(n) = members
        .get_mut("notifications")
        .and_then(Value::as_object_mut)
    {
        n.retain(|k, _| !keys_fold_equal(k, "taskIds"));
    }
    RawValue::from_string(v.to_string()).ok()
}

/// Whether a task's state (as kept) says it ended.
fn ended(state: &str) -> bool {
    let state: Value = serde_json::from_str(state).unwrap_or(Value::Null);
    matches!(
        state["status"].as_str(),
        Some("completed" | "failed" | "cancelled")
    )
}

/// The `DetailedTask` of a `tasks/get` result for `handle`: without its `resultType` and
/// `_meta` (the notification carries the listen's tag instead), and naming the task by its
/// handle whatever the backend wrote there, in whatever spelling a loose parser reads as
/// these members (`keys_fold_equal`).
fn detailed(result: &RawValue, handle: &str) -> Value {
    let mut v: Value = serde_json::from_str(result.get()).unwrap_or(Value::Null);
    if let Some(m) = v.as_object_mut() {
        m.retain(|k, _| {
            !["resultType", "_meta", "taskId", "task"]
                .iter()
                .any(|n| keys_fold_equal(k, n))
        });
        m.insert("taskId".into(), Value::String(handle.to_owned()));
        // An inlined result's tag names the backend's own id: dropped, as the bridge does.
        if let Some(meta) = (m.get_mut("result"))
            .and_then(Value::as_object_mut)
            .and_then(|r| r.get_mut("_meta"))
            .and_then(Value::as_object_mut)
        {
            meta.retain(|k, _| !keys_fold_equal(k, super::META_RELATED_TASK));
        }
    }
    v
}

/// The `notifications/tasks` params for `state`, tagged with the listen.
fn notification(mut state: Value, listen: &RequestId) -> Option<Box<RawValue>> {
    let tag: Value = serde_json::from_str(listen.as_json()).ok()?;
    let mut meta = Map::new();
    meta.insert(META_SUBSCRIPTION_ID.into(), tag);
    state
        .as_object_mut()?
        .insert("_meta".into(), Value::Object(meta));
    RawValue::from_string(state.to_string()).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raw(v: Value) -> Box<RawValue> {
        RawValue::from_string(v.to_string()).unwrap()
    }

    #[test]
    fn asked_handles_are_strings_once_and_bounded() {
        let many: Vec<String> = (0..40).map(|n| format!("h{n}")).collect();
        let params = raw(json!({"notifications": {"taskIds": ["a", "a", 7, "b"]}}));
        let w = TaskWatch::asked(Some(&params)).unwrap();
        assert_eq!(w.asked_handles(), ["a", "b"]);
        let params = raw(json!({"notifications": {"taskIds": many}}));
        let w = TaskWatch::asked(Some(&params)).unwrap();
        assert_eq!(w.asked_handles().len(), MAX_WATCHED);
        let none = raw(json!({"notifications": {"toolsListChanged": true}}));
        assert!(TaskWatch::asked(Some(&none)).is_none());
    }

    #[test]
    fn a_change_is_sent_once_and_an_ended_task_is_let_go() {
        let params = raw(json!({"notifications": {"taskIds": ["h"]}}));
        let mut w = TaskWatch::asked(Some(&params)).unwrap();
        let working = raw(
            json!({"taskId": "h", "status": "working", "pollIntervalMs": 5,
            "resultType": "complete", "_meta": {"x": 1}}),
        );
        w.agree("h", &working);
        assert_eq!(w.every(), Duration::from_millis(EVERY_MS.0));
        let listen = RequestId::from_string("L");
        assert_eq!(w.initial(&listen).len(), 1, "where it is now");
        assert!(
            w.observed("h", &Polled::Task(working.clone()), &listen)
                .is_none(),
            "unchanged"
        );
        let done = raw(
            json!({"taskId": "h", "status": "completed", "result": {"content": []},
            "resultType": "complete"}),
        );
        let note = w
            .observed("h", &Polled::Task(done.clone()), &listen)
            .unwrap();
        let v: Value = serde_json::from_str(note.get()).unwrap();
        assert_eq!(v["status"], "completed");
        assert_eq!(v["_meta"][META_SUBSCRIPTION_ID], "L");
        assert!(v.get("resultType").is_none(), "{v}");
        assert!(w.is_empty());
        assert!(w.observed("h", &Polled::Task(done), &listen).is_none());
    }

    #[test]
    fn a_failed_poll_keeps_watching_and_an_unknown_task_is_let_go() {
        let params = raw(json!({"notifications": {"taskIds": ["h", "g"]}}));
        let mut w = TaskWatch::asked(Some(&params)).unwrap();
        w.agree(
            "h",
            &raw(json!({"taskId": "backend-1", "status": "working"})),
        );
        w.agree("g", &raw(json!({"taskId": "g", "status": "working"})));
        let listen = RequestId::from_string("L");
        // The backend's own id never names the task: the handle does.
        let now = w.initial(&listen);
        let first: Value = serde_json::from_str(now[0].get()).unwrap();
        assert_eq!(first["taskId"], "h", "{first}");
        assert!(w.observed("h", &Polled::Failed, &listen).is_none());
        assert_eq!(w.handles(), ["h", "g"]);
        assert!(w.observed("g", &Polled::Gone, &listen).is_none());
        assert_eq!(w.handles(), ["h"]);
    }

    #[test]
    fn a_principal_watches_from_a_few_listens_at_most() {
        let watchers = Watchers::default();
        let alice = crate::Principal::anonymous();
        let held: Vec<_> = (0..MAX_WATCHING).map(|_| watchers.take(&alice)).collect();
        assert!(held.iter().all(Option::is_some));
        assert!(watchers.take(&alice).is_none());
        drop(held);
        assert!(watchers.take(&alice).is_some());
    }

    /// One round at a time, applied when it completes; a lapsed token stops the watch and
    /// gives the principal's place back.
    #[tokio::test]
    async fn a_round_is_in_flight_alone_and_a_lapsed_token_lets_go() {
        let watchers = Watchers::default();
        let alice = crate::Principal::anonymous();
        let mut w = Watched::new(watchers.take(&alice));
        assert!(w.may() && !w.due(), "nothing before the acknowledgement");
        let params = raw(json!({"notifications": {"taskIds": ["h"]}}));
        w.watch = TaskWatch::asked(Some(&params)).unwrap();
        w.watch
            .agree("h", &raw(json!({"taskId": "h", "status": "working"})));
        w.acked = true;
        assert!(w.due());
        let done = raw(json!({"taskId": "h", "status": "completed"}));
        let polled = vec![("h".to_owned(), Polled::Task(done))];
        w.start(Some(Box::pin(std::future::ready(polled))));
        assert!(!w.due(), "one round in flight at most");
        let polled = w.round.done().await;
        assert!(w.due(), "none in flight any more");
        let listen = RequestId::from_string("L");
        assert!(w.observed(polled, true, &listen).is_empty(), "lapsed");
        assert!(w.watch.is_empty() && !w.due());
        let held: Vec<_> = (0..MAX_WATCHING).map(|_| watchers.take(&alice)).collect();
        assert!(held.iter().all(Option::is_some), "its place was given back");
    }

    /// A status names the task by its handle only: no other id of the backend's under a
    /// spelling a loose parser reads as `taskId`.
    #[test]
    fn a_status_names_its_handle_only() {
        let got = raw(json!({"taskId": "t1", "TaskId": "t2", "taskId\u{0}": "t2",
            "ResultType": "task", "_META": {}, "status": "working", "Task": {"taskId": "t2"},
            "result": {"content": [], "_meta": {super::super::META_RELATED_TASK: {"taskId": "t2"}}}}));
        let v = detailed(&got, "h");
        assert_eq!(
            v,
            json!({"taskId": "h", "status": "working", "result": {"content": [], "_meta": {}}})
        );
    }

    #[test]
    fn the_acknowledgement_names_the_watched_handles() {
        let params = raw(json!({"notifications": {"taskIds": ["h", "x"]}}));
        let mut w = TaskWatch::asked(Some(&params)).unwrap();
        w.agree("h", &raw(json!({"taskId": "h", "status": "working"})));
        let ack = br#"{"jsonrpc":"2.0","method":"notifications/subscriptions/acknowledged","params":{"_meta":{"io.modelcontextprotocol/subscriptionId":"L"},"notifications":{"toolsListChanged":true}}}"#;
        let out = w.acknowledged(ack).unwrap();
        let v: Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(
            v["params"]["notifications"],
            json!({"toolsListChanged": true, "taskIds": ["h"]})
        );
        // A backend's own ids in an acknowledgement never reach the client.
        let theirs = br#"{"jsonrpc":"2.0","method":"notifications/subscriptions/acknowledged","params":{"notifications":{"TaskIds":["raw-1"],"taskIds":["raw-2"]}}}"#;
        let v: Value = serde_json::from_slice(&w.acknowledged(theirs).unwrap()).unwrap();
        assert_eq!(
            v["params"]["notifications"],
            json!({"taskIds": ["h"]}),
            "{v}"
        );
        let other = br#"{"jsonrpc":"2.0","method":"notifications/tools/list_changed"}"#;
        assert!(w.acknowledged(other).is_none());
    }
}

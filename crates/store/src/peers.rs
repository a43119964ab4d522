//! Delivery across replicas on one Redis: a message the core attributed to a session whose
//! listen stream this replica does not hold is published on `PREFIX:deliver` as
//! `SESSION_ID \n BYTES` (and a DELETE as `SESSION_ID` alone); every replica subscribes and hands what it receives to its core,
//! which puts it on that session's stream if the stream is attached there, else drops it.
//! Publishing is queued (bounded) to one task; a full queue drops, like any
//! server-to-client notification the client is not reading fast enough for.

use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures::StreamExt;
use tokio::sync::mpsc;

use switchboard_core::PeerDelivery;

use crate::RedisStore;

/// Messages waiting to be published, at most, and their bytes (a task message may be a
/// whole backend line).
const QUEUE: usize = 4096;
const QUEUE_BYTES: usize = 32 * 1024 * 1024;
/// How long the subscriber waits before subscribing again after Redis went away.
const RESUBSCRIBE: Duration = Duration::from_millis(500);
/// Connecting and subscribing, at most.
const SUBSCRIBE_TIMEOUT: Duration = Duration::from_secs(2);

fn timed_out() -> redis::RedisError {
    redis::RedisError::from(std::io::Error::new(
        std::io::ErrorKind::TimedOut,
        "no answer from Redis",
    ))
}

/// The core's side: queues messages for the publisher.
#[derive(Debug)]
pub struct RedisPeers {
    tx: mpsc::Sender<(String, Option<Bytes>)>,
    queued: Arc<AtomicUsize>,
    /// This replica's name on the channel (random): its own broadcasts come back to it and
    /// are ignored.
    origin: String,
}

/// What another replica published.
#[derive(Debug)]
pub enum Inbound<'a> {
    /// A message for `session`'s stream.
    Message(&'a str, Bytes),
    /// `session` was ended (DELETE).
    Ended(&'a str),
    /// A backend there changed a list (the notification's method, unchecked).
    ListChanged(&'a str),
}

impl PeerDelivery for RedisPeers {
    fn forward(&self, session: &str, data: Bytes) {
        let len = data.len();
        if self
            .queued
            .fetch_add(len, Ordering::AcqRel)
            .saturating_add(len)
            > QUEUE_BYTES
        {
            self.queued.fetch_sub(len, Ordering::AcqRel);
            tracing::debug!("cross-replica delivery queue full (bytes): message dropped");
            return;
        }
        if self.tx.try_send((session.to_owned(), Some(data))).is_err() {
            self.queued.fetch_sub(len, Ordering::AcqRel);
            tracing::debug!("cross-replica delivery queue full: message dropped");
        }
    }

    fn ended(&self, session: &str) {
        if self.tx.try_send((session.to_owned(), None)).is_err() {
            tracing::debug!("cross-replica delivery queue full: end not announced");
        }
    }

    fn list_changed(&self, name: &'static str) {
        let item = (
            format!("*{}", self.origin),
            Some(Bytes::from_static(name.as_bytes())),
        );
        // Counted like any queued body: the publisher gives back what it takes.
        self.queued.fetch_add(name.len(), Ordering::AcqRel);
        if self.tx.try_send(item).is_err() {
            self.queued.fetch_sub(name.len(), Ordering::AcqRel);
            tracing::debug!("cross-replica delivery queue full: list change not announced");
        }
    }
}

impl RedisStore {
    fn channel(&self) -> String {
        format!("{}:deliver", self.prefix)
    }

    /// Delivery across replicas: the core's [`PeerDelivery`], and the task that publishes
    /// what it queues and hands what other replicas publish to `deliver` (session id,
    /// message), until `stop` resolves.
    pub fn peers<D, S>(&self, deliver: D, stop: S) -> (RedisPeers, impl Future<Output = ()> + Send)
    where
        D: Fn(Inbound<'_>) + Send + Sync + 'static,
        S: Future<Output = ()> + Send + 'static,
    {
        let (tx, rx) = mpsc::channel(QUEUE);
        let queued = Arc::new(AtomicUsize::new(0));
        let store = self.clone();
        let counted = queued.clone();
        let origin = {
            // Unique per process: a replica must tell its own broadcasts from others'.
            let mut raw = [0u8; 12];
            let _ = getrandom::fill(&mut raw);
            raw.iter().map(|b| format!("{b:02x}")).collect::<String>()
        };
        let mine = origin.clone();
        let task = async move {
            tokio::select! {
                () = stop => {}
                () = store.publish_all(rx, counted) => {}
                () = store.subscribe_forever(deliver, mine) => {}
            }
        };
        (RedisPeers { tx, queued, origin }, task)
    }

    async fn publish_all(
        &self,
        mut rx: mpsc::Receiver<(String, Option<Bytes>)>,
        queued: Arc<AtomicUsize>,
    ) {
        let channel = self.channel();
        while let Some((session, data)) = rx.recv().await {
            let mut payload = Vec::with_capacity(session.len() + 1);
            payload.extend_from_slice(session.as_bytes());
            if let Some(data) = data {
                queued.fetch_sub(data.len(), Ordering::AcqRel);
                payload.push(b'\n');
                payload.extend_from_slice(&data);
            }
            let payload = match &self.integrity {
                Some(integrity) => integrity.seal_message(&payload),
                None => payload,
            };
            let mut c = self.connection.clone();
            let channel = channel.clone();
            let sent = crate::bounded("publish", async move {
                redis::cmd("PUBLISH")
                    .arg(&channel)
                    .arg(payload)
                    .query_async::<i64>(&mut c)
                    .await
            });
            if let Err(e) = sent.await {
                tracing::debug!(error = %e, "cross-replica message not published");
            }
        }
    }

    async fn subscribe_forever<D: Fn(Inbound<'_>)>(&self, deliver: D, mine: String) {
        loop {
            // Bounded: a Redis that accepts but never answers must not leave delivery dead
            // without a word.
            let connect = tokio::time::timeout(SUBSCRIBE_TIMEOUT, self.client.get_async_pubsub());
            match connect.await.unwrap_or_else(|_| Err(timed_out())) {
                Ok(mut pubsub) => {
                    let subscribe =
                        tokio::time::timeout(SUBSCRIBE_TIMEOUT, pubsub.subscribe(self.channel()));
                    if matches!(subscribe.await, Ok(Ok(()))) {
                        let mut messages = pubsub.on_message();
                        while let Some(msg) = messages.next().await {
                            let payload = msg.get_payload_bytes();
                            let opened = match &self.integrity {
                                Some(integrity) => integrity.open_message(payload),
                                None => Some(payload),
                            };
                            match opened {
                                Some(payload) => hand_over(payload, &mine, &deliver),
                                None => tracing::debug!(
                                    "a cross-replica message failed its integrity check: dropped"
                                ),
                            }
                        }
                    }
                    tracing::warn!(store = %self.shown, "cross-replica subscription lost; subscribing again");
                }
                Err(e) => {
                    tracing::debug!(error = e.category(), "cross-replica subscription failed")
                }
            }
            tokio::time::sleep(RESUBSCRIBE).await;
        }
    }
}

/// `SESSION_ID \n BYTES` (a message), `SESSION_ID` (ended) or `*ORIGIN \n METHOD` (a list
/// change, ignored when `ORIGIN` is this replica) to `deliver`; anything else is ignored.
fn hand_over(payload: &[u8], mine: &str, deliver: &impl Fn(Inbound<'_>)) {
    let (head, body) = match payload.iter().position(|b| *b == b'\n') {
        Some(split) => (&payload[..split], Some(&payload[split + 1..])),
        None => (payload, None),
    };
    let Ok(head) = std::str::from_utf8(head) else {
        return;
    };
    match (head.strip_prefix('*'), body) {
        (Some(origin), Some(name)) if origin != mine => {
            if let Ok(name) = std::str::from_utf8(name) {
                deliver(Inbound::ListChanged(name));
            }
        }
        (Some(_), _) => {}
        (None, Some(data)) => deliver(Inbound::Message(head, Bytes::copy_from_slice(data))),
        (None, None) => deliver(Inbound::Ended(head)),
    }
}

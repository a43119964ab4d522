//! `--fanout N`: how long a backend's `notifications/tools/list_changed` takes to reach N
//! Legacy listen streams (GET /mcp) through the gateway.
//!
//! Method: open N sessions and one listen stream each; once every stream has answered 200
//! (the gateway registers a stream before it answers), call the fixture's
//! `trigger {kind: "tools_list_changed"}` on one session and time, per stream, from just before
//! that POST until the notification arrives. One task per stream is inherent to the
//! measurement (each holds an open response); N is the bound.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use serde_json::{json, Value};
use tokio::sync::mpsc;
use tokio::task::JoinSet;

use super::hist::Histogram;
use super::http::HttpTarget;
use super::payload::{Era, Template, Verdict};

/// What one stream saw: when the notification arrived, or why it did not.
type Seen = Result<Instant, String>;

const NEEDLE: &[u8] = b"notifications/tools/list_changed";

pub(crate) async fn run(target: Arc<HttpTarget>, timeout: Duration) -> anyhow::Result<Value> {
    let n = target.session_count();
    let (opened_tx, mut opened_rx) = mpsc::channel::<Result<(), String>>(n.max(1));
    let mut streams = JoinSet::new();
    let open_started = Instant::now();
    for i in 0..n {
        let (target, opened) = (target.clone(), opened_tx.clone());
        streams.spawn(async move {
            let seen = tokio::time::timeout(timeout, watch(&target, i, &opened)).await;
            seen.unwrap_or_else(|_| Err("timeout".into()))
        });
    }
    drop(opened_tx);
    let mut open_errors: BTreeMap<String, u64> = BTreeMap::new();
    for _ in 0..n {
        match tokio::time::timeout(timeout, opened_rx.recv()).await {
            Ok(Some(Ok(()))) => {}
            Ok(Some(Err(kind))) => *open_errors.entry(kind).or_default() += 1,
            Ok(None) | Err(_) => {
                *open_errors.entry("open_timeout".into()).or_default() += 1;
                break;
            }
        }
    }
    let open_secs = open_started.elapsed().as_secs_f64();
    if open_errors.values().sum::<u64>() == n as u64 {
        bail!("no listen stream opened: {open_errors:?}");
    }

    let trigger = Template::new(
        Era::Legacy,
        "trigger",
        Some(r#"{"kind":"tools_list_changed"}"#),
        false,
    )?;
    let sent = Instant::now();
    let answer = target.call(0, 0, trigger.body(1)).await;
    let trigger_us = sent.elapsed().as_secs_f64() * 1e6;
    match answer.map(|a| trigger.verify(1, &a)) {
        Ok(Verdict::Ok) => {}
        Ok(other) => bail!("the trigger call failed: {other:?}"),
        Err(kind) => bail!("the trigger call failed: {kind}"),
    }

    let mut delivery = Histogram::default();
    let mut errors = open_errors;
    while let Some(joined) = streams.join_next().await {
        match joined.context("a stream task panicked")? {
            Ok(at) => delivery.record(
                u64::try_from(at.saturating_duration_since(sent).as_nanos()).unwrap_or(u64::MAX),
            ),
            Err(kind) => *errors.entry(kind).or_default() += 1,
        }
    }
    let us = |ns: u64| (ns as f64 / 100.0).round() / 10.0;
    Ok(json!({
        "fanout": n,
        "open_secs": (open_secs * 1000.0).round() / 1000.0,
        "trigger_us": trigger_us.round(),
        "delivered": delivery.count(),
        "errors": errors.values().sum::<u64>(),
        "errors_by_kind": errors,
        "p50_us": us(delivery.quantile(0.5)),
        "p90_us": us(delivery.quantile(0.9)),
        "p99_us": us(delivery.quantile(0.99)),
        "max_us": us(delivery.max()),
    }))
}

/// Opens stream `i`, reports that it is open, then reads until the notification arrives.
async fn watch(target: &HttpTarget, i: usize, opened: &mpsc::Sender<Result<(), String>>) -> Seen {
    let Some(req) = target.listen(i) else {
        let _ = opened.send(Err("no_session".into())).await;
        return Err("no_session".into());
    };
    let mut resp = match req.send().await {
        Ok(r) if r.status().is_success() => r,
        Ok(r) => {
            let kind = format!("listen_http_{}", r.status().as_u16());
            let _ = opened.send(Err(kind.clone())).await;
            return Err(kind);
        }
        Err(_) => {
            let _ = opened.send(Err("listen_transport".into())).await;
            return Err("listen_transport".into());
        }
    };
    let _ = opened.send(Ok(())).await;
    // A chunk boundary may split the method name: keep the tail of the previous chunk.
    let mut window: Vec<u8> = Vec::with_capacity(256);
    loop {
        match resp.chunk().await {
            Ok(Some(chunk)) => {
                window.extend_from_slice(&chunk);
                if window.windows(NEEDLE.len()).any(|w| w == NEEDLE) {
                    return Ok(Instant::now());
                }
                let keep = window.len().saturating_sub(NEEDLE.len());
                window.drain(..keep);
            }
            Ok(None) => return Err("stream_ended".into()),
            Err(_) => return Err("stream_transport".into()),
        }
    }
}

use std::time::Duration;

use std::sync::atomic::AtomicUsize;

use bytes::Bytes;
use switchboard_wire::Message;

use super::*;
use crate::stdio::{spawn, StdioConfig, StdioProcess};
use crate::{InboundSink, Upstream};

/// Drops everything (`cat` echoes requests back; they are not answers), counting the ends
/// its processes report.
#[derive(Debug, Default)]
struct Ignore {
    ended: AtomicUsize,
}

impl InboundSink for Ignore {
    fn deliver(&self, _line: &Bytes, _msg: &Message<'_>, _backend: &Upstream) {}

    fn closed(&self, _reason: &str) {
        self.ended.fetch_add(1, Ordering::AcqRel);
    }
}

/// `n` replicas of `cat` (they never answer: every call stays in flight), their handles, and
/// the sink they all report to.
fn cats(n: usize) -> (Replicated, Vec<StdioProcess>, Vec<StdioHandle>, Arc<Ignore>) {
    let sink = Arc::new(Ignore::default());
    let mut handles = Vec::new();
    let mut processes = Vec::new();
    for _ in 0..n {
        let (h, p) = spawn(&StdioConfig::new("cat", vec![]), sink.clone()).unwrap();
        handles.push(h);
        processes.push(p);
    }
    (
        Replicated::new(handles.clone()).unwrap(),
        processes,
        handles,
        sink,
    )
}

/// Waits (bounded) until the processes' readers have reported `n` ends.
async fn until_ended(sink: &Ignore, n: usize) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while sink.ended.load(Ordering::Acquire) < n {
        assert!(tokio::time::Instant::now() < deadline, "no end reported");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

fn line(key: &str) -> Vec<u8> {
    format!(r#"{{"jsonrpc":"2.0","id":"{key}","method":"tools/call"}}"#).into_bytes()
}

/// The least busy replica takes each call: with one call held on replica 0, the next goes to
/// replica 1, the third to 0 again; an answered or dropped call no longer counts.
#[tokio::test]
async fn each_call_goes_to_the_replica_with_fewest_in_flight() {
    let (set, _procs, _handles, _sink) = cats(2);
    let first = set.least_busy();
    assert_eq!(first.pinned(), Some(0));
    let a = first.call("a", line("a")).await.unwrap();
    assert_eq!(set.loads(), vec![1, 0]);
    let second = set.least_busy();
    assert_eq!(second.pinned(), Some(1));
    let b = second.call("b", line("b")).await.unwrap();
    assert_eq!(set.loads(), vec![1, 1]);
    let c = set.call("c", line("c")).await.unwrap();
    assert_eq!(set.loads(), vec![2, 1]);
    drop(a);
    drop(c);
    assert_eq!(set.loads(), vec![0, 1]);
    assert_eq!(set.least_busy().pinned(), Some(0));
    drop(b);
    assert_eq!(set.loads(), vec![0, 0]);
}

/// A cancellation goes to the replica whose pending table holds the key, and nowhere when
/// none does.
#[tokio::test]
async fn a_key_is_found_at_the_replica_that_holds_its_call() {
    let (set, _procs, _handles, _sink) = cats(3);
    let _a = set.least_busy().call("a", line("a")).await.unwrap();
    let _b = set.least_busy().call("b", line("b")).await.unwrap();
    assert_eq!(set.for_key("a").and_then(|r| r.pinned()), Some(0));
    assert_eq!(set.for_key("b").and_then(|r| r.pinned()), Some(1));
    assert!(set.for_key("never-sent").is_none());
}

/// Subscribe and unsubscribe of one URI reach the same replica, and URIs spread.
#[tokio::test]
async fn a_uri_always_maps_to_one_replica() {
    let (set, _procs, _handles, _sink) = cats(4);
    let seen: std::collections::HashSet<_> = (0..64)
        .map(|i| {
            let uri = format!("fixture://r/{i}");
            let at = set.for_uri(&uri).pinned();
            assert_eq!(at, set.clone().for_uri(&uri).pinned());
            at
        })
        .collect();
    assert!(seen.len() > 1, "64 URIs all on one replica");
    let subscribe = Upstream::Replicated(set.clone());
    let params = serde_json::value::RawValue::from_string(r#"{"uri":"fixture://r/7"}"#.into());
    let params = params.unwrap();
    let sub = subscribe.for_request(switchboard_wire::method::SUBSCRIBE, Some(&params));
    let unsub = subscribe.for_request(switchboard_wire::method::UNSUBSCRIBE, Some(&params));
    let want = Some(set.uri_index("fixture://r/7"));
    assert_eq!(sub.as_replicated().and_then(Replicated::pinned), want);
    assert_eq!(unsub.as_replicated().and_then(Replicated::pinned), want);
}

/// A replica whose process ended is not chosen while another runs; once its handle reaches a
/// new process (a restart), it is.
#[tokio::test]
async fn a_replica_that_is_down_is_passed_over_until_restarted() {
    let (set, procs, handles, sink) = cats(2);
    let mut procs = procs.into_iter();
    let first = procs.next().unwrap();
    first.shutdown(Duration::from_secs(5)).await;
    until_ended(&sink, 1).await;
    assert!(handles[0].is_closed());
    for _ in 0..3 {
        assert_eq!(set.least_busy().pinned(), Some(1));
    }
    let _held = set.call("x", line("x")).await.unwrap();
    assert_eq!(set.loads(), vec![0, 1]);
    // Even busier, the running replica is chosen over the one that is down.
    assert_eq!(set.least_busy().pinned(), Some(1));
    let (standby, _next) = spawn(&StdioConfig::new("cat", vec![]), sink.clone()).unwrap();
    handles[0].adopt(&standby);
    assert_eq!(set.least_busy().pinned(), Some(0));
}

/// The end of a process a restart replaced, reported after the new one was installed (a
/// grandchild held its stdout), leaves the new one chosen. Before, the replica's one running
/// flag was shared by every process of the slot, so the late report marked the new process
/// down for good.
#[tokio::test]
async fn a_late_end_of_a_replaced_process_leaves_its_successor_chosen() {
    let (set, procs, handles, sink) = cats(2);
    // Replica 1 runs throughout (dropping its process would end it too).
    let mut procs = procs.into_iter();
    let old = procs.next().unwrap();
    let (standby, _next) = spawn(&StdioConfig::new("cat", vec![]), sink.clone()).unwrap();
    handles[0].adopt(&standby);
    old.shutdown(Duration::from_secs(5)).await;
    until_ended(&sink, 1).await;
    assert!(!handles[0].is_closed() && !handles[1].is_closed());
    assert_eq!(set.least_busy().pinned(), Some(0));
}

/// At most 64 replicas, at least one.
#[test]
fn the_set_size_is_bounded() {
    assert!(Replicated::new(Vec::new()).is_err());
}

//! The partition table's bounds.

use std::time::Duration;

use super::{reserve_of, share_of, Key, Partitions};
use crate::CoreError;

fn key(principal: &str, backend: &str, caps: u8) -> Key {
    Key {
        principal: principal.to_owned(),
        backend: crate::BackendId::try_from(backend).expect("a backend name"),
        caps,
    }
}

/// One caller past its share (8 of 32: its listens on eight capability sets, say) still takes
/// free partitions, but never the last quarter of the table: those stay for callers within
/// their share. Before, only the whole table was bounded: one caller could fill it and every
/// other caller's Modern requests were refused (review).
#[test]
fn one_caller_cannot_take_the_whole_table() {
    let partitions = Partitions::new(32, Duration::from_secs(60));
    assert_eq!((share_of(32), reserve_of(32)), (8, 8));
    let mut held = Vec::new();
    for (who, backend) in [("bob", "a"), ("carol", "a")] {
        for caps in 0..8 {
            held.push(
                partitions
                    .cell(&key(who, backend, caps))
                    .expect("their share"),
            );
        }
    }
    for caps in 0..8 {
        held.push(
            partitions
                .cell(&key("alice", "a", caps))
                .expect("her share"),
        );
    }
    // 24 of 32 taken: alice, past her share, is refused the reserve.
    let refused = partitions.cell(&key("alice", "b", 0));
    assert!(
        matches!(refused, Err(CoreError::PartitionShare(8))),
        "{refused:?}"
    );
    // A key that is hers already is no new partition.
    assert!(partitions.cell(&key("alice", "a", 3)).is_ok());
    for caps in 0..8 {
        let dave = partitions.cell(&key("dave", "a", caps));
        assert!(
            dave.is_ok(),
            "the reserve is for callers within their share: {dave:?}"
        );
    }
    // Full now (dave's let go of, but idle ones are reaped only for a full table): one of
    // hers let go of (an abandoned start) is reaped for her, and within her share again she
    // gets a place; dave's idle ones are left alone.
    drop(held.pop());
    assert!(partitions.cell(&key("alice", "c", 0)).is_ok());
    assert_eq!(partitions.len(), 32);
}

/// Making room within a caller's share reaps only that caller's idle partitions: another
/// caller's, idle too, are left alone (the review found every caller's reaped for it).
#[test]
fn a_caller_past_its_share_reaps_only_its_own() {
    let partitions = Partitions::new(32, Duration::from_secs(60));
    // Bob's two, started and let go of (abandoned starts: idle, reapable).
    for caps in 0..2 {
        drop(partitions.cell(&key("bob", "a", caps)).expect("room"));
    }
    let mut held = Vec::new();
    for i in 0..16u8 {
        let backend = ["a", "b"][usize::from(i / 8)];
        held.push(
            partitions
                .cell(&key("alice", backend, i % 8))
                .expect("room"),
        );
    }
    // Alice holds half the table: refused, and bob's idle partitions are still there.
    let refused = partitions.cell(&key("alice", "c", 0));
    assert!(
        matches!(refused, Err(CoreError::PartitionShare(8))),
        "{refused:?}"
    );
    assert_eq!(
        partitions.len(),
        18,
        "bob's idle partitions were reaped for alice"
    );
}

/// A principal past its share stops at half the table, even with room above the reserve
/// (review: one could hold 96 of 128, and two more their shares, leaving nothing).
#[test]
fn a_principal_past_its_share_holds_at_most_half() {
    let partitions = Partitions::new(128, Duration::from_secs(60));
    let mut held = Vec::new();
    for i in 0..64u8 {
        let backend = format!("b{}", i / 8);
        let got = partitions.cell(&key("alice", &backend, i % 8));
        held.push(got.expect("room below half the table"));
    }
    let refused = partitions.cell(&key("alice", "b8", 0));
    assert!(
        matches!(refused, Err(CoreError::PartitionShare(16))),
        "{refused:?}"
    );
    assert!(partitions.cell(&key("bob", "b0", 0)).is_ok());
}

/// The share is an eighth of the table, at least the eight capability sets of one backend,
/// never more than the table; the reserve a quarter.
#[test]
fn a_share_is_an_eighth_and_at_least_one_backends_capability_sets() {
    assert_eq!(share_of(128), 16);
    assert_eq!(share_of(16), 8);
    assert_eq!(share_of(4), 4);
    assert_eq!(share_of(0), 1);
    assert_eq!(reserve_of(128), 32);
}

/// A started partition for `key` in `partitions` (its process `sh`, reading and dropping
/// what it is sent), last used `ago`.
fn started(partitions: &Partitions, key: &Key, ago: Duration) {
    use std::collections::HashMap;
    use std::sync::atomic::{AtomicBool, AtomicUsize};
    use std::sync::Arc;

    use super::{CallSink, ModernListeners, Partition, Plain};
    let (cell, reaped) = partitions.cell(key).expect("room");
    assert!(reaped.is_empty());
    let log = Arc::new(parking_lot::Mutex::new(None));
    let sink = Arc::new(CallSink {
        asked: Arc::default(),
        registry: std::sync::Weak::new(),
        log: log.clone(),
        listeners: None,
        plain: None,
    });
    let config = switchboard_upstream::StdioConfig::new(
        "sh",
        vec!["-c".into(), "cat > /dev/null; exit".into()],
    );
    let (handle, process) = switchboard_upstream::spawn_stdio(&config, sink).expect("sh");
    let part = Partition {
        handle,
        process: parking_lot::Mutex::new(Some(process)),
        asked: Arc::default(),
        log,
        input: Arc::new(tokio::sync::Semaphore::new(1)),
        users: AtomicUsize::new(0),
        retired: AtomicBool::new(false),
        last_used: parking_lot::Mutex::new(std::time::Instant::now() - ago),
        listeners: Arc::new(ModernListeners::default()),
        subscribed: parking_lot::Mutex::new(HashMap::new()),
        plain: Plain::new(Duration::from_secs(60)),
    };
    cell.set(Arc::new(part)).expect("a new cell");
}

/// A full table makes room by stopping the one partition idle the longest: every idle one of
/// every principal was stopped, their backend state with them, whenever the table filled
/// (review LOW).
#[tokio::test]
async fn a_full_table_stops_only_the_partition_idle_the_longest() {
    let partitions = Partitions::new(8, Duration::from_secs(60));
    for i in 0..8u32 {
        let who = format!("p{i}");
        // p3 was used the longest ago.
        let ago = Duration::from_secs(if i == 3 { 50 } else { 10 + u64::from(i) });
        started(&partitions, &key(&who, "a", 0), ago);
    }
    let (_cell, reaped) = partitions.cell(&key("new", "a", 0)).expect("room made");
    assert_eq!(reaped.len(), 1, "one partition stopped");
    assert_eq!(partitions.len(), 8);
    let kept: Vec<String> = partitions
        .cells
        .lock()
        .keys()
        .map(|k| k.principal.clone())
        .collect();
    assert!(!kept.contains(&"p3".to_owned()), "{kept:?}");
    for process in reaped.into_iter().chain(partitions.drain()) {
        process.shutdown(Duration::from_secs(5)).await;
    }
}

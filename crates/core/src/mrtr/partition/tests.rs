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

/// One caller past its share (8 of 16: its listens on eight capability sets, say) still takes
/// free partitions, but never the last quarter of the table: those stay for callers within
/// their share. Before, only the whole table was bounded: one caller could fill it and every
/// other caller's Modern requests were refused (review).
#[test]
fn one_caller_cannot_take_the_whole_table() {
    let partitions = Partitions::new(16, Duration::from_secs(60));
    assert_eq!((share_of(16), reserve_of(16)), (8, 4));
    let mut held = Vec::new();
    for (backend, caps) in (0..12).map(|i| (["a", "b"][i / 8], (i % 8) as u8)) {
        let (cell, _) = (partitions.cell(&key("alice", backend, caps))).expect("free room");
        held.push(cell);
    }
    let refused = partitions.cell(&key("alice", "c", 0));
    assert!(
        matches!(refused, Err(CoreError::PartitionShare(8))),
        "{refused:?}"
    );
    // A key that is hers already is no new partition.
    assert!(partitions.cell(&key("alice", "a", 3)).is_ok());
    for caps in 0..4 {
        let bob = partitions.cell(&key("bob", "a", caps));
        assert!(
            bob.is_ok(),
            "the reserve is for callers within their share: {bob:?}"
        );
    }
    // Full now: one of hers let go of (an abandoned start) is reaped for her, but the free
    // place it leaves is in the reserve.
    drop(held.pop());
    let refused = partitions.cell(&key("alice", "c", 0));
    assert!(
        matches!(refused, Err(CoreError::PartitionShare(8))),
        "{refused:?}"
    );
    assert_eq!(partitions.len(), 15);
}

/// Making room within a caller's share reaps only that caller's idle partitions: another
/// caller's, idle too, are left alone (the review found every caller's reaped for it).
#[test]
fn a_caller_past_its_share_reaps_only_its_own() {
    let partitions = Partitions::new(16, Duration::from_secs(60));
    // Bob's two, started and let go of (abandoned starts: idle, reapable).
    for caps in 0..2 {
        drop(partitions.cell(&key("bob", "a", caps)).expect("room"));
    }
    let mut held = Vec::new();
    for caps in 0..8 {
        held.push(partitions.cell(&key("alice", "a", caps)).expect("room"));
    }
    for caps in 0..2 {
        held.push(partitions.cell(&key("alice", "b", caps)).expect("room"));
    }
    // 12 of 16 taken (bob's 2 idle ones among them): alice, past her share, is refused the
    // reserve, and bob's idle partitions are still there.
    let refused = partitions.cell(&key("alice", "b", 2));
    assert!(
        matches!(refused, Err(CoreError::PartitionShare(8))),
        "{refused:?}"
    );
    assert_eq!(
        partitions.len(),
        12,
        "bob's idle partitions were reaped for alice"
    );
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

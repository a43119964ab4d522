//! The partition table's bounds.

use std::time::Duration;

use super::{share_of, Key, Partitions};
use crate::CoreError;

fn key(principal: &str, backend: &str, caps: u8) -> Key {
    Key {
        principal: principal.to_owned(),
        backend: crate::BackendId::try_from(backend).expect("a backend name"),
        caps,
    }
}

/// One caller holding its share (here 8 of 16: its listens on eight capability sets, say)
/// is refused another partition, while the table still has room for everyone else; it gets
/// one again once one of its own is let go. Before, only the whole table was bounded: one
/// caller could fill it and every other caller's Modern requests were refused (review).
#[test]
fn one_caller_cannot_take_the_whole_table() {
    let partitions = Partitions::new(16, Duration::from_secs(60));
    assert_eq!(share_of(16), 8);
    let mut held = Vec::new();
    for caps in 0..8 {
        let (cell, _) = partitions
            .cell(&key("alice", "a", caps))
            .expect("in her share");
        held.push(cell);
    }
    let refused = partitions.cell(&key("alice", "b", 0));
    assert!(
        matches!(refused, Err(CoreError::PartitionShare(8))),
        "{refused:?}"
    );
    // The same key is hers already: no new partition.
    assert!(partitions.cell(&key("alice", "a", 3)).is_ok());
    let bob = partitions.cell(&key("bob", "a", 0));
    assert!(bob.is_ok(), "another caller still gets one: {bob:?}");
    // A partition she let go of (an abandoned start: nothing holds it) makes room.
    drop(held.pop());
    assert!(partitions.cell(&key("alice", "b", 0)).is_ok());
}

/// The share is an eighth of the table, at least the eight capability sets of one backend,
/// never more than the table.
#[test]
fn a_share_is_an_eighth_and_at_least_one_backends_capability_sets() {
    assert_eq!(share_of(128), 16);
    assert_eq!(share_of(16), 8);
    assert_eq!(share_of(4), 4);
    assert_eq!(share_of(0), 1);
}

//! The open connections: their bound, and which one to close when a new one needs the room.
//!
//! At the bound the oldest *idle* connection (no request being handled or streamed, which
//! includes one still trickling its request headers) is closed to make room, so a client with
//! work to do always gets in while an attacker's idle or slow-header connections are shed
//! first. Only when every connection is busy is the newcomer refused (503). An evicted
//! connection takes a moment to close, so a small slack above the bound lets the newcomer in
//! meanwhile; the fd headroom the default bound keeps covers it. When a burst outruns even the
//! slack (the evicted connections' tasks have not run yet), the newcomer is told to wait for
//! one of them to close ([`Admission::Wait`]) rather than being refused while room is on its
//! way.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

use std::task::Waker;

use futures::task::AtomicWaker;
use parking_lot::Mutex;
use tokio::sync::Notify;

/// Connections allowed above the bound while evicted ones are closing.
pub const EVICTION_SLACK: usize = 64;

/// What one connection's task, its reads and its requests share.
#[derive(Debug, Default)]
pub(crate) struct Activity {
    /// Requests dispatched on this connection whose response body has not finished.
    busy: AtomicUsize,
    /// Set once the connection was asked to close (eviction); never cleared.
    closing: AtomicBool,
    close: Notify,
    /// The connection's reader, parked while a request was in progress: woken when the last
    /// one ends, so the idle deadline starts even if hyper read before dropping the body.
    reader: AtomicWaker,
}

impl Activity {
    /// Marks a request as begun; it ends when the returned guard is dropped.
    pub(crate) fn begin(self: &Arc<Self>) -> Busy {
        // Relaxed: the connection's reads, requests and bodies are all polled by its one task;
        // the accept loop only reads this as a hint for eviction (a request that began just
        // after still completes, see `evict`).
        self.busy.fetch_add(1, Ordering::Relaxed);
        Busy(self.clone())
    }

    pub(crate) fn is_busy(&self) -> bool {
        self.busy.load(Ordering::Relaxed) > 0
    }

    /// Wakes `waker` when no request is in progress any more.
    pub(crate) fn wake_when_idle(&self, waker: &Waker) {
        self.reader.register(waker);
    }

    /// Asks an idle connection to close. A connection that turned busy meanwhile is closed
    /// gracefully by its task (its request completes first).
    fn evict(&self) -> bool {
        if self.is_busy() || self.closing.swap(true, Ordering::Relaxed) {
            return false;
        }
        self.close.notify_one();
        true
    }

    /// Resolves once the connection was evicted.
    pub(crate) async fn evicted(&self) {
        self.close.notified().await;
    }
}

/// One request in progress on a connection.
#[derive(Debug)]
pub(crate) struct Busy(Arc<Activity>);

impl Drop for Busy {
    fn drop(&mut self) {
        if self.0.busy.fetch_sub(1, Ordering::Relaxed) == 1 {
            self.0.reader.wake();
        }
    }
}

/// The table of open connections, oldest first.
#[derive(Debug)]
pub(crate) struct Connections {
    max: usize,
    open: Mutex<Table>,
    /// Signalled whenever a connection leaves the table.
    left: Notify,
}

#[derive(Debug, Default)]
struct Table {
    next: u64,
    by_age: BTreeMap<u64, Arc<Activity>>,
    /// Connections asked to close that have not left yet.
    closing: usize,
}

impl Table {
    /// Asks the oldest idle connection to close; false if every one is busy or closing.
    fn evict_oldest_idle(&mut self) -> bool {
        let evicted = self.by_age.values().any(|a| a.evict());
        self.closing += usize::from(evicted);
        evicted
    }
}

/// Whether a new connection may be served.
#[derive(Debug)]
pub(crate) enum Admission {
    /// Served; `evicted` tells that the bound was reached and an idle connection made room.
    Admitted { slot: Slot, evicted: bool },
    /// No room now, but evicted connections are closing: wait for [`Connections::left`] and
    /// ask again.
    Wait,
    /// Every connection is busy: answer 503 and close.
    Refused,
}

impl Connections {
    pub(crate) fn new(max: usize) -> Arc<Self> {
        Arc::new(Connections {
            max: max.max(1),
            open: Mutex::new(Table::default()),
            left: Notify::new(),
        })
    }

    /// Admits a new connection, evicting the oldest idle one when at the bound.
    pub(crate) fn admit(self: &Arc<Self>) -> Admission {
        let mut table = self.open.lock();
        let open = table.by_age.len();
        let mut evicted = false;
        if open >= self.max {
            let past_slack = open >= self.max + EVICTION_SLACK;
            evicted = !past_slack && table.evict_oldest_idle();
            if !evicted {
                // Only past the slack: with room in the slack and nothing idle, every
                // connection is busy and the newcomer is refused at once.
                return if past_slack && table.closing > 0 {
                    Admission::Wait
                } else {
                    Admission::Refused
                };
            }
        }
        let id = table.next;
        table.next += 1;
        let activity = Arc::new(Activity::default());
        table.by_age.insert(id, activity.clone());
        Admission::Admitted {
            slot: Slot {
                table: self.clone(),
                id,
                activity,
                lingering: false,
            },
            evicted,
        }
    }

    /// Closes the oldest idle connection, if any (the process ran out of file descriptors).
    pub(crate) fn evict_one(&self) -> bool {
        self.open.lock().evict_oldest_idle()
    }

    /// Signalled (every waiter) whenever a connection leaves the table: enable a
    /// `notified()` before [`Connections::admit`] answers [`Admission::Wait`].
    pub(crate) fn left(&self) -> &Notify {
        &self.left
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.open.lock().by_age.len()
    }
}

/// A connection's place in the table; leaves it when dropped.
#[derive(Debug)]
pub(crate) struct Slot {
    table: Arc<Connections>,
    id: u64,
    activity: Arc<Activity>,
    /// Evicted, but closing only after its request: no longer counted as closing soon.
    lingering: bool,
}

impl Slot {
    pub(crate) fn activity(&self) -> &Arc<Activity> {
        &self.activity
    }

    /// The connection was evicted but turned busy first, so it closes only once its request
    /// is done (maybe a long stream): newcomers must not wait for it.
    pub(crate) fn linger(&mut self) {
        if self.lingering || !self.activity.closing.load(Ordering::Relaxed) {
            return;
        }
        self.lingering = true;
        let mut table = self.table.open.lock();
        table.closing = table.closing.saturating_sub(1);
        drop(table);
        // Whoever waits for this one learns at once that it will not close soon.
        self.table.left.notify_waiters();
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut table = self.table.open.lock();
        table.by_age.remove(&self.id);
        if self.activity.closing.load(Ordering::Relaxed) && !self.lingering {
            table.closing = table.closing.saturating_sub(1);
        }
        drop(table);
        self.table.left.notify_waiters();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn admitted(a: Admission) -> (Slot, bool) {
        match a {
            Admission::Admitted { slot, evicted } => (slot, evicted),
            Admission::Wait | Admission::Refused => panic!("not admitted"),
        }
    }

    /// At the bound the oldest idle connection is asked to close; busy ones never are, and
    /// when all are busy the newcomer is refused.
    #[tokio::test]
    async fn the_oldest_idle_connection_makes_room() {
        let table = Connections::new(2);
        let (oldest, _) = admitted(table.admit());
        let (second, _) = admitted(table.admit());
        let _working = oldest.activity().begin();
        let (third, evicted) = admitted(table.admit());
        assert!(evicted);
        // The busy oldest one was skipped; the second was told to close.
        second.activity().evicted().await;
        assert!(!oldest.activity().closing.load(Ordering::Relaxed));
        drop(second);
        let _also = third.activity().begin();
        assert!(matches!(table.admit(), Admission::Refused));
        assert_eq!(table.len(), 2);
    }

    /// Past the slack, while evicted connections are still closing, a newcomer waits for one
    /// of them to leave instead of being refused; once one has left it is admitted.
    #[tokio::test]
    async fn a_burst_past_the_slack_waits_for_the_evicted_to_close() {
        let table = Connections::new(1);
        let slots: Vec<_> = (0..=EVICTION_SLACK)
            .map(|_| admitted(table.admit()).0)
            .collect();
        assert_eq!(table.len(), 1 + EVICTION_SLACK);
        assert!(matches!(table.admit(), Admission::Wait));
        let mut slots = slots.into_iter();
        let first = slots.next().unwrap();
        assert!(first.activity().closing.load(Ordering::Relaxed));
        let room = table.left().notified();
        let mut room = std::pin::pin!(room);
        room.as_mut().enable();
        drop(first);
        room.await;
        let (_newcomer, evicted) = admitted(table.admit());
        assert!(evicted);
        assert_eq!(table.len(), 1 + EVICTION_SLACK);
    }

    /// An evicted connection that turned busy first closes only after its request (perhaps a
    /// long stream): once it says so, newcomers are not told to wait for it.
    #[test]
    fn a_lingering_eviction_is_not_waited_for() {
        let table = Connections::new(1);
        let mut slots: Vec<_> = (0..=EVICTION_SLACK)
            .map(|_| admitted(table.admit()).0)
            .collect();
        assert!(matches!(table.admit(), Admission::Wait));
        for slot in &mut slots {
            slot.linger();
        }
        assert!(matches!(table.admit(), Admission::Refused));
        // Leaving the table still makes room.
        slots.clear();
        assert!(matches!(table.admit(), Admission::Admitted { .. }));
    }
}

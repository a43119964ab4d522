//! The queue between the gateway and one client stream, bounded twice: by events and by bytes.
//!
//! Counting events alone does not bound memory: one backend line may be as long as the stdout
//! framer allows (16 MiB by default), so 64 queued events could pin a gigabyte for one client
//! that stopped reading. Every server→client queue (listen streams, HTTP+SSE streams, request
//! streams) is therefore also bounded by the bytes it holds.
//!
//! One event larger than the whole byte budget is still accepted when nothing is queued, so a
//! client that reads can receive any message the backend may legitimately send; a client that
//! stopped reading then holds that one event and nothing more.
//!
//! The queue only refuses. What a refusal means is the owner's policy: listen and HTTP+SSE
//! streams evict their consumer, request streams drop the message.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use bytes::Bytes;
use tokio::sync::mpsc;
use tokio::sync::mpsc::error::{TryRecvError, TrySendError};

/// What an event costs against a byte budget.
pub trait Weigh {
    /// Bytes this event keeps alive while queued. Must not change while it is queued.
    fn weight(&self) -> usize;

    /// Bytes of it that are a request's answer (queued by [`QueueTx::try_send_answer`],
    /// whatever its [`weight`](Weigh::weight)), counted apart: see
    /// [`QueueTx::queued_answer_bytes`]. Must not change while it is queued.
    fn answer_bytes(&self) -> usize {
        0
    }
}

impl Weigh for Bytes {
    fn weight(&self) -> usize {
        self.len()
    }
}

/// The two bounds of one queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Most events queued at once.
    pub events: usize,
    /// Most bytes queued at once (one oversize event is allowed into an empty queue).
    pub bytes: usize,
}

/// Why an event was not queued.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rejected {
    /// Over the event or the byte bound: the consumer is not keeping up.
    Full,
    /// The consumer is gone.
    Closed,
}

/// The producing side. Never waits.
#[derive(Debug)]
pub struct QueueTx<T> {
    tx: mpsc::Sender<T>,
    /// Bytes accepted by `try_send` and not yet taken by the receiver.
    queued: Arc<AtomicUsize>,
    /// Answer bytes accepted and not yet taken ([`Weigh::answer_bytes`]).
    answers: Arc<AtomicUsize>,
    max_bytes: usize,
}

/// The consuming side.
#[derive(Debug)]
pub struct QueueRx<T> {
    rx: mpsc::Receiver<T>,
    queued: Arc<AtomicUsize>,
    answers: Arc<AtomicUsize>,
}

/// A new queue with these bounds.
pub fn bounded<T: Weigh>(limits: Limits) -> (QueueTx<T>, QueueRx<T>) {
    let (tx, rx) = mpsc::channel(limits.events.max(1));
    let queued = Arc::new(AtomicUsize::new(0));
    let answers = Arc::new(AtomicUsize::new(0));
    let tx = QueueTx {
        tx,
        queued: queued.clone(),
        answers: answers.clone(),
        max_bytes: limits.bytes,
    };
    (
        tx,
        QueueRx {
            rx,
            queued,
            answers,
        },
    )
}

impl<T: Weigh> QueueTx<T> {
    /// Queues `item` if it fits both bounds, or if it is alone (see the module docs).
    pub fn try_send(&self, item: T) -> Result<(), Rejected> {
        let max = self.max_bytes;
        self.send_if(item, 0, |queued, w| {
            queued == 0 || queued.saturating_add(w) <= max
        })
    }

    /// Queues `item` if it fits the event bound, whatever the bytes. For answers to requests
    /// the client made (which weigh nothing, see `ListenEvent`): their number is bounded by
    /// the client's own requests in flight, and refusing one would lose a request's only
    /// answer.
    pub fn try_send_answer(&self, item: T) -> Result<(), Rejected> {
        self.send_if(item, 0, |_, _| true)
    }

    /// Answer bytes queued and not yet taken by the consumer: what a client that does not
    /// read has left the gateway holding for it, which its owner bounds by refusing it more
    /// requests (answers themselves are never refused).
    pub fn queued_answer_bytes(&self) -> usize {
        self.answers.load(Ordering::Acquire)
    }

    /// Queues `item` only if it leaves `events` slots and `bytes` of the byte budget free for
    /// other messages. No oversize allowance: what is reserved stays reserved.
    pub fn try_send_reserving(&self, item: T, events: usize, bytes: usize) -> Result<(), Rejected> {
        let max = self.max_bytes.saturating_sub(bytes);
        self.send_if(item, events, |queued, w| queued.saturating_add(w) <= max)
    }

    /// Bytes queued and not yet taken by the consumer.
    pub fn queued_bytes(&self) -> usize {
        self.queued.load(Ordering::Acquire)
    }

    fn send_if(
        &self,
        item: T,
        reserve_events: usize,
        fits: impl Fn(usize, usize) -> bool,
    ) -> Result<(), Rejected> {
        if self.tx.is_closed() {
            return Err(Rejected::Closed);
        }
        if self.tx.capacity() <= reserve_events {
            return Err(Rejected::Full);
        }
        let w = item.weight();
        let answer = item.answer_bytes();
        // Reserve the bytes before the event becomes visible, so the receiver's subtraction
        // can never run first and wrap the counter.
        let reserved = self
            .queued
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |q| {
                fits(q, w).then(|| q.saturating_add(w))
            });
        if reserved.is_err() {
            return Err(Rejected::Full);
        }
        self.answers.fetch_add(answer, Ordering::AcqRel);
        self.tx.try_send(item).map_err(|e| {
            self.queued.fetch_sub(w, Ordering::AcqRel);
            self.answers.fetch_sub(answer, Ordering::AcqRel);
            match e {
                TrySendError::Full(_) => Rejected::Full,
                TrySendError::Closed(_) => Rejected::Closed,
            }
        })
    }
}

impl<T: Weigh> QueueRx<T> {
    /// The next event; `None` once every sender is gone and the queue is drained.
    pub async fn recv(&mut self) -> Option<T> {
        let item = self.rx.recv().await?;
        Some(self.taken(item))
    }

    /// The next event if one is queued.
    pub fn try_recv(&mut self) -> Result<T, TryRecvError> {
        self.rx.try_recv().map(|item| self.taken(item))
    }

    fn taken(&self, item: T) -> T {
        self.queued.fetch_sub(item.weight(), Ordering::AcqRel);
        self.answers
            .fetch_sub(item.answer_bytes(), Ordering::AcqRel);
        item
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bytes(n: usize) -> Bytes {
        Bytes::from(vec![b'x'; n])
    }

    const SMALL: Limits = Limits {
        events: 4,
        bytes: 100,
    };

    #[test]
    fn the_byte_bound_refuses_before_the_event_bound() {
        let (tx, mut rx) = bounded(SMALL);
        assert_eq!(tx.try_send(bytes(60)), Ok(()));
        assert_eq!(tx.try_send(bytes(41)), Err(Rejected::Full), "101 > 100");
        assert_eq!(tx.try_send(bytes(40)), Ok(()), "exactly the budget fits");
        assert_eq!(tx.queued_bytes(), 100);
        assert_eq!(rx.try_recv().map(|b| b.len()), Ok(60));
        assert_eq!(tx.queued_bytes(), 40, "taking an event frees its bytes");
        assert_eq!(tx.try_send(bytes(60)), Ok(()));
    }

    #[test]
    fn the_event_bound_still_holds_for_small_events() {
        let (tx, _rx) = bounded(SMALL);
        for _ in 0..SMALL.events {
            assert_eq!(tx.try_send(bytes(1)), Ok(()));
        }
        assert_eq!(tx.try_send(bytes(1)), Err(Rejected::Full));
        assert_eq!(
            tx.queued_bytes(),
            SMALL.events,
            "a refused event costs nothing"
        );
    }

    #[test]
    fn one_oversize_event_is_accepted_only_into_an_empty_queue() {
        let (tx, mut rx) = bounded(SMALL);
        assert_eq!(tx.try_send(bytes(1000)), Ok(()), "alone: deliverable");
        assert_eq!(
            tx.try_send(bytes(1)),
            Err(Rejected::Full),
            "nothing after it"
        );
        assert_eq!(rx.try_recv().map(|b| b.len()), Ok(1000));
        assert_eq!(tx.queued_bytes(), 0);
        assert_eq!(tx.try_send(bytes(1)), Ok(()));
        assert_eq!(
            tx.try_send(bytes(1000)),
            Err(Rejected::Full),
            "not behind others"
        );
    }

    #[test]
    fn reserving_sends_leave_room_and_get_no_oversize_allowance() {
        let (tx, _rx) = bounded(SMALL);
        assert_eq!(tx.try_send_reserving(bytes(51), 0, 50), Err(Rejected::Full));
        assert_eq!(tx.try_send_reserving(bytes(50), 0, 50), Ok(()));
        assert_eq!(tx.try_send_reserving(bytes(1), 0, 50), Err(Rejected::Full));
        assert_eq!(
            tx.try_send_reserving(bytes(1), 3, 0),
            Err(Rejected::Full),
            "slots"
        );
        assert_eq!(
            tx.try_send(bytes(50)),
            Ok(()),
            "the reserve is usable by others"
        );
    }

    #[tokio::test]
    async fn closing_either_side_is_seen_by_the_other() {
        let (tx, mut rx) = bounded(SMALL);
        tx.try_send(bytes(3)).unwrap();
        drop(tx);
        assert_eq!(
            rx.recv().await.map(|b| b.len()),
            Some(3),
            "queued events still arrive"
        );
        assert_eq!(rx.recv().await, None);
        let (tx, rx) = bounded::<Bytes>(SMALL);
        drop(rx);
        assert_eq!(tx.try_send(bytes(3)), Err(Rejected::Closed));
        assert_eq!(tx.queued_bytes(), 0);
    }

    /// An answer: weighs nothing against the budget, counted apart.
    struct Answer(usize);

    impl Weigh for Answer {
        fn weight(&self) -> usize {
            0
        }
        fn answer_bytes(&self) -> usize {
            self.0
        }
    }

    #[test]
    fn answer_bytes_are_counted_until_taken_and_a_refused_one_costs_nothing() {
        let (tx, mut rx) = bounded(Limits {
            events: 2,
            bytes: 10,
        });
        assert_eq!(tx.try_send_answer(Answer(300)), Ok(()));
        assert_eq!(tx.try_send_answer(Answer(200)), Ok(()));
        assert_eq!(
            tx.queued_answer_bytes(),
            500,
            "past the byte budget: never refused"
        );
        assert_eq!(
            tx.try_send_answer(Answer(1)),
            Err(Rejected::Full),
            "the event bound"
        );
        assert_eq!(tx.queued_answer_bytes(), 500);
        assert_eq!(rx.try_recv().map(|a| a.0), Ok(300));
        assert_eq!(tx.queued_answer_bytes(), 200);
        assert_eq!(tx.queued_bytes(), 0);
    }
}

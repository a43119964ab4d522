//! A partition's running requests, and whom a backend's request for input can be blamed on
//! ([`Plain`]).

use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::oneshot;
use tokio::time::Instant;

use switchboard_wire::RequestId;

use crate::{Answer, CoreError};

/// The requests running on a partition (its listens aside). A server request for input
/// cannot be answered for any of them (no call of the partition holds its lease); when
/// exactly one request runs and it is a call that declared no input capability, the request
/// is attributable, and that call is told which capability it lacked (-32021) instead of
/// running on with a refusal. Once a request ended without the backend's answer (timed out,
/// its client gone), the backend may still be running its handler, and what it asks belongs
/// to nobody alive: nothing is blamed on the partition until `hold` (the longest a request
/// may take) has passed since.
#[derive(Debug, Clone)]
pub(crate) struct Plain(Arc<parking_lot::Mutex<PlainInner>>);

#[derive(Debug)]
struct PlainInner {
    next: u64,
    /// Each running request; a call that can be blamed holds the sender that tells it.
    calls: HashMap<u64, Option<oneshot::Sender<&'static str>>>,
    /// How long after a request ended unanswered nothing is blamed.
    hold: Duration,
    /// Until when nothing is blamed: see [`Plain`].
    quiet_until: Option<Instant>,
}

/// One running request; removed on drop, which without its answer makes the partition's
/// requests for input unattributable for a while (see [`Plain`]).
#[derive(Debug)]
pub(crate) struct PlainCall {
    plain: Plain,
    id: u64,
    /// `None` for a request that is never blamed (a list, a completion).
    blamed: Option<oneshot::Receiver<&'static str>>,
    answered: bool,
}

impl Plain {
    /// Nothing blamed for `hold` after a request ended unanswered.
    pub(crate) fn new(hold: Duration) -> Plain {
        Plain(Arc::new(parking_lot::Mutex::new(PlainInner {
            next: 0,
            calls: HashMap::new(),
            hold,
            quiet_until: None,
        })))
    }

    /// A call that declared no input capability starts: it can be blamed.
    pub(crate) fn start(&self) -> PlainCall {
        let (tx, rx) = oneshot::channel();
        self.register(Some(tx), Some(rx))
    }

    /// Another request starts (nothing it runs asks for input that could be answered): while
    /// it runs, what the backend asks is not attributable to any one call.
    pub(crate) fn start_other(&self) -> PlainCall {
        self.register(None, None)
    }

    fn register(
        &self,
        tx: Option<oneshot::Sender<&'static str>>,
        blamed: Option<oneshot::Receiver<&'static str>>,
    ) -> PlainCall {
        let mut inner = self.0.lock();
        inner.next += 1;
        let id = inner.next;
        inner.calls.insert(id, tx);
        PlainCall {
            plain: self.clone(),
            id,
            blamed,
            answered: false,
        }
    }

    /// A server request needed `cap`: the one running request, if exactly one runs, it is a
    /// call, and no request ended unanswered within `hold`, is told.
    pub(crate) fn blame(&self, cap: &'static str) {
        let mut inner = self.0.lock();
        let quiet = inner
            .quiet_until
            .is_some_and(|until| Instant::now() < until);
        if inner.calls.len() == 1 && !quiet {
            if let Some(tx) = inner.calls.values_mut().next().and_then(Option::take) {
                let _ = tx.send(cap);
            }
        }
    }
}

impl PlainCall {
    /// A request that is never blamed (a listen's subscription) ended: `answered` when its
    /// backend answered.
    pub(crate) fn ended(mut self, answered: bool) {
        self.answered = answered;
    }

    /// The request's `answer`, or -32021 when the backend asked, while the call ran, for a
    /// capability it did not declare. The blame is sent before the backend's request is
    /// refused, so it is there before any answer that refusal led to, and it wins over an
    /// answer that is there too (a task woken late, under load, finds both ready). A blamed
    /// call still waits for the backend's answer, discarded, so that its handler has ended
    /// before another request runs alone (else what it asked next would be blamed there).
    pub(crate) async fn answer_or_blamed(
        mut self,
        id: &RequestId,
        answer: impl Future<Output = Result<Answer, CoreError>>,
    ) -> Result<Answer, CoreError> {
        tokio::pin!(answer);
        let Some(mut blamed) = self.blamed.take() else {
            let out = answer.await;
            self.answered = out.is_ok();
            return out;
        };
        let cap = tokio::select! {
            biased;
            Ok(cap) = &mut blamed => cap,
            out = &mut answer => match blamed.try_recv() {
                // Blamed after the first poll of `blamed`, the answer already there.
                Ok(cap) => {
                    self.answered = out.is_ok();
                    return Ok(super::missing_capability(id, cap));
                }
                Err(_) => {
                    self.answered = out.is_ok();
                    return out;
                }
            },
        };
        self.answered = answer.await.is_ok();
        Ok(super::missing_capability(id, cap))
    }
}

impl Drop for PlainCall {
    fn drop(&mut self) {
        let mut inner = self.plain.0.lock();
        inner.calls.remove(&self.id);
        if !self.answered {
            let until = Instant::now() + inner.hold;
            inner.quiet_until = Some(inner.quiet_until.map_or(until, |u| u.max(until)));
        }
    }
}

#[cfg(test)]
mod tests;

//! A partition's running calls that declared no input capability ([`Plain`]).

use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;

use switchboard_wire::RequestId;

use crate::{Answer, CoreError};

/// A partition's running calls that declared no input capability. A server request for input
/// cannot be answered for them; when exactly one runs, it is attributable, and that call is
/// told which capability it lacked (-32021) instead of running on with a refusal.
#[derive(Debug, Clone, Default)]
pub(crate) struct Plain(Arc<parking_lot::Mutex<PlainInner>>);

#[derive(Debug, Default)]
struct PlainInner {
    next: u64,
    calls: HashMap<u64, Option<tokio::sync::oneshot::Sender<&'static str>>>,
}

/// One running plain call; removed on drop.
#[derive(Debug)]
pub(crate) struct PlainCall {
    plain: Plain,
    id: u64,
    pub(crate) blamed: tokio::sync::oneshot::Receiver<&'static str>,
}

impl Plain {
    pub(crate) fn start(&self) -> PlainCall {
        let (tx, rx) = tokio::sync::oneshot::channel();
        let mut inner = self.0.lock();
        inner.next += 1;
        let id = inner.next;
        inner.calls.insert(id, Some(tx));
        PlainCall {
            plain: self.clone(),
            id,
            blamed: rx,
        }
    }

    /// A server request needed `cap`: the one running call, if exactly one, is told.
    pub(crate) fn blame(&self, cap: &'static str) {
        let mut inner = self.0.lock();
        if inner.calls.len() == 1 {
            if let Some(tx) = inner.calls.values_mut().next().and_then(Option::take) {
                let _ = tx.send(cap);
            }
        }
    }
}

impl PlainCall {
    /// The call's `answer`, or -32021 when the backend asked, while it ran, for a capability
    /// the call did not declare. The blame is sent before the backend's request is refused,
    /// so it is there before any answer that refusal led to, and it wins over an answer that
    /// is there too: a task woken late (under load) finds both ready.
    pub(crate) async fn answer_or_blamed(
        mut self,
        id: &RequestId,
        answer: impl Future<Output = Result<Answer, CoreError>>,
    ) -> Result<Answer, CoreError> {
        tokio::select! {
            biased;
            Ok(cap) = &mut self.blamed => Ok(super::missing_capability(id, cap)),
            answer = answer => answer,
        }
    }
}

impl Drop for PlainCall {
    fn drop(&mut self) {
        self.plain.0.lock().calls.remove(&self.id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The blame wins over an answer that is ready too (a CI run once got the backend's
    /// answer to a call it had blamed: `tokio::select!` picks at random among ready
    /// branches). Many rounds, so that a random pick fails the test.
    #[tokio::test]
    async fn a_blamed_call_answers_minus_32021_even_when_its_answer_is_ready_too() {
        let id = RequestId::from_string("7");
        for _ in 0..64 {
            let plain = Plain::default();
            let call = plain.start();
            plain.blame("sampling");
            let answered = Answer::ok(br#"{"jsonrpc":"2.0","id":"7","result":{}}"#.to_vec());
            let answer = call.answer_or_blamed(&id, async { Ok(answered) }).await;
            assert_eq!(answer.unwrap().error_code, Some(-32021));
        }
    }

    /// Two calls running: the backend's request is nobody's to blame; each gets its answer.
    #[tokio::test]
    async fn with_two_calls_running_nobody_is_blamed() {
        let id = RequestId::from_string("7");
        let plain = Plain::default();
        let (one, _two) = (plain.start(), plain.start());
        plain.blame("sampling");
        let answered = Answer::ok(br#"{"jsonrpc":"2.0","id":"7","result":{}}"#.to_vec());
        let answer = one.answer_or_blamed(&id, async { Ok(answered) }).await;
        assert_eq!(answer.unwrap().error_code, None);
    }
}

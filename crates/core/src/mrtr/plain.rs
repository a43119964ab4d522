//! A partition's running calls that declared no input capability ([`Plain`]).

use std::collections::HashMap;
use std::sync::Arc;

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

impl Drop for PlainCall {
    fn drop(&mut self) {
        self.plain.0.lock().calls.remove(&self.id);
    }
}

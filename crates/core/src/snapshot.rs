//! A value replaced whole at run time (hot reload) and read on the request path: a reader
//! takes the current `Arc` under a read lock held for one clone, never across an `.await`,
//! so a writer waits at most for those clones and every reader sees one consistent value.

use std::sync::Arc;

/// See the module docs.
#[derive(Debug)]
pub(crate) struct Snapshot<T: ?Sized>(parking_lot::RwLock<Arc<T>>);

impl<T: ?Sized> Snapshot<T> {
    pub(crate) fn new(value: Arc<T>) -> Self {
        Snapshot(parking_lot::RwLock::new(value))
    }

    /// The value now.
    pub(crate) fn load(&self) -> Arc<T> {
        self.0.read().clone()
    }

    /// Puts `value` in place; returns the one it replaces (dropped outside the lock).
    pub(crate) fn store(&self, value: Arc<T>) -> Arc<T> {
        std::mem::replace(&mut *self.0.write(), value)
    }
}

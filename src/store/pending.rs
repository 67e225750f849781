//! The pending answer of work handed to the database thread.

use super::{Store, StoreError};
use rusqlite::Connection;

/// The answer of work handed to the database thread by [`Store::submit`].
#[must_use = "the work runs either way; its answer says whether it committed"]
pub struct Pending<R>(tokio::sync::oneshot::Receiver<Result<R, StoreError>>);

impl Store {
    /// Hands `f` to the database thread now (unlike [`Store::call`], whose future sends it
    /// when first polled); its answer is waited for later, from async or blocking code.
    pub fn submit<R, F>(&self, f: F) -> Result<Pending<R>, StoreError>
    where
        R: Send + 'static,
        F: FnOnce(&mut Connection) -> Result<R, StoreError> + Send + 'static,
    {
        let (rtx, rrx) = tokio::sync::oneshot::channel();
        self.tx
            .send(Box::new(move |c| {
                let _ = rtx.send(f(c));
            }))
            .map_err(|_| StoreError::Closed)?;
        Ok(Pending(rrx))
    }
}

impl<R> Pending<R> {
    /// Waits for the answer.
    pub async fn answer(self) -> Result<R, StoreError> {
        self.0.await.map_err(|_| StoreError::Closed)?
    }

    /// Waits for the answer from blocking code (a `block_in_place` closure or a plain
    /// thread, never an async task).
    pub fn blocking_answer(self) -> Result<R, StoreError> {
        self.0.blocking_recv().map_err(|_| StoreError::Closed)?
    }
}

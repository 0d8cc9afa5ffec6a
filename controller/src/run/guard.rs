//! Undo guards: what a run changed on a machine (a local agent started, a broker deployed,
//! netem applied), held so that it is changed back on every path out of the phase that
//! made it.
//!
//! The run awaits [`Guard::undo`] (or [`Guard::around`] and [`Guard::finish`], which also
//! undo after a panic of the body and then resume it) on success, on a failed cell, on cancellation and on an
//! error from any phase. A guard dropped without its undo, which only happens when the
//! run's future itself is dropped (a caller's timeout, an aborted task, a runtime shutting
//! down), logs what it could not undo and calls [`Undo::abandon`]: the best that can be done
//! without awaiting (cancel a token, spawn the undo as a detached task, let a lease lapse).

use std::future::Future;
use std::panic::AssertUnwindSafe;

use futures_util::FutureExt;

/// A change on a machine and how to take it back.
pub(super) trait Undo: Send {
    /// What it is, for logs: "netem of scenario wan on tester, worker".
    fn describe(&self) -> String;

    /// Takes the change back; errors are logged (there is nobody left to return them to).
    /// Called at most once, but may be cut short when the run's future is dropped, so it
    /// must leave `self` in a state [`Undo::abandon`] can still act on.
    fn undo(&mut self) -> impl Future<Output = ()> + Send;

    /// The fallback when the guard is dropped without its undo: no awaiting possible.
    fn abandon(&mut self);
}

/// Holds an [`Undo`] until it has been undone.
pub(super) struct Guard<T: Undo> {
    change: T,
    undone: bool,
}

impl<T: Undo> Guard<T> {
    /// Guards `change`.
    pub(super) fn new(change: T) -> Self {
        Guard {
            change,
            undone: false,
        }
    }

    /// Undoes the change and waits until that is done.
    pub(super) async fn undo(mut self) {
        self.change.undo().await;
        // Only now: dropped halfway through the undo, the guard still abandons what is left.
        self.undone = true;
    }

    /// The change, to add to it while it is being made.
    pub(super) fn get_mut(&mut self) -> &mut T {
        &mut self.change
    }

    /// Runs `body`, then undoes the change whatever became of it: its output is returned
    /// after the undo, and a panic of `body` is resumed after the undo.
    pub(super) async fn around<F: Future>(self, body: F) -> F::Output {
        let outcome = catching(body).await;
        self.finish(outcome).await
    }

    /// Undoes the change after a body run with [`catching`] (one that needed
    /// [`Guard::get_mut`]), then returns its output or resumes its panic.
    pub(super) async fn finish<R>(self, outcome: std::thread::Result<R>) -> R {
        self.undo().await;
        match outcome {
            Ok(output) => output,
            Err(panic) => std::panic::resume_unwind(panic),
        }
    }
}

/// `body`'s output, or its panic caught (to be resumed by [`Guard::finish`]).
pub(super) async fn catching<F: Future>(body: F) -> std::thread::Result<F::Output> {
    // The body's state is not looked at after a panic, only the guard's undo runs.
    AssertUnwindSafe(body).catch_unwind().await
}

impl<T: Undo> Drop for Guard<T> {
    fn drop(&mut self) {
        if !self.undone {
            tracing::error!(
                change = %self.change.describe(),
                "dropped without its undo (the run was abandoned): undoing what can be undone \
                 without waiting"
            );
            self.change.abandon();
        }
    }
}

/// Runs `undo` as a task of its own when there is a runtime to run it: the fallback of a
/// guard dropped inside one. Without a runtime nothing can be sent, and `what` is logged.
pub(super) fn spawn_detached(what: &str, undo: impl Future<Output = ()> + Send + 'static) {
    match tokio::runtime::Handle::try_current() {
        Ok(runtime) => {
            runtime.spawn(undo);
        }
        Err(_) => tracing::error!(change = what, "no runtime left to undo it"),
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use super::*;

    /// Records what happened to it.
    struct Recorder(Arc<Mutex<Vec<&'static str>>>);

    impl Undo for Recorder {
        fn describe(&self) -> String {
            "a recorder".into()
        }

        async fn undo(&mut self) {
            tokio::task::yield_now().await;
            self.0.lock().expect("log").push("undone");
        }

        fn abandon(&mut self) {
            self.0.lock().expect("log").push("abandoned");
        }
    }

    fn recorder() -> (Guard<Recorder>, Arc<Mutex<Vec<&'static str>>>) {
        let log = Arc::new(Mutex::new(Vec::new()));
        (Guard::new(Recorder(Arc::clone(&log))), log)
    }

    #[tokio::test]
    async fn undo_runs_once_and_the_drop_after_it_does_nothing() {
        let (guard, log) = recorder();
        guard.undo().await;
        assert_eq!(*log.lock().expect("log"), ["undone"]);
    }

    #[tokio::test]
    async fn around_undoes_after_an_error_and_after_a_panic() {
        let (guard, log) = recorder();
        let out: Result<(), &str> = guard.around(async { Err("a phase failed") }).await;
        assert_eq!(out, Err("a phase failed"));
        assert_eq!(*log.lock().expect("log"), ["undone"]);

        let (guard, log) = recorder();
        let panicked = tokio::spawn(guard.around(async { panic!("a phase panicked") })).await;
        assert!(panicked.is_err_and(|e| e.is_panic()), "the panic goes on");
        assert_eq!(*log.lock().expect("log"), ["undone"], "after the undo");
    }

    #[tokio::test]
    async fn a_guard_dropped_without_its_undo_abandons_the_change() {
        let (guard, log) = recorder();
        drop(guard);
        assert_eq!(*log.lock().expect("log"), ["abandoned"]);
        // Dropped halfway through its undo (the run's future was dropped): abandoned too.
        let (guard, log) = recorder();
        let mut undo = Box::pin(guard.undo());
        assert!(futures_util::poll!(undo.as_mut()).is_pending());
        drop(undo);
        assert_eq!(*log.lock().expect("log"), ["abandoned"]);
    }
}

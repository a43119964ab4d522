//! The one thread that forks per-session and per-call backends.
//!
//! `PR_SET_PDEATHSIG` (see [`crate::orphan`]) fires when the *thread* that forked a child
//! exits, not when the process does. Forking on an async worker stalls that worker for the
//! milliseconds a `fork` of a large process takes; forking on tokio's blocking pool is worse:
//! its threads exit after ten idle seconds, and the kernel then SIGKILLs every backend they
//! forked. So spawns that happen while the gateway serves run here, on a thread that lives as
//! long as the process: the only lifetime that outlives every child it can fork.

use std::sync::mpsc::{channel, Sender};
use std::sync::OnceLock;

use tokio::sync::oneshot;

use crate::UpstreamError;

type Job = Box<dyn FnOnce() + Send>;

/// Jobs for the forking thread; created on first use and never dropped (see the module docs).
static FORKER: OnceLock<Option<Sender<Job>>> = OnceLock::new();

fn forker() -> Option<&'static Sender<Job>> {
    FORKER
        .get_or_init(|| {
            let (tx, rx) = channel::<Job>();
            let started = std::thread::Builder::new()
                .name("switchboard-fork".into())
                .spawn(move || {
                    while let Ok(job) = rx.recv() {
                        // A panicking job must not end this thread: every child it forked
                        // would be killed with it. The job's caller sees its result dropped.
                        let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(job));
                    }
                });
            started.ok().map(|_| tx)
        })
        .as_ref()
}

/// Runs `job` (typically [`crate::spawn`]) on the forking thread, inside the caller's tokio
/// runtime, and returns its result. If the caller stops waiting, the job still completes and
/// its result is dropped: a spawned process is then killed (`kill_on_drop`).
pub async fn on_forker<T: Send + 'static>(
    job: impl FnOnce() -> T + Send + 'static,
) -> Result<T, UpstreamError> {
    let unavailable = |why: &str| UpstreamError::Spawn {
        program: "backend".into(),
        reason: format!("forking thread unavailable: {why}"),
    };
    let runtime = tokio::runtime::Handle::current();
    let (tx, rx) = oneshot::channel();
    let job: Job = Box::new(move || {
        // The spawn starts the backend's reader and writer tasks on the caller's runtime.
        let _entered = runtime.enter();
        let _ = tx.send(job());
    });
    forker()
        .ok_or_else(|| unavailable("could not start it"))?
        .send(job)
        .map_err(|_| unavailable("it has stopped"))?;
    rx.await.map_err(|_| unavailable("the job was dropped"))
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use bytes::Bytes;

    use super::*;
    use crate::{spawn, InboundSink, StdioConfig};
    use switchboard_wire::Message;

    #[derive(Debug)]
    struct Ignore;

    impl InboundSink for Ignore {
        fn deliver(&self, _: &Bytes, _: &Message<'_>, _: &crate::Upstream) {}
    }

    /// Every job runs on one named thread, whichever runtime asks.
    #[test]
    fn jobs_from_any_runtime_run_on_one_thread() {
        let ask = || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .build()
                .expect("runtime");
            rt.block_on(on_forker(|| {
                let me = std::thread::current();
                (me.id(), me.name().map(str::to_owned))
            }))
            .expect("job ran")
        };
        let (first, name) = ask();
        let (second, _) = std::thread::spawn(ask).join().expect("asking thread");
        assert_eq!(first, second);
        assert_eq!(name.as_deref(), Some("switchboard-fork"));
    }

    /// A panicking job fails only its own caller; the thread (and every child it forked)
    /// lives on for the next job.
    #[test]
    fn a_panicking_job_does_not_end_the_thread() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("runtime");
        let before = rt
            .block_on(on_forker(|| std::thread::current().id()))
            .expect("job ran");
        let failed = rt.block_on(on_forker(|| -> u8 { panic!("a bug in a spawn job") }));
        assert!(failed.is_err(), "the caller learns its job failed");
        let after = rt
            .block_on(on_forker(|| std::thread::current().id()))
            .expect("the thread still serves");
        assert_eq!(before, after);
    }

    /// The regression: spawned from a blocking-pool thread, a backend was SIGKILLed when that
    /// thread retired. Here the pool's threads retire after 50 ms; after waiting well past
    /// that, a round trip through the backend (`cat` echoes a response to its own call) proves
    /// it is alive.
    #[test]
    fn backends_outlive_retired_pool_threads() {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_keep_alive(Duration::from_millis(50))
            .enable_all()
            .build()
            .expect("runtime");
        rt.block_on(async {
            let config = StdioConfig::new("cat", vec![]);
            let (handle, process) = tokio::task::spawn_blocking(|| {
                tokio::runtime::Handle::current().block_on(on_forker(move || {
                    spawn(&config, std::sync::Arc::new(Ignore))
                }))
            })
            .await
            .expect("blocking task")
            .expect("forker")
            .expect("spawned");
            // Let the blocking thread that asked retire (keep-alive 50 ms).
            tokio::time::sleep(Duration::from_millis(400)).await;
            let line = br#"{"jsonrpc":"2.0","id":"k1","result":{"alive":true}}"#.to_vec();
            let call = handle.call("k1", line).await.expect("queued");
            let answer = tokio::time::timeout(Duration::from_secs(10), call)
                .await
                .expect("answered in time")
                .expect("backend alive");
            assert_eq!(answer.payload(), r#"{"alive":true}"#);
            process.shutdown(Duration::from_secs(2)).await;
        });
    }
}

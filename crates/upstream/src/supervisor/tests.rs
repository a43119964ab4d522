use bytes::Bytes;
use parking_lot::Mutex;
use switchboard_wire::Message;

use super::*;

/// Drops what the backend sends on its own.
#[derive(Debug)]
struct Ignore;

impl InboundSink for Ignore {
    fn deliver(&self, _line: &Bytes, _msg: &Message<'_>, _backend: &crate::Upstream) {}
}

/// The process a handle reaches, and the one `ready` was given.
type Pids = (Option<u32>, Option<u32>);

/// A backend that exits once it reads a line.
fn exits_on_a_line() -> StdioConfig {
    let script = "import sys\nsys.stdin.readline()\n";
    StdioConfig::new("python3", vec!["-c".to_owned(), script.to_owned()])
}

/// A restarted process is announced (its breaker half-open) only once the handle reaches it:
/// a call sent when the announcement runs goes to the new process, never to the ended one.
/// Before, the replica was marked running (and the breaker half-opened) inside `ready`,
/// before the handle was switched.
#[tokio::test]
async fn a_restart_is_announced_only_once_the_handle_reaches_the_new_process() {
    let (handle, process) = spawn(&exits_on_a_line(), Arc::new(Ignore)).unwrap();
    let first = handle.pid();
    // What `announce` saw the handle reach, and the process `ready` was given.
    let seen: Arc<Mutex<Option<Pids>>> = Arc::default();
    let announced = Arc::new(tokio::sync::Notify::new());
    let (watched, record, told) = (handle.clone(), seen.clone(), announced.clone());
    let stop = Stop::default();
    let supervisor = tokio::spawn(supervise(
        handle.clone(),
        exits_on_a_line(),
        Arc::new(Ignore),
        process,
        stop.clone(),
        Duration::from_secs(5),
        move |standby: StdioHandle| {
            let (watched, record, told) = (watched.clone(), record.clone(), told.clone());
            async move {
                let new = standby.pid();
                Some(move || {
                    *record.lock() = Some((watched.pid(), new));
                    told.notify_one();
                })
            }
        },
    ));
    handle.send_line(b"exit\n".to_vec()).await.unwrap();
    tokio::time::timeout(Duration::from_secs(30), announced.notified())
        .await
        .expect("the restart was announced");
    let (reached, new) = seen.lock().take().unwrap();
    assert_ne!(new, first, "a new process was started");
    assert_eq!(
        reached, new,
        "announced while the handle reached the old process"
    );
    stop.now.cancel();
    supervisor.await.unwrap();
}

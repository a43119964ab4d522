//! The session table on its own; the wire behaviour is tested against `fixture --http` and
//! raw-socket fakes in the switchboard integration tests (`remote_sse_client`).

use std::sync::atomic::AtomicUsize;

use super::*;
use crate::UpstreamError;

#[derive(Debug, Default)]
struct Counting {
    delivered: AtomicUsize,
    closed: AtomicUsize,
}

impl RemoteSink for Counting {
    fn deliver(&self, _: &Bytes, _: &Message<'_>) {
        self.delivered.fetch_add(1, Ordering::SeqCst);
    }
    fn listen_closed(&self, reason: &RemoteError) {
        assert!(matches!(reason, RemoteError::SessionLost));
        self.closed.fetch_add(1, Ordering::SeqCst);
    }
}

fn session() -> (Session, Arc<Counting>) {
    let sink = Arc::new(Counting::default());
    (Session::new(sink.clone()), sink)
}

#[test]
fn pending_calls_are_bounded_and_ids_unique() {
    let (s, _) = session();
    let mut held = Vec::new();
    for i in 0..MAX_PENDING {
        held.push(s.register(&i.to_string()).unwrap());
    }
    assert!(matches!(s.register("x"), Err(RemoteError::Refused(_))));
    s.withdraw("0", held[0].0);
    assert!(matches!(s.register("1"), Err(RemoteError::Refused(_))));
    assert!(s.register("x").is_ok());
}

#[test]
fn a_stale_withdraw_leaves_a_later_registration_alone() {
    let (s, _) = session();
    let (first, _rx) = s.register("7").unwrap();
    s.withdraw("7", first);
    let (_second, _rx2) = s.register("7").unwrap();
    s.withdraw("7", first);
    assert_eq!(s.table.lock().calls.len(), 1);
}

#[tokio::test]
async fn the_end_fails_every_call_and_is_reported_once() {
    let (s, sink) = session();
    let (_, a) = s.register("1").unwrap();
    let (_, b) = s.register("\"two\"").unwrap();
    s.end(&"test");
    s.end(&"again");
    // In flight when the stream ended: the remote may have run them (never retried as
    // unseen), while a call after the end was never sent.
    for call in [a, b] {
        let err = call.await.unwrap().unwrap_err();
        assert!(matches!(err, RemoteError::SessionEndedInFlight));
        assert!(UpstreamError::Remote(err).is_session_lost());
    }
    assert_eq!(sink.closed.load(Ordering::SeqCst), 1);
    let unsent = s.register("3").unwrap_err();
    assert!(UpstreamError::Remote(unsent).refused_unseen());
}

#[tokio::test]
async fn answers_go_to_their_call_and_everything_else_to_the_sink() {
    let (s, sink) = session();
    let (_, rx) = s.register("9007199254740993").unwrap();
    s.route(Bytes::from_static(
        br#"{"jsonrpc":"2.0","method":"notifications/message","params":{}}"#,
    ));
    s.route(Bytes::from_static(
        br#"{"jsonrpc":"2.0","id":5,"result":{}}"#,
    ));
    s.route(Bytes::from_static(b"not json"));
    s.route(Bytes::from_static(
        br#"{"jsonrpc":"2.0","id":9007199254740993,"result":{"ok":1}}"#,
    ));
    let answer = rx.await.unwrap().unwrap();
    assert_eq!(answer.payload(), r#"{"ok":1}"#);
    assert_eq!(sink.delivered.load(Ordering::SeqCst), 1);
    assert!(s.table.lock().calls.is_empty());
}

//! Unit tests of the session table.

use tokio_util::sync::CancellationToken;

use super::*;
use crate::session::InFlight;

fn anon() -> Principal {
    Principal::anonymous()
}

fn named(subject: &str) -> Principal {
    Principal {
        subject: subject.into(),
        ..anon()
    }
}

const S: Transport = Transport::Streamable;

#[tokio::test]
async fn an_id_is_valid_only_on_the_transport_that_minted_it() {
    let store = Sessions::new(10, Duration::from_secs(60));
    let (listen, _rx) = ListenState::stream_only(crate::stream_queue::Limits {
        events: 4,
        bytes: 1024,
    });
    let sse = store
        .create_with(
            Transport::Sse,
            "2024-11-05",
            listen,
            Some(JoinSet::new()),
            &anon(),
        )
        .unwrap();
    let http = store.create("2025-11-25", &anon()).unwrap();
    assert!(store.touch(sse.as_str(), S, &anon()).is_err());
    assert!(store.attach_listener(sse.as_str(), &anon(), None).is_err());
    assert!(store.remove(sse.as_str(), S, None).is_err());
    assert!(store.touch(http.as_str(), Transport::Sse, &anon()).is_err());
    assert!(store.remove(http.as_str(), Transport::Sse, None).is_err());
    assert_eq!(store.len(), 2, "a wrong-transport removal removes nothing");
    assert!(store.touch(sse.as_str(), Transport::Sse, &anon()).is_ok());
    assert!(store.remove(sse.as_str(), Transport::Sse, None).is_ok());
}

#[test]
fn another_principals_session_is_not_found() {
    let store = Sessions::new(10, Duration::from_secs(60));
    let (alice, bob) = (named("alice"), named("bob"));
    let id = store.create("2025-11-25", &alice).unwrap();
    assert!(matches!(
        store.touch(id.as_str(), S, &bob),
        Err(CoreError::SessionNotFound)
    ));
    assert!(store.attach_listener(id.as_str(), &bob, None).is_err());
    assert!(store.remove(id.as_str(), S, Some(&bob)).is_err());
    assert!(store.touch(id.as_str(), S, &alice).is_ok());
    assert!(store.remove(id.as_str(), S, Some(&alice)).is_ok());
}

#[test]
fn lifecycle() {
    let store = Sessions::new(2, Duration::from_secs(60));
    let a = store.create("2025-11-25", &anon()).unwrap();
    let b = store.create("2025-06-18", &anon()).unwrap();
    assert_ne!(a, b);
    assert!(matches!(
        store.create("2025-11-25", &anon()),
        Err(CoreError::TooManySessions(2))
    ));
    assert_eq!(store.touch(b.as_str(), S, &anon()).unwrap().1, "2025-06-18");
    store.remove(a.as_str(), S, None).unwrap();
    assert!(matches!(
        store.touch(a.as_str(), S, &anon()),
        Err(CoreError::SessionNotFound)
    ));
    assert!(matches!(
        store.remove(a.as_str(), S, None),
        Err(CoreError::SessionNotFound)
    ));
    assert!(matches!(
        store.touch("forged", S, &anon()),
        Err(CoreError::SessionNotFound)
    ));
    assert_eq!(store.len(), 1);
}

#[tokio::test(start_paused = true)]
async fn idle_sessions_expire_and_used_ones_do_not() {
    let store = Sessions::new(10, Duration::from_secs(60));
    let idle = store.create("2025-11-25", &anon()).unwrap();
    let used = store.create("2025-11-25", &anon()).unwrap();
    tokio::time::advance(Duration::from_secs(40)).await;
    store.touch(used.as_str(), S, &anon()).unwrap();
    tokio::time::advance(Duration::from_secs(30)).await;
    assert_eq!(store.reap().len(), 1);
    assert!(store.touch(idle.as_str(), S, &anon()).is_err());
    assert!(store.touch(used.as_str(), S, &anon()).is_ok());
}

#[test]
fn ending_a_session_closes_its_stream_and_cancels_its_work() {
    let store = Sessions::new(10, Duration::from_secs(60));
    let id = store.create("2025-11-25", &anon()).unwrap();
    let mut stream = store.attach_listener(id.as_str(), &anon(), None).unwrap();
    let cancel = CancellationToken::new();
    store
        .with(id.as_str(), |s| {
            s.subscriptions
                .insert((BackendId::default_id(), "u".into()));
            s.in_flight.insert(
                "1".into(),
                InFlight {
                    key: RouteKey::mint(),
                    backend: BackendId::default_id(),
                    cancel: cancel.clone(),
                    stream: None,
                    at_backend: true,
                },
            );
        })
        .unwrap();
    assert_eq!(store.entry_count(), 3);
    let ended = store.remove(id.as_str(), S, None).unwrap();
    assert!(ended
        .subscriptions
        .contains(&(BackendId::default_id(), "u".into())));
    assert!(cancel.is_cancelled());
    assert!(stream.events.try_recv().is_err());
    assert_eq!(store.entry_count(), 0);
}

#[test]
fn one_principal_cannot_take_every_session() {
    let store = Sessions::new(10, Duration::from_secs(60)).with_principal_limit(2);
    let (alice, bob) = (named("alice"), named("bob"));
    let a1 = store.create("2025-11-25", &alice).unwrap();
    let a2 = store.create("2025-11-25", &alice).unwrap();
    assert!(matches!(
        store.create("2025-11-25", &alice),
        Err(CoreError::TooManyPrincipalSessions(2))
    ));
    assert!(
        store.create("2025-11-25", &bob).is_ok(),
        "others unaffected"
    );
    // Every way a session ends gives its place back: here a removal and a drain.
    store.remove(a1.as_str(), S, None).unwrap();
    let a3 = store.create("2025-11-25", &alice).unwrap();
    assert!(store.create("2025-11-25", &alice).is_err());
    drop(store.drain());
    assert!(
        store.per_principal.lock().is_empty(),
        "no count outlives its sessions"
    );
    assert!(store.create("2025-11-25", &alice).is_ok());
    let _ = (a2, a3);
}

/// Adopting a session already live here names it only for its owner, and only a Streamable
/// HTTP one: a stored record naming another owner (written by whoever can write to the
/// store) is not that session's, and never rewrites its state (review MEDIUM: `adopt`
/// answered any live id as adopted).
#[tokio::test]
async fn adopting_a_live_session_is_for_its_owner_only() {
    let store = Sessions::new(10, Duration::from_secs(60));
    let alice = store.create("2025-11-25", &named("alice")).unwrap();
    assert!(matches!(
        store.adopt(alice.as_str(), "2025-11-25", &named("mallory")),
        Err(CoreError::SessionNotFound)
    ));
    let again = store.adopt(alice.as_str(), "2025-11-25", &named("alice"));
    assert_eq!(again.unwrap().as_str(), alice.as_str());
    let (listen, _rx) = ListenState::stream_only(crate::stream_queue::Limits {
        events: 4,
        bytes: 1024,
    });
    let sse = (store.create_with(Transport::Sse, "2024-11-05", listen, None, &anon())).unwrap();
    assert!(matches!(
        store.adopt(sse.as_str(), "2025-11-25", &anon()),
        Err(CoreError::SessionNotFound)
    ));
}

/// One principal's sessions hold at most `MAX_SUBSCRIPTIONS_PER_PRINCIPAL` subscriptions
/// together: past it a new one is refused in any of its sessions, one given up (or a session
/// ended) makes room, and another principal (or the anonymous one) is not held by it. Before,
/// only each session was bounded, so a principal opening sessions held without end (review
/// MEDIUM).
#[tokio::test]
async fn a_principal_s_sessions_share_one_subscription_bound() {
    use crate::session::watch::{MAX_SUBSCRIPTIONS, MAX_SUBSCRIPTIONS_PER_PRINCIPAL};
    let store = Sessions::new(100, Duration::from_secs(60));
    let backend = BackendId::default_id();
    let key = |i: usize| (backend.clone(), format!("file:///{i}"));
    let full = MAX_SUBSCRIPTIONS_PER_PRINCIPAL / MAX_SUBSCRIPTIONS;
    let mut bobs = Vec::new();
    for s in 0..=full {
        let sid = store.create("2025-11-25", &named("bob")).unwrap();
        if s < full {
            for i in 0..MAX_SUBSCRIPTIONS {
                assert!(store.add_subscription(sid.as_str(), &key(i)).unwrap());
            }
        }
        bobs.push(sid);
    }
    let last = bobs[full].as_str();
    assert!(matches!(
        store.add_subscription(last, &key(0)),
        Err(CoreError::TooManySubscriptions(
            MAX_SUBSCRIPTIONS_PER_PRINCIPAL
        ))
    ));
    assert!(store.may_subscribe(last, &key(0)).is_err());
    let alice = store.create("2025-11-25", &named("alice")).unwrap();
    assert!(store.add_subscription(alice.as_str(), &key(0)).unwrap());
    let anyone = store.create("2025-11-25", &anon()).unwrap();
    assert!(store.add_subscription(anyone.as_str(), &key(0)).unwrap());
    assert!(store
        .remove_subscription(bobs[0].as_str(), &key(0))
        .unwrap());
    assert!(store.add_subscription(last, &key(0)).unwrap());
    assert!(store.add_subscription(last, &key(1)).is_err());
    store.remove(bobs[1].as_str(), S, None).unwrap();
    // Bob's ended session gave its place back: his last one fills to its own bound.
    for i in 1..MAX_SUBSCRIPTIONS {
        assert!(store.add_subscription(last, &key(i)).is_ok(), "{i}");
    }
}

//! Listen streams: one per session, resumable with Last-Event-ID, and cleaned up under churn.

use reqwest::StatusCode;
use serde_json::json;

use crate::common::{emit, pushy, stats, Listener, TestGateway};

fn note(method: &str) -> serde_json::Value {
    json!({"jsonrpc":"2.0","method":method})
}

#[tokio::test]
async fn resume_replays_missed_events_exactly_once_and_nothing_of_other_sessions() {
    let gw = pushy(&[]).await;
    let (a, b) = (gw.session().await, gw.session().await);
    let mut la = Listener::open(&gw, &a, None).await;
    let mut lb = Listener::open(&gw, &b, None).await;
    emit(&gw, &a, json!([note("notifications/tools/list_changed")])).await;
    let first = la.next().await;
    let _ = lb.next().await;
    drop(la);
    // Only A subscribes, so A's buffer holds events B's does not.
    let sub = json!({"jsonrpc":"2.0","id":1,"method":"resources/subscribe","params":{"uri":"file:///only-a"}});
    gw.post(Some(&a), &sub).await;
    let upd = json!({"jsonrpc":"2.0","method":"notifications/resources/updated","params":{"uri":"file:///only-a"}});
    emit(
        &gw,
        &a,
        json!([upd, note("notifications/resources/list_changed")]),
    )
    .await;

    let mut resumed = Listener::open(&gw, &a, first.id.as_deref()).await;
    assert_eq!(
        resumed.next().await.data["method"],
        "notifications/resources/updated"
    );
    assert_eq!(
        resumed.next().await.data["method"],
        "notifications/resources/list_changed"
    );
    emit(&gw, &a, json!([note("notifications/prompts/list_changed")])).await;
    assert_eq!(
        resumed.next().await.data["method"],
        "notifications/prompts/list_changed",
        "no duplicates"
    );

    // B presents A's event id: it gets only its own events after that point.
    drop(lb);
    let mut forged = Listener::open(&gw, &b, first.id.as_deref()).await;
    let e = forged.next().await;
    assert_eq!(
        e.data["method"], "notifications/resources/list_changed",
        "not A's resource update"
    );
}

#[tokio::test]
async fn a_second_get_replaces_the_first() {
    let gw = TestGateway::start(&[]).await;
    let a = gw.session().await;
    let mut first = Listener::open(&gw, &a, None).await;
    let mut second = Listener::open(&gw, &a, None).await;
    assert!(first.ends().await, "the replaced stream is closed");
    gw.call_tool(
        Some(&a),
        json!(1),
        "trigger",
        json!({"kind":"tools_list_changed"}),
    )
    .await;
    assert_eq!(
        second.next().await.data["method"],
        "notifications/tools/list_changed"
    );
}

#[tokio::test]
async fn get_requires_a_known_session() {
    let gw = TestGateway::start(&[]).await;
    let r = gw
        .http
        .get(&gw.url)
        .header("accept", "text/event-stream")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::BAD_REQUEST);
    let r = gw
        .http
        .get(&gw.url)
        .header("accept", "text/event-stream")
        .header("mcp-session-id", "nope")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::NOT_FOUND);
    let v: serde_json::Value = serde_json::from_str(&r.text().await.unwrap()).unwrap();
    assert_eq!(v["error"]["code"], -32001);
    let a = gw.session().await;
    let r = gw
        .http
        .get(&gw.url)
        .header("accept", "application/json")
        .header("mcp-session-id", &a)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::NOT_ACCEPTABLE);
}

#[tokio::test]
async fn deleting_a_session_closes_its_stream_and_purges_its_state() {
    let gw = pushy(&[]).await;
    let a = gw.session().await;
    let mut la = Listener::open(&gw, &a, None).await;
    gw.post(Some(&a), &json!({"jsonrpc":"2.0","id":1,"method":"resources/subscribe","params":{"uri":"file:///d"}})).await;
    gw.post(
        Some(&a),
        &json!({"jsonrpc":"2.0","id":2,"method":"logging/setLevel","params":{"level":"info"}}),
    )
    .await;
    assert!(stats(&gw).await["tableEntries"].as_u64().unwrap() > 0);
    gw.http
        .delete(&gw.url)
        .header("mcp-session-id", &a)
        .send()
        .await
        .unwrap();
    assert!(la.ends().await);
    let s = stats(&gw).await;
    assert_eq!(
        (s["sessions"].as_u64(), s["tableEntries"].as_u64()),
        (Some(0), Some(0)),
        "{s}"
    );
    let probe = gw.session().await;
    let st = crate::common::backend_stats(&gw, &probe).await;
    assert_eq!(
        st["unsubscribe"],
        json!(["file:///d"]),
        "last subscriber gone: upstream unsubscribe"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn churn_of_a_thousand_sessions_leaves_every_table_empty() {
    let gw = pushy(&[]).await;
    let uris = ["file:///a", "file:///b", "file:///c"];
    let results = futures::future::join_all((0..1000).map(|i| {
        let gw = &gw;
        async move {
            let sid = gw.session().await;
            let sub = json!({"jsonrpc":"2.0","id":i,"method":"resources/subscribe","params":{"uri":uris[i % 3]}});
            let r = gw.post(Some(&sid), &sub).await;
            assert_eq!(r.json()["result"], json!({}));
            if i % 2 == 0 {
                let _listen = Listener::open(gw, &sid, None).await;
            }
            let r = gw.http.delete(&gw.url).header("mcp-session-id", &sid).send().await.unwrap();
            r.status()
        }
    }))
    .await;
    assert!(results.iter().all(|s| *s == StatusCode::NO_CONTENT));
    let s = stats(&gw).await;
    assert_eq!(
        (s["sessions"].as_u64(), s["tableEntries"].as_u64()),
        (Some(0), Some(0)),
        "{s}"
    );
}

//! 2025-11-25 tasks in shared mode: a task belongs to the session that created it.

use serde_json::{json, Value};

use crate::common::{emit, pushy, Listener};

#[tokio::test]
async fn tasks_belong_to_their_session() {
    let gw = pushy(&[]).await;
    let (a, b) = (gw.session().await, gw.session().await);
    let mut la = Listener::open(&gw, &a, None).await;
    let mut lb = Listener::open(&gw, &b, None).await;
    let create = json!({"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"work","arguments":{},"task":{"ttl":60000}}});
    let created = gw.post(Some(&a), &create).await.json();
    let task_id = created["result"]["task"]["taskId"]
        .as_str()
        .unwrap()
        .to_owned();

    let by_id =
        |m: &str, t: &str| json!({"jsonrpc":"2.0","id":"q","method":m,"params":{"taskId":t}});
    // The owner can use it.
    for m in ["tasks/get", "tasks/result"] {
        let r = gw.post(Some(&a), &by_id(m, &task_id)).await.json();
        assert!(r["result"].is_object(), "{m}: {r}");
    }
    // Anyone else gets exactly what an unknown task gets.
    for m in ["tasks/get", "tasks/result", "tasks/cancel"] {
        let foreign = gw.post(Some(&b), &by_id(m, &task_id)).await;
        let unknown = gw.post(Some(&b), &by_id(m, "task-does-not-exist")).await;
        assert_eq!(
            (foreign.status, foreign.text.clone()),
            (unknown.status, unknown.text),
            "{m}"
        );
        assert_eq!(foreign.error_code(), -32602);
    }
    let list = |sid: &str| {
        let gw = &gw;
        let sid = sid.to_owned();
        async move {
            let r = gw
                .post(
                    Some(&sid),
                    &json!({"jsonrpc":"2.0","id":"l","method":"tasks/list"}),
                )
                .await
                .json();
            r["result"]["tasks"]
                .as_array()
                .unwrap()
                .iter()
                .map(|t| t["taskId"].clone())
                .collect::<Vec<Value>>()
        }
    };
    assert_eq!(list(&a).await, vec![json!(task_id)]);
    assert_eq!(list(&b).await, Vec::<Value>::new());

    // Status notifications reach the owner only (B's sentinel proves non-delivery).
    let status = json!({"jsonrpc":"2.0","method":"notifications/tasks/status","params":{"taskId":task_id,"status":"completed","createdAt":"x","lastUpdatedAt":"x","ttl":null}});
    let sentinel = json!({"jsonrpc":"2.0","method":"notifications/prompts/list_changed"});
    emit(&gw, &b, json!([status, sentinel])).await;
    assert_eq!(la.next().await.data["params"]["taskId"], json!(task_id));
    assert_eq!(
        la.next().await.data["method"],
        "notifications/prompts/list_changed"
    );
    assert_eq!(
        lb.next().await.data["method"],
        "notifications/prompts/list_changed"
    );
}

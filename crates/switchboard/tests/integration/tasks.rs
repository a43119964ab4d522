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

/// A stateless (Modern) caller cannot reach a session's task: the same answer as an unknown
/// task, and absent from its `tasks/list`.
#[tokio::test]
async fn modern_callers_cannot_reach_session_tasks() {
    let gw = pushy(&[]).await;
    let a = gw.session().await;
    let create = json!({"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"work","arguments":{},"task":{"ttl":60000}}});
    let task_id = gw.post(Some(&a), &create).await.json()["result"]["task"]["taskId"]
        .as_str()
        .unwrap()
        .to_owned();
    let modern = |method: &str, params: Value| {
        let mut params = params;
        params["_meta"] = json!({"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}});
        let body = json!({"jsonrpc":"2.0","id":"m","method":method,"params":params}).to_string();
        let method = method.to_owned();
        let gw = &gw;
        async move {
            gw.post_raw(
                None,
                body,
                &[
                    ("mcp-protocol-version", "2026-07-28"),
                    ("mcp-method", method.as_str()),
                ],
            )
            .await
        }
    };
    for m in ["tasks/get", "tasks/result", "tasks/cancel"] {
        let foreign = modern(m, json!({"taskId": task_id})).await;
        let unknown = modern(m, json!({"taskId": "task-does-not-exist"})).await;
        assert_eq!(foreign.error_code(), -32602, "{m}: {}", foreign.text);
        assert_eq!(
            (foreign.status, foreign.text.clone()),
            (unknown.status, unknown.text),
            "{m}: no oracle"
        );
    }
    let list = modern("tasks/list", json!({})).await.json();
    let ids: Vec<Value> = list["result"]["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["taskId"].clone())
        .collect();
    assert!(!ids.contains(&json!(task_id)), "{list}");
    // The owner still has it.
    let r = gw
        .post(
            Some(&a),
            &json!({"jsonrpc":"2.0","id":2,"method":"tasks/get","params":{"taskId":task_id}}),
        )
        .await
        .json();
    assert!(r["result"].is_object(), "{r}");
}

//! Sessions across replicas under a policy: what a record gained through another replica
//! is judged here, as the caller, and made at this replica's backends.

use super::client::{replica, Endpoint};
use super::redis::Redis;
use super::updated_by;
use crate::common::Listener;

/// Under a policy, a subscription made through replica B is made at A's backend too when
/// the session's next request reaches A (reconcile judges it as the caller, its owner), so
/// the client's stream on A carries the update. Before (6083cf4), reconcile judged as the
/// session's recorded subscriber, which A, where the session was opened, never had: the
/// subscription was dropped there and the update never came (review).
#[tokio::test]
async fn a_subscription_made_elsewhere_is_made_here_under_a_policy() {
    let Some(redis) = Redis::start_or_skip("policy_reconcile").await else {
        return;
    };
    let dir = std::env::temp_dir().join(format!("sb-policy-reconcile-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let policy = dir.join("policy.cedar");
    std::fs::write(&policy, "permit(principal, action, resource);\n").unwrap();
    let args = ["--policy", policy.to_str().unwrap()];
    let (a, b) = tokio::join!(replica(&redis, &args), replica(&redis, &args));
    let (on_a, on_b) = (Endpoint::of(&a), Endpoint::of(&b));
    let sid = on_a.session().await;
    let uri = "test://watched-resource";
    let sub = serde_json::json!({"jsonrpc": "2.0", "id": 2, "method": "resources/subscribe",
                                 "params": {"uri": uri}});
    let r = on_b.post(Some(&sid), &sub).await;
    assert_eq!(r.json()["result"], serde_json::json!({}), "{}", r.text);
    // The session's next request on A: its record moved on B, and A makes it match.
    let mut stream = Listener::open(&a, &sid, None).await;
    updated_by(&on_a, &sid, uri).await;
    let first = stream.next().await;
    assert_eq!(first.data["params"]["uri"], uri, "{:?}", first.data);
    let _ = std::fs::remove_dir_all(&dir);
}

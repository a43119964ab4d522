//! A Modern `subscriptions/listen` on the virtual server: acknowledged with what the merged
//! capabilities feed, each URI subscribed at the backend that serves it, list changes from
//! every backend; a backend that does not serve a URI cannot announce it.

use serde_json::{json, Value};

use super::{call_text, serve, stdio, Era};
use crate::modern::next_message;

const WATCHED: &str = "test://watched-resource";

#[tokio::test]
async fn a_modern_listen_hears_every_backend_but_each_uri_only_from_its_server() {
    // Both fixtures list the watched URI; the first in configured order serves it (alpha).
    let yaml = format!("backends:\n{}{}", stdio("alpha", ""), stdio("beta", ""));
    let served = serve("listen", &yaml, None).await;
    let gw = &served.gw;
    let resp = super::modern_listen(
        gw,
        json!({"toolsListChanged": true, "resourceSubscriptions": [WATCHED, "test://nowhere"]}),
    )
    .await;
    let mut events = Box::pin(sse_stream::SseStream::from_bytes_stream(
        resp.bytes_stream(),
    ));
    let ack = next_message(&mut events).await;
    assert_eq!(
        ack["method"], "notifications/subscriptions/acknowledged",
        "{ack}"
    );
    // A URI no backend serves is not honoured.
    assert_eq!(
        ack["params"]["notifications"]["resourceSubscriptions"],
        json!([WATCHED]),
        "{ack}"
    );

    let sid = gw.session().await;
    let trigger = |tool: &'static str, kind: &'static str| {
        let sid = sid.clone();
        async move {
            let args = json!({"kind": kind, "uri": WATCHED});
            call_text(gw, Era::Legacy, Some(&sid), tool, args).await;
        }
    };
    // Beta announces alpha's URI, then beta's tools change: only the change arrives.
    trigger("beta_trigger", "resource_updated").await;
    trigger("beta_trigger", "tools_list_changed").await;
    let next = next_message(&mut events).await;
    assert_eq!(next["method"], "notifications/tools/list_changed", "{next}");
    // Alpha, which serves it, is heard.
    trigger("alpha_trigger", "resource_updated").await;
    let next: Value = next_message(&mut events).await;
    assert_eq!(next["method"], "notifications/resources/updated", "{next}");
    assert_eq!(next["params"]["uri"], WATCHED);
    assert_eq!(
        next["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"],
        "L"
    );
}

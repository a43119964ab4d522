//! Pagination through the virtual server: a backend's own pages followed, our cursors walked
//! to the end in both eras, and every cursor we did not issue for this list refused.

use std::collections::HashSet;

use reqwest::StatusCode;
use serde_json::{json, Value};

use super::{call_text, growy, list_all, modern, names, request, serve, stdio, tool_names, Era};
use crate::common::TestGateway;

/// Growy's tools (and its `grow`), in pages of 100 upstream.
const GROWN: usize = 1200;
/// Items per page of a merged list (`VmcpConfig::page_size`'s default).
const PAGE: usize = 500;

/// The error code of `method` with `cursor` in `era`.
async fn refused(gw: &TestGateway, era: Era, sid: &str, method: &str, cursor: Value) -> i64 {
    let params = json!({ "cursor": cursor });
    let r = match era {
        Era::Legacy => {
            gw.post(Some(sid), &request(json!("c"), method, params))
                .await
        }
        Era::Modern => modern(gw, json!("c"), method, params, &[]).await,
    };
    let answer = r.json();
    assert!(
        answer.get("result").is_none(),
        "{era:?} accepted {cursor}: {answer}"
    );
    assert_eq!(answer["id"], "c");
    assert_ne!(r.status, StatusCode::INTERNAL_SERVER_ERROR);
    r.error_code()
}

/// The first page's `nextCursor` of `method` in `era`.
async fn first_cursor(gw: &TestGateway, era: Era, sid: &str, method: &str) -> String {
    let r = match era {
        Era::Legacy => {
            gw.post(Some(sid), &request(json!(1), method, json!({})))
                .await
        }
        Era::Modern => modern(gw, json!(1), method, json!({}), &[]).await,
    };
    let answer = r.json();
    let page = answer["result"]["tools"].as_array().unwrap();
    assert_eq!(page.len(), PAGE, "a full first page");
    answer["result"]["nextCursor"].as_str().unwrap().to_owned()
}

/// Garbage, a too long cursor, a non-string, and a real cursor of another list: -32602.
async fn refuses_what_it_did_not_issue(gw: &TestGateway, era: Era, sid: &str) {
    for garbage in [
        json!("garbage"),
        json!(""),
        json!("A".repeat(4000)),
        json!(7),
    ] {
        let code = refused(gw, era, sid, "tools/list", garbage.clone()).await;
        assert_eq!(code, -32602, "{era:?} {garbage}");
    }
    let tools_cursor = first_cursor(gw, era, sid, "tools/list").await;
    let code = refused(gw, era, sid, "prompts/list", json!(tools_cursor)).await;
    assert_eq!(code, -32602, "{era:?}: a tools cursor on prompts/list");
}

#[tokio::test]
async fn merged_lists_page_through_our_cursors_and_refuse_a_forged_one() {
    let yaml = format!(
        "backends:\n{}{}",
        stdio("alpha", ""),
        growy("growy", GROWN, 100)
    );
    let served = serve("pages", &yaml, None).await;
    let gw = &served.gw;
    let sid = gw.session().await;
    let (items, pages) = list_all(gw, Era::Legacy, Some(&sid), "tools/list", "tools").await;
    let listed = names(&items);
    let unique: HashSet<&String> = listed.iter().collect();
    assert_eq!(unique.len(), listed.len(), "an item was listed twice");
    // Every upstream page arrived (growy's first and last), and the fixture's tools too.
    for want in ["g0000", "g0099", "g0100", "g1199", "grow", "echo"] {
        assert!(unique.contains(&want.to_owned()), "{want} missing");
    }
    assert!(listed.len() > GROWN + 20, "{}", listed.len());
    assert_eq!(pages, listed.len().div_ceil(PAGE), "pages of {PAGE}");
    let (modern_items, modern_pages) = list_all(gw, Era::Modern, None, "tools/list", "tools").await;
    assert_eq!(names(&modern_items), listed);
    assert_eq!(modern_pages, pages);

    for era in [Era::Legacy, Era::Modern] {
        refuses_what_it_did_not_issue(gw, era, &sid).await;
    }

    // Once the list changed, an old cursor is refused (no silent skip or repeat): the client
    // starts again and sees the new tool.
    let stale = first_cursor(gw, Era::Legacy, &sid, "tools/list").await;
    let grown = call_text(gw, Era::Legacy, Some(&sid), "grow", json!({"name": "late"})).await;
    assert_eq!(grown, "grown late");
    for era in [Era::Legacy, Era::Modern] {
        let code = refused(gw, era, &sid, "tools/list", json!(stale)).await;
        assert_eq!(
            code, -32602,
            "{era:?}: a cursor of the list before it changed"
        );
        let s = (era == Era::Legacy).then_some(sid.as_str());
        let again = tool_names(gw, era, s).await;
        assert_eq!(again.len(), listed.len() + 1, "{era:?}");
        assert!(again.iter().any(|n| n == "late"), "{era:?}");
    }
}

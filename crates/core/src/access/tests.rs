//! Unit tests of admission, list filtering and audit lines.

use super::lines::CLIENT_INFO_LIMIT;
use super::*;
use crate::destination::Name;

#[derive(Debug)]
struct OnlyEcho;

impl Authorizer for OnlyEcho {
    fn is_allowed(&self, _: &Principal, action: &str, target: &Target) -> bool {
        action == "list_tools" || (action == "call_tool" && *target == Target::Tool("echo".into()))
    }
}

fn access() -> Access {
    Access {
        authorizer: Some(Arc::new(OnlyEcho)),
        ..Access::default()
    }
}

#[test]
fn lists_keep_only_permitted_items_verbatim() {
    let access = access();
    let p = Principal::anonymous();
    let req = br#"{"jsonrpc":"2.0","id":12345678901234567890123,"method":"tools/list"}"#;
    let msg = Message::parse(req).unwrap();
    let admitted = access.admit(&p, None, &msg, None, Path::Legacy).unwrap();
    let body = br#"{"jsonrpc":"2.0","id":12345678901234567890123,"result":{"tools":[{"name":"add","x":1.0},{"name":"echo","inputSchema":{"default":1e400}}],"nextCursor":"c"}}"#;
    let out = admitted
        .finish(Ok(crate::Answer::ok(body.to_vec())))
        .map(|a| a.body)
        .unwrap();
    assert_eq!(
        std::str::from_utf8(&out).unwrap(),
        r#"{"jsonrpc":"2.0","id":12345678901234567890123,"result":{"tools":[{"name":"echo","inputSchema":{"default":1e400}}],"nextCursor":"c"}}"#
    );
}

#[derive(Debug)]
struct NoSecretSubscriptions;

impl Authorizer for NoSecretSubscriptions {
    fn is_allowed(&self, _: &Principal, action: &str, target: &Target) -> bool {
        !(action == "subscribe" && *target == Target::Resource("file:///secret".into()))
    }
}

#[test]
fn a_listen_is_judged_on_every_uri_it_subscribes() {
    let access = Access {
        authorizer: Some(Arc::new(NoSecretSubscriptions)),
        ..Access::default()
    };
    let p = Principal::anonymous();
    for subs in [
        r#"["file:///secret"]"#,
        r#"["file:///secret",0]"#,
        r#"[0,"file:///secret"]"#,
    ] {
        let req = format!(
            r#"{{"jsonrpc":"2.0","id":1,"method":"subscriptions/listen","params":{{"notifications":{{"resourceSubscriptions":{subs}}}}}}}"#
        );
        let msg = Message::parse(req.as_bytes()).unwrap();
        // What the listen would subscribe, and what admission must therefore have judged.
        let uris = crate::modern_listen::Filter::parse(msg.params).uris;
        assert_eq!(uris, ["file:///secret"], "{subs}");
        let admitted = access.admit(&p, None, &msg, None, Path::Modern);
        assert!(matches!(admitted, Err(CoreError::Forbidden(_))), "{subs}");
    }
    // A URI a C-string backend reads as another (`file:///secret`) is refused, judged or not.
    let req = r#"{"jsonrpc":"2.0","id":1,"method":"subscriptions/listen","params":{"notifications":{"resourceSubscriptions":["file:///open","file:///secret\u0000x"]}}}"#;
    let msg = Message::parse(req.as_bytes()).unwrap();
    let admitted = access.admit(&p, None, &msg, None, Path::Modern);
    assert!(matches!(admitted, Err(CoreError::InvalidParams(_))));
}

#[test]
fn calls_and_unknown_methods_are_checked() {
    let access = access();
    let p = Principal::anonymous();
    for (req, ok) in [
        (
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo"}}"#,
            true,
        ),
        (
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"add"}}"#,
            false,
        ),
        (r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#, true),
        (r#"{"jsonrpc":"2.0","id":1,"method":"made/up"}"#, false),
        (r#"{"jsonrpc":"2.0","id":1,"method":"prompts/list"}"#, false),
        (
            r#"{"jsonrpc":"2.0","id":1,"method":"resources/subscribe","params":{"uri":"x"}}"#,
            false,
        ),
    ] {
        let msg = Message::parse(req.as_bytes()).unwrap();
        let got = access.admit(&p, None, &msg, None, Path::Legacy);
        assert_eq!(got.is_ok(), ok, "{req}");
        if let Ok(a) = got {
            let _ = a.finish(Ok(crate::Answer::ok(Vec::new())));
        }
    }
}

#[test]
fn capability_families_follow_list_permissions() {
    let caps = json!({"tools":{"listChanged":true},"prompts":{},"logging":{}});
    let out = access().visible_capabilities(&Principal::anonymous(), &caps);
    assert_eq!(out, json!({"tools":{"listChanged":true},"logging":{}}));
}

/// Collects what the audit writer thread writes, one write per line.
struct Lines(std::sync::mpsc::Sender<Vec<u8>>);

impl std::io::Write for Lines {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let _ = self.0.send(buf.to_vec());
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

fn audited() -> (Access, std::sync::mpsc::Receiver<Vec<u8>>) {
    let (tx, rx) = std::sync::mpsc::channel();
    let log = AuditLog::to_writer(Box::new(Lines(tx)), None).unwrap();
    let access = Access {
        audit: Some(log),
        ..Access::default()
    };
    (access, rx)
}

/// The line's member names, sorted (their order depends on serde_json's features).
fn keys(line: &Value) -> Vec<&str> {
    let mut keys: Vec<&str> = line
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    keys.sort_unstable();
    keys
}

/// The next line, raw and parsed; it must be exactly one line.
fn next_line(rx: &std::sync::mpsc::Receiver<Vec<u8>>) -> (String, Value) {
    let raw = rx
        .recv_timeout(std::time::Duration::from_secs(10))
        .expect("an audit line");
    let raw = String::from_utf8(raw).unwrap();
    assert!(
        raw.ends_with('\n') && raw.matches('\n').count() == 1,
        "{raw:?}"
    );
    let parsed = serde_json::from_str(&raw).unwrap();
    (raw, parsed)
}

#[test]
fn initialize_lines_label_the_session_and_bound_the_client_info() {
    let (access, rx) = audited();
    let alice = Principal {
        issuer: "api-key".into(),
        subject: "alice".into(),
        claims: serde_json::Map::new(),
        credential: None,
    };
    let name = format!("evil\"}},\n\u{2028}{}", "é".repeat(300));
    let req = json!({"jsonrpc":"2.0","id":7,"method":"initialize","params":{
        "protocolVersion":"2025-11-25","capabilities":{},
        "clientInfo":{"name":name,"version":"1.2"}}})
    .to_string();
    let msg = Message::parse(req.as_bytes()).unwrap();
    let store = crate::session::Sessions::new(4, std::time::Duration::from_secs(60));
    let sid = store.create("2025-11-25", &alice).unwrap();

    access
        .audit_only(&alice, &msg)
        .finish_initialize(Ok((&sid, "2025-11-25", b"{}".as_slice())));
    let (raw, line) = next_line(&rx);
    assert!(
        !raw.contains(sid.as_str()),
        "the raw session id is never logged"
    );
    assert_eq!(line["principal"], json!({"iss":"api-key","sub":"alice"}));
    assert_eq!(line["session"], session_label(sid.as_str()));
    assert_eq!(
        (&line["era"], &line["method"], &line["outcome"], &line["id"]),
        (
            &json!("legacy"),
            &json!("initialize"),
            &json!("allowed"),
            &json!("7")
        )
    );
    assert_eq!(line["protocolVersion"], "2025-11-25");
    assert_eq!(line["client"]["version"], "1.2");
    let kept = line["client"]["name"].as_str().unwrap();
    assert!(kept.len() <= CLIENT_INFO_LIMIT && kept.len() > CLIENT_INFO_LIMIT - 4);
    assert!(
        name.starts_with(kept),
        "a prefix, cut on a character boundary"
    );
    assert_eq!(line["clientTruncated"], true);
    assert!(
        line.get("response").is_none(),
        "bodies only with a body limit"
    );

    // Refused: no session, the reason; the client still named.
    access
        .audit_only(&alice, &msg)
        .finish_initialize(Err(&CoreError::TooManySessions(4)));
    let (_, line) = next_line(&rx);
    assert_eq!(
        (&line["outcome"], &line["reason"], &line["session"]),
        (
            &json!("error"),
            &json!("too many sessions (limit 4)"),
            &json!("stateless")
        )
    );
    assert!(line.get("protocolVersion").is_none() && line["client"]["version"] == "1.2");

    // Abandoned (the client left): cancelled.
    drop(access.audit_only(&alice, &msg));
    let (_, line) = next_line(&rx);
    assert_eq!(
        (&line["outcome"], &line["reason"]),
        (&json!("error"), &json!("cancelled"))
    );
}

#[test]
fn session_ends_and_refused_credentials_are_events() {
    let (access, rx) = audited();
    let id = "0123456789abcdef0123456789abcdef";
    access.record_session_end(&("iss".into(), "bob".into()), id, "expired");
    let (raw, line) = next_line(&rx);
    assert!(!raw.contains(id));
    assert_eq!(
        keys(&line),
        [
            "era",
            "event",
            "outcome",
            "principal",
            "reason",
            "session",
            "time"
        ]
    );
    assert_eq!(
        (&line["principal"]["sub"], &line["session"], &line["event"]),
        (&json!("bob"), &json!("01234567…"), &json!("session_end"))
    );
    assert_eq!(
        (&line["outcome"], &line["reason"]),
        (&json!("ended"), &json!("expired"))
    );

    access.record_unauthenticated(Unauthenticated::Missing, "GET", "/sse");
    let (_, line) = next_line(&rx);
    assert_eq!(
        keys(&line),
        ["event", "httpMethod", "outcome", "path", "reason", "time"]
    );
    assert_eq!(
        (
            &line["outcome"],
            &line["reason"],
            &line["httpMethod"],
            &line["path"]
        ),
        (
            &json!("unauthenticated"),
            &json!("missing_credential"),
            &json!("GET"),
            &json!("/sse")
        )
    );
    access.record_unauthenticated(Unauthenticated::Invalid("unknown API key"), "POST", "/mcp");
    let (_, line) = next_line(&rx);
    assert_eq!(
        (&line["reason"], &line["detail"]),
        (&json!("invalid_credential"), &json!("unknown API key"))
    );
}

/// Merged lists of two backends: `exit` is alpha's, exposed as `a_exit`; `echo` is beta's;
/// anything else is unknown.
#[derive(Debug)]
struct TwoBackends;

fn origin(backend: &str, original: &str) -> Origin {
    Origin {
        backend: BackendId::try_from(backend).unwrap(),
        original: original.into(),
    }
}

impl Origins for TwoBackends {
    fn of_request(&self, _: &Message<'_>, target: &Target) -> Option<Origin> {
        self.of_item(target)
    }

    fn of_item(&self, target: &Target) -> Option<Origin> {
        match target.name()? {
            "a_exit" => Some(origin("alpha", "exit")),
            "echo" => Some(origin("beta", "echo")),
            _ => None,
        }
    }
}

/// Permits listing and every call except alpha's `exit`, by origin.
#[derive(Debug)]
struct NotAlphasExit;

impl Authorizer for NotAlphasExit {
    fn is_allowed(&self, _: &Principal, _: &str, _: &Target) -> bool {
        unreachable!("the gateway asks with the origin")
    }

    fn is_allowed_at(&self, _: &Principal, action: &str, _: &Target, o: Option<&Origin>) -> bool {
        action == "list_tools" || o != Some(&origin("alpha", "exit"))
    }
}

#[test]
fn admission_lists_and_audit_see_the_backend_and_original_name() {
    let (mut access, rx) = audited();
    access.authorizer = Some(Arc::new(NotAlphasExit));
    let p = Principal::anonymous();
    let origins: Option<&dyn Origins> = Some(&TwoBackends);
    let call = |name: &str| {
        json!({"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":name}}).to_string()
    };

    // Forbidden by origin, whatever it is exposed as; the denial names the backend.
    let req = call("a_exit");
    let msg = Message::parse(req.as_bytes()).unwrap();
    assert!(access.admit(&p, None, &msg, origins, Path::Legacy).is_err());
    let (_, line) = next_line(&rx);
    assert_eq!(
        (&line["outcome"], &line["backend"], &line["original"]),
        (&json!("denied"), &json!("alpha"), &json!("exit"))
    );

    // Allowed: `backend`, and no `original` where it is the exposed name.
    let req = call("echo");
    let msg = Message::parse(req.as_bytes()).unwrap();
    let admitted = access.admit(&p, None, &msg, origins, Path::Legacy).unwrap();
    // Routed where admission saw it: fine; anywhere else: refused.
    let beta = BackendId::try_from("beta").unwrap();
    let alpha = BackendId::try_from("alpha").unwrap();
    assert!(admitted.confirm_route(&beta, &Name::AsClient).is_ok());
    assert!(admitted.confirm_route(&alpha, &Name::AsClient).is_err());
    let renamed = Name::Renamed("other".into());
    assert!(admitted.confirm_route(&beta, &renamed).is_err());
    let _ = admitted
        .finish(Ok(crate::Answer::ok(
            br#"{"jsonrpc":"2.0","id":1,"result":{}}"#.to_vec(),
        )))
        .map(|a| a.body);
    let (_, line) = next_line(&rx);
    assert_eq!(
        (&line["backend"], &line["outcome"]),
        (&json!("beta"), &json!("allowed"))
    );
    assert!(line.get("original").is_none(), "{line}");

    // Lists: alpha's exit and an item the merged lists no longer hold are left out.
    let req = br#"{"jsonrpc":"2.0","id":2,"method":"tools/list"}"#;
    let msg = Message::parse(req).unwrap();
    let admitted = access.admit(&p, None, &msg, origins, Path::Legacy).unwrap();
    let body = br#"{"jsonrpc":"2.0","id":2,"result":{"tools":[{"name":"a_exit"},{"name":"gone"},{"name":"echo"}]}}"#;
    let out = admitted
        .finish(Ok(crate::Answer::ok(body.to_vec())))
        .map(|a| a.body)
        .unwrap();
    assert_eq!(
        std::str::from_utf8(&out).unwrap(),
        r#"{"jsonrpc":"2.0","id":2,"result":{"tools":[{"name":"echo"}]}}"#
    );
    let (_, line) = next_line(&rx);
    assert!(
        line.get("backend").is_none(),
        "a list has no one backend: {line}"
    );

    // Not aggregating: no origin, nothing to confirm, the exposed name is all there is.
    let req = call("a_exit");
    let msg = Message::parse(req.as_bytes()).unwrap();
    let admitted = access.admit(&p, None, &msg, None, Path::Legacy).unwrap();
    assert!(admitted.confirm_route(&alpha, &Name::AsClient).is_ok());
    drop(admitted);
    let (_, line) = next_line(&rx);
    assert!(line.get("backend").is_none(), "{line}");
}

/// A list the policy cannot read (one holding serde_json's RawValue key, which
/// `Message::parse` refuses) becomes an error, not the whole list unfiltered (review LOW:
/// no producer yields one today; the filter must not depend on that).
#[test]
fn a_list_that_cannot_be_read_is_an_error_not_unfiltered() {
    let access = access();
    let p = Principal::anonymous();
    let msg = Message::parse(br#"{"jsonrpc":"2.0","id":7,"method":"tools/list"}"#).unwrap();
    let admitted = access.admit(&p, None, &msg, None, Path::Legacy).unwrap();
    let body = br#"{"jsonrpc":"2.0","id":7,"result":{"tools":[{"name":"add","inputSchema":{"$serde_json::private::RawValue":"1"}},{"name":"echo"}]}}"#;
    let answer = admitted
        .finish(Ok(crate::Answer::ok(body.to_vec())))
        .unwrap();
    // An error with its code: counted as one, and a Modern caller's status says so.
    assert_eq!(answer.error_code, Some(-32603));
    let out = std::str::from_utf8(&answer.body).unwrap();
    assert!(!out.contains("add"), "{out}");
    assert!(out.contains(r#""id":7"#) && out.contains("-32603"), "{out}");
}

/// A list member the policy cannot filter (not an array) is an error, not passed as it came;
/// a result without the member has nothing to filter and passes.
#[test]
fn a_list_member_that_is_not_a_list_is_an_error_not_unfiltered() {
    let access = access();
    let p = Principal::anonymous();
    let finish = |result: &str| {
        let msg = Message::parse(br#"{"jsonrpc":"2.0","id":7,"method":"tools/list"}"#).unwrap();
        let admitted = access.admit(&p, None, &msg, None, Path::Legacy).unwrap();
        let body = format!(r#"{{"jsonrpc":"2.0","id":7,"result":{result}}}"#);
        admitted
            .finish(Ok(crate::Answer::ok(body.into_bytes())))
            .unwrap()
    };
    let answer = finish(r#"{"tools":{"0":{"name":"add"},"1":{"name":"echo"}}}"#);
    assert_eq!(answer.error_code, Some(-32603));
    let out = std::str::from_utf8(&answer.body).unwrap();
    assert!(!out.contains("add") && out.contains("-32603"), "{out}");

    for nothing in [
        r#"{"nextCursor":"c"}"#,
        r#"{"tools":null,"nextCursor":"c"}"#,
    ] {
        let answer = finish(nothing);
        assert_eq!(answer.error_code, None, "{nothing}");
        let out = std::str::from_utf8(&answer.body).unwrap();
        assert!(out.contains(r#""nextCursor":"c""#), "{out}");
    }
    // Read two ways (review LOW): the filter judged `tools` and passed `Tools`, or judged an
    // item by the last of two names; a case-insensitive or first-copy parser reads the other.
    for two_ways in [
        r#"{"Tools":[{"name":"add"}]}"#,
        r#"{"tools":[{"name":"echo"}],"Tools":[{"name":"add"}]}"#,
        r#"{"tools":[{"name":"add","name":"echo"}]}"#,
        r#"{"tools":[{"name":"echo","Name":"add"}]}"#,
    ] {
        let answer = finish(two_ways);
        assert_eq!(answer.error_code, Some(-32603), "{two_ways}");
        let out = std::str::from_utf8(&answer.body).unwrap();
        assert!(!out.contains("add"), "{out}");
    }
}

#[derive(Debug)]
struct AllButAdd;

impl Authorizer for AllButAdd {
    fn is_allowed(&self, _: &Principal, _: &str, target: &Target) -> bool {
        *target != Target::Tool("add".into())
    }
}

/// An item named in another case only (`Name`) is judged by no name a deny-list refuses, and
/// a case-insensitive parser reads the denied name: not shown (review LOW of 0899a9f).
#[test]
fn an_item_named_in_another_case_only_is_not_shown() {
    let access = Access {
        authorizer: Some(Arc::new(AllButAdd)),
        ..Access::default()
    };
    let p = Principal::anonymous();
    let msg = Message::parse(br#"{"jsonrpc":"2.0","id":7,"method":"tools/list"}"#).unwrap();
    let admitted = access.admit(&p, None, &msg, None, Path::Legacy).unwrap();
    let body = br#"{"jsonrpc":"2.0","id":7,"result":{"tools":[{"Name":"add"},{"name":"echo"}]}}"#;
    let answer = admitted
        .finish(Ok(crate::Answer::ok(body.to_vec())))
        .unwrap();
    assert_eq!(answer.error_code, None);
    let out = std::str::from_utf8(&answer.body).unwrap();
    assert!(!out.contains("add") && out.contains("echo"), "{out}");
}

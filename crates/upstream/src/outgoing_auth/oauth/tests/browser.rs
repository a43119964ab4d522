//! The browser half of a flow: the callback's checks, the start page's binding to the browser
//! that clicked it, and where a click may come from.

use super::*;

#[tokio::test]
async fn the_callback_checks_state_and_iss_before_anything_else() {
    let flows = Arc::new(Flows::default());
    let b = backend(&flows);
    assert_eq!(
        complete(&flows, CB, "code=x", browser_of(1)).await,
        Err(CallbackError::UnknownState)
    );
    assert_eq!(
        complete(&flows, CB, "state=nope&code=x", browser_of(1)).await,
        Err(CallbackError::UnknownState)
    );

    flows.insert("s1".into(), flow(&b, 1, true)).unwrap();
    assert_eq!(
        complete(
            &flows,
            CB,
            "state=s1&code=x&iss=https%3A%2F%2Fevil.example.com",
            browser_of(1)
        )
        .await,
        Err(CallbackError::IssuerMismatch)
    );
    // Single use: the state is gone, whatever the first use's outcome.
    assert_eq!(
        complete(
            &flows,
            CB,
            "state=s1&code=x&iss=http%3A%2F%2Fas%3A9",
            browser_of(1)
        )
        .await,
        Err(CallbackError::UnknownState)
    );
    flows.insert("s2".into(), flow(&b, 1, true)).unwrap();
    assert_eq!(
        complete(&flows, CB, "state=s2&code=x", browser_of(1)).await,
        Err(CallbackError::IssuerMissing)
    );
    // Compared as written: a trailing slash is another issuer.
    flows.insert("s3".into(), flow(&b, 1, true)).unwrap();
    assert_eq!(
        complete(
            &flows,
            CB,
            "state=s3&code=x&iss=http%3A%2F%2Fas%3A9%2F",
            browser_of(1)
        )
        .await,
        Err(CallbackError::IssuerMismatch)
    );
    // Not advertised but present: compared anyway.
    flows.insert("s4".into(), flow(&b, 1, false)).unwrap();
    assert_eq!(
        complete(
            &flows,
            CB,
            "state=s4&code=x&iss=http%3A%2F%2Fevil",
            browser_of(1)
        )
        .await,
        Err(CallbackError::IssuerMismatch)
    );
    // A duplicated parameter is refused.
    flows.insert("s5".into(), flow(&b, 1, false)).unwrap();
    assert_eq!(
        complete(&flows, CB, "state=s5&state=s5&code=x", browser_of(1)).await,
        Err(CallbackError::UnknownState)
    );
    // Passing the checks reaches the token request (nothing listens: unreachable), and no
    // token is kept for anyone.
    flows.insert("s6".into(), flow(&b, 1, false)).unwrap();
    assert!(matches!(
        complete(&flows, CB, "state=s6&code=x", browser_of(1)).await,
        Err(CallbackError::Token(OutgoingAuthError::Unreachable))
    ));
    assert!(!b.has_token("p1").await);
    // An error answer from the right issuer is a refusal, not a token.
    flows.insert("s7".into(), flow(&b, 1, false)).unwrap();
    assert_eq!(
        complete(&flows, CB, "state=s7&error=access_denied", browser_of(1)).await,
        Err(CallbackError::Denied("access_denied".into()))
    );
}

#[test]
fn errors_and_debug_output_hold_no_secret() {
    let flows = Arc::new(Flows::default());
    let b = backend(&flows);
    let consent = OutgoingAuthError::ConsentRequired(Box::new(Consent {
        backend: "gh".into(),
        url: "http://as/authorize?state=SECRETSTATE".into(),
        elicitation_id: "e".into(),
    }));
    assert!(!consent.to_string().contains("SECRETSTATE"));
    assert!(!format!("{b:?}").contains("Secret"));
    let reg = registration::Registration {
        issuer: "i".into(),
        client_id: "c".into(),
        secret: Some(Secret::new("hunter2")),
        auth: TokenAuth::Basic,
        dynamic: true,
    };
    assert!(!format!("{reg:?}").contains("hunter2"));
}

#[test]
fn client_metadata_documents_name_themselves_and_the_refresh_grant() {
    let doc = client_metadata(
        "https://gw.example/oauth/callback",
        Some("https://gw.example/oauth/client-metadata.json"),
        TokenAuth::None,
    );
    assert_eq!(
        doc["client_id"],
        "https://gw.example/oauth/client-metadata.json"
    );
    assert_eq!(doc["application_type"], "web");
    assert!(doc["grant_types"]
        .as_array()
        .unwrap()
        .contains(&json!("refresh_token")));
    let native = client_metadata("http://127.0.0.1:9/oauth/callback", None, TokenAuth::None);
    assert_eq!(native["application_type"], "native");
    assert!(native.get("client_id").is_none());
}

/// A click from the page of the gateway at `http://127.0.0.1:2`.
const HERE: ClickFrom<'static> = ClickFrom {
    origin: Some("http://127.0.0.1:2"),
    fetch_site: Some("same-origin"),
};

#[tokio::test]
async fn a_flow_completes_only_in_the_browser_that_clicked_its_start_page() {
    let flows = Arc::new(Flows::default());
    flows.set_public_url("http://127.0.0.1:2");
    let b = backend(&flows);
    flows.insert("s1".into(), fresh(&b, 1)).unwrap();
    let page = flows.start_page("start1").unwrap();
    assert_eq!(page.principal, "an unknown caller");
    assert_eq!(page.server, "http://as:9");
    assert!(page.csrf_cookie.header().contains("SameSite=Strict"));

    // Another site's form (no Strict cookie), or a wrong token: refused, nothing bound.
    assert_eq!(
        flows
            .begin(b"flow=start1&csrf=csrf", None, HERE)
            .unwrap_err(),
        StartError::Forged
    );
    assert_eq!(
        flows
            .begin(
                b"flow=start1&csrf=guess",
                Some("sb_csrf_start1=guess"),
                HERE
            )
            .unwrap_err(),
        StartError::Forged
    );
    // The authorization server's URL opened without the start page: no browser cookie.
    flows.insert("s0".into(), fresh(&b, 2)).unwrap();
    assert_eq!(
        complete(&flows, CB, "state=s0&code=x", None).await,
        Err(CallbackError::OtherBrowser)
    );

    // The click from the page: bound to this browser, once.
    let started = flows
        .begin(b"flow=start1&csrf=csrf", Some("sb_csrf_start1=csrf"), HERE)
        .unwrap();
    assert_eq!(started.location, "http://as:9/authorize?state=x");
    let set = started.cookie.header();
    assert!(
        set.starts_with("sb_oauth_start1=") && set.contains("SameSite=Lax"),
        "{set}"
    );
    assert_eq!(
        flows
            .begin(b"flow=start1&csrf=csrf", Some("sb_csrf_start1=csrf"), HERE)
            .unwrap_err(),
        StartError::AlreadyStarted
    );
    assert_eq!(
        flows.start_page("start1").unwrap_err(),
        StartError::AlreadyStarted
    );
    // Another browser (another cookie value) brings the code back: refused, and the flow
    // is over (single use), so the right browser cannot complete it afterwards either.
    assert_eq!(
        complete(&flows, CB, "state=s1&code=x", Some("sb_oauth_start1=other")).await,
        Err(CallbackError::OtherBrowser)
    );
    assert_eq!(flows.start_page("start1").unwrap_err(), StartError::Unknown);
    assert!(!b.has_token("p1").await);

    // The browser that clicked passes the check and reaches the token request (nothing
    // listens there).
    flows.insert("s3".into(), fresh(&b, 1)).unwrap();
    let value = flows
        .begin(b"flow=start1&csrf=csrf", Some("sb_csrf_start1=csrf"), HERE)
        .unwrap()
        .cookie
        .header();
    let value = value.split(';').next().unwrap();
    assert!(matches!(
        complete(&flows, CB, "state=s3&code=x", Some(value)).await,
        Err(CallbackError::Token(OutgoingAuthError::Unreachable))
    ));
}

#[tokio::test]
async fn a_click_from_another_origin_or_without_one_is_refused() {
    let flows = Arc::new(Flows::default());
    flows.set_public_url("http://127.0.0.1:2");
    let b = backend(&flows);
    flows.insert("s1".into(), fresh(&b, 1)).unwrap();
    let form: &[u8] = b"flow=start1&csrf=csrf";
    let cookie = Some("sb_csrf_start1=csrf");
    // A page on another port of the same host is same-site: its form carries the Strict
    // cookie, but not the gateway's origin.
    let sibling = ClickFrom {
        origin: Some("http://127.0.0.1:3"),
        fetch_site: Some("same-site"),
    };
    let no_origin = ClickFrom {
        origin: None,
        fetch_site: None,
    };
    let null = ClickFrom {
        origin: Some("null"),
        fetch_site: None,
    };
    let cross = ClickFrom {
        origin: Some("http://127.0.0.1:2"),
        fetch_site: Some("cross-site"),
    };
    let null_elsewhere = ClickFrom {
        origin: Some("null"),
        fetch_site: Some("cross-site"),
    };
    for from in [sibling, no_origin, null, cross, null_elsewhere] {
        assert_eq!(
            flows.begin(form, cookie, from).unwrap_err(),
            StartError::Forged
        );
    }
    // Nothing was bound: the gateway's own page still can.
    assert!(flows.begin(form, cookie, HERE).is_ok());
}

/// A browser posts a form with `Origin: null` when its page's referrer policy withholds the
/// origin (the start page said `no-referrer`, so every real browser's click was refused as
/// forged: review HIGH); beside `Sec-Fetch-Site: same-origin`, which no page can set, it is
/// the gateway's own page.
#[tokio::test]
async fn a_click_with_origin_null_from_the_gateways_own_page_is_taken() {
    let flows = Arc::new(Flows::default());
    flows.set_public_url("http://127.0.0.1:2");
    let b = backend(&flows);
    flows.insert("s1".into(), fresh(&b, 1)).unwrap();
    let from = ClickFrom {
        origin: Some("null"),
        fetch_site: Some("same-origin"),
    };
    let cookie = Some("sb_csrf_start1=csrf");
    assert!(flows.may_be_a_click(cookie, from));
    assert!(flows.begin(b"flow=start1&csrf=csrf", cookie, from).is_ok());
}

/// The clicked flow's cookie is the newest a browser sends (older ones of the same path come
/// first): it is looked at however many older ones come before it (review LOW: the first
/// eight were kept, and a ninth flow's click was refused).
#[tokio::test]
async fn the_newest_anti_forgery_cookie_is_looked_at_behind_many_older_ones() {
    let flows = Arc::new(Flows::default());
    flows.set_public_url("http://127.0.0.1:2");
    let b = backend(&flows);
    flows.insert("s1".into(), fresh(&b, 1)).unwrap();
    let older: Vec<String> = (0..12).map(|i| format!("sb_csrf_gone{i:011}=x")).collect();
    let cookies = format!("{}; sb_csrf_start1=csrf", older.join("; "));
    assert!(flows.may_be_a_click(Some(&cookies), HERE));
}

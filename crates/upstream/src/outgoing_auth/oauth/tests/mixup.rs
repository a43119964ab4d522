//! Mix-up (RFC 9700 §4.4): two remote backends, each its own authorization server, one of
//! them hostile. Evil's authorize endpoint sends the user's browser on to the honest server
//! with evil's flow's `state`; the honest server (no `iss`) sends its code back to the
//! gateway. That code must never be posted to evil's token endpoint.

use parking_lot::Mutex;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

use super::*;

/// A remote MCP server that is its own authorization server, on loopback: protected-resource
/// and server metadata, dynamic registration, a token endpoint. It keeps every request it
/// got (`method path`, body).
struct Server {
    base: String,
    seen: Arc<Mutex<Vec<(String, String)>>>,
}

impl Server {
    async fn start(cimd: bool) -> Server {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let seen: Arc<Mutex<Vec<(String, String)>>> = Arc::default();
        let (log, me) = (seen.clone(), base.clone());
        tokio::spawn(async move {
            while let Ok((mut sock, _)) = listener.accept().await {
                let (log, me) = (log.clone(), me.clone());
                tokio::spawn(async move {
                    let Some((line, body)) = read_request(&mut sock).await else {
                        return;
                    };
                    let answer = answer(&me, &line, cimd);
                    log.lock().push((line, body));
                    let (status, json) = answer.map_or((404, "{}".to_owned()), |j| (200, j));
                    let reply = format!(
                        "HTTP/1.1 {status} X\r\ncontent-type: application/json\r\n\
                         content-length: {}\r\nconnection: close\r\n\r\n{json}",
                        json.len()
                    );
                    let _ = sock.write_all(reply.as_bytes()).await;
                });
            }
        });
        Server { base, seen }
    }

    /// The bodies of the requests to `line` (`POST /token`, …).
    fn bodies(&self, line: &str) -> Vec<String> {
        let seen = self.seen.lock();
        seen.iter()
            .filter(|(l, _)| l == line)
            .map(|(_, b)| b.clone())
            .collect()
    }
}

fn answer(me: &str, line: &str, cimd: bool) -> Option<String> {
    let doc = match line {
        "GET /.well-known/oauth-protected-resource/mcp" => {
            json!({"resource": format!("{me}/mcp"), "authorization_servers": [me]})
        }
        "GET /.well-known/oauth-authorization-server" => json!({
            "issuer": me,
            "authorization_endpoint": format!("{me}/authorize"),
            "token_endpoint": format!("{me}/token"),
            "registration_endpoint": format!("{me}/register"),
            "code_challenge_methods_supported": ["S256"],
            "client_id_metadata_document_supported": cimd,
        }),
        "POST /register" => json!({"client_id": format!("client-of-{me}")}),
        "POST /token" => json!({"access_token": "at", "token_type": "Bearer", "expires_in": 3600}),
        _ => return None,
    };
    Some(doc.to_string())
}

async fn read_request(sock: &mut tokio::net::TcpStream) -> Option<(String, String)> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        let n = sock.read(&mut chunk).await.ok().filter(|n| *n > 0)?;
        buf.extend_from_slice(&chunk[..n]);
        let text = String::from_utf8_lossy(&buf).to_string();
        let Some((head, body)) = text.split_once("\r\n\r\n") else {
            continue;
        };
        let len: usize = (head.lines())
            .filter_map(|l| l.split_once(':'))
            .find(|(k, _)| k.eq_ignore_ascii_case("content-length"))
            .and_then(|(_, v)| v.trim().parse().ok())
            .unwrap_or(0);
        if body.len() >= len {
            let mut words = head.split(' ');
            let (method, target) = (words.next()?, words.next()?);
            let path = target.split('?').next()?;
            return Some((format!("{method} {path}"), body.to_owned()));
        }
    }
}

fn backend_of(flows: &Arc<Flows>, name: &str, server: &Server, cimd: bool) -> Arc<Backend> {
    let client = ClientSettings {
        client_metadata_url: cimd.then(|| "https://gw.example/oauth/client-metadata.json".into()),
        ..Default::default()
    };
    Backend::new(
        OAuthConfig {
            backend: name.into(),
            server_url: format!("{}/mcp", server.base),
            scopes: vec![],
            client,
            timeout: Duration::from_secs(5),
        },
        flows.clone(),
        Arc::new(crate::outgoing_auth::MemoryVault::new(
            crate::outgoing_auth::vault::VaultKeyMaterial::ephemeral().unwrap(),
        )),
    )
    .unwrap()
}

/// A flow of `backend` for `p1`, started in a browser on the gateway's page: the
/// authorization request's parameters, and that browser's `Cookie` header.
async fn started(flows: &Flows, backend: &Arc<Backend>) -> (HashMap<String, String>, String) {
    let consent = backend.consent("p1", &Challenge::default()).await.unwrap();
    let start = consent.url.split("flow=").nth(1).unwrap().to_owned();
    let page = flows.start_page(&start).unwrap();
    let form = format!("flow={start}&csrf={}", page.csrf);
    let csrf_cookie = format!("sb_csrf_{}={}", &start[..16], page.csrf);
    let from = ClickFrom {
        origin: Some("http://127.0.0.1:2"),
        fetch_site: Some("same-origin"),
    };
    let begun = flows
        .begin(form.as_bytes(), Some(&csrf_cookie), from)
        .unwrap();
    let query = begun.location.split_once('?').unwrap().1;
    let params: HashMap<String, String> = form_urlencoded::parse(query.as_bytes())
        .into_owned()
        .collect();
    let cookie = begun.cookie.header();
    // The browser brings it back to where its answer comes (CI: a cookie scoped to
    // `/oauth/callback` never reached `/oauth/i/<tag>/callback`, and every callback failed).
    let scope = format!("; Path={};", path_of(&params["redirect_uri"]));
    assert!(cookie.contains(&scope), "{cookie}");
    (params, cookie.split(';').next().unwrap().to_owned())
}

fn path_of(uri: &str) -> &str {
    discovery::split(uri).unwrap().1
}

fn gateway() -> Arc<Flows> {
    let flows = Arc::new(Flows::default());
    flows.set_public_url("http://127.0.0.1:2");
    flows
}

#[tokio::test]
async fn an_honest_servers_answer_to_evils_state_is_refused_and_not_posted_to_evil() {
    let (honest_as, evil_as) = (Server::start(false).await, Server::start(false).await);
    let flows = gateway();
    let honest = backend_of(&flows, "honest", &honest_as, false);
    let evil = backend_of(&flows, "evil", &evil_as, false);

    // Each dynamic client registered its own issuer's redirect URI, and asks for that one.
    let (h, _) = started(&flows, &honest).await;
    let honest_redirect = h["redirect_uri"].clone();
    let expected = format!(
        "http://127.0.0.1:2/oauth/i/{}/callback",
        issuer_tag(&honest_as.base)
    );
    assert_eq!(honest_redirect, expected);
    let registered: serde_json::Value =
        serde_json::from_str(&honest_as.bodies("POST /register")[0]).unwrap();
    assert_eq!(registered["redirect_uris"], json!([expected]));
    assert_ne!(
        started(&flows, &evil).await.0["redirect_uri"],
        honest_redirect
    );

    // The honest server sends its code for evil's state to the honest client's redirect URI
    // (the only one registered there), or to the shared one (its metadata-document or
    // configured client's).
    for path in [path_of(&honest_redirect), "/oauth/callback"] {
        let (e, evil_cookie) = started(&flows, &evil).await;
        let answer = format!("state={}&code=honest-code", e["state"]);
        assert_eq!(
            complete(&flows, path, &answer, Some(&evil_cookie)).await,
            Err(CallbackError::WrongRedirect),
            "{path}"
        );
        // The flow is over: not even its own path completes it now.
        let own = path_of(&e["redirect_uri"]);
        assert_eq!(
            complete(&flows, own, &answer, Some(&evil_cookie)).await,
            Err(CallbackError::UnknownState)
        );
    }
    assert!(evil_as.bodies("POST /token").is_empty());
    assert!(!evil.has_token("p1").await);
}

#[tokio::test]
async fn a_dynamic_clients_flow_completes_at_its_issuers_redirect_uri() {
    let honest_as = Server::start(false).await;
    let flows = gateway();
    let honest = backend_of(&flows, "honest", &honest_as, false);
    let (h, cookie) = started(&flows, &honest).await;
    let answer = format!("state={}&code=c1", h["state"]);
    let path = path_of(&h["redirect_uri"]);
    assert!(
        path.starts_with("/oauth/i/") && path.ends_with("/callback"),
        "{path}"
    );
    assert_eq!(
        complete(&flows, path, &answer, Some(&cookie)).await,
        Ok("honest".to_owned())
    );
    let posted = honest_as.bodies("POST /token");
    let form: HashMap<String, String> = form_urlencoded::parse(posted[0].as_bytes())
        .into_owned()
        .collect();
    assert_eq!(form["code"], "c1");
    assert_eq!(form["redirect_uri"], h["redirect_uri"]);
    assert!(honest.has_token("p1").await);
    // Behind a proxy that strips the public URL's path, the tail is what arrives.
    assert!(flows::arrived_at(
        "https://gw.example/sb/oauth/i/ab/callback",
        "/oauth/i/ab/callback"
    ));
    assert!(!flows::arrived_at(
        "https://gw.example/sb/oauth/i/ab/callback",
        "/oauth/callback"
    ));
    assert!(!flows::arrived_at(
        "https://gw.example/sb/oauth/callback",
        "/oauth/i/ab/callback"
    ));
    assert!(!flows::arrived_at(
        "https://gw.example/oauth/i/ab/callback",
        "/x/i/ab/callback"
    ));
    // No issuer's path lies under the shared one, or under another's.
    let shared = flows.redirect_uri().unwrap();
    let own = flows.issuer_redirect_uri("https://as.example").unwrap();
    assert!(
        !own.starts_with(&shared) && !shared.starts_with(&own),
        "{own}"
    );
    assert_eq!(issuer_tag("https://as.example").len(), 32);
}

/// The metadata document lists one redirect URI for every issuer: where another issuer's
/// answer could come back to it, a flow there needs `iss`.
#[tokio::test]
async fn a_metadata_document_flow_needs_iss_when_issuers_share_its_redirect_uri() {
    let (honest_as, evil_as) = (Server::start(true).await, Server::start(true).await);
    let flows = gateway();
    let evil = backend_of(&flows, "evil", &evil_as, true);
    // Alone, the flow keeps working with a server that sends no `iss`.
    let (e, cookie) = started(&flows, &evil).await;
    assert_eq!(e["redirect_uri"], "http://127.0.0.1:2/oauth/callback");
    let answer = format!("state={}&code=c0", e["state"]);
    let done = complete(&flows, "/oauth/callback", &answer, Some(&cookie)).await;
    assert_eq!(done, Ok("evil".to_owned()));
    assert_eq!(evil_as.bodies("POST /token").len(), 1);

    // A request made while it was alone is checked as things are at its callback.
    let (e, cookie) = started(&flows, &evil).await;
    let _honest = backend_of(&flows, "honest", &honest_as, true);
    let answer = format!("state={}&code=honest-code", e["state"]);
    assert_eq!(
        complete(&flows, "/oauth/callback", &answer, Some(&cookie)).await,
        Err(CallbackError::IssuerMissing)
    );
    assert_eq!(
        evil_as.bodies("POST /token").len(),
        1,
        "nothing more posted"
    );
    let (e, cookie) = started(&flows, &evil).await;
    let answer = format!("state={}&code=honest-code", e["state"]);
    assert_eq!(
        complete(&flows, "/oauth/callback", &answer, Some(&cookie)).await,
        Err(CallbackError::IssuerMissing)
    );
    // Its own server's answer, naming itself, completes it.
    let (e, cookie) = started(&flows, &evil).await;
    let iss: String = form_urlencoded::byte_serialize(evil_as.base.as_bytes()).collect();
    let answer = format!("state={}&code=c2&iss={iss}", e["state"]);
    let done = complete(&flows, "/oauth/callback", &answer, Some(&cookie)).await;
    assert_eq!(done, Ok("evil".to_owned()));
}

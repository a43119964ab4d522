//! A Streamable session's listen stream, reopened after it dropped, goes without a token its
//! owner no longer holds: the reopening checks the vault, as the session's own lines do.

use std::sync::Arc;

use tokio::io::AsyncWriteExt;
use tokio::net::TcpListener;
use tokio::sync::{mpsc, oneshot};

use super::credential::Quiet;
use super::read_request;
use super::sse_session::oauth_remote;
use crate::remote::{Mode, RemoteEndpoint, RemoteUpstream};
use crate::{Credential, Upstream};

/// A Streamable remote with sessions: `initialize` answered with a session id, other POSTs
/// `202`; each GET (the listen stream) reports its `Authorization` on `gets` and is held
/// open until the next sender on `drops` fires (or, with none left, for good).
async fn remote() -> (
    String,
    mpsc::UnboundedReceiver<String>,
    mpsc::UnboundedSender<oneshot::Receiver<()>>,
) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/mcp", listener.local_addr().unwrap());
    let (gets_tx, gets) = mpsc::unbounded_channel();
    let (drops_tx, drops) = mpsc::unbounded_channel::<oneshot::Receiver<()>>();
    let drops = Arc::new(tokio::sync::Mutex::new(drops));
    tokio::spawn(async move {
        while let Ok((mut sock, _)) = listener.accept().await {
            let (gets, drops) = (gets_tx.clone(), drops.clone());
            tokio::spawn(async move {
                let Some((head, body)) = read_request(&mut sock).await else {
                    return;
                };
                let auth = (head.lines())
                    .filter_map(|l| l.split_once(':'))
                    .find(|(n, _)| n.eq_ignore_ascii_case("authorization"))
                    .map_or("none".to_owned(), |(_, v)| v.trim().to_owned());
                if head.starts_with("GET ") {
                    let open = "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n\
                                cache-control: no-cache\r\nconnection: close\r\n\r\n: open\n\n";
                    let _ = sock.write_all(open.as_bytes()).await;
                    let _ = gets.send(auth);
                    let next = drops.lock().await.recv().await;
                    match next {
                        Some(drop_now) => {
                            let _ = drop_now.await;
                        }
                        None => std::future::pending::<()>().await,
                    }
                    return;
                }
                let msg: serde_json::Value = serde_json::from_str(&body).unwrap_or_default();
                let reply = match msg["method"].as_str() {
                    Some("initialize") => {
                        let answer = format!(
                            r#"{{"jsonrpc":"2.0","id":{},"result":{{"protocolVersion":"2025-11-25","capabilities":{{}},"serverInfo":{{"name":"r","version":"1"}}}}}}"#,
                            msg["id"]
                        );
                        format!(
                            "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n\
                             mcp-session-id: s-1\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{answer}",
                            answer.len()
                        )
                    }
                    _ => "HTTP/1.1 202 Accepted\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"
                        .to_owned(),
                };
                let _ = sock.write_all(reply.as_bytes()).await;
            });
        }
    });
    (url, gets, drops_tx)
}

/// Frank's session opens its listen stream with his token; his consent is revoked; the
/// stream drops and is reopened: without the token. Before, the reopening GET carried the
/// revoked token until the session's next call or line (review LOW).
#[tokio::test]
async fn a_reopened_listen_stream_carries_no_revoked_token() {
    let (url, mut gets, drops) = remote().await;
    let vault = crate::outgoing_auth::MemoryVault::new(
        crate::outgoing_auth::vault::VaultKeyMaterial::ephemeral().unwrap(),
    );
    let frank = Credential::bearer("incoming", "https://idp", "frank").unwrap();
    let (backend, config) = oauth_remote(&url, Arc::new(vault), &frank, "at.frank").await;
    let endpoint = RemoteEndpoint::new(config).unwrap();
    let up = Upstream::Remote(RemoteUpstream::new(
        &endpoint,
        Mode::Session,
        Arc::new(Quiet),
    ));
    let init = br#"{"jsonrpc":"2.0","id":"k1","method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}"#;
    let answer = (up.call_as("k1", init.to_vec(), Some(&frank)).await)
        .unwrap()
        .await
        .unwrap();
    assert!(!answer.is_error(), "{answer:?}");
    let initialized = br#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#;
    up.send_line(initialized.to_vec()).await.unwrap();
    assert_eq!(gets.recv().await.as_deref(), Some("Bearer at.frank"));
    backend.forget(frank.principal()).await;
    let (drop_now, dropped) = oneshot::channel();
    drops.send(dropped).unwrap();
    drop_now.send(()).unwrap();
    let reopened = gets.recv().await;
    assert_eq!(
        reopened.as_deref(),
        Some("none"),
        "the reopened listen stream carried the revoked token"
    );
}

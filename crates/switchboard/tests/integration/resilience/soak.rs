//! The bounded mixed-era soak.

use super::*;

const WORKERS: u64 = 64;
const OPS: u64 = 24;

#[derive(Default, Debug, Clone, Copy)]
struct Tally {
    answered: u64,
    disconnects: u64,
    deletes: u64,
    cancelled: u64,
}

impl std::ops::AddAssign for Tally {
    fn add_assign(&mut self, o: Self) {
        self.answered += o.answered;
        self.disconnects += o.disconnects;
        self.deletes += o.deletes;
        self.cancelled += o.cancelled;
    }
}

/// Streamable HTTP, Legacy or Modern: one request, answered within the bound, verified.
async fn http_echo(
    gw: &TestGateway,
    session: Option<&str>,
    id: u64,
    text: &str,
    delay: u64,
    sse: bool,
) -> Reply {
    let modern = session.is_none();
    let mut headers: Vec<(&str, &str)> = if modern {
        MODERN_CALL_HEADERS.to_vec()
    } else {
        Vec::new()
    };
    if sse {
        headers.push(("accept", "text/event-stream, application/json;q=0.5"));
    }
    gw.post_raw(session, echo_body(id, text, delay, modern), &headers)
        .await
}

async fn legacy_worker(gw: &TestGateway, w: u64, mut rng: Rng) -> Tally {
    let mut t = Tally::default();
    let mut sid = bounded("initialize", gw.session()).await;
    for op in 0..OPS {
        let text = |id: u64| format!("legacy-w{w}-op{op}-id{id}");
        match rng.below(10) {
            // The client goes away mid-request: drop the in-flight future.
            0 | 1 => {
                let (delay, after) = (5 + rng.below(30), rng.below(15));
                let sse = rng.below(2) == 0;
                let t1 = text(1);
                let call = http_echo(gw, Some(&sid), 1, &t1, delay, sse);
                t.disconnects += 1;
                if let Ok(r) = tokio::time::timeout(Duration::from_millis(after), call).await {
                    assert_own_echo(&r.json(), 1, &t1);
                    t.answered += 1;
                }
            }
            // DELETE the session while a request is in flight.
            2 => {
                let delay = 10 + rng.below(40);
                let pause = Duration::from_millis(rng.below(30));
                let t2 = text(2);
                let call = bounded(
                    "request racing a DELETE",
                    http_echo(gw, Some(&sid), 2, &t2, delay, rng.below(2) == 0),
                );
                let delete = async {
                    tokio::time::sleep(pause).await;
                    delete_session(gw, &sid, "DELETE").await
                };
                let (r, status) = tokio::join!(call, delete);
                assert_eq!(status, StatusCode::NO_CONTENT);
                let v = r.json();
                assert_eq!(v["id"], 2, "{v}");
                match r.status {
                    StatusCode::OK if v.get("result").is_some() => assert_own_echo(&v, 2, &text(2)),
                    // Cancelled by the DELETE (-32800), or, on a streamed answer whose 200 was
                    // already sent, routed just after it (-32001): an error with its own id.
                    StatusCode::OK => {
                        let code = &v["error"]["code"];
                        assert!(code == -32800 || code == -32001, "{v}");
                        t.cancelled += 1;
                    }
                    StatusCode::NOT_FOUND => assert_eq!(v["error"]["code"], -32001, "{v}"),
                    s => panic!("unexpected {s}: {v}"),
                }
                t.deletes += 1;
                t.answered += 1;
                sid = bounded("initialize", gw.session()).await;
            }
            // A burst of concurrent requests with colliding ids (1..=k in every session).
            _ => {
                let k = 1 + rng.below(4);
                let calls = (1..=k).map(|id| {
                    let (delay, sse) = (rng.below(10), rng.below(3) == 0);
                    let (sid, text) = (sid.clone(), text(id));
                    async move {
                        let r = bounded(
                            "legacy request",
                            http_echo(gw, Some(&sid), id, &text, delay, sse),
                        )
                        .await;
                        assert_eq!(r.status, StatusCode::OK, "{}", r.text);
                        assert_own_echo(&r.json(), id, &text);
                    }
                });
                futures::future::join_all(calls).await;
                t.answered += k;
            }
        }
    }
    let status = delete_session(gw, &sid, "final DELETE").await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    t
}

async fn modern_worker(gw: &TestGateway, w: u64, mut rng: Rng) -> Tally {
    let mut t = Tally::default();
    for op in 0..OPS {
        let text = |id: u64| format!("modern-w{w}-op{op}-id{id}");
        if rng.below(5) == 0 {
            let (delay, after) = (5 + rng.below(30), rng.below(15));
            let t1 = text(1);
            let call = http_echo(gw, None, 1, &t1, delay, rng.below(2) == 0);
            t.disconnects += 1;
            if let Ok(r) = tokio::time::timeout(Duration::from_millis(after), call).await {
                assert_own_echo(&r.json(), 1, &t1);
                t.answered += 1;
            }
            continue;
        }
        let k = 1 + rng.below(4);
        let calls = (1..=k).map(|id| {
            let (delay, sse) = (rng.below(10), rng.below(3) == 0);
            let text = text(id);
            async move {
                let r = bounded("modern request", http_echo(gw, None, id, &text, delay, sse)).await;
                assert_eq!(r.status, StatusCode::OK, "{}", r.text);
                let v = r.json();
                assert_own_echo(&v, id, &text);
                assert_eq!(v["result"]["resultType"], "complete");
            }
        });
        futures::future::join_all(calls).await;
        t.answered += k;
    }
    t
}

async fn sse_worker(gw: &TestGateway, w: u64, mut rng: Rng) -> Tally {
    let mut t = Tally::default();
    let mut conn = SseConn::open(gw).await;
    for op in 0..OPS {
        let k = 1 + rng.below(4);
        let mut expect: HashMap<u64, String> = HashMap::new();
        for id in 1..=k {
            let text = format!("sse-w{w}-op{op}-id{id}");
            conn.send(echo_body(id, &text, rng.below(20), false)).await;
            expect.insert(id, text);
        }
        if rng.below(6) == 0 {
            // Close the stream with answers outstanding: the session ends, its answers are
            // dropped, and the next session must never see them (its texts differ).
            t.disconnects += 1;
            conn = SseConn::open(gw).await;
            continue;
        }
        while !expect.is_empty() {
            let v = conn.next().await;
            let id = v["id"]
                .as_u64()
                .unwrap_or_else(|| panic!("stray message {v}"));
            let text = expect
                .remove(&id)
                .unwrap_or_else(|| panic!("cross-delivery or duplicate: {v}"));
            assert_own_echo(&v, id, &text);
            t.answered += 1;
        }
    }
    conn.sentinel("soak-end").await;
    t
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn soak_mixed_eras_with_disconnects_and_deletes() {
    let seed = seed();
    let gw = Arc::new(TestGateway::start(&[]).await);
    let started = Instant::now();
    let workers = (0..WORKERS).map(|w| {
        let gw = gw.clone();
        let rng = Rng::new(seed ^ (w + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15));
        tokio::spawn(async move {
            match w % 3 {
                0 => legacy_worker(&gw, w, rng).await,
                1 => modern_worker(&gw, w, rng).await,
                _ => sse_worker(&gw, w, rng).await,
            }
        })
    });
    let mut total = Tally::default();
    for r in futures::future::join_all(workers).await {
        total += r.unwrap_or_else(|e| panic!("worker failed (seed {seed}): {e}"));
    }
    println!("soak: {total:?} in {:.2?} (seed {seed})", started.elapsed());
    assert!(total.disconnects > 0 && total.deletes > 0, "{total:?}");
    // Every client is gone: every registry drains (asynchronous cleanup, so poll, bounded).
    eventually("every table back to empty", || {
        let gw = gw.clone();
        async move {
            let s = stats(&gw).await;
            s["sessions"] == 0 && s["tableEntries"] == 0
        }
    })
    .await;
}

// ---------------------------------------------------------------------------------------------
// 2. Slow consumer

/// DELETEs `sid`, bounded; its status.
async fn delete_session(gw: &TestGateway, sid: &str, what: &str) -> StatusCode {
    bounded(
        what,
        gw.http.delete(&gw.url).header("mcp-session-id", sid).send(),
    )
    .await
    .unwrap()
    .status()
}

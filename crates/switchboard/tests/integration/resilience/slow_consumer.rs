//! A consumer that stops reading is evicted and slows nobody.

use super::*;

/// A URI of almost 8 KiB (the longest a session may subscribe to): every
/// `resources/updated` for it is that large on the wire.
fn big_uri() -> String {
    format!("file:///{}", "u".repeat(8 * 1024 - 16))
}

fn updated(uri: &str) -> Value {
    json!({"jsonrpc":"2.0","method":"notifications/resources/updated","params":{"uri":uri}})
}

/// Updates per `emit` call (about 2 MiB of arguments).
const FLOOD_BATCH: usize = 32;
/// Upper bound on flood rounds (about 128 MiB): eviction must come long before.
const FLOOD_ROUNDS: usize = 64;

/// Echo requests from the well-behaved sessions; returns their latencies.
async fn others_work(gw: &TestGateway, sessions: &[String], round: usize) -> Vec<Duration> {
    let calls = sessions.iter().enumerate().flat_map(|(s, sid)| {
        (1..=4u64).map(move |id| async move {
            let text = format!("other-{s}-round{round}-{id}");
            let t0 = Instant::now();
            let r = bounded(
                "a well-behaved session's request",
                gw.call_tool(Some(sid), json!(id), "echo", json!({"text": text})),
            )
            .await;
            let elapsed = t0.elapsed();
            assert_eq!(r.status, StatusCode::OK, "{}", r.text);
            // pushy has no echo: the answer is its own error, still with this request's id.
            let v = r.json();
            assert_eq!(v["id"], id, "{v}");
            elapsed
        })
    });
    futures::future::join_all(calls).await
}

fn percentile(v: &mut [Duration], p: f64) -> Duration {
    v.sort();
    v[((v.len() - 1) as f64 * p).round() as usize]
}

/// What [`flood_until_one_detaches`] leaves: the session that floods, the four other
/// sessions' listen streams, and their request latencies before and during the flood.
struct Flooded {
    flooder: String,
    listeners: Vec<Listener>,
    baseline: Vec<Duration>,
    during: Vec<Duration>,
}

/// Four other sessions listen while a fifth floods `uri`'s updates, until the stalled stream
/// is evicted: with every stream attached the table is quiescent, and eviction detaches
/// exactly one.
async fn flood_until_one_detaches(gw: &TestGateway, uri: &str) -> Flooded {
    let others: Vec<String> = futures::future::join_all((0..4).map(|_| gw.session())).await;
    let mut listeners = Vec::new();
    for sid in &others {
        listeners.push(Listener::open(gw, sid, None).await);
    }
    let flooder = gw.session().await;
    let attached = stats(gw).await["tableEntries"].as_u64().unwrap();
    let (baseline, during) = flood_until(gw, &flooder, &others, uri, || async {
        stats(gw).await["tableEntries"].as_u64().unwrap() == attached - 1
    })
    .await;
    Flooded {
        flooder,
        listeners,
        baseline,
        during,
    }
}

/// Floods the slow session until `evicted` holds (checked between rounds, when nothing else is
/// in flight), while the other sessions keep working. Returns (baseline, during) latencies.
async fn flood_until<F, Fut>(
    gw: &TestGateway,
    flooder: &str,
    others: &[String],
    uri: &str,
    mut evicted: F,
) -> (Vec<Duration>, Vec<Duration>)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let baseline = others_work(gw, others, 0).await;
    let mut during = Vec::new();
    let lines: Vec<Value> = (0..FLOOD_BATCH).map(|_| updated(uri)).collect();
    for round in 1..=FLOOD_ROUNDS {
        let flood = bounded("flood round", emit(gw, flooder, json!(lines)));
        let (_, lat) = tokio::join!(flood, others_work(gw, others, round));
        during.extend(lat);
        if evicted().await {
            println!(
                "slow consumer evicted after {} updates (~{} MiB)",
                round * FLOOD_BATCH,
                (round * FLOOD_BATCH * uri.len()) >> 20
            );
            return (baseline, during);
        }
    }
    panic!("the slow consumer was never evicted");
}

fn report(name: &str, mut baseline: Vec<Duration>, mut during: Vec<Duration>) {
    println!(
        "{name}: others' p50/p99 before the flood {:?}/{:?}, during {:?}/{:?} ({} requests)",
        percentile(&mut baseline, 0.5),
        percentile(&mut baseline, 0.99),
        percentile(&mut during, 0.5),
        percentile(&mut during, 0.99),
        during.len()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_listen_stream_that_is_never_read_is_evicted_and_slows_nobody() {
    let gw = pushy(&[]).await;
    let uri = big_uri();
    let slow = gw.session().await;
    let r = gw
        .post(
            Some(&slow),
            &json!({"jsonrpc":"2.0","id":"s","method":"resources/subscribe","params":{"uri":uri}}),
        )
        .await;
    assert_eq!(r.json()["result"], json!({}), "{}", r.text);
    // Opened, then never read.
    let stalled = gw
        .http
        .get(&gw.url)
        .header("accept", "text/event-stream")
        .header("mcp-session-id", &slow)
        .send()
        .await
        .unwrap();
    assert_eq!(stalled.status(), StatusCode::OK);

    let Flooded {
        flooder,
        mut listeners,
        baseline,
        during,
    } = flood_until_one_detaches(&gw, &uri).await;
    report("listen stream", baseline, during);

    // The eviction is visible to the stalled client: once it reads, its stream ends.
    until_evicted_stream_ends(stalled).await;

    // Everyone else still listens, and got nothing of the slow session's updates.
    sentinel_reaches_next(&gw, &flooder, &mut listeners).await;
    // The evicted session itself lives on and can listen again.
    let mut again = Listener::open(&gw, &slow, None).await;
    emit(&gw, &flooder, json!([{"jsonrpc":"2.0","method":SENTINEL}])).await;
    assert_eq!(again.next().await.data["method"], SENTINEL);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_sse_stream_that_is_never_read_is_evicted_and_slows_nobody() {
    let gw = pushy(&[]).await;
    let uri = big_uri();
    let mut slow = SseConn::open(&gw).await;
    slow.send(
        json!({"jsonrpc":"2.0","id":"s","method":"resources/subscribe","params":{"uri":uri}})
            .to_string(),
    )
    .await;
    assert_eq!(slow.next().await["result"], json!({}));
    // From here on the slow client never reads.

    let Flooded {
        flooder,
        mut listeners,
        baseline,
        during,
    } = flood_until_one_detaches(&gw, &uri).await;
    report("HTTP+SSE stream", baseline, during);
    // An HTTP+SSE stream is its session: once the client reads, the stream ends, and the
    // session with it.
    assert!(slow.ends().await, "the evicted stream must end");
    let (status, _) = slow
        .post(json!({"jsonrpc":"2.0","id":1,"method":"ping"}).to_string())
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND, "the session ended with it");

    emit(&gw, &flooder, json!([{"jsonrpc":"2.0","method":SENTINEL}])).await;
    for l in &mut listeners {
        assert_eq!(l.next().await.data["method"], SENTINEL);
    }
}

// ---------------------------------------------------------------------------------------------
// 3. Malformed-input corpus

//! Whoever can write to Redis but lacks the replica secret: a session record it rewrites
//! (its owner changed to another principal) is not adopted by any replica.

use reqwest::StatusCode;
use serde_json::json;

use super::client::Endpoint;
use super::home::forwarding_pair_with;
use super::redis::Redis;
use super::{keys_file, ALICE, BOB};
use crate::common::tool_text;

/// Bob rewrites alice's session record in Redis to name him its owner (keeping, or
/// dropping, the tag it carried), then uses her session id at the replica that does not
/// hold it: it is unknown to him there. Before, that replica adopted the record as written
/// and served bob alice's session (review MEDIUM: records were plain JSON).
#[tokio::test]
async fn a_record_rewritten_in_redis_is_not_adopted() {
    let Some(redis) = Redis::start_or_skip("forged_record").await else {
        return;
    };
    let keys = keys_file();
    let auth = ["--api-keys-file", keys.as_str()];
    let (a, b) = forwarding_pair_with(&redis, &auth, &[]).await;
    let sid = Endpoint::of(&a).with_key(ALICE).session().await;
    let key = redis.keys(&format!("*:s:{sid}")).await;
    let [key] = key.as_slice() else {
        panic!("one record for the session: {key:?}");
    };
    let stored = redis.hget(key, "rec").await;
    assert!(stored.contains("\"alice\""), "{stored}");
    // The same record with bob as its owner: under its tag, and as plain JSON.
    let bobs = stored.replace("\"alice\"", "\"bob\"");
    let plain = bobs.find('{').map(|at| bobs[at..].to_owned()).unwrap();
    for forged in [bobs, plain] {
        redis.hset(key, "rec", &forged).await;
        let bob = Endpoint::of(&b)
            .with_key(BOB)
            .echo(&sid, json!(1), "bob's")
            .await;
        assert_eq!(bob.status, StatusCode::NOT_FOUND, "{forged}: {}", bob.text);
    }
    // Alice, at the replica holding her session, is served as before.
    let alice = Endpoint::of(&a)
        .with_key(ALICE)
        .echo(&sid, json!(2), "hers")
        .await;
    assert_eq!(tool_text(&alice.json()), "hers", "{}", alice.text);
}

/// A replica's registration overwritten in Redis (not signed under the secret) sends the
/// hop nowhere and ends nothing: the request through the other replica is a retryable 503,
/// and the session lives on at its home. Before, a registration that did not verify counted
/// as the home being gone, and the session was ended everywhere (review LOW: so did a
/// replica's clock running 10 s ahead of the home's).
#[tokio::test]
async fn a_forged_registration_ends_no_session() {
    let Some(redis) = Redis::start_or_skip("forged_registration").await else {
        return;
    };
    let per_session = ["--isolation", "per-session"];
    let (a, b) = forwarding_pair_with(&redis, &per_session, &[]).await;
    let sid = Endpoint::of(&a).session().await;
    let registrations = redis.keys("*:replica:*").await;
    assert_eq!(registrations.len(), 2, "{registrations:?}");
    for key in &registrations {
        redis
            .set(key, "v1.99999999999999.00.http://127.0.0.1:9")
            .await;
    }
    let there = Endpoint::of(&b).echo(&sid, json!(1), "via b").await;
    assert_eq!(
        there.status,
        StatusCode::SERVICE_UNAVAILABLE,
        "{}",
        there.text
    );
    let home = Endpoint::of(&a).echo(&sid, json!(2), "at home").await;
    assert_eq!(tool_text(&home.json()), "at home", "{}", home.text);
}

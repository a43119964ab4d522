//! `RedisTokenVault` against a real `redis-server` the test starts on a free loopback port
//! (Debian's package; absent: a loud skip, or a failure with `SWITCHBOARD_REDIS_TESTS=1`).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use tokio::process::{Child, Command};

use switchboard_store::{RedisStore, RedisTokenVault};
use switchboard_upstream::outgoing_auth::{
    principal_key, TokenVault, UpstreamToken, VaultError, VaultKey, VaultKeyMaterial,
};

const REDIS_SERVER: &str = "/usr/bin/redis-server";
const REQUIRE: &str = "SWITCHBOARD_REDIS_TESTS";

struct Redis {
    _child: Child,
    url: String,
}

impl Redis {
    async fn start_or_skip(test: &str) -> Option<Self> {
        if !Path::new(REDIS_SERVER).exists() {
            assert!(
                std::env::var_os(REQUIRE).is_none(),
                "{REDIS_SERVER} is missing and {REQUIRE} requires the Redis tests"
            );
            eprintln!("*** REDIS TEST {test} SKIPPED: {REDIS_SERVER} is not installed (set {REQUIRE}=1 to require it) ***");
            return None;
        }
        for _ in 0..5 {
            let port = std::net::TcpListener::bind("127.0.0.1:0")
                .unwrap()
                .local_addr()
                .unwrap()
                .port();
            let mut child = Command::new(REDIS_SERVER)
                .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
                .args(["--save", "", "--appendonly", "no", "--daemonize", "no"])
                .arg("--dir")
                .arg(std::env::temp_dir())
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .kill_on_drop(true)
                .spawn()
                .expect("spawn redis-server");
            let url = format!("redis://127.0.0.1:{port}");
            let client = redis::Client::open(url.as_str()).unwrap();
            let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
            while tokio::time::Instant::now() < deadline {
                if child.try_wait().ok().flatten().is_some() {
                    break;
                }
                if let Ok(mut c) = client.get_multiplexed_async_connection().await {
                    if redis::cmd("PING")
                        .query_async::<String>(&mut c)
                        .await
                        .is_ok()
                    {
                        return Some(Redis { _child: child, url });
                    }
                }
                // A starting process: nothing to wait on but its socket.
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            let _ = child.kill().await;
        }
        panic!("redis-server did not start on any of 5 free ports");
    }

    fn vault(&self, key: [u8; 32]) -> RedisTokenVault {
        let store = RedisStore::new(&self.url, None, "sbtest", Duration::from_secs(60)).unwrap();
        RedisTokenVault::new(&store, VaultKeyMaterial::from_bytes(&key))
    }

    async fn raw(&self) -> redis::aio::MultiplexedConnection {
        redis::Client::open(self.url.as_str())
            .unwrap()
            .get_multiplexed_async_connection()
            .await
            .unwrap()
    }
}

const ACCESS: &str = "gho_access_5c1e7d";
const REFRESH: &str = "ghr_refresh_b2a9f0";

fn token(access: &str, refresh: Option<&str>, expires_in: u64) -> UpstreamToken {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    UpstreamToken {
        access_token: access.into(),
        refresh_token: refresh.map(Into::into),
        expires_at: Some(now + expires_in),
        issued_at: None,
        scope: Some("repo".into()),
        issuer: "https://github.example.com".into(),
        resource: "https://api.github.example.com/mcp".into(),
        client_id: "switchboard".into(),
        client_secret: None,
        client_auth: None,
    }
}

fn key(subject: &str, backend: &str) -> VaultKey {
    VaultKey::new(principal_key("https://idp.example.com", subject), backend)
}

#[tokio::test]
async fn values_in_redis_are_ciphertext_and_shared_by_replicas() {
    let Some(redis) = Redis::start_or_skip("token_vault_ciphertext").await else {
        return;
    };
    let (one, two) = (redis.vault([3; 32]), redis.vault([3; 32]));
    let (alice, bob) = (key("alice", "github"), key("bob", "github"));
    one.put(&alice, &token(ACCESS, Some(REFRESH), 3600))
        .await
        .unwrap();
    // Written through one replica, read through the other.
    let read = two.get(&alice).await.unwrap().unwrap();
    assert_eq!(read.access_token, ACCESS);
    assert_eq!(read.refresh_token.as_deref(), Some(REFRESH));
    assert!(two.get(&bob).await.unwrap().is_none());

    // The raw value is ciphertext: neither token appears in it, nor in any key's name.
    let mut raw = redis.raw().await;
    let names: Vec<String> = redis::cmd("KEYS")
        .arg("*")
        .query_async(&mut raw)
        .await
        .unwrap();
    assert!(names.contains(&one.storage_key(&alice)), "{names:?}");
    for name in &names {
        assert!(!name.contains(ACCESS) && !name.contains(REFRESH));
        let kind: String = redis::cmd("TYPE")
            .arg(name)
            .query_async(&mut raw)
            .await
            .unwrap();
        if kind == "string" {
            let value: Vec<u8> = redis::cmd("GET")
                .arg(name)
                .query_async(&mut raw)
                .await
                .unwrap();
            for secret in [ACCESS, REFRESH] {
                assert!(!value.windows(secret.len()).any(|w| w == secret.as_bytes()));
            }
        }
    }
    // A refreshable token outlives its expiry in Redis.
    let ttl: i64 = redis::cmd("TTL")
        .arg(one.storage_key(&alice))
        .query_async(&mut raw)
        .await
        .unwrap();
    assert!(ttl > 3600, "ttl {ttl}");

    // Moved to another principal's key, the value does not open.
    let value: Vec<u8> = redis::cmd("GET")
        .arg(one.storage_key(&alice))
        .query_async(&mut raw)
        .await
        .unwrap();
    redis::cmd("SET")
        .arg(one.storage_key(&bob))
        .arg(value)
        .query_async::<()>(&mut raw)
        .await
        .unwrap();
    assert!(matches!(two.get(&bob).await, Err(VaultError::Open)));

    // Another encryption key does not open it either.
    let stranger = redis.vault([4; 32]);
    assert!(matches!(stranger.get(&alice).await, Err(VaultError::Open)));
}

#[tokio::test]
async fn list_and_remove_per_principal() {
    let Some(redis) = Redis::start_or_skip("token_vault_list").await else {
        return;
    };
    let (one, two) = (redis.vault([5; 32]), redis.vault([5; 32]));
    let a_github = key("alice", "github");
    let a_linear = key("alice", "linear");
    let b_github = key("bob", "github");
    one.put(&a_github, &token("a1", Some("ar1"), 600))
        .await
        .unwrap();
    one.put(&a_linear, &token("a2", None, 600)).await.unwrap();
    two.put(&b_github, &token("b1", None, 600)).await.unwrap();

    let alice = two.list(Some(&a_github.principal)).await.unwrap();
    let backends: Vec<(&str, bool)> = alice
        .iter()
        .map(|s| (s.backend.as_str(), s.refreshable))
        .collect();
    assert_eq!(backends, [("github", true), ("linear", false)]);
    assert!(alice.iter().all(|s| s.principal == a_github.principal));
    let all = one.list(None).await.unwrap();
    assert_eq!(all.len(), 3);
    let printed = serde_json::to_string(&all).unwrap();
    for secret in ["a1", "ar1", "b1"] {
        assert!(!printed.contains(&format!("\"{secret}\"")), "{printed}");
    }

    // Removing alice's github token leaves bob's (same backend) and her other one.
    assert!(two.remove(&a_github).await.unwrap());
    assert!(!one.remove(&a_github).await.unwrap());
    assert!(one.get(&a_github).await.unwrap().is_none());
    assert_eq!(
        one.get(&b_github).await.unwrap().unwrap().access_token,
        "b1"
    );
    assert_eq!(one.list(Some(&a_github.principal)).await.unwrap().len(), 1);
    assert_eq!(one.list(None).await.unwrap().len(), 2);

    // A value that expired leaves the principal's index when listed.
    let mut raw = redis.raw().await;
    redis::cmd("DEL")
        .arg(one.storage_key(&a_linear))
        .query_async::<()>(&mut raw)
        .await
        .unwrap();
    assert!(one
        .list(Some(&a_linear.principal))
        .await
        .unwrap()
        .is_empty());
}

#[tokio::test]
async fn refresh_lock_is_exclusive_across_replicas() {
    let Some(redis) = Redis::start_or_skip("token_vault_lock").await else {
        return;
    };
    let (one, two) = (redis.vault([6; 32]), redis.vault([6; 32]));
    let k = key("alice", "github");
    let held = one.refresh_lock(&k, Duration::ZERO).await.unwrap();
    assert!(held.is_some(), "the first caller holds it");
    // The other replica (and this one) cannot take it while held.
    assert!(two
        .refresh_lock(&k, Duration::ZERO)
        .await
        .unwrap()
        .is_none());
    assert!(one
        .refresh_lock(&k, Duration::ZERO)
        .await
        .unwrap()
        .is_none());
    // Another key is independent.
    assert!(two
        .refresh_lock(&key("bob", "github"), Duration::ZERO)
        .await
        .unwrap()
        .is_some());

    // A waiter on the other replica returns once the holder releases: told to re-read.
    let waiter = {
        let (two, k) = (two.clone(), k.clone());
        tokio::spawn(async move { two.refresh_lock(&k, Duration::from_secs(30)).await })
    };
    one.put(&k, &token(ACCESS, Some(REFRESH), 3600))
        .await
        .unwrap();
    drop(held);
    assert!(waiter.await.unwrap().unwrap().is_none());
    // Released (the waiter saw the lock gone): the next caller takes it.
    let next = two.refresh_lock(&k, Duration::ZERO).await.unwrap();
    assert!(next.is_some());
    assert_eq!(two.get(&k).await.unwrap().unwrap().access_token, ACCESS);
}

/// A refresh's result is written only over the token it replaces: after a revoke (or another
/// replica's refresh) it is dropped, on every replica.
#[tokio::test]
async fn replace_writes_only_over_the_token_it_refreshed() {
    let Some(redis) = Redis::start_or_skip("token_vault_replace").await else {
        return;
    };
    let (one, two) = (redis.vault([6; 32]), redis.vault([6; 32]));
    let k = key("alice", "github");
    one.put(&k, &token("old", Some("r1"), 600)).await.unwrap();
    assert!(!two
        .replace(&k, "other", &token("x", None, 600))
        .await
        .unwrap());
    assert!(two
        .replace(&k, "old", &token("new", Some("r2"), 600))
        .await
        .unwrap());
    assert_eq!(one.get(&k).await.unwrap().unwrap().access_token, "new");
    // Revoked while a refresh of "new" was in flight: its result is not written back.
    one.remove(&k).await.unwrap();
    assert!(!two
        .replace(&k, "new", &token("newer", None, 600))
        .await
        .unwrap());
    assert!(one.get(&k).await.unwrap().is_none());
    assert!(one.list(Some(&k.principal)).await.unwrap().is_empty());
}

/// A refused refresh removes only the token it refreshed: one another replica wrote
/// meanwhile stays, on every replica.
#[tokio::test]
async fn remove_if_removes_only_the_token_that_was_refused() {
    let Some(redis) = Redis::start_or_skip("token_vault_remove_if").await else {
        return;
    };
    let (one, two) = (redis.vault([7; 32]), redis.vault([7; 32]));
    let k = key("alice", "github");
    one.put(&k, &token("t0", Some("r0"), 600)).await.unwrap();
    two.put(&k, &token("t1", Some("r1"), 600)).await.unwrap();
    assert!(!one.remove_if(&k, "t0").await.unwrap());
    assert_eq!(two.get(&k).await.unwrap().unwrap().access_token, "t1");
    assert_eq!(one.list(Some(&k.principal)).await.unwrap().len(), 1);
    assert!(one.remove_if(&k, "t1").await.unwrap());
    assert!(two.get(&k).await.unwrap().is_none());
    assert!(two.list(Some(&k.principal)).await.unwrap().is_empty());
}

/// A value another key sealed is removed only while it still does not open: once a token
/// this key opens is written there (a consent completed meanwhile), it stays.
#[tokio::test]
async fn remove_unopenable_removes_only_what_does_not_open() {
    let Some(redis) = Redis::start_or_skip("token_vault_remove_unopenable").await else {
        return;
    };
    let (here, rotated) = (redis.vault([7; 32]), redis.vault([8; 32]));
    let k = key("alice", "github");
    rotated.put(&k, &token("old", None, 600)).await.unwrap();
    assert!(matches!(here.get(&k).await, Err(VaultError::Open)));
    assert!(here.remove_unopenable(&k).await.unwrap());
    assert!(rotated.get(&k).await.unwrap().is_none());
    assert!(here.list(Some(&k.principal)).await.unwrap().is_empty());
    here.put(&k, &token("fresh", None, 600)).await.unwrap();
    assert!(!here.remove_unopenable(&k).await.unwrap());
    assert_eq!(here.get(&k).await.unwrap().unwrap().access_token, "fresh");
    assert!(!here.remove_unopenable(&key("bob", "github")).await.unwrap());
}

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::Duration;

use super::*;

const ACCESS: &str = "at-secret-7f3a9c";
const REFRESH: &str = "rt-secret-19be44";

fn token() -> UpstreamToken {
    UpstreamToken {
        access_token: ACCESS.into(),
        refresh_token: Some(REFRESH.into()),
        expires_at: Some(4_000_000_000),
        issued_at: None,
        scope: Some("repo read".into()),
        issuer: "https://as.example.com".into(),
        resource: "https://mcp.example.com/".into(),
        client_id: "switchboard".into(),
        client_secret: None,
        client_auth: None,
    }
}

fn key(principal: &str, backend: &str) -> VaultKey {
    VaultKey::new(principal_key("https://idp.example.com", principal), backend)
}

fn contains(hay: &[u8], needle: &str) -> bool {
    hay.windows(needle.len()).any(|w| w == needle.as_bytes())
}

#[test]
fn principal_keys_do_not_collide() {
    assert_ne!(principal_key("a:b", "c"), principal_key("a", "b:c"));
    assert_ne!(principal_key("ab", "c"), principal_key("a", "bc"));
    assert_eq!(principal_key("i", "s"), principal_key("i", "s"));
}

#[test]
fn seal_roundtrips_and_is_ciphertext() {
    let k = VaultKeyMaterial::from_bytes(&[7; KEY_LEN]);
    let vk = key("alice", "github");
    let sealed = k.seal(&vk, &token()).unwrap();
    assert!(!contains(&sealed, ACCESS) && !contains(&sealed, REFRESH));
    let opened = k.open(&vk, &sealed).unwrap();
    assert_eq!(opened.access_token, ACCESS);
    assert_eq!(opened.refresh_token.as_deref(), Some(REFRESH));
    assert_eq!(opened.expires_at, Some(4_000_000_000));
    // A fresh nonce per seal: the same token seals differently.
    assert_ne!(sealed, k.seal(&vk, &token()).unwrap());
}

#[test]
fn wrong_key_does_not_open() {
    let vk = key("alice", "github");
    let sealed = VaultKeyMaterial::from_bytes(&[7; KEY_LEN])
        .seal(&vk, &token())
        .unwrap();
    let other = VaultKeyMaterial::from_bytes(&[8; KEY_LEN]);
    assert!(matches!(other.open(&vk, &sealed), Err(VaultError::Open)));
}

#[test]
fn moved_or_altered_value_does_not_open() {
    let k = VaultKeyMaterial::from_bytes(&[7; KEY_LEN]);
    let sealed = k.seal(&key("alice", "github"), &token()).unwrap();
    assert!(matches!(
        k.open(&key("bob", "github"), &sealed),
        Err(VaultError::Open)
    ));
    assert!(matches!(
        k.open(&key("alice", "linear"), &sealed),
        Err(VaultError::Open)
    ));
    let mut altered = sealed.clone();
    let last = altered.len() - 1;
    altered[last] ^= 1;
    assert!(matches!(
        k.open(&key("alice", "github"), &altered),
        Err(VaultError::Open)
    ));
    assert!(matches!(
        k.open(&key("alice", "github"), &sealed[..10]),
        Err(VaultError::Open)
    ));
    assert!(matches!(
        k.open(&key("alice", "github"), &[]),
        Err(VaultError::Open)
    ));
    // Another format's version byte: a newer build's value, not an altered one.
    let mut newer = sealed.clone();
    newer[0] = newer[0].wrapping_add(1);
    assert!(matches!(
        k.open(&key("alice", "github"), &newer),
        Err(VaultError::Format)
    ));
}

#[test]
fn debug_prints_no_secret() {
    let t = token();
    let printed = format!(
        "{t:?} {:?} {:?}",
        t.summary(&key("alice", "github")),
        VaultKeyMaterial::from_bytes(&[7; KEY_LEN])
    );
    assert!(
        !printed.contains(ACCESS) && !printed.contains(REFRESH),
        "{printed}"
    );
    assert!(printed.contains("<redacted>"));
    let summary = serde_json::to_string(&t.summary(&key("alice", "github"))).unwrap();
    assert!(
        !summary.contains(ACCESS) && !summary.contains(REFRESH),
        "{summary}"
    );
}

#[cfg(unix)]
#[test]
fn key_file_is_checked() {
    use std::os::unix::fs::PermissionsExt;
    let dir = std::env::temp_dir().join(format!("sb-vault-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("tokens.key");
    std::fs::write(&path, [9u8; KEY_LEN]).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
    let e = VaultKeyMaterial::from_file(&path).unwrap_err();
    assert!(
        matches!(e, VaultError::KeyFileMode { mode: 0o644, .. }),
        "{e}"
    );
    assert!(e.to_string().contains("0600"), "{e}");
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
    let k = VaultKeyMaterial::from_file(&path).unwrap();
    let vk = key("alice", "github");
    let sealed = k.seal(&vk, &token()).unwrap();
    assert_eq!(
        VaultKeyMaterial::from_bytes(&[9; KEY_LEN])
            .open(&vk, &sealed)
            .unwrap()
            .access_token,
        ACCESS
    );
    std::fs::write(&path, [9u8; 31]).unwrap();
    let e = VaultKeyMaterial::from_file(&path).unwrap_err();
    assert!(
        matches!(e, VaultError::KeyFileLength { len: 31, .. }),
        "{e}"
    );
    let e = VaultKeyMaterial::from_file(&dir.join("absent")).unwrap_err();
    assert!(matches!(e, VaultError::KeyFileUnreadable { .. }), "{e}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[tokio::test]
async fn memory_vault_stores_sealed_per_key() {
    let vault = MemoryVault::new(VaultKeyMaterial::ephemeral().unwrap());
    let (a, b) = (key("alice", "github"), key("bob", "github"));
    assert!(vault.get(&a).await.unwrap().is_none());
    vault.put(&a, &token()).await.unwrap();
    assert_eq!(vault.get(&a).await.unwrap().unwrap().access_token, ACCESS);
    assert!(vault.get(&b).await.unwrap().is_none());
    let sealed = vault.sealed(&a).unwrap();
    assert!(!contains(&sealed, ACCESS) && !contains(&sealed, REFRESH));

    let mut other = token();
    other.access_token = "bob-token".into();
    other.refresh_token = None;
    vault.put(&b, &other).await.unwrap();
    let all = vault.list(None).await.unwrap();
    assert_eq!(all.len(), 2);
    let mine = vault.list(Some(&a.principal)).await.unwrap();
    assert_eq!(mine.len(), 1);
    assert_eq!(
        (mine[0].backend.as_str(), mine[0].refreshable),
        ("github", true)
    );
    assert!(!vault.list(Some(&b.principal)).await.unwrap()[0].refreshable);

    assert!(vault.remove(&a).await.unwrap());
    assert!(!vault.remove(&a).await.unwrap());
    assert!(vault.get(&a).await.unwrap().is_none());
    assert_eq!(
        vault.get(&b).await.unwrap().unwrap().access_token,
        "bob-token"
    );
    assert!(!format!("{vault:?}").contains("bob-token"));
}

#[tokio::test]
async fn refresh_lock_is_single_flight() {
    let vault = Arc::new(MemoryVault::new(VaultKeyMaterial::ephemeral().unwrap()));
    let k = key("alice", "github");
    let guard = vault
        .refresh_lock(&k, Duration::from_secs(5))
        .await
        .unwrap()
        .expect("first holder");
    // Another key is independent.
    let other = vault
        .refresh_lock(&key("bob", "github"), Duration::ZERO)
        .await
        .unwrap();
    assert!(other.is_some());
    // While held, a second caller gets None after its wait (zero here).
    assert!(vault
        .refresh_lock(&k, Duration::ZERO)
        .await
        .unwrap()
        .is_none());
    // A waiter is woken by the release (its wait is far longer than the test), and is told to
    // re-read rather than refresh again.
    let waiter = {
        let (vault, k) = (vault.clone(), k.clone());
        tokio::spawn(async move { vault.refresh_lock(&k, Duration::from_secs(3600)).await })
    };
    // The waiter subscribes before the release: it is queued on the same lock as the holder.
    while vault.inner_waiters(&k) == 0 {
        tokio::task::yield_now().await;
    }
    vault.put(&k, &token()).await.unwrap();
    drop(guard);
    assert!(waiter.await.unwrap().unwrap().is_none());
    // Released: the next caller holds it.
    assert!(vault
        .refresh_lock(&k, Duration::ZERO)
        .await
        .unwrap()
        .is_some());
}

#[tokio::test]
async fn memory_vault_replaces_only_the_token_it_refreshed() {
    let vault = MemoryVault::new(VaultKeyMaterial::ephemeral().unwrap());
    let a = key("alice", "github");
    vault.put(&a, &token()).await.unwrap();
    let mut next = token();
    next.access_token = "next".into();
    assert!(!vault.replace(&a, "not-it", &next).await.unwrap());
    assert!(vault.replace(&a, ACCESS, &next).await.unwrap());
    assert_eq!(vault.get(&a).await.unwrap().unwrap().access_token, "next");
    vault.remove(&a).await.unwrap();
    assert!(!vault.replace(&a, "next", &token()).await.unwrap());
    assert!(vault.get(&a).await.unwrap().is_none());
}

#[tokio::test]
async fn memory_vault_removes_only_the_token_that_was_refused() {
    let vault = MemoryVault::new(VaultKeyMaterial::ephemeral().unwrap());
    let a = key("alice", "github");
    vault.put(&a, &token()).await.unwrap();
    assert!(!vault.remove_if(&a, "an-older-one").await.unwrap());
    assert!(vault.get(&a).await.unwrap().is_some());
    assert!(vault.remove_if(&a, ACCESS).await.unwrap());
    assert!(vault.get(&a).await.unwrap().is_none());
}

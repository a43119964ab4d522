//! The token vault: each principal's upstream OAuth token per backend, sealed at rest.
//!
//! A value is the JSON of an [`UpstreamToken`] sealed with XChaCha20-Poly1305 under the
//! store's 32-byte key ([`VaultKeyMaterial`], read from `tokenStore.encryptionKeyFile`, or a
//! random one per process), with a fresh random 24-byte nonce per seal and the [`VaultKey`]
//! (principal and backend) as associated data: a value copied to another principal's or
//! backend's key does not open. Layout: `version (1) ‖ nonce (24) ‖ ciphertext ‖ tag (16)`.
//!
//! [`MemoryVault`] keeps the sealed values in this process; `switchboard_store` keeps them in
//! Redis for replicas. Neither ever prints a token: [`UpstreamToken`]'s `Debug` redacts, and
//! [`VaultError`]'s texts are fixed words (a key file's path at most).

mod memory;

use std::path::{Path, PathBuf};

use chacha20poly1305::aead::{Aead, KeyInit, Payload};
use chacha20poly1305::{XChaCha20Poly1305, XNonce};

pub use futures::future::BoxFuture;
pub use memory::{MemoryVault, MAX_MEMORY_TOKENS};

/// Bytes of a vault key ([`VaultKeyMaterial`]).
pub const KEY_LEN: usize = 32;
const VERSION: u8 = 1;
const NONCE_LEN: usize = 24;
const TAG_LEN: usize = 16;
const AAD_CONTEXT: &[u8] = b"switchboard-token-vault-v1\0";

/// Whose token: a stable principal key (built by [`principal_key`], never from a token) and
/// the backend name.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct VaultKey {
    /// [`principal_key`] of the verified caller.
    pub principal: String,
    /// The backend's configured name.
    pub backend: String,
}

impl VaultKey {
    /// The key of `principal`'s token for `backend`.
    pub fn new(principal: impl Into<String>, backend: impl Into<String>) -> Self {
        VaultKey {
            principal: principal.into(),
            backend: backend.into(),
        }
    }

    /// The AEAD associated data: a context string, then both parts length-prefixed.
    fn associated_data(&self) -> Vec<u8> {
        let mut aad =
            Vec::with_capacity(AAD_CONTEXT.len() + 16 + self.principal.len() + self.backend.len());
        aad.extend_from_slice(AAD_CONTEXT);
        for part in [&self.principal, &self.backend] {
            aad.extend_from_slice(&(part.len() as u64).to_be_bytes());
            aad.extend_from_slice(part.as_bytes());
        }
        aad
    }
}

/// `issuer` and `subject` of the verified caller -> the vault's principal key: stable across
/// restarts and replicas, collision-free (`<issuer length>:<issuer>:<subject>`; the length
/// says where the issuer ends, whatever either holds).
pub fn principal_key(issuer: &str, subject: &str) -> String {
    format!("{}:{issuer}:{subject}", issuer.len())
}

/// One principal's token for one backend. `Debug` prints no secret.
#[derive(Clone, serde::Serialize, serde::Deserialize)]
pub struct UpstreamToken {
    /// The bearer token sent upstream.
    pub access_token: String,
    /// The refresh token, if the authorization server issued one.
    pub refresh_token: Option<String>,
    /// When the access token expires, unix seconds (None: unknown).
    pub expires_at: Option<u64>,
    /// When it was issued, unix seconds (None: unknown, as for tokens kept by older builds).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub issued_at: Option<u64>,
    /// The granted scope, space-separated.
    pub scope: Option<String>,
    /// The authorization server that issued it.
    pub issuer: String,
    /// The RFC 8707 resource it was requested for.
    pub resource: String,
    /// The client id it was issued to.
    pub client_id: String,
    /// For a client made by dynamic registration (which lives only in the process that made
    /// it): its secret, if it has one, and how it authenticates at the token endpoint
    /// (`client_secret_basic`, `client_secret_post`, `none`), so that another replica or a
    /// restarted gateway can refresh or revoke the token. `None` for a configured client.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_secret: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_auth: Option<String>,
}

impl UpstreamToken {
    /// Whether a refresh token came with it.
    pub fn refreshable(&self) -> bool {
        self.refresh_token.is_some()
    }

    /// What [`TokenVault::list`] shows of it under `key`: no secret.
    pub fn summary(&self, key: &VaultKey) -> TokenSummary {
        TokenSummary {
            principal: key.principal.clone(),
            backend: key.backend.clone(),
            expires_at: self.expires_at,
            scope: self.scope.clone(),
            issuer: self.issuer.clone(),
            refreshable: self.refreshable(),
        }
    }
}

impl std::fmt::Debug for UpstreamToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UpstreamToken")
            .field("access_token", &"<redacted>")
            .field(
                "refresh_token",
                &self.refresh_token.as_ref().map(|_| "<redacted>"),
            )
            .field("expires_at", &self.expires_at)
            .field("issued_at", &self.issued_at)
            .field("scope", &self.scope)
            .field("issuer", &self.issuer)
            .field("resource", &self.resource)
            .field("client_id", &self.client_id)
            .field(
                "client_secret",
                &self.client_secret.as_ref().map(|_| "<redacted>"),
            )
            .field("client_auth", &self.client_auth)
            .finish()
    }
}

/// What `list` shows: no secret.
#[derive(Clone, Debug, serde::Serialize)]
pub struct TokenSummary {
    /// The principal key.
    pub principal: String,
    /// The backend's name.
    pub backend: String,
    /// When the access token expires, unix seconds.
    pub expires_at: Option<u64>,
    /// The granted scope.
    pub scope: Option<String>,
    /// The authorization server that issued it.
    pub issuer: String,
    /// Whether it has a refresh token.
    pub refreshable: bool,
}

/// Why the vault could not answer. Fixed words only (a key file's path at most): never a
/// token, a key or a store's address.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum VaultError {
    /// The key file could not be read.
    #[error("the token store key file {path}: cannot be read ({kind})")]
    KeyFileUnreadable {
        /// The configured path.
        path: PathBuf,
        /// The I/O error's kind.
        kind: std::io::ErrorKind,
    },
    /// The key file is readable by others than its owner.
    #[error("the token store key file {path}: mode {mode:04o} lets group or others access it; it must be 0600 or stricter (chmod 600)")]
    KeyFileMode {
        /// The configured path.
        path: PathBuf,
        /// Its permission bits.
        mode: u32,
    },
    /// The key file does not hold exactly 32 bytes.
    #[error("the token store key file {path}: holds {len} bytes; it must hold exactly 32 random bytes (e.g. head -c 32 /dev/urandom)")]
    KeyFileLength {
        /// The configured path.
        path: PathBuf,
        /// Its length.
        len: u64,
    },
    /// The system's random source failed.
    #[error("the system random source failed")]
    Random,
    /// A token could not be sealed.
    #[error("a token could not be sealed")]
    Seal,
    /// A stored value did not open: another key sealed it, it was altered, or it was stored
    /// under another principal or backend.
    #[error("a stored token could not be opened (another encryption key, or the value was altered or moved)")]
    Open,
    /// A stored value in a format this build does not read (a newer build's).
    #[error("a stored token is in a format this build does not read")]
    Format,
    /// The store is full.
    #[error("the token store is full")]
    Full,
    /// The store could not be reached or answered wrongly (what, in fixed words).
    #[error("the token store is unavailable: {0}")]
    Unavailable(&'static str),
}

/// Held while one replica refreshes a key's token; dropping it releases the lock.
pub struct RefreshGuard {
    release: Option<Box<dyn FnOnce() + Send + Sync>>,
}

impl RefreshGuard {
    /// A guard that runs `release` once, when dropped.
    pub fn new(release: impl FnOnce() + Send + Sync + 'static) -> Self {
        RefreshGuard {
            release: Some(Box::new(release)),
        }
    }
}

impl Drop for RefreshGuard {
    fn drop(&mut self) {
        if let Some(release) = self.release.take() {
            release();
        }
    }
}

impl std::fmt::Debug for RefreshGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("RefreshGuard")
    }
}

/// Where principals' upstream tokens are kept.
pub trait TokenVault: Send + Sync + std::fmt::Debug {
    /// `key`'s token, if one is stored.
    fn get<'a>(
        &'a self,
        key: &'a VaultKey,
    ) -> BoxFuture<'a, Result<Option<UpstreamToken>, VaultError>>;
    /// Stores `token` under `key`, replacing any.
    fn put<'a>(
        &'a self,
        key: &'a VaultKey,
        token: &'a UpstreamToken,
    ) -> BoxFuture<'a, Result<(), VaultError>>;
    /// Stores `token` under `key` only if the token stored there now is still the one whose
    /// access token is `stale` (a refresh's result): false, and nothing written, when it was
    /// removed (revoked) or replaced meanwhile.
    fn replace<'a>(
        &'a self,
        key: &'a VaultKey,
        stale: &'a str,
        token: &'a UpstreamToken,
    ) -> BoxFuture<'a, Result<bool, VaultError>>;
    /// Removes `key`'s token: true when something was removed.
    fn remove<'a>(&'a self, key: &'a VaultKey) -> BoxFuture<'a, Result<bool, VaultError>>;
    /// Removes `key`'s token only if it is still the one whose access token is `stale` (a
    /// refresh that was refused): false, and nothing removed, when another holder has
    /// replaced it meanwhile.
    fn remove_if<'a>(
        &'a self,
        key: &'a VaultKey,
        stale: &'a str,
    ) -> BoxFuture<'a, Result<bool, VaultError>>;
    /// Removes `key`'s value only if it still does not open ([`VaultError::Open`]: sealed
    /// with another key, or altered): false, and nothing removed, when a token that opens was
    /// written meanwhile (a consent that completed between the read and this removal).
    fn remove_unopenable<'a>(
        &'a self,
        key: &'a VaultKey,
    ) -> BoxFuture<'a, Result<bool, VaultError>>;
    /// Every token (principal = None) or one principal's.
    fn list<'a>(
        &'a self,
        principal: Option<&'a str>,
    ) -> BoxFuture<'a, Result<Vec<TokenSummary>, VaultError>>;
    /// Single-flight refresh (across replicas for Redis): waits up to `wait` for the lock;
    /// Ok(Some(guard)) = you refresh then `put`; Ok(None) = another holder refreshed meanwhile
    /// (or still is after `wait`): re-`get`.
    fn refresh_lock<'a>(
        &'a self,
        key: &'a VaultKey,
        wait: std::time::Duration,
    ) -> BoxFuture<'a, Result<Option<RefreshGuard>, VaultError>>;
}

/// The AEAD key (32 bytes from `tokenStore.encryptionKeyFile`, mode 0600 or stricter, or
/// random per process). `Debug` prints no key.
#[derive(Clone)]
pub struct VaultKeyMaterial {
    cipher: XChaCha20Poly1305,
}

impl std::fmt::Debug for VaultKeyMaterial {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("VaultKeyMaterial(<redacted>)")
    }
}

impl VaultKeyMaterial {
    /// The key in `bytes`.
    pub fn from_bytes(bytes: &[u8; KEY_LEN]) -> Self {
        VaultKeyMaterial {
            cipher: XChaCha20Poly1305::new(bytes.into()),
        }
    }

    /// A random key, for this process only (tokens sealed with it die with it).
    pub fn ephemeral() -> Result<Self, VaultError> {
        let mut bytes = [0u8; KEY_LEN];
        getrandom::fill(&mut bytes).map_err(|_| VaultError::Random)?;
        let key = Self::from_bytes(&bytes);
        bytes.fill(0);
        std::hint::black_box(&bytes);
        Ok(key)
    }

    /// The key in the file at `path`: exactly 32 bytes, readable by its owner only (mode
    /// 0600 or stricter); refused otherwise.
    pub fn from_file(path: &Path) -> Result<Self, VaultError> {
        use std::io::Read;
        let unreadable = |e: std::io::Error| VaultError::KeyFileUnreadable {
            path: path.to_path_buf(),
            kind: e.kind(),
        };
        let mut file = std::fs::File::open(path).map_err(unreadable)?;
        let meta = file.metadata().map_err(unreadable)?;
        check_mode(path, &meta)?;
        if meta.len() != KEY_LEN as u64 {
            return Err(VaultError::KeyFileLength {
                path: path.to_path_buf(),
                len: meta.len(),
            });
        }
        let mut bytes = [0u8; KEY_LEN];
        file.read_exact(&mut bytes).map_err(unreadable)?;
        let key = Self::from_bytes(&bytes);
        bytes.fill(0);
        std::hint::black_box(&bytes);
        Ok(key)
    }

    /// `token` sealed for `key`: `version ‖ nonce ‖ ciphertext ‖ tag`.
    pub fn seal(&self, key: &VaultKey, token: &UpstreamToken) -> Result<Vec<u8>, VaultError> {
        let mut nonce = [0u8; NONCE_LEN];
        getrandom::fill(&mut nonce).map_err(|_| VaultError::Random)?;
        let plain = serde_json::to_vec(token).map_err(|_| VaultError::Seal)?;
        let aad = key.associated_data();
        let sealed = self
            .cipher
            .encrypt(
                &XNonce::from(nonce),
                Payload {
                    msg: &plain,
                    aad: &aad,
                },
            )
            .map_err(|_| VaultError::Seal);
        wipe(plain);
        let sealed = sealed?;
        let mut out = Vec::with_capacity(1 + NONCE_LEN + sealed.len());
        out.push(VERSION);
        out.extend_from_slice(&nonce);
        out.extend_from_slice(&sealed);
        Ok(out)
    }

    /// The token `sealed` holds, if this key sealed it for `key`.
    pub fn open(&self, key: &VaultKey, sealed: &[u8]) -> Result<UpstreamToken, VaultError> {
        let rest = match sealed {
            [VERSION, rest @ ..] => rest,
            [] => return Err(VaultError::Open),
            // Written by a newer build (a rolling upgrade): not this key's to judge.
            [_, ..] => return Err(VaultError::Format),
        };
        if rest.len() < NONCE_LEN + TAG_LEN {
            return Err(VaultError::Open);
        }
        let (nonce, body) = rest.split_at(NONCE_LEN);
        let nonce = XNonce::try_from(nonce).map_err(|_| VaultError::Open)?;
        let aad = key.associated_data();
        let plain = self
            .cipher
            .decrypt(
                &nonce,
                Payload {
                    msg: body,
                    aad: &aad,
                },
            )
            .map_err(|_| VaultError::Open)?;
        // Sealed by this key, for this caller: a shape this build does not read is a newer
        // build's, not an altered value.
        let token = serde_json::from_slice(&plain).map_err(|_| VaultError::Format);
        wipe(plain);
        token
    }
}

/// Overwrites a plaintext buffer before it is freed.
fn wipe(mut plain: Vec<u8>) {
    plain.iter_mut().for_each(|b| *b = 0);
    std::hint::black_box(&plain);
}

#[cfg(unix)]
fn check_mode(path: &Path, meta: &std::fs::Metadata) -> Result<(), VaultError> {
    use std::os::unix::fs::PermissionsExt;
    let mode = meta.permissions().mode() & 0o7777;
    if mode & 0o077 != 0 {
        return Err(VaultError::KeyFileMode {
            path: path.to_path_buf(),
            mode,
        });
    }
    Ok(())
}

#[cfg(not(unix))]
fn check_mode(_: &Path, _: &std::fs::Metadata) -> Result<(), VaultError> {
    Ok(())
}

#[cfg(test)]
mod tests;

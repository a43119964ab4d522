//! The token vault the gateway keeps callers' upstream tokens in (`tokenStore`,
//! `--token-store-key-file`): one per process, built before anything listens.
//!
//! - A key file and a session store: Redis ([`RedisTokenVault`]), shared by the replicas
//!   (which all need the same key).
//! - A key file alone: in memory, sealed with that key.
//! - No key file: in memory, sealed with a random key (said in a startup line; no key is
//!   ever printed). With a session store too, tokens stay per replica: a value another
//!   replica sealed with its own random key could never be opened.

use std::sync::Arc;

use anyhow::anyhow;

use switchboard_store::{RedisStore, RedisTokenVault};
use switchboard_upstream::outgoing_auth::{MemoryVault, TokenVault, VaultKeyMaterial};

use crate::cli::GatewayArgs;

/// The vault `args` asks for, over `redis` when the sessions are there.
pub(crate) fn open(
    args: &GatewayArgs,
    redis: Option<&RedisStore>,
) -> anyhow::Result<Arc<dyn TokenVault>> {
    let Some(path) = &args.token_store_key_file else {
        let key = VaultKeyMaterial::ephemeral().map_err(|e| anyhow!("token store: {e}"))?;
        let also = if redis.is_some() {
            "; with --session-store, give every replica the same key file to share them"
        } else {
            ""
        };
        println!("switchboard: token store in memory with a random key (no tokenStore.encryptionKeyFile): upstream tokens are lost on restart{also}");
        return Ok(Arc::new(MemoryVault::new(key)));
    };
    let key =
        VaultKeyMaterial::from_file(path).map_err(|e| anyhow!("--token-store-key-file: {e}"))?;
    Ok(match redis {
        Some(store) => {
            println!("switchboard: token store in {}", store.shown());
            Arc::new(RedisTokenVault::new(store, key))
        }
        None => {
            println!("switchboard: token store in memory (tokens are lost on restart)");
            Arc::new(MemoryVault::new(key))
        }
    })
}

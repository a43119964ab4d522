//! Route keys: the ids the backend sees in place of clients' ids.
//!
//! Every request forwarded to a backend carries a fresh key from a CSPRNG, so the key the
//! backend echoes identifies exactly one waiting caller. Nothing a client sends can name a key:
//! client ids are only ever restored payload.

use std::fmt;

use switchboard_wire::RequestId;

/// Prefix that makes gateway keys recognisable in backend logs.
const PREFIX: &str = "sb-";

/// A gateway-minted, per-request routing key (128 random bits).
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct RouteKey(String);

impl RouteKey {
    /// Mints a new key (see [`random_hex`]).
    pub fn mint() -> Self {
        RouteKey(format!("{PREFIX}{}", random_hex()))
    }

    /// The key text (what the backend receives as the JSON-RPC id string).
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The key as a JSON-RPC string id.
    pub fn to_request_id(&self) -> RequestId {
        RequestId::from_string(&self.0)
    }
}

impl fmt::Debug for RouteKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Prefix of the keys a shared backend's questions about a session's task go out under
/// (`dispatch`), `sbq-REPLICA-<hex>` with replicas (`client_ask::replica_of_key` reads it).
pub(crate) const TASK_QUESTION_PREFIX: &str = "sbq-";

/// 128 bits from a CSPRNG as 32 lowercase hex digits.
///
/// The generator is `rand`'s thread-local ChaCha12, seeded from the OS and reseeded from it
/// after every 64 KiB of output: unpredictable like the OS generator, without a `getrandom`
/// syscall per request. If the OS cannot provide entropy it panics rather than produce
/// guessable keys.
pub(crate) fn random_hex() -> String {
    use rand::Rng as _;
    let mut bytes = [0u8; 16];
    rand::rng().fill_bytes(&mut bytes);
    let mut s = String::with_capacity(32);
    for b in bytes {
        s.push(char::from(HEX[usize::from(b >> 4)]));
        s.push(char::from(HEX[usize::from(b & 0xf)]));
    }
    s
}

const HEX: &[u8; 16] = b"0123456789abcdef";

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    #[test]
    fn keys_are_unique_and_well_formed() {
        let keys: HashSet<String> = (0..10_000).map(|_| RouteKey::mint().0).collect();
        assert_eq!(keys.len(), 10_000);
        for k in keys.iter().take(10) {
            assert_eq!(k.len(), 3 + 32);
            assert!(k[3..]
                .bytes()
                .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase()));
        }
        assert_eq!(RouteKey::mint().to_request_id().as_json().len(), 37);
    }
}

//! The MRTR bridge's memory: sealed `requestState` tokens and the bounded table of held calls.
//!
//! A token is `<held id>.<expiry, unix seconds>.<HMAC-SHA256 hex>`. The MAC (per-gateway key
//! from the OS CSPRNG, never leaves the process) covers the held id, the expiry, the caller's
//! issuer and subject, the method and a digest of the original params, so a token verifies only
//! for the same principal retrying the same call before it expires. The token itself carries no
//! principal and no params: only the id and expiry are readable.
//!
//! The table maps held ids to parked calls. Taking an entry removes it, so each token works
//! once; expired entries are swept (their processes shut down) by the gateway's reaper and on
//! every insert.

use std::collections::HashMap;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use hmac::{Hmac, Mac};
use sha2::Sha256;

use crate::route::random_hex;
use crate::Principal;

type HmacSha256 = Hmac<Sha256>;

/// Most calls parked at once, across all callers.
pub(crate) const MAX_HELD: usize = 1024;
/// How long a parked call waits for its retry.
pub(crate) const HELD_TTL: Duration = Duration::from_secs(5 * 60);

/// Why a `requestState` was refused (`data.reason` of the -32602 answer).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Refused {
    /// Not a token this gateway mints.
    Malformed,
    /// The MAC does not verify: tampered, another principal's, or another call's.
    Invalid,
    /// Verified, but past its expiry.
    Expired,
    /// Verified, but the call is gone (already resumed once, or reaped).
    Unknown,
}

impl Refused {
    pub(crate) fn reason(self) -> &'static str {
        match self {
            Refused::Malformed => "malformed_request_state",
            Refused::Invalid => "invalid_request_state",
            Refused::Expired => "expired_request_state",
            Refused::Unknown => "unknown_request_state",
        }
    }
}

/// What a token is bound to besides its id and expiry.
pub(crate) struct Binding<'a> {
    pub(crate) caller: &'a Principal,
    pub(crate) method: &'a str,
    pub(crate) digest: &'a [u8; 32],
}

/// Seals and opens `requestState` tokens with this gateway's key.
pub(crate) struct Sealer {
    /// Keyed once; cloned for every token.
    keyed: HmacSha256,
    /// Replicas: this replica's name, readable in every token it seals (the first half of a
    /// held call's id, a relay payload's `h`), so another replica that gets the retry hands
    /// it here (`session_store::home`). It is not a credential: the token still opens only
    /// here, under this process's key.
    pub(crate) replica: Option<String>,
}

impl std::fmt::Debug for Sealer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Sealer(..)")
    }
}

impl Sealer {
    pub(crate) fn new() -> Self {
        let mut key = [0u8; 32];
        // Tokens MACed with a zero key would be forgeable: without an OS entropy source the
        // gateway stops rather than continue (as `route::random_hex` does).
        if let Err(e) = getrandom::fill(&mut key) {
            panic!("OS random number generator unavailable: {e}");
        }
        match HmacSha256::new_from_slice(&key) {
            Ok(keyed) => Sealer {
                keyed,
                replica: None,
            },
            // HMAC takes keys of any length; this arm cannot run.
            Err(e) => panic!("HMAC refused a 32-byte key: {e}"),
        }
    }

    /// The same sealer, naming `replica` in its tokens.
    pub(crate) fn at_replica(self, replica: Option<String>) -> Self {
        Sealer { replica, ..self }
    }

    fn mac(&self, id: &str, expires: u64, b: &Binding<'_>) -> HmacSha256 {
        let mut mac = self.keyed.clone();
        // Length-prefixed fields: no two different bindings feed the same bytes.
        let expires = expires.to_string();
        for field in [
            "switchboard-mrtr-v1",
            id,
            expires.as_str(),
            b.caller.issuer.as_str(),
            b.caller.subject.as_str(),
            b.method,
        ] {
            mac.update(&(field.len() as u64).to_be_bytes());
            mac.update(field.as_bytes());
        }
        mac.update(b.digest);
        mac
    }

    /// A key for `domain` alone, derived from this gateway's key (HMAC of the domain): the
    /// relay's AEAD key (`relay::envelope`), never usable as the MAC key or the other way round.
    pub(crate) fn derive_key(&self, domain: &str) -> [u8; 32] {
        self.keyed_fields(domain, &[])
            .finalize()
            .into_bytes()
            .into()
    }

    /// A MAC over length-prefixed `fields` with this gateway's key (for [`Self::derive_key`]).
    /// `domain` is the first field, so no derived key is a held call's MAC of anything (those
    /// start with `switchboard-mrtr-v1`).
    fn keyed_fields(&self, domain: &str, fields: &[&[u8]]) -> HmacSha256 {
        let mut mac = self.keyed.clone();
        for field in std::iter::once(domain.as_bytes()).chain(fields.iter().copied()) {
            mac.update(&(field.len() as u64).to_be_bytes());
            mac.update(field);
        }
        mac
    }

    /// A fresh held id and its token, valid for `ttl`.
    pub(crate) fn seal(&self, b: &Binding<'_>, ttl: Duration) -> (String, String) {
        let id = match &self.replica {
            // Half the id names the replica; the other half, the MAC and single use keep it
            // unguessable.
            Some(replica) if replica.len() == 16 => format!("{replica}{}", &random_hex()[16..]),
            _ => random_hex(),
        };
        let expires = unix_now() + ttl.as_secs().max(1);
        let tag = hex(&self.mac(&id, expires, b).finalize().into_bytes());
        let token = format!("{id}.{expires}.{tag}");
        (id, token)
    }

    /// The held id a token names, if it verifies for this binding and has not expired.
    pub(crate) fn open(&self, token: &str, b: &Binding<'_>) -> Result<String, Refused> {
        let mut parts = token.split('.');
        let (Some(id), Some(expires), Some(tag), None) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return Err(Refused::Malformed);
        };
        // Exactly as issued: decimal digits without a sign or a leading zero, a lower-case
        // hex id (one token has one spelling).
        let canonical = expires.bytes().all(|c| c.is_ascii_digit())
            && !(expires.len() > 1 && expires.starts_with('0'));
        if !canonical {
            return Err(Refused::Malformed);
        }
        let expires: u64 = expires.parse().map_err(|_| Refused::Malformed)?;
        let tag = unhex(tag).ok_or(Refused::Malformed)?;
        if id.len() != 32 || !id.bytes().all(|c| matches!(c, b'0'..=b'9' | b'a'..=b'f')) {
            return Err(Refused::Malformed);
        }
        self.mac(id, expires, b)
            .verify_slice(&tag)
            .map_err(|_| Refused::Invalid)?;
        if unix_now() >= expires {
            return Err(Refused::Expired);
        }
        Ok(id.to_owned())
    }
}

/// The replica a held call's token names (the first half of its id), unverified.
pub(crate) fn replica_of_token(token: &str) -> Option<&str> {
    let id = token.split('.').next()?;
    (id.len() == 32).then(|| id.get(..16)).flatten()
}

pub(crate) fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The bytes of `text`, which must be exactly what [`hex`] writes: lower-case digits only. An
/// upper-cased MAC names the same bytes but is not the token that was issued, so it is refused
/// (the MAC itself is then compared in constant time by `verify_slice`).
fn unhex(text: &str) -> Option<Vec<u8>> {
    let canonical = text.bytes().all(|c| matches!(c, b'0'..=b'9' | b'a'..=b'f'));
    if !text.len().is_multiple_of(2) || !canonical {
        return None;
    }
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&text[i..i + 2], 16).ok())
        .collect()
}

/// Parked calls by held id, bounded and expiring. `T` is the parked call (generic so the
/// table can be tested without processes).
#[derive(Debug)]
pub(crate) struct HeldTable<T> {
    entries: parking_lot::Mutex<HashMap<String, (Instant, T)>>,
    max: usize,
}

impl<T> HeldTable<T> {
    pub(crate) fn new(max: usize) -> Self {
        HeldTable {
            entries: parking_lot::Mutex::new(HashMap::new()),
            max,
        }
    }

    /// Parks `value` under `id` until `expires`. When the table is full (after sweeping
    /// expired entries) the value is handed back. Expired entries are returned for shutdown.
    pub(crate) fn hold(&self, id: String, expires: Instant, value: T) -> (Result<(), T>, Vec<T>) {
        let mut entries = self.entries.lock();
        let expired = sweep(&mut entries, Instant::now());
        if entries.len() >= self.max {
            return (Err(value), expired);
        }
        entries.insert(id, (expires, value));
        (Ok(()), expired)
    }

    /// Removes and returns the call parked under `id` (single use).
    pub(crate) fn take(&self, id: &str) -> Option<T> {
        let (expires, value) = self.entries.lock().remove(id)?;
        (Instant::now() < expires).then_some(value)
    }

    /// Whether another call could be parked right now.
    pub(crate) fn has_room(&self) -> bool {
        self.entries.lock().len() < self.max
    }

    /// Removes and returns every expired call.
    pub(crate) fn reap(&self) -> Vec<T> {
        sweep(&mut self.entries.lock(), Instant::now())
    }

    /// Removes and returns every call (gateway shutdown).
    pub(crate) fn drain(&self) -> Vec<T> {
        self.entries.lock().drain().map(|(_, (_, v))| v).collect()
    }

    pub(crate) fn len(&self) -> usize {
        self.entries.lock().len()
    }
}

fn sweep<T>(entries: &mut HashMap<String, (Instant, T)>, now: Instant) -> Vec<T> {
    let dead: Vec<String> = entries
        .iter()
        .filter(|(_, (expires, _))| *expires <= now)
        .map(|(k, _)| k.clone())
        .collect();
    dead.into_iter()
        .filter_map(|k| entries.remove(&k).map(|(_, v)| v))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{json, Value};

    fn params_digest(v: &Value) -> [u8; 32] {
        crate::mrtr::params_digest(&v.to_string())
    }

    fn principal(sub: &str) -> Principal {
        Principal {
            issuer: "api-key".into(),
            subject: sub.into(),
            claims: serde_json::Map::new(),
            credential: None,
        }
    }

    #[test]
    fn a_token_opens_only_for_its_binding() {
        let sealer = Sealer::new();
        let alice = principal("alice");
        let digest = params_digest(&json!({"name": "t", "arguments": {"a": 1, "b": 2}}));
        let bind = Binding {
            caller: &alice,
            method: "tools/call",
            digest: &digest,
        };
        let (id, token) = sealer.seal(&bind, HELD_TTL);
        assert_eq!(sealer.open(&token, &bind), Ok(id));

        let bob = principal("bob");
        let foreign = Binding {
            caller: &bob,
            ..bind
        };
        assert_eq!(sealer.open(&token, &foreign), Err(Refused::Invalid));
        let other_method = Binding {
            method: "prompts/get",
            ..bind
        };
        assert_eq!(sealer.open(&token, &other_method), Err(Refused::Invalid));
        let other_digest = params_digest(&json!({"name": "t", "arguments": {"a": 2}}));
        let other_params = Binding {
            digest: &other_digest,
            ..bind
        };
        assert_eq!(sealer.open(&token, &other_params), Err(Refused::Invalid));

        let mut tampered = token.clone();
        tampered.push('0');
        assert_eq!(sealer.open(&tampered, &bind), Err(Refused::Malformed));
        let flipped = format!("{}{}", &token[..token.len() - 1], "x");
        assert_eq!(sealer.open(&flipped, &bind), Err(Refused::Malformed));
        let last = token.chars().last().unwrap();
        let swapped = format!(
            "{}{}",
            &token[..token.len() - 1],
            if last == '0' { '1' } else { '0' }
        );
        assert_eq!(sealer.open(&swapped, &bind), Err(Refused::Invalid));
        // Extending the expiry breaks the MAC.
        let parts: Vec<&str> = token.split('.').collect();
        let later = format!("{}.{}.{}", parts[0], u64::MAX, parts[2]);
        assert_eq!(sealer.open(&later, &bind), Err(Refused::Invalid));
        // The MAC in upper case names the same bytes, but is not the token issued.
        let shouted = format!(
            "{}.{}.{}",
            parts[0],
            parts[1],
            parts[2].to_ascii_uppercase()
        );
        assert_ne!(shouted, token);
        assert_eq!(sealer.open(&shouted, &bind), Err(Refused::Malformed));
        // Nor another spelling of the same expiry or id: one token, one spelling.
        for (id, expires) in [
            (parts[0].to_owned(), format!("+{}", parts[1])),
            (parts[0].to_owned(), format!("0{}", parts[1])),
            (parts[0].to_ascii_uppercase(), parts[1].to_owned()),
        ] {
            let respelled = format!("{id}.{expires}.{}", parts[2]);
            assert_eq!(
                sealer.open(&respelled, &bind),
                Err(Refused::Malformed),
                "{respelled}"
            );
        }
        // Another gateway's key.
        assert_eq!(Sealer::new().open(&token, &bind), Err(Refused::Invalid));
    }

    #[test]
    fn expired_tokens_are_refused() {
        let sealer = Sealer::new();
        let p = principal("p");
        let digest = params_digest(&json!({}));
        let bind = Binding {
            caller: &p,
            method: "tools/call",
            digest: &digest,
        };
        let id = "0".repeat(32);
        let past = unix_now() - 1;
        let tag = hex(&sealer.mac(&id, past, &bind).finalize().into_bytes());
        assert_eq!(
            sealer.open(&format!("{id}.{past}.{tag}"), &bind),
            Err(Refused::Expired)
        );
    }

    #[test]
    fn the_table_is_bounded_single_use_and_expiring() {
        let table = HeldTable::new(2);
        let later = Instant::now() + Duration::from_secs(60);
        assert!(table.hold("a".into(), later, 1).0.is_ok());
        assert!(table.hold("b".into(), later, 2).0.is_ok());
        assert_eq!(table.hold("c".into(), later, 3).0, Err(3));
        assert_eq!(table.take("a"), Some(1));
        assert_eq!(table.take("a"), None);
        let (held, _) = table.hold("d".into(), Instant::now(), 4);
        assert!(held.is_ok());
        assert_eq!(table.take("d"), None, "expired entries are not handed out");
        let (_, expired) = table.hold("e".into(), Instant::now(), 5);
        assert!(expired.is_empty());
        assert_eq!(table.reap(), vec![5]);
        assert_eq!(table.len(), 1);
        assert_eq!(table.drain(), vec![2]);
        assert_eq!(table.len(), 0);
    }
}

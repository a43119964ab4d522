//! What replicas leave in Redis for each other, authenticated (with a replica secret): a
//! session's record and what is published on the delivery channel carry an HMAC-SHA256 tag
//! under a key derived from the secret every replica holds. Whoever can write to Redis but
//! lacks the secret cannot make a record another replica adopts (a session with an owner of
//! its choosing, or another session's state), nor put a message on a session's stream; what
//! fails the check is treated as absent. The replicas' registrations are signed the same
//! way (`switchboard_http::Hop`); the token vault's values are sealed (`tokens`).

use hmac::{Hmac, Mac};
use sha2::Sha256;

type HmacSha256 = Hmac<Sha256>;

/// A record's stored form: `m1.` + the tag (64 hex digits) + `.` + the record.
const RECORD_PREFIX: &[u8] = b"m1.";
const TAG_HEX: usize = 64;

/// The key derived from the replica secret, and the tagging done with it.
#[derive(Clone)]
pub(crate) struct Integrity(HmacSha256);

impl std::fmt::Debug for Integrity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Integrity(..)")
    }
}

impl Integrity {
    /// Keyed with `key` (derived from the replica secret by the caller).
    pub(crate) fn new(key: &[u8]) -> Integrity {
        // HMAC takes a key of any length.
        let mac = HmacSha256::new_from_slice(key).unwrap_or_else(|_| unreachable!());
        Integrity(mac)
    }

    /// The tag over `parts`, each length-prefixed (no two lists of parts tag alike).
    fn mac(&self, parts: &[&[u8]]) -> HmacSha256 {
        let mut mac = self.0.clone();
        for part in parts {
            mac.update(&(part.len() as u64).to_be_bytes());
            mac.update(part);
        }
        mac
    }

    /// Session `id`'s record at revision `rev`, as stored.
    pub(crate) fn seal_record(&self, id: &str, rev: u64, record: &[u8]) -> Vec<u8> {
        let rev = rev.to_string();
        let tag = self.mac(&[b"record", id.as_bytes(), rev.as_bytes(), record]);
        let mut out = Vec::with_capacity(RECORD_PREFIX.len() + TAG_HEX + 1 + record.len());
        out.extend_from_slice(RECORD_PREFIX);
        out.extend_from_slice(hex(&tag.finalize().into_bytes()).as_bytes());
        out.push(b'.');
        out.extend_from_slice(record);
        out
    }

    /// The record stored for session `id` at revision `rev`, if its tag is this key's for
    /// exactly that; else `None`.
    pub(crate) fn open_record<'a>(&self, id: &str, rev: u64, stored: &'a [u8]) -> Option<&'a [u8]> {
        let rest = stored.strip_prefix(RECORD_PREFIX)?;
        let (tag, record) = (rest.get(..TAG_HEX)?, rest.get(TAG_HEX + 1..)?);
        (rest.get(TAG_HEX) == Some(&b'.')).then_some(())?;
        let rev = rev.to_string();
        let mac = self.mac(&[b"record", id.as_bytes(), rev.as_bytes(), record]);
        mac.verify_slice(&unhex(tag)?).ok()?;
        Some(record)
    }

    /// A message for the delivery channel, as published: the tag (hex), `\n`, the message.
    pub(crate) fn seal_message(&self, message: &[u8]) -> Vec<u8> {
        let tag = self.mac(&[b"message", message]).finalize().into_bytes();
        let mut out = Vec::with_capacity(TAG_HEX + 1 + message.len());
        out.extend_from_slice(hex(&tag).as_bytes());
        out.push(b'\n');
        out.extend_from_slice(message);
        out
    }

    /// The message a published payload carries, if its tag is this key's; else `None`.
    pub(crate) fn open_message<'a>(&self, payload: &'a [u8]) -> Option<&'a [u8]> {
        let (tag, message) = (payload.get(..TAG_HEX)?, payload.get(TAG_HEX + 1..)?);
        (payload.get(TAG_HEX) == Some(&b'\n')).then_some(())?;
        self.mac(&[b"message", message])
            .verify_slice(&unhex(tag)?)
            .ok()?;
        Some(message)
    }
}

fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write;
    let mut out = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        let _ = write!(out, "{b:02x}");
    }
    out
}

fn unhex(text: &[u8]) -> Option<Vec<u8>> {
    let digit = |c: u8| (c as char).to_digit(16);
    text.chunks(2)
        .map(|pair| match pair {
            [hi, lo] => Some((digit(*hi)? * 16 + digit(*lo)?) as u8),
            _ => None,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::Integrity;

    /// A record opens only for its own session, revision and key, untouched; anything else
    /// (another key, id or revision, one byte changed, no tag) is absent.
    #[test]
    fn a_record_opens_only_as_it_was_sealed() {
        let key = Integrity::new(b"a replica secret of thirty-two bytes");
        let sealed = key.seal_record("s1", 7, br#"{"owner":["api-key","alice"]}"#);
        let opened = key.open_record("s1", 7, &sealed);
        assert_eq!(opened, Some(&br#"{"owner":["api-key","alice"]}"#[..]));
        let other = Integrity::new(b"another secret of thirty-two bytes!!");
        assert!(other.open_record("s1", 7, &sealed).is_none());
        assert!(key.open_record("s2", 7, &sealed).is_none());
        assert!(key.open_record("s1", 8, &sealed).is_none());
        let mut forged = sealed.clone();
        let last = forged.len() - 3;
        forged[last] ^= 1;
        assert!(key.open_record("s1", 7, &forged).is_none());
        assert!(key
            .open_record("s1", 7, br#"{"owner":["api-key","mallory"]}"#)
            .is_none());
    }

    /// A published message opens only under its key, untouched.
    #[test]
    fn a_message_opens_only_as_it_was_sealed() {
        let key = Integrity::new(b"a replica secret of thirty-two bytes");
        let sealed = key.seal_message(b"0123abcd\n{\"jsonrpc\":\"2.0\"}");
        assert_eq!(
            key.open_message(&sealed),
            Some(&b"0123abcd\n{\"jsonrpc\":\"2.0\"}"[..])
        );
        let other = Integrity::new(b"another secret of thirty-two bytes!!");
        assert!(other.open_message(&sealed).is_none());
        assert!(key.open_message(b"0123abcd\n{\"forged\":true}").is_none());
        let mut forged = sealed.clone();
        *forged.last_mut().unwrap() ^= 1;
        assert!(key.open_message(&forged).is_none());
    }
}

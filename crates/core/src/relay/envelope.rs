//! The sealed part of a relay token: the payload encrypted and authenticated with
//! ChaCha20-Poly1305 (ring's, already in the tree for TLS), under a key derived from the MRTR
//! bridge's per-gateway key for this use only (`mrtr::Sealer::derive_key`), with a fresh random
//! 96-bit nonce per token. What the token is bound to (replica, caller, method, params digest)
//! is the associated data: authenticated, never carried. A client sees neither the backend's
//! `requestState` nor anything else of the payload.

use ring::aead::{Aad, LessSafeKey, Nonce, UnboundKey, CHACHA20_POLY1305, NONCE_LEN};

/// One key, for sealing and opening.
pub(super) struct Envelope(LessSafeKey);

impl Envelope {
    /// The envelope under `key` (32 bytes: ChaCha20-Poly1305's only key length).
    pub(super) fn new(key: &[u8; 32]) -> Option<Self> {
        let key = UnboundKey::new(&CHACHA20_POLY1305, key).ok()?;
        Some(Envelope(LessSafeKey::new(key)))
    }

    /// `nonce ‖ ciphertext ‖ tag` of `plain`, bound to `aad`; `None` without OS randomness.
    pub(super) fn seal(&self, aad: &[u8], plain: Vec<u8>) -> Option<Vec<u8>> {
        let mut nonce = [0u8; NONCE_LEN];
        getrandom::fill(&mut nonce).ok()?;
        let mut sealed = plain;
        self.0
            .seal_in_place_append_tag(
                Nonce::assume_unique_for_key(nonce),
                Aad::from(aad),
                &mut sealed,
            )
            .ok()?;
        let mut out = Vec::with_capacity(NONCE_LEN + sealed.len());
        out.extend_from_slice(&nonce);
        out.extend_from_slice(&sealed);
        Some(out)
    }

    /// The plaintext of `sealed` (as [`Envelope::seal`] writes it), if it was sealed under this
    /// key with this `aad` and not altered; `None` otherwise.
    pub(super) fn open(&self, aad: &[u8], sealed: &[u8]) -> Option<Vec<u8>> {
        let (nonce, rest) = sealed.split_at_checked(NONCE_LEN)?;
        let nonce = Nonce::try_assume_unique_for_key(nonce).ok()?;
        let mut buf = rest.to_vec();
        let plain = self.0.open_in_place(nonce, Aad::from(aad), &mut buf).ok()?;
        Some(plain.to_vec())
    }
}

/// `fields`, each prefixed by its length: no two different bindings give the same bytes.
pub(super) fn associated(fields: &[&[u8]]) -> Vec<u8> {
    let mut out = Vec::with_capacity(fields.iter().map(|f| f.len() + 8).sum());
    for field in fields {
        out.extend_from_slice(&(field.len() as u64).to_be_bytes());
        out.extend_from_slice(field);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_same_key_and_binding_open_an_unaltered_envelope() {
        let env = Envelope::new(&[7; 32]).unwrap();
        let aad = associated(&[b"alice", b"tools/call"]);
        let sealed = env.seal(&aad, b"the backend's state".to_vec()).unwrap();
        assert!(!sealed.windows(7).any(|w| w == b"backend"), "readable");
        assert_eq!(env.open(&aad, &sealed).unwrap(), b"the backend's state");
        let other = associated(&[b"bob", b"tools/call"]);
        assert!(env.open(&other, &sealed).is_none());
        assert!(Envelope::new(&[8; 32])
            .unwrap()
            .open(&aad, &sealed)
            .is_none());
        let mut flipped = sealed.clone();
        let last = flipped.len() - 1;
        flipped[last] ^= 1;
        assert!(env.open(&aad, &flipped).is_none());
        assert!(env.open(&aad, &sealed[..NONCE_LEN]).is_none());
        // Two seals of the same plaintext differ (a fresh nonce each).
        assert_ne!(env.seal(&aad, b"x".to_vec()), env.seal(&aad, b"x".to_vec()));
    }
}

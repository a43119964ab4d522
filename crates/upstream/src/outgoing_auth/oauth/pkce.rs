//! PKCE (RFC 7636, S256 only) and the random values of one authorization request: the
//! verifier and the `state`, 32 bytes from the operating system's generator each, base64url.

use base64::Engine;
use sha2::{Digest, Sha256};

use crate::outgoing_auth::OutgoingAuthError;

const B64: base64::engine::GeneralPurpose = base64::engine::general_purpose::URL_SAFE_NO_PAD;

/// 32 random bytes, base64url without padding (43 characters).
pub(crate) fn random_token() -> Result<String, OutgoingAuthError> {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes)
        .map_err(|_| OutgoingAuthError::Config("no randomness from the operating system"))?;
    Ok(B64.encode(bytes))
}

/// The S256 `code_challenge` of `verifier`.
pub(crate) fn challenge_of(verifier: &str) -> String {
    B64.encode(Sha256::digest(verifier.as_bytes()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn s256_matches_rfc_7636_appendix_b() {
        let verifier = "dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXk";
        assert_eq!(
            challenge_of(verifier),
            "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM"
        );
    }

    #[test]
    fn random_tokens_are_long_and_distinct() {
        let a = random_token().unwrap();
        let b = random_token().unwrap();
        assert_eq!(a.len(), 43);
        assert_ne!(a, b);
        assert!(a
            .bytes()
            .all(|c| c.is_ascii_alphanumeric() || c == b'-' || c == b'_'));
    }
}

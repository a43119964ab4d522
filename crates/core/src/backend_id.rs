//! A backend's name ([`BackendId`]): validated once, cheap to clone, the key of every
//! per-backend table. Data only, so that every layer can name a backend.

use std::fmt;
use std::str::FromStr;
use std::sync::Arc;

/// Longest backend name.
pub const MAX_BACKEND_ID: usize = 32;

/// A backend's name: 1 to 32 of `A-Z`, `a-z`, `0-9`, `_`, `-` (config keys, log fields and
/// policy attributes stay plain; case is kept, so `remA` and `rema` are two names). Cheap to
/// clone.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct BackendId(Arc<str>);

/// Why a string is not a [`BackendId`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BackendIdError {
    /// The empty string.
    #[error("a backend name must not be empty")]
    Empty,
    /// Longer than [`MAX_BACKEND_ID`] bytes.
    #[error("a backend name has at most {MAX_BACKEND_ID} characters, this one has {0}")]
    TooLong(usize),
    /// A character outside `A-Za-z0-9_-`.
    #[error("a backend name may use only A-Z, a-z, 0-9, '_' and '-', not {0:?}")]
    BadChar(char),
}

impl BackendId {
    /// The name of the one backend `switchboard run` fronts.
    pub const DEFAULT: &'static str = "default";

    /// The id `default`.
    pub fn default_id() -> Self {
        BackendId(Arc::from(Self::DEFAULT))
    }

    /// The name.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl FromStr for BackendId {
    type Err = BackendIdError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if s.is_empty() {
            return Err(BackendIdError::Empty);
        }
        if let Some(bad) = s
            .chars()
            .find(|c| !matches!(c, 'A'..='Z' | 'a'..='z' | '0'..='9' | '_' | '-'))
        {
            return Err(BackendIdError::BadChar(bad));
        }
        // Only ASCII is left, so bytes are characters.
        if s.len() > MAX_BACKEND_ID {
            return Err(BackendIdError::TooLong(s.len()));
        }
        Ok(BackendId(Arc::from(s)))
    }
}

impl TryFrom<&str> for BackendId {
    type Error = BackendIdError;

    fn try_from(s: &str) -> Result<Self, Self::Error> {
        s.parse()
    }
}

impl fmt::Display for BackendId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for BackendId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "BackendId({})", self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_validated() {
        for ok in [
            "default",
            "a",
            "git-hub_2",
            "remA",
            "GitHub",
            &"x".repeat(MAX_BACKEND_ID),
        ] {
            let id: BackendId = ok.parse().unwrap();
            assert_eq!(id.as_str(), ok);
            assert_eq!(id.to_string(), ok);
            assert_eq!(BackendId::try_from(ok).unwrap(), id);
        }
        assert_eq!("".parse::<BackendId>(), Err(BackendIdError::Empty));
        assert_eq!(
            "x".repeat(MAX_BACKEND_ID + 1).parse::<BackendId>(),
            Err(BackendIdError::TooLong(MAX_BACKEND_ID + 1))
        );
        for (bad, c) in [
            ("a b", ' '),
            ("a.b", '.'),
            ("a/b", '/'),
            ("é", 'é'),
            ("ＡＢ", 'Ａ'),
        ] {
            assert_eq!(
                BackendId::try_from(bad),
                Err(BackendIdError::BadChar(c)),
                "{bad}"
            );
        }
        // A long name of multi-byte characters is refused for the character, not its length.
        assert_eq!(
            "é".repeat(20).parse::<BackendId>(),
            Err(BackendIdError::BadChar('é'))
        );
        assert_eq!(BackendId::default_id().as_str(), BackendId::DEFAULT);
    }

    #[test]
    fn clones_share_the_name() {
        let a: BackendId = "shared".parse().unwrap();
        let b = a.clone();
        assert!(Arc::ptr_eq(&a.0, &b.0));
        assert_eq!(format!("{b:?}"), "BackendId(shared)");
    }
}

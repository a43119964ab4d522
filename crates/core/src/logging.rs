//! `logging/setLevel` across sessions sharing one backend.
//!
//! Each session's level is recorded; the backend is set to the most verbose level any session
//! wants, and set again when that changes (including when sessions leave). Log messages
//! themselves are never delivered in shared mode: nothing says which session caused them.

/// RFC 5424 severities as MCP names them, least verbose first.
const LEVELS: [&str; 8] = [
    "emergency",
    "alert",
    "critical",
    "error",
    "warning",
    "notice",
    "info",
    "debug",
];

/// The rank of a level name (higher is more verbose), or `None` if it is not a level.
pub(crate) fn rank(level: &str) -> Option<u8> {
    LEVELS
        .iter()
        .position(|l| *l == level)
        .and_then(|p| u8::try_from(p).ok())
}

/// The level name of a rank.
pub(crate) fn name(rank: u8) -> &'static str {
    LEVELS.get(usize::from(rank)).copied().unwrap_or("debug")
}

/// The rank the backend should run at: the most verbose wanted, or the least verbose level
/// when nobody asked (quiet backends cost less).
pub(crate) fn target(wanted: impl Iterator<Item = u8>) -> u8 {
    wanted.max().unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranks() {
        assert_eq!(rank("debug"), Some(7));
        assert_eq!(rank("emergency"), Some(0));
        assert_eq!(rank("verbose"), None);
        assert_eq!(name(rank("warning").unwrap()), "warning");
        assert_eq!(target([3, 6, 4].into_iter()), 6);
        assert_eq!(target(std::iter::empty()), 0);
    }
}

//! MCP protocol revisions the gateway knows.

/// Legacy (session-based) revisions, oldest first.
pub const LEGACY: &[&str] = &["2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25"];

/// The newest Legacy revision: what the gateway speaks to a backend and offers by default.
pub const LATEST_LEGACY: &str = "2025-11-25";

/// Modern (stateless) revisions.
pub const MODERN: &[&str] = &["2026-07-28"];

/// Every revision this gateway serves, newest first (what `-32022` and `server/discover`
/// advertise).
pub fn supported() -> Vec<&'static str> {
    MODERN.iter().chain(LEGACY.iter().rev()).copied().collect()
}

/// Whether `v` is a Legacy revision this gateway serves.
pub fn is_legacy(v: &str) -> bool {
    LEGACY.contains(&v)
}

/// Whether `v` is a Modern revision this gateway knows.
pub fn is_modern(v: &str) -> bool {
    MODERN.contains(&v)
}

/// Legacy version negotiation: echo the client's version when we serve it, else offer ours.
pub fn negotiate_legacy(requested: Option<&str>) -> &'static str {
    requested
        .and_then(|r| LEGACY.iter().copied().find(|v| *v == r))
        .unwrap_or(LATEST_LEGACY)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn negotiation() {
        assert_eq!(negotiate_legacy(Some("2025-06-18")), "2025-06-18");
        assert_eq!(negotiate_legacy(Some("2024-11-05")), "2024-11-05");
        assert_eq!(negotiate_legacy(Some("1999-01-01")), LATEST_LEGACY);
        assert_eq!(negotiate_legacy(Some("2026-07-28")), LATEST_LEGACY);
        assert_eq!(negotiate_legacy(None), LATEST_LEGACY);
        assert!(is_modern("2026-07-28") && !is_legacy("2026-07-28"));
    }
}

//! How a URL appears in logs and messages: without what may carry a credential.

/// A URL as logs and messages show it: without a query or user info, which may carry
/// credentials (`?key=…`, `user:pass@`).
pub fn shown_url(url: &str) -> String {
    let (base, query) = match url.split_once('?') {
        Some((base, _)) => (base, "?…"),
        None => (url, ""),
    };
    let base = match base.split_once("://") {
        Some((scheme, rest)) => {
            // User info ends at the last `@` before the path.
            let authority = &rest[..rest.find('/').unwrap_or(rest.len())];
            match authority.rfind('@') {
                Some(at) => format!("{scheme}://…@{}", &rest[at + 1..]),
                None => base.to_owned(),
            }
        }
        None => base.to_owned(),
    };
    format!("{base}{query}")
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_url_is_shown_without_its_query_or_user_info() {
        assert_eq!(super::shown_url("http://h:1/mcp"), "http://h:1/mcp");
        assert_eq!(
            super::shown_url("https://h/mcp?key=s3cret"),
            "https://h/mcp?…"
        );
        assert_eq!(super::shown_url("https://u:p@h/mcp"), "https://…@h/mcp");
        assert_eq!(super::shown_url("https://h/a@b"), "https://h/a@b");
    }
}

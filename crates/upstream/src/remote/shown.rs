//! How a URL appears in logs and messages: without what may carry a credential.

/// A URL as logs and messages show it: without user info or a query (or fragment), which
/// may carry credentials (`user:pass@`, `?key=…`). User info is taken off first, up to the
/// last `@` before the path, so a `?` or `#` in a password does not end it early.
pub fn shown_url(url: &str) -> String {
    let (scheme, rest) = match url.split_once("://") {
        Some((scheme, rest)) => (Some(scheme), rest),
        None => (None, url),
    };
    let path_at = rest.find('/').unwrap_or(rest.len());
    let (user, rest) = match rest[..path_at].rfind('@') {
        Some(at) => ("…@", &rest[at + 1..]),
        None => ("", rest),
    };
    let (base, query) = match rest.find(['?', '#']) {
        Some(at) => (&rest[..at], "?…"),
        None => (rest, ""),
    };
    match scheme {
        Some(scheme) => format!("{scheme}://{user}{base}{query}"),
        None => format!("{user}{base}{query}"),
    }
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
        // A `?` or `#` in the password (review: the query was cut first, leaving `pa`).
        let shown = super::shown_url("https://user:pa?ss@idp/jwks");
        assert_eq!(shown, "https://…@idp/jwks");
        assert_eq!(
            super::shown_url("https://u:p#w@h/x#frag"),
            "https://…@h/x?…"
        );
    }
}

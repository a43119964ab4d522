//! The upstream's `WWW-Authenticate: Bearer …` challenge (RFC 6750 §3, RFC 9728 §5.1): the
//! protected-resource metadata URL, the scope the current operation needs, and the error code
//! (`insufficient_scope` asks for step-up).

/// What a Bearer challenge says.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Challenge {
    /// `resource_metadata`: where the protected-resource metadata is.
    pub resource_metadata: Option<String>,
    /// `scope`: what the current operation needs (authoritative for it).
    pub scope: Option<String>,
    /// `error`: `invalid_token`, `insufficient_scope`, ...
    pub error: Option<String>,
}

impl Challenge {
    /// Whether it asks for more scope (a step-up).
    pub fn insufficient_scope(&self) -> bool {
        self.error.as_deref() == Some("insufficient_scope")
    }
}

/// The Bearer challenge among `header`'s challenges; `None` when there is none.
pub fn parse(header: &str) -> Option<Challenge> {
    let start = find_bearer(header)?;
    let mut rest = &header[start + "bearer".len()..];
    let mut out = Challenge::default();
    loop {
        rest = rest.trim_start_matches([' ', '\t', ',']);
        let Some(eq) = rest.find('=') else { break };
        let name = rest[..eq].trim();
        if name.is_empty() || name.contains([' ', '\t', ',']) {
            // The next challenge's scheme (`Bearer a="b", Basic realm=…`): this one ends.
            break;
        }
        let after = rest[eq + 1..].trim_start();
        let (value, remaining) = match after.strip_prefix('"') {
            Some(quoted) => read_quoted(quoted)?,
            None => {
                let end = after.find([',', ' ', '\t']).unwrap_or(after.len());
                (after[..end].to_owned(), &after[end..])
            }
        };
        match name.to_ascii_lowercase().as_str() {
            "resource_metadata" => out.resource_metadata = Some(value),
            "scope" => out.scope = Some(value).filter(|s| !s.trim().is_empty()),
            "error" => out.error = Some(value),
            _ => {}
        }
        rest = remaining;
    }
    Some(out)
}

/// Where the `Bearer` scheme name starts (case-insensitive, as a whole word).
fn find_bearer(header: &str) -> Option<usize> {
    let lower = header.to_ascii_lowercase();
    let mut from = 0;
    while let Some(at) = lower[from..].find("bearer") {
        let at = from + at;
        let before_ok = at == 0 || matches!(lower.as_bytes()[at - 1], b' ' | b',' | b'\t');
        let after = lower.as_bytes().get(at + 6).copied();
        if before_ok && matches!(after, None | Some(b' ' | b'\t')) {
            return Some(at);
        }
        from = at + 6;
    }
    None
}

/// A quoted-string's value (after its opening quote) and what follows its closing quote.
fn read_quoted(s: &str) -> Option<(String, &str)> {
    let mut value = String::new();
    let mut chars = s.char_indices();
    while let Some((i, c)) = chars.next() {
        match c {
            '\\' => value.push(chars.next()?.1),
            '"' => return Some((value, &s[i + 1..])),
            c => value.push(c),
        }
    }
    None
}

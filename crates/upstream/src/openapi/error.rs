//! What can go wrong with an OpenAPI backend: a spec that cannot be served (with the JSON
//! pointer of the place), and one call's refusal or failure (fixed words, the argument's name
//! at most: never a header value, which may be a credential).

/// A problem in the spec, at `pointer` (`#/paths/~1pets~1{id}/get`; empty: the whole document).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}{message}", if pointer.is_empty() { String::new() } else { format!("{pointer}: ") })]
pub struct SpecError {
    /// A JSON pointer into the spec as a URI fragment, `#/…`.
    pub pointer: String,
    /// What is wrong there.
    pub message: String,
}

impl SpecError {
    pub(crate) fn new(pointer: impl Into<String>, message: impl Into<String>) -> Self {
        SpecError {
            pointer: printable(pointer.into()),
            message: printable(message.into()),
        }
    }
}

/// `text` (which may quote the spec) safe to print: control characters, line and paragraph
/// separators and bidirectional overrides escaped (`\u{1b}`), so a spec cannot forge log
/// lines or drive a terminal.
pub(crate) fn printable(text: String) -> String {
    let unsafe_char = |c: char| {
        c.is_control()
            || matches!(c, '\u{2028}' | '\u{2029}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
    };
    if !text.chars().any(unsafe_char) {
        return text;
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        match unsafe_char(c) {
            true => out.extend(c.escape_default()),
            false => out.push(c),
        }
    }
    out
}

/// The module's errors.
#[derive(Debug, thiserror::Error)]
pub enum OpenApiError {
    /// The spec cannot be served.
    #[error("{0}")]
    Spec(#[from] SpecError),
    /// The spec could not be read or fetched (`source` names the file or URL as configured).
    #[error("cannot read the spec {source_name}: {why}")]
    Read {
        /// The file or URL as configured.
        source_name: String,
        /// Why (fixed words, or the I/O error).
        why: String,
    },
    /// `baseUrl` is not an absolute http(s) URL with a host.
    #[error("baseUrl: {0}")]
    BaseUrl(&'static str),
    /// A call's arguments were refused before anything was sent.
    #[error("{0}")]
    Argument(String),
    /// The API could not be reached, or did not answer in time.
    #[error("the API did not answer: {0}")]
    Transport(String),
    /// The API's response passed the bound.
    #[error("the API's response is larger than {limit} bytes: it was cut off and discarded")]
    TooLarge {
        /// The bound, in bytes.
        limit: usize,
    },
}

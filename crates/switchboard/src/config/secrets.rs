//! `${VAR}` references and where their values come from: the process environment, then an
//! optional secrets file. Used by `run --header` and by the config file.
//!
//! The config file expands references in `env` values, `headers` values (and `headersFile`
//! lines), `url`, and `auth.apiKeys[].key`: the places a credential belongs. Not in `args`: a
//! command line is visible to every local user in `ps` and `/proc/PID/cmdline`, so a secret
//! must not be put there by the gateway, and a server's own `${...}` syntax in its arguments
//! passes through untouched.

use std::collections::HashMap;
use std::path::Path;

/// Why a value could not be expanded. Never carries a value, only reference names.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum ExpandError {
    #[error("an unclosed `${{`")]
    Unclosed,
    #[error("environment variable {0} is not set")]
    Unset(String),
}

/// Replaces each `${VAR}` with its value; an unset variable is an error (a missing token
/// would otherwise be sent as an empty credential).
pub(crate) fn expand(
    value: &str,
    lookup: &impl Fn(&str) -> Option<String>,
) -> Result<String, ExpandError> {
    let mut out = String::with_capacity(value.len());
    let mut rest = value;
    while let Some(start) = rest.find("${") {
        out.push_str(&rest[..start]);
        let after = &rest[start + 2..];
        let end = after.find('}').ok_or(ExpandError::Unclosed)?;
        let var = &after[..end];
        let found = lookup(var).ok_or_else(|| ExpandError::Unset(var.to_owned()))?;
        out.push_str(&found);
        rest = &after[end + 1..];
    }
    out.push_str(rest);
    Ok(out)
}

/// Every run of adjacent segments of `part` (`a/b/c`: `a`, `a/b`, `a/b/c`, `b`…) of
/// [`PATH_SECRET_MIN`] bytes or more: an echo may quote a key apart from its neighbours, and
/// a key may hold a `/` (base64). At most [`MAX_SEGMENTS`] segments are taken apart.
fn segment_runs(part: &str) -> Vec<String> {
    let ends: Vec<usize> = (part.match_indices('/').map(|(at, _)| at))
        .chain([part.len()])
        .take(MAX_SEGMENTS)
        .collect();
    let starts = std::iter::once(0).chain(ends.iter().map(|end| end + 1));
    let mut runs = Vec::new();
    for (i, start) in starts.enumerate().take(ends.len()) {
        for end in &ends[i..] {
            let run = part.get(start..*end).unwrap_or_default();
            if run.len() >= PATH_SECRET_MIN {
                runs.push(run.to_owned());
            }
        }
    }
    if ends.last() != Some(&part.len()) && part.len() >= PATH_SECRET_MIN {
        runs.push(part.to_owned());
    }
    runs
}

/// Segments of one value's path part taken apart, at most.
const MAX_SEGMENTS: usize = 16;

/// The shortest value in a URL's path taken for a secret ([`Secrets::in_path_of`]).
const PATH_SECRET_MIN: usize = 12;

/// Why a secrets file was refused.
#[derive(Debug, thiserror::Error)]
pub(crate) enum SecretsFileError {
    #[error("cannot read {path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error(
        "{path} is readable or writable by group or others (mode {mode:o}); run `chmod 600 {path}`"
    )]
    Exposed { path: String, mode: u32 },
    #[error("{path}:{line}: expected KEY=VALUE")]
    Syntax { path: String, line: usize },
}

/// Where `${VAR}` values come from. The process environment wins over the file, so an
/// operator can override one value for one run without editing the file.
#[derive(Debug, Default, Clone)]
pub(crate) struct Secrets {
    file: HashMap<String, String>,
    /// Ignore the process environment (tests).
    no_env: bool,
}

impl Secrets {
    /// The process environment plus `values` (an in-memory secrets file).
    pub(crate) fn with_values(values: HashMap<String, String>) -> Self {
        Secrets {
            file: values,
            no_env: false,
        }
    }

    #[cfg(test)]
    pub(crate) fn only(values: HashMap<String, String>) -> Self {
        Secrets {
            file: values,
            no_env: true,
        }
    }

    /// Adds the `KEY=VALUE` lines of `path`, which must be private to its owner: a file of
    /// credentials that others can read is refused rather than trusted.
    pub(crate) fn add_file(&mut self, path: &Path) -> Result<(), SecretsFileError> {
        let shown = path.display().to_string();
        let read = |source| SecretsFileError::Read {
            path: shown.clone(),
            source,
        };
        let meta = std::fs::metadata(path).map_err(read)?;
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = meta.permissions().mode() & 0o777;
            if mode & 0o077 != 0 {
                return Err(SecretsFileError::Exposed { path: shown, mode });
            }
        }
        #[cfg(not(unix))]
        let _ = meta;
        let text = std::fs::read_to_string(path).map_err(read)?;
        for (n, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let line = line.strip_prefix("export ").unwrap_or(line);
            let Some((key, value)) = line.split_once('=') else {
                return Err(SecretsFileError::Syntax {
                    path: shown,
                    line: n + 1,
                });
            };
            let key = key.trim();
            if key.is_empty() {
                return Err(SecretsFileError::Syntax {
                    path: shown,
                    line: n + 1,
                });
            }
            self.file
                .insert(key.to_owned(), unquote(value.trim()).to_owned());
        }
        Ok(())
    }

    pub(crate) fn get(&self, var: &str) -> Option<String> {
        if !self.no_env {
            if let Some(v) = crate::config_vars::var(var) {
                return Some(v);
            }
        }
        self.file.get(var).cloned()
    }

    /// `value` with its references expanded.
    pub(crate) fn expand(&self, value: &str) -> Result<String, ExpandError> {
        expand(value, &|v| self.get(v))
    }

    /// The path segments the references in `url` put there, once expanded, of
    /// [`PATH_SECRET_MIN`] bytes or more: an OpenAPI base URL's key there never comes back in a result. Judged
    /// where each value lands (a reference may hold the path, or the whole URL), not where it
    /// is written; the host's and a short one (an account number, a version) are left alone:
    /// they would be cut out of ordinary numbers and text.
    pub(crate) fn in_path_of(&self, url: &str) -> Vec<String> {
        let (mut expanded, mut placed) = (String::new(), Vec::new());
        let mut rest = url;
        while let Some(start) = rest.find("${") {
            expanded.push_str(&rest[..start]);
            let after = &rest[start + 2..];
            let Some(end) = after.find('}') else {
                break;
            };
            if let Some(value) = self.get(&after[..end]) {
                placed.push((expanded.len(), value.clone()));
                expanded.push_str(&value);
            }
            rest = &after[end + 1..];
        }
        expanded.push_str(rest);
        let authority = expanded.find("://").map_or(0, |at| at + 3);
        let path_at = (expanded[authority..].find('/')).map_or(expanded.len(), |at| authority + at);
        let in_path = |(at, value): &(usize, String)| {
            let part = value.get(path_at.saturating_sub(*at)..).unwrap_or_default();
            segment_runs(part.trim_start_matches('/'))
        };
        placed.iter().flat_map(in_path).collect()
    }
}

/// `"v"` or `'v'` → `v` (as shell-style env files write values).
fn unquote(v: &str) -> &str {
    for q in ['"', '\''] {
        if let Some(inner) = v.strip_prefix(q).and_then(|r| r.strip_suffix(q)) {
            return inner;
        }
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_long_value_in_a_urls_path_is_a_secret() {
        let values = [
            ("HOST", "api.example.com.internal"),
            ("TOKEN", "123456:BotPathSecretXYZ"),
            ("ACCOUNT", "1234"),
        ];
        let s = Secrets::only(values.map(|(k, v)| (k.to_owned(), v.to_owned())).into());
        let url = "https://${HOST}/v1/${ACCOUNT}/bot${TOKEN}";
        assert_eq!(s.in_path_of(url), ["123456:BotPathSecretXYZ"]);
        assert!(s.in_path_of("https://${HOST}").is_empty());
        // Judged where the value lands (review: the path was looked for as written).
        let s = Secrets::only(
            [
                ("BOT_PATH", "/bot123456:BotPathSecretXYZ"),
                ("API_URL", "https://api.example.com/v2/k-0123456789abcdef"),
            ]
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .into(),
        );
        let telegram = "https://api.telegram.org${BOT_PATH}";
        assert_eq!(s.in_path_of(telegram), ["bot123456:BotPathSecretXYZ"]);
        assert_eq!(
            s.in_path_of("${API_URL}"),
            ["v2/k-0123456789abcdef", "k-0123456789abcdef"]
        );
        // A key with a `/` inside a longer part is a secret on its own (review).
        let runs = segment_runs("v1/Zm9vYmFy/YmF6cXV4");
        assert!(runs.contains(&"Zm9vYmFy/YmF6cXV4".to_owned()), "{runs:?}");
        assert!(!runs.iter().any(|r| r.len() < PATH_SECRET_MIN), "{runs:?}");
        // A key holding a `/` is kept whole, though its pieces are short (review).
        let s = Secrets::only([("TOKEN".to_owned(), "Zm9vYmFy/YmF6cXV4".to_owned())].into());
        let hooks = "https://api.example.com/hooks/${TOKEN}";
        assert_eq!(s.in_path_of(hooks), ["Zm9vYmFy/YmF6cXV4"]);
    }

    #[test]
    fn expands_references_and_names_what_is_missing() {
        let s = Secrets::only(HashMap::from([("A".to_owned(), "1".to_owned())]));
        assert_eq!(s.expand("x${A}y${A}").unwrap(), "x1y1");
        assert_eq!(s.expand("plain").unwrap(), "plain");
        assert_eq!(s.expand("${B}"), Err(ExpandError::Unset("B".to_owned())));
        assert_eq!(s.expand("${A"), Err(ExpandError::Unclosed));
    }

    #[cfg(unix)]
    #[test]
    fn a_secrets_file_others_can_read_is_refused() {
        use std::os::unix::fs::PermissionsExt;
        let dir = std::env::temp_dir().join(format!("sb-secrets-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("s.env");
        std::fs::write(&path, "# c\nexport TOKEN=\"abc\"\nOTHER = x=y\n").unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        let mut s = Secrets::only(HashMap::new());
        let err = s.add_file(&path).unwrap_err();
        assert!(
            matches!(err, SecretsFileError::Exposed { mode: 0o644, .. }),
            "{err}"
        );
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        s.add_file(&path).unwrap();
        assert_eq!(s.get("TOKEN").as_deref(), Some("abc"));
        assert_eq!(s.get("OTHER").as_deref(), Some("x=y"));
        std::fs::write(&path, "novalue\n").unwrap();
        assert!(matches!(
            s.add_file(&path),
            Err(SecretsFileError::Syntax { line: 1, .. })
        ));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

//! What the running gateway serves, as a reload compares it: each backend's identity, its
//! lists' rules, the guardrails and the settings a restart applies, each a digest (secrets
//! are compared in memory, never held as text or shown).

use std::collections::HashMap;
use std::path::PathBuf;

use hyper::header::{HeaderName, HeaderValue};
use switchboard_core::BackendId;

use crate::config::spec::{BackendKind, BackendSpec, RemoteSpec};
use crate::config::ServeSpec;

/// What is served now, as far as a reload compares it.
pub(crate) struct Served {
    pub(super) backends: Vec<(BackendId, Digest)>,
    pub(super) rules: Digest,
    pub(super) fixed: Digest,
    /// Every level's guardrails.
    pub(super) guards: Digest,
}

impl Served {
    /// What is served when `absent` did not start: a later reload sees them as added.
    pub(crate) fn without<'a>(mut self, absent: impl Iterator<Item = &'a BackendId>) -> Self {
        let absent: Vec<&BackendId> = absent.collect();
        self.backends.retain(|(id, _)| !absent.contains(&id));
        self
    }

    /// What `spec` serves at startup, its guardrails keyed with the webhooks' `secrets` they
    /// are built with.
    pub(crate) fn of(spec: &ServeSpec, secrets: &HashMap<PathBuf, Vec<u8>>) -> Self {
        Served {
            guards: guards_key(spec, secrets),
            ..Served::shape_of(spec)
        }
    }

    /// What `spec` serves but its guardrails' key (a diff's, or what follows an applied
    /// reload, which keys the guardrails itself).
    pub(super) fn shape_of(spec: &ServeSpec) -> Self {
        Served {
            backends: spec
                .backends
                .iter()
                .map(|b| (b.name.clone(), fingerprint(b)))
                .collect(),
            rules: rules_key(spec),
            fixed: fixed_key(spec),
            guards: Digest::default(),
        }
    }
}

/// A backend's identity for the diff: what it is and how it is reached (secrets included,
/// compared in memory only, never shown). Filters are not part of it: they change lists,
/// not the process; nor is its place in the file (a remote's `label`, `backends[2].url`,
/// which moves when an earlier entry is removed).
pub(super) fn fingerprint(b: &BackendSpec) -> Digest {
    let kind = match &b.kind {
        BackendKind::Stdio(stdio) => format!("{stdio:?}"),
        BackendKind::Remote(RemoteSpec {
            url,
            shown_url,
            label: _,
            transport,
            headers,
            auth: _,
            auth_fingerprint,
        }) => {
            let headers = header_text(headers);
            format!("{url:?}|{shown_url:?}|{transport:?}|{headers:?}|{auth_fingerprint}")
        }
        // The spec's digest: a changed spec file restarts the backend (its tools change).
        BackendKind::OpenApi(o) => format!(
            "{:?}|{:?}|{:?}|{:?}|{}",
            o.source,
            o.base_url,
            header_text(&o.headers),
            o.max_response_bytes,
            o.loaded.as_ref().map(|l| l.digest.as_str()).unwrap_or("")
        ),
    };
    digest(&format!("{kind}|{:?}", b.timeout))
}

/// Headers with their values: a sensitive value's `Debug` is `Sensitive`, whatever it is,
/// so a rotated credential would look unchanged.
fn header_text(headers: &[(HeaderName, HeaderValue)]) -> Vec<(&str, &[u8])> {
    (headers.iter())
        .map(|(name, value)| (name.as_str(), value.as_bytes()))
        .collect()
}

/// What the diff keeps of a backend, its lists and the fixed settings: a SHA-256 of their
/// text, so the expanded secrets in it (header values, URLs, environment) are compared
/// without being held in a string for the life of the process.
pub(super) type Digest = [u8; 32];

pub(super) fn digest(text: &str) -> Digest {
    use sha2::Digest as _;
    sha2::Sha256::digest(text.as_bytes()).into()
}

pub(super) fn rules_key(spec: &ServeSpec) -> Digest {
    let lists: Vec<_> = spec
        .backends
        .iter()
        .map(|b| (&b.name, &b.tools, &b.prompts))
        .collect();
    digest(&format!("{:?}|{lists:?}", spec.aggregation))
}

pub(super) fn guards_key(spec: &ServeSpec, secrets: &HashMap<PathBuf, Vec<u8>>) -> Digest {
    let per_backend: Vec<_> = spec
        .backends
        .iter()
        .map(|b| {
            let overrides = (b.tools.overrides.iter())
                .chain(&b.prompts.overrides)
                .map(|(name, o)| (name, &o.guardrails));
            (&b.name, &b.guardrails, overrides.collect::<Vec<_>>())
        })
        .collect();
    // A webhook's secret rotated in its `secretFile` (then SIGHUP) builds them again: the
    // files' contents count, digested with the rest and never shown.
    let secrets: std::collections::BTreeMap<_, _> = secrets.iter().collect();
    digest(&format!(
        "{:?}|{per_backend:?}|{secrets:?}",
        spec.guardrails
    ))
}

pub(super) fn fixed_key(spec: &ServeSpec) -> Digest {
    digest(&format!(
        "{:?}|{:?}|{:?}",
        spec.options, spec.composites, spec.trust.config
    ))
}

//! Authorization requests awaiting their callback, by `state`: each bound to the principal and
//! backend it was made for, single use (taken, never read), expiring after
//! [`FLOW_LIFETIME`], and at most [`MAX_FLOWS`] at once (expired ones are dropped first; a
//! full table refuses a new flow rather than evicting a live one).
//!
//! Each flow is also bound to **one browser** (`super::start`): the `state` alone is not the
//! capability to complete it.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use super::registration::Registration;
use super::Backend;
use crate::outgoing_auth::{OutgoingAuthError, Secret};

/// How long a user has to give consent.
pub const FLOW_LIFETIME: Duration = Duration::from_secs(600);
/// Most flows awaiting a callback, across backends.
pub const MAX_FLOWS: usize = 4096;
/// Most flows one principal has awaiting a callback for one backend: a new one replaces the
/// oldest, so no principal can fill the table for everyone else.
pub const MAX_FLOWS_PER_PRINCIPAL: usize = 4;

/// One authorization request.
pub(crate) struct Flow {
    /// The principal key (the vault's) it was made for.
    pub(crate) principal: String,
    pub(crate) backend: Arc<Backend>,
    pub(crate) registration: Registration,
    pub(crate) verifier: Secret,
    pub(crate) token_endpoint: String,
    pub(crate) resource: String,
    pub(crate) redirect_uri: String,
    pub(crate) scope: Option<String>,
    /// The issuer the `iss` of the answer must be (when it has one, or must have one).
    pub(crate) issuer: String,
    pub(crate) iss_required: bool,
    pub(crate) created: Instant,
    /// The start page's key (`/oauth/start?flow=<start>`).
    pub(crate) start: String,
    /// The start page's anti-forgery token (form field and `SameSite=Strict` cookie).
    pub(crate) csrf: Secret,
    /// The authorization server's URL the start page sends the browser to.
    pub(crate) authorize_url: String,
    /// The random value of the cookie of the browser that started the flow, once started.
    pub(crate) browser: Option<Secret>,
}

impl Flow {
    fn live(&self) -> bool {
        self.created.elapsed() < FLOW_LIFETIME
    }
}

/// The pending flows, by `state`, and the start keys' states.
#[derive(Default)]
struct Table {
    by_state: HashMap<String, Flow>,
    by_start: HashMap<String, String>,
}

impl Table {
    fn remove(&mut self, state: &str) -> Option<Flow> {
        let flow = self.by_state.remove(state)?;
        self.by_start.remove(&flow.start);
        Some(flow)
    }

    /// Drops the oldest flows of `flow`'s principal and backend beyond
    /// [`MAX_FLOWS_PER_PRINCIPAL`] - 1.
    fn keep_room_for(&mut self, flow: &Flow) {
        let mut own: Vec<(Instant, String)> = (self.by_state.iter())
            .filter(|(_, f)| {
                f.principal == flow.principal && Arc::ptr_eq(&f.backend, &flow.backend)
            })
            .map(|(state, f)| (f.created, state.clone()))
            .collect();
        own.sort();
        let excess = (own.len() + 1).saturating_sub(MAX_FLOWS_PER_PRINCIPAL);
        for (_, state) in own.into_iter().take(excess) {
            self.remove(&state);
        }
    }

    fn drop_expired(&mut self) {
        self.by_state.retain(|_, f| f.live());
        let states = &self.by_state;
        self.by_start.retain(|_, state| states.contains_key(state));
    }
}

/// The callback site: the table of flows, shared by every oauth backend (the callback URL is
/// one), and the redirect URI (`<public URL>/oauth/callback`), known once the gateway listens.
#[derive(Default)]
pub struct Flows {
    table: Mutex<Table>,
    redirect: Mutex<Option<String>>,
    metadata_url: Mutex<Option<String>>,
    /// The oauth backends completing here, by name, oldest first: a reload builds a new one
    /// under the same name, which replaces the one in service only if the reload adopts it
    /// (else it is dropped, and the one in service is the newest still alive).
    backends: Mutex<std::collections::HashMap<String, Vec<std::sync::Weak<Backend>>>>,
}

/// The segment of `issuer`'s redirect URI that names it: the first 32 lowercase hex digits
/// (128 bits: no issuer URL an attacker picks can be made to share another's) of the
/// SHA-256 of the issuer URL as written.
pub fn issuer_tag(issuer: &str) -> String {
    use sha2::Digest;
    let digest = sha2::Sha256::digest(issuer.as_bytes());
    digest.iter().take(16).map(|b| format!("{b:02x}")).collect()
}

/// Whether a callback that arrived at `path` (the request's path, as the gateway's router
/// saw it) arrived at `redirect_uri`: the same path, or, behind a proxy that strips the
/// public URL's path, its `/oauth/…` tail.
pub(crate) fn arrived_at(redirect_uri: &str, path: &str) -> bool {
    let Some((_, expected)) = super::discovery::split(redirect_uri) else {
        return false;
    };
    let path = path.trim_end_matches('/');
    path == expected || (path.starts_with("/oauth/") && expected.ends_with(path))
}

/// The process's callback site (what the gateway's `/oauth/callback` completes).
pub fn site() -> Arc<Flows> {
    static SITE: std::sync::OnceLock<Arc<Flows>> = std::sync::OnceLock::new();
    SITE.get_or_init(Default::default).clone()
}

impl std::fmt::Debug for Flows {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Flows")
            .field("pending", &self.table.lock().by_state.len())
            .finish()
    }
}

impl Flows {
    /// Records `flow` under `state`.
    pub(crate) fn insert(&self, state: String, flow: Flow) -> Result<(), OutgoingAuthError> {
        let mut table = self.table.lock();
        table.keep_room_for(&flow);
        if table.by_state.len() >= MAX_FLOWS {
            table.drop_expired();
        }
        if table.by_state.len() >= MAX_FLOWS {
            return Err(OutgoingAuthError::Discovery(
                "too many authorizations are awaiting consent; try again later",
            ));
        }
        table.by_start.insert(flow.start.clone(), state.clone());
        table.by_state.insert(state, flow);
        Ok(())
    }

    /// The live flow of `state`, removed (a second use finds nothing).
    pub(crate) fn take(&self, state: &str) -> Option<Flow> {
        self.table.lock().remove(state).filter(Flow::live)
    }

    /// `f` on the live flow whose start key is `start` (an expired one is dropped).
    /// Whether any live flow satisfies `f`.
    pub(crate) fn any_live(&self, f: impl Fn(&Flow) -> bool) -> bool {
        (self.table.lock().by_state.values()).any(|flow| flow.live() && f(flow))
    }

    pub(crate) fn with_start<T>(&self, start: &str, f: impl FnOnce(&mut Flow) -> T) -> Option<T> {
        let mut table = self.table.lock();
        let state = table.by_start.get(start)?.clone();
        if !table.by_state.get(&state).is_some_and(Flow::live) {
            table.remove(&state);
            return None;
        }
        table.by_state.get_mut(&state).map(f)
    }

    /// The URL the user is sent to for the flow whose start key is `start`.
    pub(crate) fn start_url(&self, start: &str) -> Option<String> {
        let redirect = self.redirect_uri()?;
        let base = redirect.trim_end_matches("/oauth/callback");
        Some(format!("{base}/oauth/start?flow={start}"))
    }

    /// Whether the gateway's public URL is https (its cookies are then `Secure`).
    pub(crate) fn secure(&self) -> bool {
        self.redirect_uri().is_some_and(|r| {
            r.get(..8)
                .is_some_and(|p| p.eq_ignore_ascii_case("https://"))
        })
    }

    /// Sets the gateway's public base URL (no trailing slash needed): the redirect URI is
    /// `<base>/oauth/callback`.
    pub fn set_public_url(&self, base: &str) {
        *self.redirect.lock() = Some(format!("{}/oauth/callback", base.trim_end_matches('/')));
    }

    /// The shared redirect URI (`<base>/oauth/callback`), once the public URL is known: the
    /// one of a pre-registered client and of the client metadata document.
    pub fn redirect_uri(&self) -> Option<String> {
        self.redirect.lock().clone()
    }

    /// The redirect URI of a dynamic registration at `issuer`, once the public URL is known:
    /// `<base>/oauth/i/<tag>/callback`, [`issuer_tag`] of the issuer. Each issuer's client
    /// gets its own, so an answer one issuer sends cannot complete another issuer's flow
    /// (mix-up, RFC 9700 §4.4); none lies under another or under the shared one (a server
    /// that accepts any path below a registered one cannot reach it from there).
    pub fn issuer_redirect_uri(&self, issuer: &str) -> Option<String> {
        let shared = self.redirect_uri()?;
        let base = shared.trim_end_matches("/oauth/callback");
        Some(format!("{base}/oauth/i/{}/callback", issuer_tag(issuer)))
    }

    /// Whether answers from more than one authorization server may come back to the shared
    /// redirect URI, so that a flow there cannot be told from another issuer's without `iss`:
    /// more than one oauth backend completes here, or an issuer other than `issuer` is
    /// known (pinned by the config, or met in discovery) to any of them.
    pub(crate) fn shared_by_issuers(&self, issuer: &str) -> bool {
        let live: Vec<Arc<Backend>> = self
            .backends
            .lock()
            .values()
            .filter_map(|built| built.iter().rev().find_map(std::sync::Weak::upgrade))
            .collect();
        if live.len() > 1 {
            return true;
        }
        live.iter().any(|b| {
            let pinned = b.config.client.authorization_server.as_deref();
            pinned.is_some_and(|p| p != issuer) || b.servers.lock().keys().any(|k| k != issuer)
        })
    }

    /// Records the configured URL of the client metadata document (its `client_id`).
    pub fn set_metadata_url(&self, url: &str) {
        *self.metadata_url.lock() = Some(url.to_owned());
    }

    /// The client metadata document the gateway serves at `/oauth/client-metadata.json`:
    /// `None` until the public URL is known.
    pub fn metadata_document(&self) -> Option<serde_json::Value> {
        let redirect = self.redirect_uri()?;
        let id = self.metadata_url.lock().clone().unwrap_or_else(|| {
            redirect.trim_end_matches("/oauth/callback").to_owned() + "/oauth/client-metadata.json"
        });
        Some(super::client_metadata(
            &redirect,
            Some(&id),
            super::TokenAuth::None,
        ))
    }

    /// Records `backend` under its name (see [`Flows::backend`]).
    pub(crate) fn register(&self, backend: &Arc<Backend>) {
        let mut backends = self.backends.lock();
        for built in backends.values_mut() {
            built.retain(|b| b.strong_count() > 0);
        }
        backends.retain(|_, built| !built.is_empty());
        backends
            .entry(backend.name().to_owned())
            .or_default()
            .push(Arc::downgrade(backend));
    }

    /// The newest oauth backend named `name` still in use.
    pub fn backend(&self, name: &str) -> Option<Arc<Backend>> {
        self.backends
            .lock()
            .get(name)?
            .iter()
            .rev()
            .find_map(std::sync::Weak::upgrade)
    }

    /// How many await a callback.
    pub fn pending(&self) -> usize {
        self.table.lock().by_state.len()
    }
}

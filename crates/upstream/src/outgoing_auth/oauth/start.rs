//! The browser's side of an authorization flow before the authorization server: the start
//! page the client is sent to, and the cookie that binds the callback to the browser that
//! clicked it.
//!
//! Why: with the authorization server's URL handed to the client, its `state` was the whole
//! capability. Alice could send Bob her link; Bob's browser (silently, where the
//! authorization server approves a known client without a prompt) would bring back a code
//! for Bob's upstream account, kept in Alice's slot: Alice then acts upstream as Bob. Now:
//! - the client gets `/oauth/start?flow=<key>`; the page names the principal and backend and
//!   asks for a click, so following someone else's link is not silent;
//! - the click is a POST whose anti-forgery token is also a `SameSite=Strict` cookie set by
//!   that page, so another site cannot click for the user;
//! - a flow is started once, by one browser, which gets a random cookie; the callback is
//!   refused without it, so the authorization server's URL alone completes nothing.

use subtle::ConstantTimeEq;

use super::flows::{Flow, Flows, FLOW_LIFETIME};
use super::{pkce, CallbackError};
use crate::outgoing_auth::Secret;

/// What the start page shows, and the anti-forgery token its form and cookie carry.
/// `Debug` shows no token.
pub struct StartPage {
    /// The backend's configured name.
    pub backend: String,
    /// Whom the authorization is for, as the gateway knows them.
    pub principal: String,
    /// The authorization server the browser is sent to (its origin).
    pub server: String,
    /// The form's hidden field.
    pub csrf: String,
    /// The cookie that must carry the same token back.
    pub csrf_cookie: Cookie,
}

/// A cookie the gateway sets for a flow (`HttpOnly`, expiring with the flow). `Debug` shows
/// no value.
pub struct Cookie {
    name: String,
    value: String,
    path: String,
    same_site: &'static str,
    secure: bool,
}

impl Cookie {
    /// Its `Set-Cookie` value.
    pub fn header(&self) -> String {
        format!(
            "{}={}; Path={}; Max-Age={}; HttpOnly; SameSite={}{}",
            self.name,
            self.value,
            self.path,
            FLOW_LIFETIME.as_secs(),
            self.same_site,
            if self.secure { "; Secure" } else { "" }
        )
    }
}

/// The click, accepted: where the browser goes next, and the cookie it must bring back to
/// the callback. `Debug` shows neither (the URL holds the `state`).
pub struct Started {
    /// The authorization server's URL.
    pub location: String,
    /// The browser's cookie.
    pub cookie: Cookie,
}

impl std::fmt::Debug for StartPage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StartPage")
            .field("backend", &self.backend)
            .field("server", &self.server)
            .finish_non_exhaustive()
    }
}

impl std::fmt::Debug for Cookie {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cookie")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

impl std::fmt::Debug for Started {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Started").finish_non_exhaustive()
    }
}

/// Why the start page or its click was refused: fixed words.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StartError {
    /// No live flow has this key (wrong, completed, or expired).
    #[error("this authorization link is unknown, was already used, or has expired; start again from your MCP client")]
    Unknown,
    /// The flow was started already, in some browser.
    #[error("this authorization was already started in another browser or tab; if that was not you, start again from your MCP client")]
    AlreadyStarted,
    /// The click did not come from the gateway's own page in this browser (no or another
    /// anti-forgery token, or another origin than the gateway's).
    #[error("this confirmation did not come from the gateway's page in this browser; open the link your MCP client gave you")]
    Forged,
}

/// What the browser said of where its click came from: the `Origin` and `Sec-Fetch-Site`
/// headers of the POST.
#[derive(Debug, Clone, Copy, Default)]
pub struct ClickFrom<'a> {
    /// `Origin`.
    pub origin: Option<&'a str>,
    /// `Sec-Fetch-Site`.
    pub fetch_site: Option<&'a str>,
}

impl Flows {
    /// The start page of the flow whose key is `start`.
    pub fn start_page(&self, start: &str) -> Result<StartPage, StartError> {
        let names = self.cookie_names();
        self.with_start(start, |flow| {
            if flow.browser.is_some() {
                return Err(StartError::AlreadyStarted);
            }
            Ok(StartPage {
                backend: flow.backend.name().to_owned(),
                principal: principal_label(&flow.principal),
                server: shown_origin(&flow.authorize_url),
                csrf: flow.csrf.expose().to_owned(),
                csrf_cookie: names.csrf(&flow.start, flow.csrf.expose()),
            })
        })
        .unwrap_or(Err(StartError::Unknown))
    }

    /// Whether a click's POST could be genuine, judged from its headers alone: from the
    /// gateway's own origin (`from`), with `cookies` (a `Cookie` header) holding a live flow's
    /// anti-forgery cookie, with its value. Judged before the form is read, so that a POST
    /// that cannot be a click (anyone's: the route needs no credential) is answered at once
    /// rather than holding its connection while its body trickles in. Cheap whatever the
    /// header: at most [`MAX_CLICK_COOKIES`] of its cookies, read once, outside the flows'
    /// lock, and a header past [`MAX_COOKIE_HEADER`] is no click's.
    pub fn may_be_a_click(&self, cookies: Option<&str>, from: ClickFrom<'_>) -> bool {
        let Some(header) = cookies.filter(|h| h.len() <= MAX_COOKIE_HEADER) else {
            return false;
        };
        if !self.same_origin(from) {
            return false;
        }
        let prefix = self.cookie_names().csrf_prefix();
        // The newest last (browsers send older cookies of one path first): the flow being
        // clicked was shown last.
        let candidates: Vec<(&str, &str)> = (header.rsplit(';'))
            .filter_map(|pair| pair.trim().split_once('='))
            .filter_map(|(name, value)| Some((name.strip_prefix(prefix.as_str())?, value)))
            .take(MAX_CLICK_COOKIES)
            .collect();
        if candidates.is_empty() {
            return false;
        }
        self.any_live(|flow| {
            (candidates.iter())
                .any(|(t, value)| *t == tag(&flow.start) && equal(value, flow.csrf.expose()))
        })
    }

    /// The start page's form (`flow`, `csrf`) posted with the browser's `Cookie` header,
    /// from the gateway's own origin (`from`: a same-site page on another port or subdomain
    /// would carry the `SameSite=Strict` cookie too): the flow is bound to this browser,
    /// once.
    pub fn begin(
        &self,
        form: &[u8],
        cookies: Option<&str>,
        from: ClickFrom<'_>,
    ) -> Result<Started, StartError> {
        if !self.same_origin(from) {
            return Err(StartError::Forged);
        }
        let (mut start, mut csrf) = (None, None);
        for (k, v) in form_urlencoded::parse(form) {
            let slot = match &*k {
                "flow" => &mut start,
                "csrf" => &mut csrf,
                _ => continue,
            };
            if slot.replace(v.into_owned()).is_some() {
                return Err(StartError::Forged);
            }
        }
        let (start, csrf) = (start.ok_or(StartError::Unknown)?, csrf.unwrap_or_default());
        let names = self.cookie_names();
        let browser = pkce::random_token().map_err(|_| StartError::Unknown)?;
        self.with_start(&start, |flow| {
            let cookie = cookie(cookies, &names.csrf_name(&flow.start)).unwrap_or_default();
            if !(equal(&csrf, flow.csrf.expose()) && equal(cookie, flow.csrf.expose())) {
                return Err(StartError::Forged);
            }
            if flow.browser.is_some() {
                return Err(StartError::AlreadyStarted);
            }
            flow.browser = Some(Secret::new(&browser));
            Ok(Started {
                location: flow.authorize_url.clone(),
                cookie: names.browser(&flow.start, &browser, &flow.redirect_uri),
            })
        })
        .unwrap_or(Err(StartError::Unknown))
    }

    /// Whether a click came from the gateway's own origin: `Origin` present and equal to the
    /// public URL's (absent or another refused), and `Sec-Fetch-Site`, where the browser
    /// sends it, `same-origin`. `Origin: null` passes only beside `Sec-Fetch-Site:
    /// same-origin`, which no page can set: a browser sends `null` for a form of a page
    /// whose referrer policy withholds its origin (the start page's no longer does, but a
    /// user's own policy may).
    fn same_origin(&self, from: ClickFrom<'_>) -> bool {
        let Some(ours) = self.redirect_uri() else {
            return false;
        };
        let same = |s: &str| s.eq_ignore_ascii_case("same-origin");
        let fetch_ok = from.fetch_site.is_none_or(same);
        let origin_ok = from.origin.is_some_and(|o| {
            o.eq_ignore_ascii_case(origin(&ours)) || (o == "null" && from.fetch_site.is_some())
        });
        fetch_ok && origin_ok
    }

    /// How this gateway names and scopes its cookies (see [`CookieNames`]).
    fn cookie_names(&self) -> CookieNames {
        let redirect = self.redirect_uri().unwrap_or_default();
        let base = redirect.trim_end_matches("/oauth/callback");
        let path = &base[origin(base).len()..];
        CookieNames {
            secure: self.secure(),
            base_path: path.trim_end_matches('/').to_owned(),
        }
    }

    /// The live flow of `state`, removed, if the browser (its `Cookie` header) is the one
    /// that started it. Removed either way: a callback in the wrong browser ends the flow.
    pub(crate) fn take_in_browser(
        &self,
        state: &str,
        cookies: Option<&str>,
    ) -> Result<Flow, CallbackError> {
        let flow = self.take(state).ok_or(CallbackError::UnknownState)?;
        let sent = cookie(cookies, &self.cookie_names().browser_name(&flow.start));
        match (&flow.browser, sent) {
            (Some(ours), Some(sent)) if equal(sent, ours.expose()) => Ok(flow),
            _ => Err(CallbackError::OtherBrowser),
        }
    }
}

/// A principal key (`vault::principal_key`: `<issuer length>:<issuer>:<subject>`) as a
/// person reads it.
pub(crate) fn principal_label(key: &str) -> String {
    let parsed = key.split_once(':').and_then(|(len, rest)| {
        let len: usize = len.parse().ok()?;
        let issuer = rest.get(..len)?;
        let subject = rest.get(len..)?.strip_prefix(':')?;
        Some((issuer, subject))
    });
    match parsed {
        Some(("anonymous", _)) => "the anonymous caller (loopback)".to_owned(),
        Some(("api-key", name)) => format!("API key \"{name}\""),
        Some((issuer, subject)) => format!("\"{subject}\" (issued by {issuer})"),
        None => "an unknown caller".to_owned(),
    }
}

/// `scheme://host[:port]` of `url` (with any user-info: see [`shown_origin`]).
fn origin(url: &str) -> &str {
    let after_scheme = url.find("://").map_or(0, |i| i + 3);
    let end = url[after_scheme..]
        .find(['/', '?', '#'])
        .map_or(url.len(), |i| after_scheme + i);
    &url[..end]
}

/// [`origin`] as a person should read it: without user-info, which would let
/// `https://login.example@evil.example` read as `login.example`.
fn shown_origin(url: &str) -> String {
    let origin = origin(url);
    match (origin.find("://"), origin.rfind('@')) {
        (Some(s), Some(at)) if at > s => format!("{}{}", &origin[..s + 3], &origin[at + 1..]),
        _ => origin.to_owned(),
    }
}

/// The start key's first characters: enough to keep two flows' cookies apart in one browser.
/// Most anti-forgery cookies of one `Cookie` header that [`Flows::may_be_a_click`] looks at,
/// the newest (a browser holds one per flow it was shown), and the longest header it reads.
const MAX_CLICK_COOKIES: usize = 8;
const MAX_COOKIE_HEADER: usize = 32 << 10;

fn tag(start: &str) -> &str {
    start.get(..16).unwrap_or(start)
}

/// The flow cookies' names and paths. Over https they are `__Host-` cookies (`Secure`,
/// `Path=/`, no `Domain`): a sibling subdomain cannot set them, nor can a plain-http
/// answer. Over http (loopback, a test) they are scoped to the two routes under the public
/// URL's path.
struct CookieNames {
    secure: bool,
    base_path: String,
}

impl CookieNames {
    fn name(&self, kind: &str, start: &str) -> String {
        let prefix = if self.secure { "__Host-" } else { "" };
        format!("{prefix}sb_{kind}_{}", tag(start))
    }

    fn path(&self, route: &str) -> String {
        match self.secure {
            true => "/".to_owned(),
            false => format!("{}/oauth/{route}", self.base_path),
        }
    }

    fn csrf_name(&self, start: &str) -> String {
        self.name("csrf", start)
    }

    /// What every anti-forgery cookie's name starts with (its flow's tag follows).
    fn csrf_prefix(&self) -> String {
        self.name("csrf", "")
    }

    fn browser_name(&self, start: &str) -> String {
        self.name("oauth", start)
    }

    fn csrf(&self, start: &str, value: &str) -> Cookie {
        Cookie {
            name: self.csrf_name(start),
            value: value.to_owned(),
            path: self.path("start"),
            same_site: "Strict",
            secure: self.secure,
        }
    }

    /// The browser's cookie, sent back to the flow's own redirect URI (a dynamic client's
    /// is its issuer's, `…/oauth/i/<tag>/callback`), and nowhere else.
    fn browser(&self, start: &str, value: &str, redirect_uri: &str) -> Cookie {
        let path = match self.secure {
            true => "/".to_owned(),
            false => super::discovery::split(redirect_uri)
                .map_or_else(|| self.path("callback"), |(_, path)| path.to_owned()),
        };
        Cookie {
            name: self.browser_name(start),
            value: value.to_owned(),
            path,
            same_site: "Lax",
            secure: self.secure,
        }
    }
}

/// The value of cookie `name` in a `Cookie` header (`a=1; b=2`); none when it is repeated.
fn cookie<'a>(header: Option<&'a str>, name: &str) -> Option<&'a str> {
    let mut found = header?
        .split(';')
        .filter_map(|pair| pair.trim().split_once('='))
        .filter(|(k, _)| *k == name)
        .map(|(_, v)| v);
    let value = found.next()?;
    found.next().is_none().then_some(value)
}

fn equal(a: &str, b: &str) -> bool {
    !b.is_empty() && bool::from(a.as_bytes().ct_eq(b.as_bytes()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn principal_keys_read_as_people_read_them() {
        let key = crate::outgoing_auth::vault::principal_key("https://idp", "alice");
        assert_eq!(principal_label(&key), "\"alice\" (issued by https://idp)");
        let key = crate::outgoing_auth::vault::principal_key("api-key", "ci");
        assert_eq!(principal_label(&key), "API key \"ci\"");
        assert_eq!(principal_label("garbage"), "an unknown caller");
        assert_eq!(principal_label("99:short"), "an unknown caller");
    }

    #[test]
    fn cookies_are_found_by_exact_name_once() {
        let h = Some("a=1; sb_oauth_x=2;b=3");
        assert_eq!(cookie(h, "sb_oauth_x"), Some("2"));
        assert_eq!(cookie(h, "sb_oauth"), None);
        assert_eq!(cookie(Some("k=1; k=2"), "k"), None);
        assert_eq!(cookie(None, "k"), None);
    }

    #[test]
    fn origins_drop_the_path_and_query() {
        assert_eq!(
            origin("https://as.example:8443/authorize?x=1"),
            "https://as.example:8443"
        );
        assert_eq!(origin("http://h?x"), "http://h");
    }
}

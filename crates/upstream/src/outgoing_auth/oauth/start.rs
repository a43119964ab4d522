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
#[derive(Debug)]
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

/// A cookie the gateway sets for a flow (`HttpOnly`, expiring with the flow).
#[derive(Debug)]
pub struct Cookie {
    name: String,
    value: String,
    path: &'static str,
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
/// the callback.
#[derive(Debug)]
pub struct Started {
    /// The authorization server's URL.
    pub location: String,
    /// The browser's cookie.
    pub cookie: Cookie,
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
    /// The click did not come from the gateway's own page in this browser.
    #[error("this confirmation did not come from the gateway's page in this browser; open the link your MCP client gave you")]
    Forged,
}

impl Flows {
    /// The start page of the flow whose key is `start`.
    pub fn start_page(&self, start: &str) -> Result<StartPage, StartError> {
        let secure = self.secure();
        self.with_start(start, |flow| {
            if flow.browser.is_some() {
                return Err(StartError::AlreadyStarted);
            }
            Ok(StartPage {
                backend: flow.backend.name().to_owned(),
                principal: principal_label(&flow.principal),
                server: origin(&flow.authorize_url).to_owned(),
                csrf: flow.csrf.expose().to_owned(),
                csrf_cookie: Cookie {
                    name: csrf_cookie(&flow.start),
                    value: flow.csrf.expose().to_owned(),
                    path: "/oauth/start",
                    same_site: "Strict",
                    secure,
                },
            })
        })
        .unwrap_or(Err(StartError::Unknown))
    }

    /// The start page's form (`flow`, `csrf`) posted with the browser's `Cookie` header:
    /// the flow is bound to this browser, once.
    pub fn begin(&self, form: &[u8], cookies: Option<&str>) -> Result<Started, StartError> {
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
        let secure = self.secure();
        let browser = pkce::random_token().map_err(|_| StartError::Unknown)?;
        self.with_start(&start, |flow| {
            let cookie = cookie(cookies, &csrf_cookie(&flow.start)).unwrap_or_default();
            if !(equal(&csrf, flow.csrf.expose()) && equal(cookie, flow.csrf.expose())) {
                return Err(StartError::Forged);
            }
            if flow.browser.is_some() {
                return Err(StartError::AlreadyStarted);
            }
            flow.browser = Some(Secret::new(&browser));
            Ok(Started {
                location: flow.authorize_url.clone(),
                cookie: Cookie {
                    name: browser_cookie(&flow.start),
                    value: browser,
                    path: "/oauth/callback",
                    same_site: "Lax",
                    secure,
                },
            })
        })
        .unwrap_or(Err(StartError::Unknown))
    }

    /// The live flow of `state`, removed, if the browser (its `Cookie` header) is the one
    /// that started it. Removed either way: a callback in the wrong browser ends the flow.
    pub(crate) fn take_in_browser(
        &self,
        state: &str,
        cookies: Option<&str>,
    ) -> Result<Flow, CallbackError> {
        let flow = self.take(state).ok_or(CallbackError::UnknownState)?;
        let sent = cookie(cookies, &browser_cookie(&flow.start));
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

/// `scheme://host[:port]` of `url`.
fn origin(url: &str) -> &str {
    let after_scheme = url.find("://").map_or(0, |i| i + 3);
    let end = url[after_scheme..]
        .find(['/', '?', '#'])
        .map_or(url.len(), |i| after_scheme + i);
    &url[..end]
}

/// The start key's first characters: enough to keep two flows' cookies apart in one browser.
fn tag(start: &str) -> &str {
    start.get(..16).unwrap_or(start)
}

fn csrf_cookie(start: &str) -> String {
    format!("sb_csrf_{}", tag(start))
}

fn browser_cookie(start: &str) -> String {
    format!("sb_oauth_{}", tag(start))
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

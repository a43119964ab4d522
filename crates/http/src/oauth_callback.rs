//! The browser's side of per-user OAuth to remote backends:
//! - `GET /oauth/start?flow=…`, the page a client's URL elicitation opens: it names the
//!   principal and backend and asks for a click; `POST /oauth/start`, the click, binds the
//!   flow to this browser (a cookie) and redirects to the authorization server
//!   (`switchboard_core::oauth::start` says why);
//! - `GET /oauth/callback` and `GET /oauth/i/{tag}/callback` (a dynamically registered client's
//!   redirect URI, one per issuer), where the authorization server sends the user back (the
//!   state, the browser's cookie, the path, the code and `iss` are checked and the code
//!   redeemed by `switchboard_core::oauth::complete`);
//! - `GET /oauth/client-metadata.json`, the gateway's Client ID Metadata Document.
//!
//! None needs the caller's credential: the flow's keys and the browser's cookie are what bind
//! a callback to the principal that asked and the browser that started it. Pages are fixed
//! text plus the backend's configured name and the principal's name, escaped; never the
//! query. No page may be framed (clickjacking the click).

use axum::body::Body;
use axum::extract::RawQuery;
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};

use switchboard_core::oauth;

/// `GET /oauth/start?flow=…`: the page that asks for the click.
pub(crate) async fn start_page(RawQuery(query): RawQuery) -> Response {
    let query = query.unwrap_or_default();
    let start = form_pairs(&query)
        .find(|(k, _)| k == "flow")
        .map(|(_, v)| v);
    let page_of = |start: &str| oauth::site().start_page(start);
    match start.as_deref().map(page_of) {
        Some(Ok(p)) => {
            let text = format!(
                "Switchboard asks you to authorize its access to <b>{}</b> at {} for \
                 <b>{}</b>.</p><p>Continue only if you are {}. If someone sent you this \
                 link, close this tab.</p>\
                 <form method=\"post\" action=\"\">\
                 <input type=\"hidden\" name=\"flow\" value=\"{}\">\
                 <input type=\"hidden\" name=\"csrf\" value=\"{}\">\
                 <button type=\"submit\">Continue to sign in</button></form><p>",
                escape(&p.backend),
                escape(&p.server),
                escape(&p.principal),
                escape(&p.principal),
                escape(start.as_deref().unwrap_or_default()),
                escape(&p.csrf),
            );
            let mut r = page(StatusCode::OK, "Authorize Switchboard", &text);
            // Its form must carry the gateway's origin: under `no-referrer` a browser sends
            // `Origin: null` with it. Its URL (the flow key) still goes to no other origin.
            r.headers_mut().insert(
                header::REFERRER_POLICY,
                header::HeaderValue::from_static("same-origin"),
            );
            set_cookie(&mut r, &p.csrf_cookie);
            r
        }
        Some(Err(e)) => refused(StatusCode::BAD_REQUEST, &e),
        None => refused(StatusCode::BAD_REQUEST, &oauth::StartError::Unknown),
    }
}

/// The most a click's form may be (its flow and anti-forgery token take about 100 bytes).
const START_FORM_LIMIT: usize = 4096;

/// `POST /oauth/start`: the click; on to the authorization server.
pub(crate) async fn start(headers: HeaderMap, body: Body) -> Response {
    // Only a browser on the gateway's own page, holding a live flow's anti-forgery cookie,
    // can be clicking: anything else is refused before its body is read.
    let text = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    let from = oauth::ClickFrom {
        origin: text(header::ORIGIN.as_str()),
        fetch_site: text("sec-fetch-site"),
    };
    if !oauth::site().may_be_a_click(text(header::COOKIE.as_str()), from) {
        return refused(StatusCode::BAD_REQUEST, &oauth::StartError::Forged);
    }
    // Read within a bound and a deadline, as the MCP routes read theirs: a form sent slowly,
    // or never finished, held its connection (busy, so never evicted) for good, and a few
    // such connections, from anyone, filled the connection bound (review HIGH).
    let form = match crate::streamable::read_body(&headers, body, START_FORM_LIMIT).await {
        Ok(form) => form,
        Err(e) => {
            let status = match e {
                crate::error::HttpError::PayloadTooLarge(_) => StatusCode::PAYLOAD_TOO_LARGE,
                _ => StatusCode::BAD_REQUEST,
            };
            return page(
                status,
                "Authorization failed",
                "The form could not be read.",
            );
        }
    };
    match oauth::site().begin(&form, text(header::COOKIE.as_str()), from) {
        Ok(started) => {
            let mut r = page(
                StatusCode::SEE_OTHER,
                "Signing in",
                "Continuing to the authorization server.",
            );
            if let Ok(location) = header::HeaderValue::from_str(&started.location) {
                r.headers_mut().insert(header::LOCATION, location);
            }
            set_cookie(&mut r, &started.cookie);
            r
        }
        Err(e) => {
            tracing::info!(error = %e, "OAuth start refused");
            refused(StatusCode::BAD_REQUEST, &e)
        }
    }
}

/// `GET /oauth/callback` and `GET /oauth/i/{tag}/callback` (a dynamic client's redirect URI at
/// one issuer): the path goes to `complete`, which refuses an answer that came back to
/// another redirect URI than its flow's.
pub(crate) async fn callback(
    uri: axum::http::Uri,
    headers: HeaderMap,
    RawQuery(query): RawQuery,
) -> Response {
    let site = oauth::site();
    let cookies = headers.get(header::COOKIE).and_then(|v| v.to_str().ok());
    let query = query.as_deref().unwrap_or("");
    match oauth::complete(&site, uri.path(), query, cookies).await {
        Ok(backend) => page(
            StatusCode::OK,
            "Authorized",
            &format!(
                "Switchboard can now use {} on your behalf. You can close this tab and retry in your MCP client.",
                escape(&backend)
            ),
        ),
        Err(e) => {
            tracing::info!(error = %e, "OAuth callback refused");
            let status = match e {
                oauth::CallbackError::Token(_) => StatusCode::BAD_GATEWAY,
                _ => StatusCode::BAD_REQUEST,
            };
            page(status, "Authorization failed", &escape(&e.to_string()))
        }
    }
}

/// `GET /oauth/client-metadata.json`.
pub(crate) async fn client_metadata() -> Response {
    match oauth::site().metadata_document() {
        Some(doc) => (
            [(header::CONTENT_TYPE, "application/json")],
            doc.to_string(),
        )
            .into_response(),
        None => StatusCode::NOT_FOUND.into_response(),
    }
}

fn refused(status: StatusCode, e: &oauth::StartError) -> Response {
    page(status, "Authorization failed", &escape(&e.to_string()))
}

fn set_cookie(r: &mut Response, cookie: &oauth::Cookie) {
    if let Ok(v) = header::HeaderValue::from_str(&cookie.header()) {
        r.headers_mut().append(header::SET_COOKIE, v);
    }
}

/// The `key=value` pairs of a query, as sent: the flow key is base64url, which needs no
/// decoding, and a key that does not match is unknown either way.
fn form_pairs(query: &str) -> impl Iterator<Item = (String, String)> + '_ {
    query.split('&').filter_map(|pair| {
        let (k, v) = pair.split_once('=')?;
        Some((k.to_owned(), v.to_owned()))
    })
}

fn page(status: StatusCode, title: &str, text: &str) -> Response {
    let body = format!(
        "<!doctype html><html><head><meta charset=\"utf-8\"><title>{title}</title></head>\
         <body><h1>{title}</h1><p>{text}</p></body></html>"
    );
    (
        status,
        [
            (header::CONTENT_TYPE, "text/html; charset=utf-8"),
            (header::CACHE_CONTROL, "no-store"),
            (header::REFERRER_POLICY, "no-referrer"),
            (header::X_FRAME_OPTIONS, "DENY"),
            (
                header::CONTENT_SECURITY_POLICY,
                "default-src 'none'; frame-ancestors 'none'",
            ),
        ],
        body,
    )
        .into_response()
}

fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

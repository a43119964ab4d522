//! One call's HTTP request, built exactly from its (already validated) arguments: path
//! templating with percent-encoding (a value can never add a path segment or a dot segment),
//! query parameters by style and explode, header and cookie parameters (no CR/LF, nothing the
//! gateway sets), and a JSON or form body. The URL is always the configured base URL's
//! scheme and authority: nothing in the spec or the arguments can point it elsewhere.

use bytes::Bytes;
use http_body_util::Full;
use hyper::header::{HeaderName, HeaderValue, ACCEPT, CONTENT_TYPE, COOKIE};
use hyper::{Request, Uri};
use percent_encoding::{utf8_percent_encode, AsciiSet, NON_ALPHANUMERIC};
use serde_json::{Map, Value};

use super::error::OpenApiError;
use super::tools::{BodyKind, In, Operation, Param, Style};

/// Everything but RFC 3986's unreserved characters is encoded.
const COMPONENT: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~');

/// The longest header or cookie value a call may send (servers refuse far less).
pub(crate) const MAX_HEADER_VALUE: usize = 8 * 1024;
/// The longest URL a call may send.
pub(crate) const MAX_URL: usize = 64 * 1024;

/// Where calls go: the configured base URL, split once.
#[derive(Debug, Clone)]
pub(crate) struct Base {
    pub(crate) scheme: hyper::http::uri::Scheme,
    pub(crate) authority: hyper::http::uri::Authority,
    /// The base URL's path without a trailing `/` (the operation's path is appended).
    pub(crate) prefix: String,
}

impl Base {
    pub(crate) fn parse(url: &str) -> Result<Base, OpenApiError> {
        const WHY: &str = "not an absolute http(s) URL with a host (and no query)";
        let uri = crate::remote::url::parse(url).map_err(|_| OpenApiError::BaseUrl(WHY))?;
        if uri.query().is_some() {
            return Err(OpenApiError::BaseUrl(WHY));
        }
        let parts = uri.into_parts();
        let (Some(scheme), Some(authority)) = (parts.scheme, parts.authority) else {
            return Err(OpenApiError::BaseUrl(WHY));
        };
        let prefix = parts
            .path_and_query
            .map(|p| p.path().trim_end_matches('/').to_owned())
            .unwrap_or_default();
        Ok(Base {
            scheme,
            authority,
            prefix,
        })
    }
}

fn refuse(why: String) -> OpenApiError {
    OpenApiError::Argument(why)
}

/// The request for `op` with `args`, carrying `fixed` headers (configured; they win).
pub(crate) fn build(
    base: &Base,
    op: &Operation,
    args: &Map<String, Value>,
    fixed: &[(HeaderName, HeaderValue)],
) -> Result<Request<Full<Bytes>>, OpenApiError> {
    let path = path(&op.path, &op.params, args)?;
    let query = query(&op.params, args)?;
    let target = match query.is_empty() {
        true => format!("{}{path}", base.prefix),
        false => format!("{}{path}?{query}", base.prefix),
    };
    if target.len() + base.authority.as_str().len() > MAX_URL {
        return Err(refuse(format!(
            "the URL would be longer than {MAX_URL} bytes"
        )));
    }
    let uri = Uri::builder()
        .scheme(base.scheme.clone())
        .authority(base.authority.clone())
        .path_and_query(target)
        .build()
        .map_err(|_| refuse("the arguments do not make a valid URL".into()))?;
    let mut builder = Request::builder()
        .method(op.method.clone())
        .uri(uri)
        .header(ACCEPT, "application/json, */*;q=0.5");
    for (name, value) in fixed {
        builder = builder.header(name, value);
    }
    for (name, value) in headers(&op.params, args, fixed)? {
        builder = builder.header(name, value);
    }
    let body = match (op.body, args.get("body")) {
        (Some(BodyKind::Json), Some(v)) => {
            builder = builder.header(CONTENT_TYPE, "application/json");
            Bytes::from(serde_json::to_vec(v).unwrap_or_default())
        }
        (Some(BodyKind::Form), Some(v)) => {
            builder = builder.header(CONTENT_TYPE, "application/x-www-form-urlencoded");
            Bytes::from(form(v))
        }
        _ => Bytes::new(),
    };
    builder
        .body(Full::new(body))
        .map_err(|_| refuse("the arguments do not make a valid request".into()))
}

/// A scalar as text (strings as they are; `null` as nothing).
fn scalar(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Null => String::new(),
        other => other.to_string(),
    }
}

fn enc(s: &str) -> String {
    utf8_percent_encode(s, COMPONENT).to_string()
}

/// The path with each `{name}` replaced by its encoded value.
fn path(
    template: &str,
    params: &[Param],
    args: &Map<String, Value>,
) -> Result<String, OpenApiError> {
    let mut out = template.to_owned();
    for p in params.iter().filter(|p| p.at == In::Path) {
        let Some(v) = args.get(&p.name) else {
            return Err(refuse(format!("path parameter {} is missing", p.name)));
        };
        let text = simple(v);
        if text.is_empty() {
            return Err(refuse(format!("path parameter {} is empty", p.name)));
        }
        if text.contains(['/', '\\']) {
            return Err(refuse(format!(
                "path parameter {} may not contain / or \\ (it would name another path)",
                p.name
            )));
        }
        out = out.replace(&format!("{{{}}}", p.name), &enc(&text));
    }
    if out.split('/').any(|seg| seg == "." || seg == "..") {
        return Err(refuse("a path parameter may not be . or ..".into()));
    }
    Ok(out)
}

/// Whether a spec's path template can only ever name a path under the base URL: it starts
/// with `/`; outside its `{name}`s there is no `%`, `?`, `#` or `\`, no empty segment (but a
/// trailing `/`), no `.` or `..` segment; its braces pair up.
pub(crate) fn check_template(template: &str) -> Result<(), String> {
    let refuse = |why: &str| Err(format!("path {template:?}: {why}"));
    let Some(rest) = template.strip_prefix('/') else {
        return refuse("does not start with /");
    };
    let mut literal = String::new();
    let mut open = false;
    for c in rest.chars() {
        match (c, open) {
            ('{', false) => open = true,
            ('}', true) => {
                open = false;
                literal.push('v');
            }
            ('{' | '}', _) => return refuse("its braces do not pair up"),
            (_, true) => {}
            (c, false) => literal.push(c),
        }
    }
    if open {
        return refuse("its braces do not pair up");
    }
    if literal.contains(['%', '?', '#', '\\']) {
        return refuse("has %, ?, # or \\ outside a {parameter}");
    }
    let segments: Vec<&str> = literal.split('/').collect();
    let last = segments.len() - 1;
    for (i, seg) in segments.iter().enumerate() {
        if (seg.is_empty() && i != last) || *seg == "." || *seg == ".." {
            return refuse("has an empty, . or .. segment");
        }
    }
    Ok(())
}

/// The simple style: scalars as they are, arrays and objects comma-separated.
fn simple(v: &Value) -> String {
    match v {
        Value::Array(items) => items.iter().map(scalar).collect::<Vec<_>>().join(","),
        Value::Object(map) => map
            .iter()
            .flat_map(|(k, v)| [k.clone(), scalar(v)])
            .collect::<Vec<_>>()
            .join(","),
        other => scalar(other),
    }
}

fn query(params: &[Param], args: &Map<String, Value>) -> Result<String, OpenApiError> {
    let mut pairs: Vec<String> = Vec::new();
    for p in params.iter().filter(|p| p.at == In::Query) {
        match args.get(&p.name) {
            None | Some(Value::Null) => {}
            Some(v) => {
                exploded_keys_are_their_own(p, v, params)?;
                query_param(p, v, &mut pairs);
            }
        }
    }
    Ok(pairs.join("&"))
}

/// An exploded form object puts its keys at the top of the query: a key that is another
/// query parameter's name would set (or repeat) that parameter behind its schema's back.
fn exploded_keys_are_their_own(p: &Param, v: &Value, params: &[Param]) -> Result<(), OpenApiError> {
    let Value::Object(map) = v else {
        return Ok(());
    };
    if p.style == Style::DeepObject || !p.explode {
        return Ok(());
    }
    let other = params
        .iter()
        .filter(|o| o.at == In::Query && o.name != p.name)
        .find(|o| map.contains_key(&o.name));
    match other {
        Some(o) => Err(refuse(format!(
            "query parameter {}: key {} is another query parameter",
            p.name, o.name
        ))),
        None => Ok(()),
    }
}

fn query_param(p: &Param, v: &Value, pairs: &mut Vec<String>) {
    let name = enc(&p.name);
    match (v, p.style, p.explode) {
        (Value::Array(items), Style::Form, true) => {
            pairs.extend(items.iter().map(|i| format!("{name}={}", enc(&scalar(i)))));
        }
        (Value::Array(items), style, _) => {
            let sep = match style {
                Style::SpaceDelimited => "%20",
                Style::PipeDelimited => "%7C",
                _ => ",",
            };
            let joined: Vec<String> = items.iter().map(|i| enc(&scalar(i))).collect();
            pairs.push(format!("{name}={}", joined.join(sep)));
        }
        (Value::Object(map), Style::DeepObject, _) => {
            pairs.extend(
                map.iter()
                    .map(|(k, v)| format!("{name}%5B{}%5D={}", enc(k), enc(&scalar(v)))),
            );
        }
        (Value::Object(map), _, true) => {
            pairs.extend(
                map.iter()
                    .map(|(k, v)| format!("{}={}", enc(k), enc(&scalar(v)))),
            );
        }
        (Value::Object(map), _, false) => {
            let flat: Vec<String> = map
                .iter()
                .flat_map(|(k, v)| [enc(k), enc(&scalar(v))])
                .collect();
            pairs.push(format!("{name}={}", flat.join(",")));
        }
        (other, _, _) => pairs.push(format!("{name}={}", enc(&scalar(other)))),
    }
}

/// Header and cookie parameters. A value with CR, LF or NUL is refused (it could end the
/// header); a header the configuration sets is not overridden.
fn headers(
    params: &[Param],
    args: &Map<String, Value>,
    fixed: &[(HeaderName, HeaderValue)],
) -> Result<Vec<(HeaderName, HeaderValue)>, OpenApiError> {
    let mut out = Vec::new();
    let mut cookies = Vec::new();
    for p in params
        .iter()
        .filter(|p| matches!(p.at, In::Header | In::Cookie))
    {
        let Some(v) = args.get(&p.name).filter(|v| !v.is_null()) else {
            continue;
        };
        let text = simple(v);
        let kind = match p.at {
            In::Header => "header",
            _ => "cookie",
        };
        if text.contains(['\r', '\n', '\0']) {
            return Err(refuse(format!(
                "{kind} parameter {} may not contain CR, LF or NUL",
                p.name
            )));
        }
        if text.len() > MAX_HEADER_VALUE {
            return Err(refuse(format!(
                "{kind} parameter {} is longer than {MAX_HEADER_VALUE} bytes",
                p.name
            )));
        }
        if p.at == In::Cookie {
            cookies.push(format!("{}={}", enc(&p.name), enc(&text)));
            continue;
        }
        let name = HeaderName::from_bytes(p.name.as_bytes())
            .map_err(|_| refuse(format!("header parameter {} is not a header name", p.name)))?;
        if fixed.iter().any(|(n, _)| *n == name) {
            continue;
        }
        let value = HeaderValue::from_str(&text).map_err(|_| {
            refuse(format!(
                "header parameter {} has characters a header cannot carry",
                p.name
            ))
        })?;
        out.push((name, value));
    }
    if !cookies.is_empty() && !fixed.iter().any(|(n, _)| *n == COOKIE) {
        let cookies = cookies.join("; ");
        if cookies.len() > MAX_HEADER_VALUE {
            return Err(refuse(format!(
                "the cookie parameters are longer than {MAX_HEADER_VALUE} bytes"
            )));
        }
        let value = HeaderValue::from_str(&cookies)
            .map_err(|_| refuse("cookie parameters do not make a header".into()))?;
        out.push((COOKIE, value));
    }
    Ok(out)
}

/// A form body: one pair per property (arrays repeated, objects as JSON text).
fn form(v: &Value) -> Vec<u8> {
    let mut s = form_urlencoded::Serializer::new(String::new());
    if let Value::Object(map) = v {
        for (k, v) in map {
            match v {
                Value::Array(items) => {
                    for i in items {
                        s.append_pair(k, &scalar(i));
                    }
                }
                Value::Null => {}
                other => {
                    s.append_pair(k, &scalar(other));
                }
            }
        }
    }
    s.finish().into_bytes()
}

#[cfg(test)]
mod tests;

//! A scripted browser for per-user OAuth: a cookie jar of its own (by name; loopback only, so
//! no domains or paths to tell apart), no automatic redirects (each hop is visible), the
//! gateway's start page, and an authorization server's own sign-in and consent pages (plain
//! HTML forms: hidden fields, and a login and password where it asks who the user is).

use parking_lot::Mutex;

/// `scheme://host:port` of `url`: what a browser sends as `Origin` for a form on that page.
fn origin_of(url: &str) -> &str {
    let after = url.find("://").unwrap() + 3;
    let end = url[after..].find('/').map_or(url.len(), |i| after + i);
    &url[..end]
}

/// One browser: its own cookies.
#[derive(Default)]
pub(crate) struct Browser {
    jar: Mutex<Vec<(String, String)>>,
}

/// What a page answered: its status, `Location` and body.
pub(crate) struct Page {
    pub(crate) status: u16,
    pub(crate) location: Option<String>,
    pub(crate) body: String,
}

impl Browser {
    fn client() -> reqwest::Client {
        reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .unwrap()
    }

    fn cookie_header(&self) -> String {
        let jar = self.jar.lock();
        let pairs: Vec<String> = jar.iter().map(|(k, v)| format!("{k}={v}")).collect();
        pairs.join("; ")
    }

    async fn keep(&self, r: reqwest::Response) -> Page {
        for set in r.headers().get_all(reqwest::header::SET_COOKIE) {
            let pair = set.to_str().unwrap().split(';').next().unwrap();
            let (k, v) = pair.split_once('=').unwrap();
            let mut jar = self.jar.lock();
            jar.retain(|(name, _)| name != k);
            jar.push((k.to_owned(), v.to_owned()));
        }
        let location = r
            .headers()
            .get(reqwest::header::LOCATION)
            .map(|l| l.to_str().unwrap().to_owned());
        Page {
            status: r.status().as_u16(),
            location,
            body: r.text().await.unwrap(),
        }
    }

    /// GET `url` with this browser's cookies (one hop).
    pub(crate) async fn get(&self, url: &str) -> Page {
        let r = Self::client()
            .get(url)
            .header(reqwest::header::COOKIE, self.cookie_header())
            .send()
            .await
            .unwrap();
        self.keep(r).await
    }

    /// POSTs the form `fields` to `url` with this browser's cookies (one hop).
    pub(crate) async fn post(&self, url: &str, fields: &[(&str, &str)]) -> Page {
        self.post_from(url, fields, origin_of(url)).await
    }

    /// [`Self::post`] as a form of a page at `origin` would.
    pub(crate) async fn post_from(&self, url: &str, fields: &[(&str, &str)], origin: &str) -> Page {
        let body: String = fields
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join("&");
        let r = Self::client()
            .post(url)
            .header(reqwest::header::ORIGIN, origin)
            .header(reqwest::header::COOKIE, self.cookie_header())
            .header(
                reqwest::header::CONTENT_TYPE,
                "application/x-www-form-urlencoded",
            )
            .body(body)
            .send()
            .await
            .unwrap();
        self.keep(r).await
    }

    /// GETs `url` and follows redirects (at most 5): the last page.
    pub(crate) async fn open(&self, url: &str) -> Page {
        let mut page = self.get(url).await;
        for _ in 0..5 {
            match (&page.location, page.status) {
                (Some(next), 300..=399) => page = self.get(&next.clone()).await,
                _ => break,
            }
        }
        page
    }

    /// Opens the gateway's start page at `url` and clicks its button: the authorization
    /// server's URL it redirects to, or the page that refused.
    pub(crate) async fn click_start(&self, url: &str) -> Result<String, Page> {
        let page = self.get(url).await;
        if page.status != 200 {
            return Err(page);
        }
        let field = |name: &str| {
            let marker = format!("name=\"{name}\" value=\"");
            let at = page.body.find(&marker).unwrap() + marker.len();
            let end = page.body[at..].find('"').unwrap();
            page.body[at..at + end].to_owned()
        };
        let (flow, csrf) = (field("flow"), field("csrf"));
        let action = format!("{}/oauth/start", url.split("/oauth/start").next().unwrap());
        let clicked = self
            .post(&action, &[("flow", &flow), ("csrf", &csrf)])
            .await;
        match (clicked.status, clicked.location.clone()) {
            (303, Some(location)) => Ok(location),
            _ => Err(clicked),
        }
    }
}

/// `next` (a `Location` or a form's `action`) resolved against the page at `base`.
fn resolve(base: &str, next: &str) -> String {
    if next.starts_with("http://") || next.starts_with("https://") {
        return next.to_owned();
    }
    assert!(
        next.starts_with('/'),
        "a relative link this browser does not follow: {next}"
    );
    format!("{}{next}", origin_of(base))
}

/// The value of `name="..."` (or another attribute) in one HTML tag.
fn attribute<'a>(tag: &'a str, name: &str) -> Option<&'a str> {
    let marker = format!("{name}=\"");
    let at = tag.find(&marker)? + marker.len();
    Some(&tag[at..at + tag[at..].find('"')?])
}

/// The first form of an HTML page: its action, its hidden fields, and whether it asks for a
/// login.
struct Form {
    action: String,
    hidden: Vec<(String, String)>,
    login: bool,
}

impl Form {
    fn of(html: &str) -> Option<Form> {
        let start = html.find("<form")?;
        let end = start + html[start..].find("</form>")?;
        let body = &html[start..end];
        let action = attribute(&body[..body.find('>')?], "action")?.replace("&amp;", "&");
        let mut hidden = Vec::new();
        let mut login = false;
        for tag in body.split("<input").skip(1) {
            let tag = &tag[..tag.find('>').unwrap_or(tag.len())];
            match (attribute(tag, "type"), attribute(tag, "name")) {
                (Some("hidden"), Some(name)) => hidden.push((
                    name.to_owned(),
                    attribute(tag, "value").unwrap_or("").to_owned(),
                )),
                (_, Some("login")) => login = true,
                _ => {}
            }
        }
        Some(Form {
            action,
            hidden,
            login,
        })
    }
}

impl Browser {
    /// Goes through an authorization server's pages from `url` as the user `user` would:
    /// each redirect followed, each form submitted with its hidden fields (the sign-in form
    /// with `user` as the login and a password), until a page that is neither (at most 12
    /// steps): the last page.
    pub(crate) async fn sign_in(&self, url: &str, user: &str) -> Page {
        let mut at = url.to_owned();
        let mut page = self.get(&at).await;
        for _ in 0..12 {
            if let (300..=399, Some(next)) = (page.status, page.location.clone()) {
                at = resolve(&at, &next);
                page = self.get(&at).await;
                continue;
            }
            let Some(form) = Form::of(&page.body).filter(|_| page.status == 200) else {
                break;
            };
            let mut fields = form.hidden;
            if form.login {
                fields.push(("login".into(), user.into()));
                fields.push(("password".into(), "any-password".into()));
            }
            let fields: Vec<(&str, &str)> = fields
                .iter()
                .map(|(k, v)| (k.as_str(), v.as_str()))
                .collect();
            at = resolve(&at, &form.action);
            page = self.post(&at, &fields).await;
        }
        page
    }

    /// The values of every cookie the gateway set in this browser (secrets, for leak checks).
    pub(crate) fn cookie_values(&self) -> Vec<String> {
        self.jar.lock().iter().map(|(_, v)| v.clone()).collect()
    }
}

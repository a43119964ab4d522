//! The measured request path of the HTTP driver: one plain HTTP/1.1 keep-alive connection per
//! worker ("lane"), driven with hyper's low-level client.
//!
//! Why not the pooled `reqwest` client the setup uses: on a 2-core machine the driver shares
//! the CPU with the gateway and the backend it measures, so every microsecond the driver spends
//! per request is taken from the system under test. A pooled client pays for pool checkout,
//! URL parsing, header-map copies and a per-request task on top of HTTP itself; a dedicated
//! connection per worker pays for HTTP only. The gateway sees exactly the same traffic either
//! way (one request in flight per connection, keep-alive), so this changes what the instrument
//! costs, not what is measured.

use anyhow::Context;
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http1::{self, SendRequest};
use hyper::header::{HeaderName, HeaderValue, HOST};
use hyper::{Request, Response, Uri};
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;
use tokio::sync::Mutex;
use tokio::task::JoinSet;

/// Where the lanes connect, parsed once.
#[derive(Debug)]
struct Endpoint {
    /// `host:port` to dial and to send as `Host`.
    authority: String,
    host: HeaderValue,
    /// Origin-form request target (`/mcp`).
    path: Uri,
}

/// One connection per worker; reconnected lazily when the server closes one.
#[derive(Debug)]
pub(crate) struct Lanes {
    endpoint: Endpoint,
    lanes: Vec<Mutex<Option<SendRequest<Full<Bytes>>>>>,
    /// Owns the connection tasks: dropping the lanes ends them.
    tasks: parking_lot::Mutex<JoinSet<()>>,
}

impl Lanes {
    /// `count` lanes to `url` (plain `http://` only: the driver measures the gateway, not TLS).
    pub(crate) fn new(url: &str, count: usize) -> anyhow::Result<Self> {
        let uri: Uri = url.parse().context("--url is not a URL")?;
        anyhow::ensure!(
            uri.scheme_str() == Some("http"),
            "the load driver speaks plain http:// only"
        );
        let authority = uri
            .authority()
            .context("--url has no host")?
            .as_str()
            .to_owned();
        let path = uri
            .path_and_query()
            .map_or("/", |p| p.as_str())
            .parse()
            .context("--url path")?;
        Ok(Lanes {
            endpoint: Endpoint {
                host: HeaderValue::from_str(&authority).context("--url host")?,
                authority,
                path,
            },
            lanes: (0..count.max(1)).map(|_| Mutex::new(None)).collect(),
            tasks: parking_lot::Mutex::new(JoinSet::new()),
        })
    }

    /// POSTs `body` with `headers` (and `extra`) on lane `lane` and returns the status, content type and
    /// whole body, or the kind of transport failure.
    pub(crate) async fn post(
        &self,
        lane: usize,
        headers: &[(HeaderName, HeaderValue)],
        extra: Option<(HeaderName, HeaderValue)>,
        body: Vec<u8>,
    ) -> Result<(Response<()>, Bytes), String> {
        let mut slot = self.lanes[lane % self.lanes.len()].lock().await;
        let sender = match slot.as_mut() {
            Some(s) if !s.is_closed() => s,
            _ => slot.insert(self.dial().await.map_err(|_| "connect".to_owned())?),
        };
        sender.ready().await.map_err(|_| "transport".to_owned())?;
        let mut request = Request::post(self.endpoint.path.clone());
        if let Some(map) = request.headers_mut() {
            map.reserve(headers.len() + 1);
            map.insert(HOST, self.endpoint.host.clone());
            for (name, value) in headers {
                map.insert(name.clone(), value.clone());
            }
            if let Some((name, value)) = extra {
                map.insert(name, value);
            }
        }
        let request = request
            .body(Full::new(Bytes::from(body)))
            .map_err(|_| "request".to_owned())?;
        let response = sender
            .send_request(request)
            .await
            .map_err(|_| "transport".to_owned())?;
        let (parts, incoming) = response.into_parts();
        let body = incoming
            .collect()
            .await
            .map_err(|_| "body".to_owned())?
            .to_bytes();
        Ok((Response::from_parts(parts, ()), body))
    }

    async fn dial(&self) -> anyhow::Result<SendRequest<Full<Bytes>>> {
        let stream = TcpStream::connect(&self.endpoint.authority).await?;
        stream.set_nodelay(true)?;
        let (sender, connection) = http1::handshake(TokioIo::new(stream)).await?;
        self.tasks.lock().spawn(async move {
            // Ends when the server closes the connection or the lanes are dropped.
            let _ = connection.await;
        });
        Ok(sender)
    }
}

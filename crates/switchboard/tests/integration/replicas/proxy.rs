//! A dumb round-robin TCP balancer in front of the replicas: each accepted connection goes to
//! the next upstream in rotation and bytes are copied both ways. An upstream whose connect
//! fails is skipped for the next one, as a balancer with a health check would; HTTP keep-alive
//! means one connection may carry many requests, so tests that want requests to alternate
//! open a new connection per request.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use tokio::net::{TcpListener, TcpStream};
use tokio::task::{JoinHandle, JoinSet};

#[derive(Default)]
struct State {
    upstreams: Vec<SocketAddr>,
    /// Where the next connection starts its rotation.
    next: usize,
    /// Connections handed to each upstream (after a successful connect).
    served: HashMap<SocketAddr, usize>,
}

pub struct Proxy {
    pub addr: SocketAddr,
    state: Arc<Mutex<State>>,
    /// The accept loop; it owns the connection tasks, so aborting it ends them all.
    task: JoinHandle<()>,
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Proxy {
    pub async fn start(upstreams: Vec<SocketAddr>) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let state = Arc::new(Mutex::new(State {
            upstreams,
            ..State::default()
        }));
        let task = tokio::spawn(accept_loop(listener, state.clone()));
        Proxy { addr, state, task }
    }

    /// The MCP endpoint through the proxy.
    pub fn url(&self) -> String {
        format!("http://{}/mcp", self.addr)
    }

    /// Replaces the rotation; connections already open stay where they are.
    pub fn set_upstreams(&self, upstreams: Vec<SocketAddr>) {
        let mut s = self.state.lock();
        s.upstreams = upstreams;
        s.next = 0;
    }

    /// Connections handed to `upstream` so far.
    pub fn served(&self, upstream: SocketAddr) -> usize {
        self.state
            .lock()
            .served
            .get(&upstream)
            .copied()
            .unwrap_or(0)
    }
}

/// The address a gateway listens on, from its `http://host:port/mcp` URL.
pub fn addr_of(url: &str) -> SocketAddr {
    let rest = url.strip_prefix("http://").expect("http URL");
    rest.split('/').next().unwrap().parse().expect("host:port")
}

async fn accept_loop(listener: TcpListener, state: Arc<Mutex<State>>) {
    let mut conns = JoinSet::new();
    loop {
        let Ok((client, _)) = listener.accept().await else {
            continue;
        };
        let order = rotation(&mut state.lock());
        conns.spawn(forward(client, order, state.clone()));
        // Reap finished connections so a long test does not accumulate handles.
        while conns.try_join_next().is_some() {}
    }
}

/// Every upstream once, starting at the next in rotation.
fn rotation(s: &mut State) -> Vec<SocketAddr> {
    let n = s.upstreams.len();
    if n == 0 {
        return Vec::new();
    }
    let start = s.next % n;
    s.next = s.next.wrapping_add(1);
    (0..n).map(|i| s.upstreams[(start + i) % n]).collect()
}

/// Connects to the first upstream of `order` that accepts and copies until either side
/// closes. With none reachable the client's connection is simply closed.
async fn forward(mut client: TcpStream, order: Vec<SocketAddr>, state: Arc<Mutex<State>>) {
    for addr in order {
        let connect = tokio::time::timeout(Duration::from_secs(2), TcpStream::connect(addr));
        if let Ok(Ok(mut upstream)) = connect.await {
            *state.lock().served.entry(addr).or_default() += 1;
            let _ = tokio::io::copy_bidirectional(&mut client, &mut upstream).await;
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// A TCP server that writes `name` to each connection and closes it.
    async fn named(name: &'static str) -> (SocketAddr, JoinHandle<()>) {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        let task = tokio::spawn(async move {
            while let Ok((mut s, _)) = l.accept().await {
                let _ = s.write_all(name.as_bytes()).await;
            }
        });
        (addr, task)
    }

    /// An address that refuses connections: bound once, then released.
    fn dead() -> SocketAddr {
        std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
    }

    async fn who(proxy: &Proxy) -> String {
        let mut s = TcpStream::connect(proxy.addr).await.unwrap();
        let mut out = String::new();
        tokio::time::timeout(Duration::from_secs(5), s.read_to_string(&mut out))
            .await
            .expect("proxy answered or closed")
            .unwrap();
        out
    }

    #[tokio::test]
    async fn proxy_rotates_connections_and_skips_a_dead_upstream() {
        let (a, task_a) = named("a").await;
        let (b, _task_b) = named("b").await;
        let proxy = Proxy::start(vec![a, b]).await;
        let mut seen = Vec::new();
        for _ in 0..4 {
            seen.push(who(&proxy).await);
        }
        assert_eq!(seen, ["a", "b", "a", "b"]);
        assert_eq!((proxy.served(a), proxy.served(b)), (2, 2));

        // An upstream that refuses is skipped: every connection reaches the live one.
        proxy.set_upstreams(vec![dead(), b]);
        for _ in 0..3 {
            assert_eq!(who(&proxy).await, "b");
        }
        assert_eq!(proxy.served(b), 5);

        // A stopped server (its listener closed) is skipped the same way.
        task_a.abort();
        let _ = task_a.await;
        proxy.set_upstreams(vec![a, b]);
        for _ in 0..2 {
            assert_eq!(who(&proxy).await, "b");
        }
        assert_eq!(proxy.served(a), 2, "the dead one got nothing more");

        // Nothing reachable: the client's connection is closed, not held open.
        proxy.set_upstreams(vec![dead()]);
        assert_eq!(who(&proxy).await, "");
        proxy.set_upstreams(Vec::new());
        assert_eq!(who(&proxy).await, "");
    }
}

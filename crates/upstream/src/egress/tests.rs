//! The allow list, request targets, and the proxy itself over real sockets (a Unix socket
//! in, loopback TCP out).

use std::net::{IpAddr, Ipv6Addr, SocketAddr};
use std::path::Path;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, UnixStream};

use super::allow::{AllowList, Host, Target};
use super::proxy::{connect_any, strip_hop_by_hop};
use super::{Egress, Limits};

fn target(s: &str) -> Target {
    Target::parse(s).unwrap()
}

fn uri(s: &str) -> hyper::Uri {
    s.parse().unwrap()
}

#[test]
fn entries_are_normalized_and_matched_exactly() {
    let list = AllowList::parse(&["API.GitHub.com.:443", "[0:0::1]:8080", "10.0.0.1:80"]).unwrap();
    assert!(list.permits(&target("api.github.com:443")));
    assert!(list.permits(&target("[::1]:8080")));
    assert!(list.permits(&target("10.0.0.1:80")));
    // Another port of a listed host is another target.
    assert!(!list.permits(&target("api.github.com:80")));
    assert!(!list.permits(&target("[::1]:8081")));
    // No suffix or subdomain matching.
    assert!(!list.permits(&target("evil-api.github.com:443")));
    assert!(!list.permits(&target("x.api.github.com:443")));
    assert!(!list.permits(&target("github.com:443")));
    // A name allows the name: an address asked for by number is not it.
    let names = AllowList::parse(&["localhost:8080"]).unwrap();
    assert!(!names.permits(&target("127.0.0.1:8080")));
    assert!(AllowList::parse::<&str>(&[]).unwrap().is_empty());
}

#[test]
fn entries_need_a_port_and_refuse_wildcards() {
    for bad in [
        "api.github.com",
        "api.github.com:",
        "api.github.com:0",
        "api.github.com:65536",
        "*.github.com:443",
        "*:443",
        "::1:443",
        "[::1]",
        "[zz]:443",
        "user@host:443",
        "http://host:443",
        ":443",
    ] {
        assert!(Target::parse(bad).is_err(), "{bad}");
    }
    let (i, _) = AllowList::parse(&["ok.com:1", "bad"]).unwrap_err();
    assert_eq!(i, 1);
}

#[test]
fn connect_targets_are_authority_form_with_a_port() {
    let t = Target::from_connect(&uri("Example.com:8443")).unwrap();
    assert_eq!(t.to_string(), "example.com:8443");
    let v6 = Target::from_connect(&uri("[::1]:443")).unwrap();
    assert_eq!(v6.host, Host::Ip(IpAddr::V6(Ipv6Addr::LOCALHOST)));
    assert_eq!(v6.to_string(), "[::1]:443");
    assert!(
        Target::from_connect(&uri("example.com")).is_err(),
        "no port"
    );
    assert!(Target::from_connect(&uri("/path")).is_err(), "no authority");
}

#[test]
fn absolute_targets_drop_user_info_and_default_to_port_80() {
    let t = Target::from_absolute(&uri("http://user:s3cret@127.0.0.1:8080/a?b=c")).unwrap();
    assert_eq!(t.to_string(), "127.0.0.1:8080");
    assert!(!format!("{t:?}").contains("s3cret"));
    let t = Target::from_absolute(&uri("http://Example.COM/x")).unwrap();
    assert_eq!(t.to_string(), "example.com:80");
    let t = Target::from_absolute(&uri("http://[::1]:9000/")).unwrap();
    assert_eq!(t.to_string(), "[::1]:9000");
    assert!(Target::from_absolute(&uri("https://example.com/")).is_err());
    assert!(Target::from_absolute(&uri("/origin-form")).is_err());
    assert!(Target::from_absolute(&uri("ftp://example.com/")).is_err());
}

#[test]
fn hop_by_hop_and_proxy_headers_are_stripped() {
    let mut h = hyper::HeaderMap::new();
    h.insert("connection", "keep-alive, x-secret-hop".parse().unwrap());
    h.insert("x-secret-hop", "1".parse().unwrap());
    h.insert("proxy-authorization", "Basic eDp5".parse().unwrap());
    h.insert("proxy-connection", "keep-alive".parse().unwrap());
    h.insert("accept", "*/*".parse().unwrap());
    strip_hop_by_hop(&mut h);
    let left: Vec<&str> = h.keys().map(|k| k.as_str()).collect();
    assert_eq!(left, ["accept"]);
}

/// A name that resolves to several addresses: each is tried in order, so one that refuses
/// (the first here) does not fail the connection.
#[tokio::test]
async fn every_address_of_a_name_is_tried_in_order() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let good = listener.local_addr().unwrap();
    let closed = {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        l.local_addr().unwrap()
    };
    let addrs = [closed, good];
    let (conn, accepted) = tokio::join!(
        connect_any(&addrs, Duration::from_secs(5)),
        listener.accept()
    );
    assert_eq!(conn.unwrap().peer_addr().unwrap(), good);
    assert!(accepted.is_ok());
    assert!(connect_any(&[closed], Duration::from_secs(5))
        .await
        .is_err());
    assert!(connect_any(&[], Duration::from_secs(5)).await.is_err());
}

/// The proxy's head for `request`, read to the blank line; then the stream, for more.
async fn ask(socket: &Path, request: &str) -> (String, UnixStream) {
    let mut s = UnixStream::connect(socket).await.unwrap();
    // A connection past the cap may be closed before the request is written.
    let _ = s.write_all(request.as_bytes()).await;
    (head(&mut s).await, s)
}

async fn head<S: tokio::io::AsyncRead + Unpin>(s: &mut S) -> String {
    let mut got = Vec::new();
    let mut b = [0u8; 1];
    while !got.ends_with(b"\r\n\r\n") {
        if !matches!(s.read(&mut b).await, Ok(1)) {
            break;
        }
        got.push(b[0]);
    }
    String::from_utf8_lossy(&got).into_owned()
}

fn egress(allow: &[String]) -> Egress {
    let limits = Limits {
        connections: 4,
        idle: Duration::from_secs(5),
        connect: Duration::from_secs(5),
    };
    Egress::new(
        "t",
        AllowList::parse(allow).unwrap(),
        limits,
        "/bin/true".into(),
    )
}

/// CONNECT to an allowed target tunnels; to another port of the same host, or the same
/// listener by a name not listed, it is refused with 403 and never reaches the listener:
/// the first connection the listener sees is the allowed one, made after the refusals.
#[tokio::test]
async fn connect_tunnels_only_to_listed_targets() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let other = port.wrapping_add(1).max(1);
    let e = egress(&[format!("127.0.0.1:{port}")]);
    let socket = e.socket(None).unwrap();
    for refused in [format!("127.0.0.1:{other}"), format!("localhost:{port}")] {
        let (h, _) = ask(
            &socket,
            &format!("CONNECT {refused} HTTP/1.1\r\nHost: {refused}\r\n\r\n"),
        )
        .await;
        assert!(h.starts_with("HTTP/1.1 403"), "{refused}: {h}");
    }
    let req = format!("CONNECT 127.0.0.1:{port} HTTP/1.1\r\nHost: x\r\n\r\n");
    let (h, mut tunnel) = ask(&socket, &req).await;
    assert!(h.starts_with("HTTP/1.1 200"), "{h}");
    let (mut upstream, _) = listener.accept().await.unwrap();
    tunnel.write_all(b"first").await.unwrap();
    let mut got = [0u8; 5];
    upstream.read_exact(&mut got).await.unwrap();
    assert_eq!(&got, b"first", "the first connection is the allowed tunnel");
    upstream.write_all(b"back").await.unwrap();
    let mut back = [0u8; 4];
    tunnel.read_exact(&mut back).await.unwrap();
    assert_eq!(&back, b"back");
    drop(e);
    assert!(!socket.exists(), "the socket goes with the egress");
    // And so does every tunnel it carried (well before its idle time, 5 s).
    let closed = tokio::time::timeout(Duration::from_secs(2), tunnel.read(&mut back)).await;
    assert!(matches!(closed, Ok(Ok(0)) | Ok(Err(_))), "{closed:?}");
}

/// A tunnel with no byte either way for the idle time is closed.
#[tokio::test]
async fn an_idle_tunnel_is_closed() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let limits = Limits {
        connections: 4,
        idle: Duration::from_millis(200),
        connect: Duration::from_secs(5),
    };
    let allow = AllowList::parse(&[format!("127.0.0.1:{port}")]).unwrap();
    let e = Egress::new("t", allow, limits, "/bin/true".into());
    let socket = e.socket(None).unwrap();
    let (h, mut tunnel) = ask(
        &socket,
        &format!("CONNECT 127.0.0.1:{port} HTTP/1.1\r\n\r\n"),
    )
    .await;
    assert!(h.starts_with("HTTP/1.1 200"), "{h}");
    let (mut upstream, _) = listener.accept().await.unwrap();
    let mut b = [0u8; 1];
    let closed = tokio::time::timeout(Duration::from_secs(5), tunnel.read(&mut b)).await;
    assert!(matches!(closed, Ok(Ok(0)) | Ok(Err(_))), "{closed:?}");
    let closed = tokio::time::timeout(Duration::from_secs(5), upstream.read(&mut b)).await;
    assert!(matches!(closed, Ok(Ok(0)) | Ok(Err(_))), "{closed:?}");
}

/// A plain request in absolute form is forwarded in origin form: user-info and the proxy's
/// own headers stay behind, `Host` is the target's; one not listed is refused with 403.
#[tokio::test]
async fn absolute_form_is_forwarded_in_origin_form() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let e = egress(&[format!("127.0.0.1:{port}")]);
    let socket = e.socket(None).unwrap();
    let refused = format!(
        "GET http://127.0.0.1:{}/x HTTP/1.1\r\nHost: a\r\n\r\n",
        port.wrapping_add(1).max(1)
    );
    assert!(ask(&socket, &refused).await.0.starts_with("HTTP/1.1 403"));
    let req = format!(
        "GET http://user:s3cret@127.0.0.1:{port}/p?q=1 HTTP/1.1\r\nHost: wrong\r\n\
         Proxy-Authorization: Basic s3cret\r\nProxy-Connection: keep-alive\r\n\r\n"
    );
    let server = async {
        let (mut up, _) = listener.accept().await.unwrap();
        let seen = head(&mut up).await;
        up.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")
            .await
            .unwrap();
        seen
    };
    let ((answer, mut client), seen) = tokio::join!(ask(&socket, &req), server);
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    let mut body = [0u8; 2];
    client.read_exact(&mut body).await.unwrap();
    assert_eq!(&body, b"ok");
    assert!(seen.starts_with("GET /p?q=1 HTTP/1.1\r\n"), "{seen}");
    let lower = seen.to_ascii_lowercase();
    assert!(
        lower.contains(&format!("host: 127.0.0.1:{port}\r\n")),
        "{seen}"
    );
    assert!(!lower.contains("proxy-"), "{seen}");
    assert!(!seen.contains("s3cret"), "{seen}");
}

/// An allowed name is resolved by the proxy (the sandbox has no DNS): `localhost` reaches a
/// listener on 127.0.0.1 whether it also resolves to ::1 (tried first or not) or not.
#[tokio::test]
async fn an_allowed_name_is_resolved_by_the_proxy() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let addrs: Vec<SocketAddr> = tokio::net::lookup_host(("localhost", port))
        .await
        .unwrap()
        .collect();
    assert!(addrs.iter().any(|a| a.ip().is_loopback()), "{addrs:?}");
    let e = egress(&[format!("localhost:{port}")]);
    let socket = e.socket(None).unwrap();
    let req = format!("CONNECT LOCALHOST:{port} HTTP/1.1\r\n\r\n");
    let (h, _tunnel) = ask(&socket, &req).await;
    assert!(h.starts_with("HTTP/1.1 200"), "{h}");
    assert!(listener.accept().await.is_ok());
}

/// Past the cap of connections a new one is closed unread; closed ones make room again.
#[tokio::test]
async fn connections_are_capped() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let e = egress(&[format!("127.0.0.1:{port}")]);
    let socket = e.socket(None).unwrap();
    let req = format!("CONNECT 127.0.0.1:{port} HTTP/1.1\r\n\r\n");
    let mut open = Vec::new();
    for _ in 0..4 {
        let (h, s) = ask(&socket, &req).await;
        assert!(h.starts_with("HTTP/1.1 200"), "{h}");
        open.push(s);
    }
    let (h, _) = ask(&socket, &req).await;
    assert_eq!(h, "", "the fifth is closed unanswered");
    // A tunnel ends when both ends have closed (or after the idle time).
    let mut upstreams = Vec::new();
    for _ in 0..4 {
        upstreams.push(listener.accept().await.unwrap().0);
    }
    drop(upstreams);
    drop(open);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    loop {
        let (h, _s) = ask(&socket, &req).await;
        if h.starts_with("HTTP/1.1 200") {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "no room made");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A listed name reaches public addresses only (`localhost`: loopback only): a DNS answer
/// that points at this host, a private network or a metadata service is not connected to.
#[test]
fn a_listed_name_never_reaches_this_host_or_a_private_network() {
    use super::proxy::usable_for_name;
    let ip = |s: &str| s.parse::<std::net::IpAddr>().unwrap();
    for private in [
        "127.0.0.1",
        "10.0.0.1",
        "172.16.5.4",
        "192.168.0.10",
        "169.254.169.254",
        "100.64.0.1",
        "0.0.0.0",
        "::1",
        "fd00::1",
        "fe80::1",
        "::ffff:127.0.0.1",
        "::ffff:169.254.169.254",
        "224.0.0.1",
    ] {
        assert!(!usable_for_name(ip(private), false), "{private}");
    }
    for public in [
        "93.184.216.34",
        "2606:2800:220:1::1",
        "::ffff:93.184.216.34",
    ] {
        assert!(usable_for_name(ip(public), false), "{public}");
    }
    assert!(usable_for_name(ip("127.0.0.1"), true));
    assert!(usable_for_name(ip("::1"), true));
    assert!(!usable_for_name(ip("93.184.216.34"), true));
    assert!(!usable_for_name(ip("10.0.0.1"), true));
}

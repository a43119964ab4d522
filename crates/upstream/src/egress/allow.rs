//! What a sandboxed backend may reach: `host:port` entries, and the targets its requests
//! name. Matching is exact, on the host as written (a DNS name, lower-cased, without a
//! trailing dot; or an IP address, compared as an address) and the port: a name allows
//! that name only, never the addresses it resolves to when asked for by number, and an
//! address allows that address only. There are no wildcards.

use std::fmt;
use std::net::IpAddr;

use super::EgressError;

/// A host as an entry or a request names it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Host {
    /// A DNS name: lower case, no trailing dot.
    Name(String),
    /// An IP address (IPv6 written in brackets).
    Ip(IpAddr),
}

/// A host and a port: an allow-list entry, or where a request asks to go.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Target {
    /// The host.
    pub host: Host,
    /// The port (1–65535).
    pub port: u16,
}

/// The `host:port` entries of one backend's `sandbox.network.allow`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AllowList(Vec<Target>);

impl Host {
    /// A DNS name or an IP address; IPv6 only in brackets (`[::1]`), as in a URL.
    pub fn parse(text: &str) -> Result<Host, EgressError> {
        if let Some(v6) = text.strip_prefix('[').and_then(|h| h.strip_suffix(']')) {
            return v6
                .parse::<std::net::Ipv6Addr>()
                .map(|a| Host::Ip(IpAddr::V6(a)))
                .map_err(|_| EgressError::Host("not an IPv6 address in brackets"));
        }
        if let Ok(v4) = text.parse::<std::net::Ipv4Addr>() {
            return Ok(Host::Ip(IpAddr::V4(v4)));
        }
        let name = text.strip_suffix('.').unwrap_or(text).to_ascii_lowercase();
        let label_ok = |l: &str| {
            !l.is_empty()
                && l.len() <= 63
                && l.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
                && !l.starts_with('-')
                && !l.ends_with('-')
        };
        if !name.is_empty() && name.len() <= 253 && name.split('.').all(label_ok) {
            Ok(Host::Name(name))
        } else {
            Err(EgressError::Host(
                "the host must be a DNS name or an IP address (no wildcards)",
            ))
        }
    }
}

impl fmt::Display for Host {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Host::Name(n) => f.write_str(n),
            Host::Ip(IpAddr::V4(a)) => write!(f, "{a}"),
            Host::Ip(IpAddr::V6(a)) => write!(f, "[{a}]"),
        }
    }
}

impl Target {
    /// `host:port`, as an allow-list entry is written: the port is required.
    pub fn parse(entry: &str) -> Result<Target, EgressError> {
        let (host, port) = entry.rsplit_once(':').ok_or(EgressError::Host(
            "expected host:port, like api.github.com:443",
        ))?;
        let port = match port.parse::<u16>() {
            Ok(p) if p > 0 => p,
            _ => {
                return Err(EgressError::Host(
                    "the port must be a number from 1 to 65535",
                ))
            }
        };
        // An unbracketed IPv6 address splits at its last colon: say what to write instead.
        if host.contains(':') && !host.starts_with('[') {
            return Err(EgressError::Host(
                "write an IPv6 address in brackets, like [::1]:8080",
            ));
        }
        Ok(Target {
            host: Host::parse(host)?,
            port,
        })
    }

    /// Where a `CONNECT` request asks to go: its authority-form target, port required
    /// (user-info, which no client should send there, is ignored).
    pub fn from_connect(uri: &hyper::Uri) -> Result<Target, EgressError> {
        let authority = uri
            .authority()
            .ok_or(EgressError::Request("CONNECT needs host:port"))?;
        let port = authority
            .port_u16()
            .filter(|p| *p > 0)
            .ok_or(EgressError::Request("CONNECT needs a port"))?;
        Ok(Target {
            host: Host::parse(authority.host())?,
            port,
        })
    }

    /// Where a plain HTTP request in absolute form (`GET http://host:port/path`) asks to
    /// go: port 80 unless given; user-info is dropped. `https://` is refused: a client
    /// tunnels TLS with `CONNECT`.
    pub fn from_absolute(uri: &hyper::Uri) -> Result<Target, EgressError> {
        match uri.scheme_str() {
            Some(s) if s.eq_ignore_ascii_case("http") => {}
            Some(_) => {
                return Err(EgressError::Request(
                    "only http:// is forwarded; tunnel https with CONNECT",
                ))
            }
            None => {
                return Err(EgressError::Request(
                    "a proxy request needs an absolute URL (http://host:port/path)",
                ))
            }
        }
        let host = uri
            .host()
            .ok_or(EgressError::Request("the URL has no host"))?;
        let port = match uri.port_u16() {
            Some(0) => return Err(EgressError::Request("port 0")),
            Some(p) => p,
            None => 80,
        };
        Ok(Target {
            host: Host::parse(host)?,
            port,
        })
    }
}

impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.host, self.port)
    }
}

impl AllowList {
    /// The list from its entries; the first bad one is returned with its index.
    pub fn parse<S: AsRef<str>>(entries: &[S]) -> Result<AllowList, (usize, EgressError)> {
        let mut out = Vec::new();
        for (i, e) in entries.iter().enumerate() {
            let t = Target::parse(e.as_ref()).map_err(|err| (i, err))?;
            if !out.contains(&t) {
                out.push(t);
            }
        }
        Ok(AllowList(out))
    }

    /// Whether `target` is listed.
    pub fn permits(&self, target: &Target) -> bool {
        self.0.contains(target)
    }

    /// Whether nothing is listed (no network at all).
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The entries, normalized.
    pub fn entries(&self) -> &[Target] {
        &self.0
    }
}

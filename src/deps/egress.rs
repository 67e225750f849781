//! The only way out of a dependency fetch: an HTTP `CONNECT` proxy of Airlock's own that
//! admits exactly the destinations `[egress] allow` lists and nothing else.
//!
//! The fetch container runs with no network at all (`network_mode = none`, loopback only, like
//! every job). The proxy's listening socket is made inside that container's own network
//! namespace ([`listen_in`]: a thread of the daemon enters the namespace, binds
//! `127.0.0.1:3128` there and leaves), while the daemon accepts on it and dials the
//! destinations from the host's namespace. So the tools reach the proxy on their own loopback
//! (`HTTPS_PROXY`), no Docker network is involved (the main engine's default bridge is broken
//! here), and nothing else in the container can reach anything.
//!
//! A destination is admitted only when its `host:port` is listed exactly (host names compared
//! without case), by `CONNECT` (TLS end to end) or as a plain `http://` request (an internal
//! registry without TLS; forwarded one request per connection). Every other one is refused
//! (`403`) and logged: another host or port, an IP literal not itself listed, any other
//! request. A listed name that resolves to
//! a loopback, link-local (the metadata address among them), unspecified or multicast address
//! is refused too (the host's own services, a Docker TCP socket and cloud metadata stay out of
//! reach even through DNS), unless that very IP literal is what the allowlist lists.

use crate::limits;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// One destination the allowlist admits.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Destination {
    /// Lowercase host name, or an IP literal (IPv6 without brackets).
    pub host: String,
    pub port: u16,
}

impl std::fmt::Display for Destination {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.host.contains(':') {
            write!(f, "[{}]:{}", self.host, self.port)
        } else {
            write!(f, "{}:{}", self.host, self.port)
        }
    }
}

impl Destination {
    /// `HOST:PORT` (`[V6]:PORT` for an IPv6 literal): a DNS name or IP literal and a port in
    /// 1..=65535. The error says what is wrong.
    pub fn parse(text: &str) -> Result<Destination, String> {
        let (host, port) = match text.strip_prefix('[') {
            Some(rest) => {
                let (h, p) = rest
                    .split_once("]:")
                    .ok_or_else(|| format!("{text:?} must be [IPV6]:PORT"))?;
                h.parse::<std::net::Ipv6Addr>()
                    .map_err(|_| format!("{text:?}: {h:?} is not an IPv6 address"))?;
                (h.to_string(), p)
            }
            None => {
                let (h, p) = text
                    .rsplit_once(':')
                    .ok_or_else(|| format!("{text:?} must be HOST:PORT"))?;
                (h.to_ascii_lowercase(), p)
            }
        };
        let port: u16 = port
            .parse()
            .ok()
            .filter(|p| *p > 0)
            .ok_or_else(|| format!("{text:?}: the port must be 1..=65535"))?;
        let name_ok = !host.is_empty()
            && host.len() <= 253
            && host.split('.').all(|label| {
                !label.is_empty()
                    && label.len() <= 63
                    && label
                        .bytes()
                        .all(|b| b.is_ascii_alphanumeric() || b == b'-')
                    && !label.starts_with('-')
                    && !label.ends_with('-')
            });
        if !name_ok && host.parse::<IpAddr>().is_err() {
            return Err(format!(
                "{text:?}: {host:?} is not a host name or IP address"
            ));
        }
        Ok(Destination { host, port })
    }

    fn is_literal(&self) -> bool {
        self.host.parse::<IpAddr>().is_ok()
    }
}

/// The destinations a fetch may reach.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Allowlist(pub Vec<Destination>);

impl Allowlist {
    /// The listed destination a `CONNECT` target names, or why it is refused.
    pub fn admit(&self, target: &str) -> Result<Destination, String> {
        let d = Destination::parse(target).map_err(|e| format!("not a destination: {e}"))?;
        match self.0.iter().find(|a| **a == d) {
            Some(found) => Ok(found.clone()),
            None if d.is_literal() => Err(format!(
                "{d} is an IP address, and [egress] allow does not list it"
            )),
            None => Err(format!("{d} is not in [egress] allow")),
        }
    }
}

/// Whether a resolved address may be dialled for a listed host name: never the host's own
/// loopback, link-local (cloud metadata included), unspecified or multicast addresses.
pub fn dialable(ip: IpAddr) -> Result<(), String> {
    let bad = match ip {
        IpAddr::V4(v4) => {
            v4.is_loopback()
                || v4.is_link_local()
                || v4.is_unspecified()
                || v4.is_multicast()
                || v4.is_broadcast()
        }
        IpAddr::V6(v6) => {
            v6.is_loopback()
                || v6.is_unspecified()
                || v6.is_multicast()
                || (v6.segments()[0] & 0xffc0) == 0xfe80
                || v6
                    .to_ipv4_mapped()
                    .is_some_and(|v4| dialable(IpAddr::V4(v4)).is_err())
        }
    };
    if bad {
        Err(format!(
            "it resolves to {ip}, a loopback, link-local, unspecified or multicast address"
        ))
    } else {
        Ok(())
    }
}

/// What one fetch's egress did: its refusals (the first few, for the fetch's error) and how
/// many connections it admitted.
#[derive(Debug, Default)]
pub struct EgressLog {
    refused: Mutex<Vec<String>>,
    admitted: std::sync::atomic::AtomicU64,
    /// Refusals are expected (a probe): kept, not logged.
    quiet: bool,
}

impl EgressLog {
    /// A log whose refusals are kept but not logged (`airlock doctor` asks for one on purpose).
    pub fn quiet() -> EgressLog {
        EgressLog {
            quiet: true,
            ..EgressLog::default()
        }
    }

    fn refuse(&self, fetch: &str, why: String) {
        if !self.quiet {
            tracing::warn!(fetch, reason = %why, "egress refused");
        }
        let mut r = self
            .refused
            .lock()
            .expect("the egress log is never poisoned");
        if r.len() < limits::MAX_EGRESS_REFUSALS_KEPT {
            r.push(why);
        }
    }

    /// The refusals kept, in order.
    pub fn refusals(&self) -> Vec<String> {
        self.refused
            .lock()
            .expect("the egress log is never poisoned")
            .clone()
    }

    /// Connections admitted.
    pub fn admitted(&self) -> u64 {
        self.admitted.load(std::sync::atomic::Ordering::SeqCst)
    }
}

/// Binds `127.0.0.1:port` inside the network namespace of process `pid` (a fetch container's
/// init), from a thread that enters it and ends: the socket stays in that namespace, and the
/// daemon accepts on it from its own.
pub fn listen_in(pid: u32, port: u16) -> std::io::Result<std::net::TcpListener> {
    let ns = std::fs::File::open(format!("/proc/{pid}/ns/net"))?;
    std::thread::spawn(move || -> std::io::Result<std::net::TcpListener> {
        nix::sched::setns(&ns, nix::sched::CloneFlags::CLONE_NEWNET)
            .map_err(std::io::Error::from)?;
        let l = std::net::TcpListener::bind((std::net::Ipv4Addr::LOCALHOST, port))?;
        l.set_nonblocking(true)?;
        Ok(l)
    })
    .join()
    .map_err(|_| std::io::Error::other("the thread entering the namespace panicked"))?
}

/// A connection to `127.0.0.1:port` made from inside the network namespace of process `pid`
/// (what a fetch's tool does to reach the proxy), from a thread that enters it and ends.
pub fn connect_in(pid: u32, port: u16) -> std::io::Result<std::net::TcpStream> {
    let ns = std::fs::File::open(format!("/proc/{pid}/ns/net"))?;
    std::thread::spawn(move || -> std::io::Result<std::net::TcpStream> {
        nix::sched::setns(&ns, nix::sched::CloneFlags::CLONE_NEWNET)
            .map_err(std::io::Error::from)?;
        std::net::TcpStream::connect((std::net::Ipv4Addr::LOCALHOST, port))
    })
    .join()
    .map_err(|_| std::io::Error::other("the thread entering the namespace panicked"))?
}

/// Serves the proxy on `listener` for the fetch named `fetch` until the task is dropped.
pub async fn serve(
    listener: tokio::net::TcpListener,
    allow: Arc<Allowlist>,
    log: Arc<EgressLog>,
    fetch: String,
) {
    let slots = Arc::new(tokio::sync::Semaphore::new(limits::MAX_EGRESS_CONNECTIONS));
    let mut tasks = tokio::task::JoinSet::new();
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            tokio::time::sleep(limits::ACCEPT_ERROR_BACKOFF).await;
            continue;
        };
        let Ok(permit) = slots.clone().try_acquire_owned() else {
            log.refuse(
                &fetch,
                format!(
                    "more than {} connections at once",
                    limits::MAX_EGRESS_CONNECTIONS
                ),
            );
            continue;
        };
        let (allow, log, fetch) = (allow.clone(), log.clone(), fetch.clone());
        tasks.spawn(async move {
            let _permit = permit;
            handle(stream, &allow, &log, &fetch).await;
        });
        while tasks.try_join_next().is_some() {}
    }
}

async fn handle(
    mut client: tokio::net::TcpStream,
    allow: &Allowlist,
    log: &EgressLog,
    fetch: &str,
) {
    let head = match tokio::time::timeout(limits::EGRESS_HEAD_TIMEOUT, read_head(&mut client)).await
    {
        Ok(Some(h)) => h,
        // Closed before a request (a readiness probe), or too slow or too long.
        _ => return,
    };
    let first = head.lines().next().unwrap_or_default().to_string();
    let mut parts = first.split(' ');
    let (method, target, version) = (
        parts.next().unwrap_or(""),
        parts.next().unwrap_or(""),
        parts.next().unwrap_or("HTTP/1.1"),
    );
    // CONNECT host:port (TLS end to end), or a plain `http://host[:port]/path` request to a
    // listed destination (an internal registry without TLS), forwarded as origin-form.
    let (decided, forward) = if method == "CONNECT" {
        (allow.admit(target), None)
    } else if let Some(rest) = target.strip_prefix("http://") {
        let (authority, path) = match rest.find('/') {
            Some(i) => (&rest[..i], &rest[i..]),
            None => (rest, "/"),
        };
        let with_port = if authority
            .rsplit_once(':')
            .is_some_and(|(_, p)| p.parse::<u16>().is_ok())
            && !authority.ends_with(']')
        {
            authority.to_string()
        } else {
            format!("{authority}:80")
        };
        let head_out = forwarded_head(&head, method, path, version);
        (allow.admit(&with_port), Some(head_out))
    } else {
        (
            Err(format!(
                "{method} {target}: only CONNECT and http:// requests to a listed destination are allowed"
            )),
            None,
        )
    };
    let dest = match decided {
        Ok(d) => d,
        Err(why) => return refuse(client, log, fetch, why).await,
    };
    let addrs: Vec<SocketAddr> = match tokio::time::timeout(
        limits::EGRESS_CONNECT_TIMEOUT,
        tokio::net::lookup_host((dest.host.as_str(), dest.port)),
    )
    .await
    {
        Ok(Ok(a)) => a.collect(),
        Ok(Err(e)) => return refuse(client, log, fetch, format!("{dest}: {e}")).await,
        Err(_) => return refuse(client, log, fetch, format!("{dest}: no DNS answer")).await,
    };
    let literal = dest.is_literal();
    let mut last = format!("{dest}: no address");
    for addr in addrs {
        if !literal && let Err(why) = dialable(addr.ip()) {
            last = format!("{dest}: {why}");
            continue;
        }
        match tokio::time::timeout(
            limits::EGRESS_CONNECT_TIMEOUT,
            tokio::net::TcpStream::connect(addr),
        )
        .await
        {
            Ok(Ok(mut upstream)) => {
                // Each side's writes go out as they come: the tools' small requests and TLS
                // records would otherwise wait on Nagle's algorithm at every round trip.
                let _ = client.set_nodelay(true);
                let _ = upstream.set_nodelay(true);
                log.admitted
                    .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                tracing::debug!(fetch, %dest, %addr, "egress admitted");
                let sent = match &forward {
                    None => {
                        client
                            .write_all(b"HTTP/1.1 200 Connection Established\r\n\r\n")
                            .await
                    }
                    Some(h) => upstream.write_all(h.as_bytes()).await,
                };
                if sent.is_err() {
                    return;
                }
                let _ = tokio::io::copy_bidirectional(&mut client, &mut upstream).await;
                return;
            }
            Ok(Err(e)) => last = format!("{dest} ({addr}): {e}"),
            Err(_) => last = format!("{dest} ({addr}): no answer"),
        }
    }
    refuse(client, log, fetch, last).await
}

async fn refuse(mut client: tokio::net::TcpStream, log: &EgressLog, fetch: &str, why: String) {
    let body = format!("airlock egress refused: {why}\n");
    let reply = format!(
        "HTTP/1.1 403 Forbidden\r\ncontent-type: text/plain\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    );
    log.refuse(fetch, why);
    let _ = client.write_all(reply.as_bytes()).await;
    let _ = client.shutdown().await;
}

/// A plain proxy request's head as the origin server takes it: `path` in the request line, no
/// proxy headers, and one request per connection (the next may name another destination).
fn forwarded_head(head: &str, method: &str, path: &str, version: &str) -> String {
    let mut out = format!("{method} {path} {version}\r\n");
    for line in head.lines().skip(1) {
        let lower = line.to_ascii_lowercase();
        if line.is_empty()
            || lower.starts_with("proxy-")
            || lower.starts_with("connection:")
            || lower.starts_with("keep-alive:")
        {
            continue;
        }
        out.push_str(line);
        out.push_str("\r\n");
    }
    out.push_str("Connection: close\r\n\r\n");
    out
}

/// The request head (up to its blank line), or `None` when the client closed first or sent
/// more than [`limits::MAX_EGRESS_HEAD_BYTES`].
async fn read_head(client: &mut tokio::net::TcpStream) -> Option<String> {
    let mut buf = Vec::new();
    let mut byte = [0u8; 1];
    while !buf.ends_with(b"\r\n\r\n") && !buf.ends_with(b"\n\n") {
        if buf.len() >= limits::MAX_EGRESS_HEAD_BYTES {
            return None;
        }
        match client.read(&mut byte).await {
            Ok(1) => buf.push(byte[0]),
            _ => return None,
        }
    }
    String::from_utf8(buf).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn destinations_parse_with_their_errors() {
        let d = Destination::parse("Registry.Example:443").unwrap();
        assert_eq!((d.host.as_str(), d.port), ("registry.example", 443));
        assert_eq!(d.to_string(), "registry.example:443");
        let v6 = Destination::parse("[2001:db8::1]:8443").unwrap();
        assert_eq!(v6.to_string(), "[2001:db8::1]:8443");
        for (bad, needle) in [
            ("registry.example", "HOST:PORT"),
            ("registry.example:0", "1..=65535"),
            ("registry.example:70000", "1..=65535"),
            ("bad host:443", "not a host name"),
            ("-x.example:443", "not a host name"),
            ("[nope]:443", "not an IPv6 address"),
        ] {
            let e = Destination::parse(bad).unwrap_err();
            assert!(e.contains(needle), "{bad}: {e}");
        }
    }

    #[test]
    fn only_listed_destinations_are_admitted() {
        let allow = Allowlist(vec![
            Destination::parse("index.example:443").unwrap(),
            Destination::parse("192.0.2.7:8080").unwrap(),
        ]);
        assert!(allow.admit("INDEX.example:443").is_ok());
        assert!(allow.admit("192.0.2.7:8080").is_ok());
        for (target, needle) in [
            ("index.example:80", "not in [egress] allow"),
            ("other.example:443", "not in [egress] allow"),
            ("192.0.2.8:8080", "an IP address"),
            ("127.0.0.1:7700", "an IP address"),
            ("169.254.169.254:80", "an IP address"),
            ("[::1]:2375", "an IP address"),
            ("", "not a destination"),
        ] {
            let e = allow.admit(target).unwrap_err();
            assert!(e.contains(needle), "{target}: {e}");
        }
    }

    #[test]
    fn a_listed_name_never_dials_loopback_link_local_or_metadata() {
        for ip in [
            "127.0.0.1",
            "127.8.9.10",
            "169.254.169.254",
            "0.0.0.0",
            "224.0.0.1",
            "::1",
            "fe80::1",
            "::ffff:127.0.0.1",
        ] {
            assert!(dialable(ip.parse().unwrap()).is_err(), "{ip}");
        }
        for ip in ["192.0.2.1", "2001:db8::1", "10.1.2.3"] {
            assert!(dialable(ip.parse().unwrap()).is_ok(), "{ip}");
        }
    }
}

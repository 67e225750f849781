//! The HTTP/1.1 accept loop, with the limits a daemon facing hostile clients needs:
//!
//! - at most `max_connections` connections; beyond that the connection idle the longest (or
//!   still sending a request that has not reached the service) is closed to make room, and when
//!   every connection is busy with a request being served the newcomer gets an immediate `503`;
//! - request headers must arrive within `header_read_timeout_seconds` (hyper's header timer,
//!   which also runs on a fresh connection before its first byte);
//! - a keep-alive connection with no request in progress is closed after
//!   `keep_alive_idle_seconds`; a request is in progress until its response body has ended
//!   (or was dropped), so a streamed response (a followed log, the event stream) is never cut
//!   by this timer however long it lasts; and a response that has ended but is still being
//!   written out to a client that reads slowly (its socket full) keeps the connection busy
//!   until its last byte is written, so the timer counts from the last write, never from the
//!   end of a body the client has not received yet;
//! - the body must arrive within `body_read_timeout_seconds` of the headers (enforced by the
//!   handler, which then has the control call budget for the work), so one request takes at
//!   most header + body + budget;
//! - accept errors (`EMFILE` when file descriptors run out) back off instead of spinning.
//!
//! Closing a connection never cancels a state change: the handler runs the work in its own task.

use axum::Router;
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::net::TcpListener;
use tokio::sync::Notify;
use tower::ServiceExt;

/// The connection limits of one server (from the config).
#[derive(Debug, Clone, Copy)]
pub struct ConnLimits {
    pub max_connections: usize,
    pub header_read_timeout: Duration,
    pub keep_alive_idle: Duration,
}

/// File descriptors kept free beside the connections (database, git, Docker, artifacts).
pub const RESERVED_FDS: u64 = 256;

/// The body of the immediate refusal beyond `max_connections`.
const BUSY_BODY: &str = "{\"error\":{\"code\":\"unavailable\",\"message\":\"too many connections are serving requests; retry with backoff\"}}";

fn busy_response() -> String {
    format!(
        "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\nconnection: close\r\ncontent-length: {}\r\n\r\n{BUSY_BODY}",
        BUSY_BODY.len()
    )
}

/// One connection's state, shared between its task, its requests and the accept loop.
pub struct Conn {
    /// Requests whose headers arrived and whose response is not finished.
    requests: AtomicUsize,
    /// Requests past reading their body: being served, so never closed to make room.
    dispatching: AtomicUsize,
    /// Milliseconds since the server started when the connection last became idle.
    idle_since_ms: AtomicU64,
    /// Milliseconds since the server started when bytes were last written to the socket.
    last_write_ms: AtomicU64,
    /// The last write found the socket full: a response is still going out.
    write_blocked: std::sync::atomic::AtomicBool,
    close: Notify,
}

impl Conn {
    /// Idle for the keep-alive timer: no request in progress, nothing waiting to be written,
    /// and for how long since the later of the last request's end and the last write.
    fn idle_for(&self, now_ms: u64) -> Option<Duration> {
        if self.requests.load(Ordering::SeqCst) > 0 || self.write_blocked.load(Ordering::SeqCst) {
            return None;
        }
        let since = self
            .idle_since_ms
            .load(Ordering::SeqCst)
            .max(self.last_write_ms.load(Ordering::SeqCst));
        Some(Duration::from_millis(now_ms.saturating_sub(since)))
    }
}

/// A connection's socket that tells its [`Conn`] when bytes go out and when a write finds the
/// socket full, for the idle judgement.
struct Watched {
    stream: tokio::net::TcpStream,
    conn: Arc<Conn>,
    epoch: Instant,
}

impl Watched {
    fn wrote<T>(&self, r: &std::task::Poll<std::io::Result<T>>) {
        match r {
            std::task::Poll::Pending => self.conn.write_blocked.store(true, Ordering::SeqCst),
            std::task::Poll::Ready(_) => {
                self.conn.write_blocked.store(false, Ordering::SeqCst);
                self.conn
                    .last_write_ms
                    .store(self.epoch.elapsed().as_millis() as u64, Ordering::SeqCst);
            }
        }
    }
}

impl tokio::io::AsyncRead for Watched {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.stream).poll_read(cx, buf)
    }
}

impl tokio::io::AsyncWrite for Watched {
    fn poll_write(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        let r = std::pin::Pin::new(&mut self.stream).poll_write(cx, buf);
        self.wrote(&r);
        r
    }

    fn poll_write_vectored(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> std::task::Poll<std::io::Result<usize>> {
        let r = std::pin::Pin::new(&mut self.stream).poll_write_vectored(cx, bufs);
        self.wrote(&r);
        r
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }

    fn poll_flush(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.stream).poll_flush(cx)
    }

    fn poll_shutdown(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.stream).poll_shutdown(cx)
    }
}

/// Marks a request of a connection as being served (body read, work started) while held.
pub struct Dispatching(Arc<Conn>);

impl Drop for Dispatching {
    fn drop(&mut self) {
        self.0.dispatching.fetch_sub(1, Ordering::SeqCst);
    }
}

/// The handle a request carries (as an extension) to its connection.
#[derive(Clone)]
pub struct ConnHandle(Arc<Conn>);

impl ConnHandle {
    /// Call once the body has been read: from then on the connection is not closed to make
    /// room for others.
    pub fn dispatching(&self) -> Dispatching {
        self.0.dispatching.fetch_add(1, Ordering::SeqCst);
        Dispatching(self.0.clone())
    }
}

struct RequestGuard {
    conn: Arc<Conn>,
    epoch: Instant,
}

impl Drop for RequestGuard {
    fn drop(&mut self) {
        if self.conn.requests.fetch_sub(1, Ordering::SeqCst) == 1 {
            self.conn
                .idle_since_ms
                .store(self.epoch.elapsed().as_millis() as u64, Ordering::SeqCst);
        }
    }
}

/// A response body that holds its request's guard until the body ends or is dropped, so the
/// idle judgement sees a streamed response as the request in progress it is.
struct Guarded {
    body: axum::body::Body,
    _request: RequestGuard,
}

impl axum::body::HttpBody for Guarded {
    type Data = axum::body::Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<hyper::body::Frame<Self::Data>, Self::Error>>> {
        std::pin::Pin::new(&mut self.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        self.body.size_hint()
    }
}

#[derive(Default)]
struct Registry {
    next: u64,
    conns: HashMap<u64, Arc<Conn>>,
}

impl Registry {
    /// Picks the connection to close to make room: idle ones first (longest idle first), then
    /// ones still sending a request. `None` when every connection is serving a request.
    fn victim(&self) -> Option<u64> {
        self.conns
            .iter()
            .filter(|(_, c)| c.dispatching.load(Ordering::SeqCst) == 0)
            .min_by_key(|(_, c)| {
                (
                    c.requests.load(Ordering::SeqCst) > 0,
                    c.idle_since_ms.load(Ordering::SeqCst),
                )
            })
            .map(|(id, _)| *id)
    }
}

/// Raises the soft `RLIMIT_NOFILE` to the hard limit and checks that `max_connections` fits.
pub fn raise_fd_limit(max_connections: usize) -> Result<u64, String> {
    use nix::sys::resource::{Resource, getrlimit, setrlimit};
    let (_, hard) = getrlimit(Resource::RLIMIT_NOFILE)
        .map_err(|e| format!("cannot read RLIMIT_NOFILE: {e}"))?;
    setrlimit(Resource::RLIMIT_NOFILE, hard, hard)
        .map_err(|e| format!("cannot raise RLIMIT_NOFILE to its hard limit {hard}: {e}"))?;
    let needed = max_connections as u64 + RESERVED_FDS;
    if hard < needed {
        return Err(format!(
            "max_connections {max_connections} needs at least {needed} open files ({RESERVED_FDS} kept for the database, git and Docker), but RLIMIT_NOFILE's hard limit is {hard}: lower max_connections or raise the limit (ulimit -Hn, LimitNOFILE= in a systemd unit)"
        ));
    }
    Ok(hard)
}

/// Serves `app` on `listener` until `shutdown` resolves, then stops accepting, lets in-flight
/// requests finish (up to [`crate::limits::SHUTDOWN_DRAIN`]) and returns.
pub async fn serve(
    listener: TcpListener,
    app: Router,
    limits: ConnLimits,
    shutdown: impl Future<Output = ()>,
) {
    let max_connections = limits.max_connections;
    let epoch = Instant::now();
    let registry = Arc::new(Mutex::new(Registry::default()));
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let tracker = live::Tracker::default();
    tokio::pin!(shutdown);
    loop {
        let accepted = tokio::select! {
            a = listener.accept() => a,
            _ = &mut shutdown => break,
        };
        let (stream, peer) = match accepted {
            Ok(x) => x,
            Err(e) => {
                tracing::warn!(error = %e, "accept failed; backing off");
                tokio::time::sleep(crate::limits::ACCEPT_ERROR_BACKOFF).await;
                continue;
            }
        };
        let conn = Arc::new(Conn {
            requests: AtomicUsize::new(0),
            dispatching: AtomicUsize::new(0),
            idle_since_ms: AtomicU64::new(epoch.elapsed().as_millis() as u64),
            last_write_ms: AtomicU64::new(0),
            write_blocked: std::sync::atomic::AtomicBool::new(false),
            close: Notify::new(),
        });
        let id = {
            let mut reg = registry
                .lock()
                .expect("the registry lock is never poisoned");
            if reg.conns.len() >= max_connections {
                match reg.victim() {
                    Some(v) => {
                        if let Some(c) = reg.conns.remove(&v) {
                            c.close.notify_one();
                        }
                    }
                    None => {
                        drop(reg);
                        // Every connection is serving a request: refuse at once, without
                        // reading anything.
                        let _ = stream.try_write(busy_response().as_bytes());
                        tracing::warn!(%peer, max_connections, "connection refused: at max_connections");
                        continue;
                    }
                }
            }
            reg.next += 1;
            let id = reg.next;
            reg.conns.insert(id, conn.clone());
            id
        };
        let app = app.clone();
        let registry = registry.clone();
        let mut stop_rx = stop_rx.clone();
        let guard = tracker.enter();
        tokio::spawn(async move {
            let _guard = guard;
            let svc = {
                let conn = conn.clone();
                hyper::service::service_fn(move |mut req: hyper::Request<Incoming>| {
                    conn.requests.fetch_add(1, Ordering::SeqCst);
                    let request = RequestGuard {
                        conn: conn.clone(),
                        epoch,
                    };
                    req.extensions_mut().insert(ConnHandle(conn.clone()));
                    let app = app.clone();
                    async move {
                        let resp = app.oneshot(req.map(axum::body::Body::new)).await;
                        // The request stays in progress until its body has ended: the guard
                        // travels with the body, not with the handler's future.
                        resp.map(|r| {
                            r.map(|body| {
                                axum::body::Body::new(Guarded {
                                    body,
                                    _request: request,
                                })
                            })
                        })
                    }
                })
            };
            let mut builder = hyper::server::conn::http1::Builder::new();
            builder
                .timer(TokioTimer::new())
                .header_read_timeout(limits.header_read_timeout)
                .keep_alive(true);
            let watched = Watched {
                stream,
                conn: conn.clone(),
                epoch,
            };
            let served = builder.serve_connection(TokioIo::new(watched), svc);
            tokio::pin!(served);
            let mut tick = tokio::time::interval(crate::limits::IDLE_CHECK_INTERVAL);
            let mut draining = false;
            loop {
                tokio::select! {
                    r = served.as_mut() => {
                        if let Err(e) = r {
                            tracing::debug!(%peer, error = %e, "connection ended with an error");
                        }
                        break;
                    }
                    _ = conn.close.notified() => {
                        tracing::debug!(%peer, "connection closed to make room");
                        break;
                    }
                    _ = stop_rx.wait_for(|s| *s), if !draining => {
                        draining = true;
                        served.as_mut().graceful_shutdown();
                    }
                    _ = tick.tick() => {
                        if conn
                            .idle_for(epoch.elapsed().as_millis() as u64)
                            .is_some_and(|idle| idle >= limits.keep_alive_idle)
                        {
                            tracing::debug!(%peer, "idle keep-alive connection closed");
                            break;
                        }
                    }
                }
            }
            registry
                .lock()
                .expect("the registry lock is never poisoned")
                .conns
                .remove(&id);
        });
    }
    drop(listener);
    let _ = stop_tx.send(true);
    if tokio::time::timeout(crate::limits::SHUTDOWN_DRAIN, tracker.wait())
        .await
        .is_err()
    {
        tracing::warn!("connections still open after the shutdown drain; closing them");
    }
}

/// Counts live connection tasks so shutdown can wait for them.
mod live {
    use std::sync::Arc;
    use tokio::sync::watch;

    #[derive(Clone)]
    pub struct Tracker {
        tx: Arc<watch::Sender<usize>>,
    }

    impl Default for Tracker {
        fn default() -> Self {
            Tracker {
                tx: Arc::new(watch::channel(0).0),
            }
        }
    }

    pub struct Guard {
        tx: Arc<watch::Sender<usize>>,
    }

    impl Tracker {
        pub fn enter(&self) -> Guard {
            self.tx.send_modify(|n| *n += 1);
            Guard {
                tx: self.tx.clone(),
            }
        }

        pub async fn wait(&self) {
            let mut rx = self.tx.subscribe();
            let _ = rx.wait_for(|n| *n == 0).await;
        }
    }

    impl Drop for Guard {
        fn drop(&mut self) {
            self.tx.send_modify(|n| *n -= 1);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn conn(requests: usize, dispatching: usize, idle_since_ms: u64) -> Arc<Conn> {
        Arc::new(Conn {
            requests: AtomicUsize::new(requests),
            dispatching: AtomicUsize::new(dispatching),
            idle_since_ms: AtomicU64::new(idle_since_ms),
            last_write_ms: AtomicU64::new(0),
            write_blocked: std::sync::atomic::AtomicBool::new(false),
            close: Notify::new(),
        })
    }

    #[test]
    fn a_response_still_going_out_keeps_its_connection_from_the_idle_timer() {
        let c = conn(0, 0, 1_000);
        assert_eq!(c.idle_for(3_000), Some(Duration::from_secs(2)));
        // The body ended at 1 s, but the client has not read it all: a write found the
        // socket full. Not idle, however long that lasts.
        c.write_blocked.store(true, Ordering::SeqCst);
        assert_eq!(c.idle_for(60_000), None);
        // Its last bytes went out at 59 s: idle from then.
        c.write_blocked.store(false, Ordering::SeqCst);
        c.last_write_ms.store(59_000, Ordering::SeqCst);
        assert_eq!(c.idle_for(60_000), Some(Duration::from_secs(1)));
        // A request in progress is never idle.
        c.requests.store(1, Ordering::SeqCst);
        assert_eq!(c.idle_for(120_000), None);
    }

    #[test]
    fn room_is_made_by_closing_the_longest_idle_then_a_still_arriving_request() {
        let mut reg = Registry::default();
        reg.conns.insert(1, conn(1, 1, 0)); // serving a request: never closed
        reg.conns.insert(2, conn(1, 0, 0)); // still sending its request
        reg.conns.insert(3, conn(0, 0, 500)); // idle since 500 ms
        reg.conns.insert(4, conn(0, 0, 100)); // idle since 100 ms: the longest
        assert_eq!(reg.victim(), Some(4));
        reg.conns.remove(&4);
        assert_eq!(reg.victim(), Some(3));
        reg.conns.remove(&3);
        assert_eq!(reg.victim(), Some(2));
        reg.conns.remove(&2);
        assert_eq!(reg.victim(), None, "every connection is serving a request");
    }

    #[test]
    fn the_refusal_is_a_complete_http_response() {
        let r = busy_response();
        let (head, body) = r.split_once("\r\n\r\n").unwrap();
        assert!(head.starts_with("HTTP/1.1 503 "));
        assert!(head.contains(&format!("content-length: {}", body.len())));
        let v: serde_json::Value = serde_json::from_str(body).unwrap();
        assert_eq!(v["error"]["code"], "unavailable");
    }
}

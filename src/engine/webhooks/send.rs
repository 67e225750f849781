//! One HTTP POST of a signed delivery to a receiver, over plain TCP or TLS (the host's roots
//! and a subscription's `ca_file`), with the whole exchange bounded by the subscription's
//! timeout. Redirects are never followed; an answer is read up to a bound.

use crate::config::webhooks::{Endpoint, Webhook};
use crate::limits;
use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper_util::rt::TokioIo;
use std::sync::Arc;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio_rustls::rustls;

/// What a receiver answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    /// 2xx: delivered.
    Accepted(u16),
    /// Any other status (a redirect included: none is followed), with the head of its body.
    Refused(u16, String),
    /// No complete answer: refused connection, TLS failure, timeout, a connection closed
    /// mid-answer.
    Failed(String),
}

/// A receiver's TLS settings, built once per subscription.
pub fn tls_config(hook: &Webhook) -> Result<Arc<rustls::ClientConfig>, String> {
    let mut roots = rustls::RootCertStore::empty();
    for cert in rustls_native_certs::load_native_certs().certs {
        let _ = roots.add(cert);
    }
    if let Some(pem) = &hook.extra_roots {
        use rustls::pki_types::{CertificateDer, pem::PemObject};
        for cert in CertificateDer::pem_slice_iter(pem) {
            let cert = cert.map_err(|e| format!("ca_file: {e}"))?;
            roots.add(cert).map_err(|e| format!("ca_file: {e}"))?;
        }
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(Arc::new(config))
}

/// Posts `body` with `headers` to the hook's endpoint.
pub async fn post(
    hook: &Webhook,
    tls: &Arc<rustls::ClientConfig>,
    headers: &[(&str, String)],
    body: Vec<u8>,
) -> Answer {
    match tokio::time::timeout(hook.timeout, exchange(&hook.endpoint, tls, headers, body)).await {
        Ok(Ok(a)) => a,
        Ok(Err(e)) => Answer::Failed(e),
        Err(_) => Answer::Failed(format!(
            "no answer within {} s (timeout_seconds)",
            hook.timeout.as_secs()
        )),
    }
}

async fn exchange(
    ep: &Endpoint,
    tls: &Arc<rustls::ClientConfig>,
    headers: &[(&str, String)],
    body: Vec<u8>,
) -> Result<Answer, String> {
    let tcp = tokio::net::TcpStream::connect((ep.host.as_str(), ep.port))
        .await
        .map_err(|e| format!("connect to {}:{}: {e}", ep.host, ep.port))?;
    let _ = tcp.set_nodelay(true);
    if ep.tls {
        let name = rustls::pki_types::ServerName::try_from(ep.host.clone())
            .map_err(|e| format!("host {:?}: {e}", ep.host))?;
        let stream = tokio_rustls::TlsConnector::from(tls.clone())
            .connect(name, tcp)
            .await
            .map_err(|e| format!("TLS with {}: {e}", ep.host))?;
        over(stream, ep, headers, body).await
    } else {
        over(tcp, ep, headers, body).await
    }
}

async fn over<S>(
    io: S,
    ep: &Endpoint,
    headers: &[(&str, String)],
    body: Vec<u8>,
) -> Result<Answer, String>
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(io))
        .await
        .map_err(|e| format!("HTTP handshake: {e}"))?;
    let conn = tokio::spawn(conn);
    let host = if (ep.tls && ep.port == 443) || (!ep.tls && ep.port == 80) {
        ep.host.clone()
    } else if ep.host.contains(':') {
        format!("[{}]:{}", ep.host, ep.port)
    } else {
        format!("{}:{}", ep.host, ep.port)
    };
    let mut req = hyper::Request::post(ep.target.as_str())
        .header(hyper::header::HOST, host)
        .header(hyper::header::CONTENT_TYPE, "application/json")
        .header(hyper::header::CONNECTION, "close");
    for (k, v) in headers {
        req = req.header(*k, v);
    }
    let req = req
        .body(Full::new(Bytes::from(body)))
        .map_err(|e| format!("request: {e}"))?;
    let answer = sender.send_request(req).await;
    let result = match answer {
        Err(e) => Err(format!("no answer: {e}")),
        Ok(resp) => {
            let status = resp.status();
            let location = resp
                .headers()
                .get(hyper::header::LOCATION)
                .and_then(|l| l.to_str().ok())
                .map(|l| format!(" to {l}"))
                .unwrap_or_default();
            let mut body = resp.into_body();
            let mut head: Vec<u8> = Vec::new();
            let mut cut = None;
            while head.len() < limits::MAX_WEBHOOK_ANSWER_BYTES {
                match body.frame().await {
                    None => break,
                    Some(Ok(f)) => {
                        if let Ok(d) = f.into_data() {
                            head.extend_from_slice(&d);
                        }
                    }
                    Some(Err(e)) => {
                        cut = Some(e.to_string());
                        break;
                    }
                }
            }
            match cut {
                Some(e) => Err(format!(
                    "the answer ({}) ended mid-body: {e}",
                    status.as_u16()
                )),
                None if status.is_success() => Ok(Answer::Accepted(status.as_u16())),
                None => {
                    let mut text = String::from_utf8_lossy(&head).into_owned();
                    if status.is_redirection() {
                        text = format!("a redirect{location}; webhooks follow no redirect");
                    }
                    text.truncate(floor(&text, limits::MAX_WEBHOOK_ERROR_QUOTED));
                    Ok(Answer::Refused(status.as_u16(), text))
                }
            }
        }
    };
    conn.abort();
    result
}

/// The largest char boundary of `s` at or below `n`.
fn floor(s: &str, n: usize) -> usize {
    let mut n = n.min(s.len());
    while !s.is_char_boundary(n) {
        n -= 1;
    }
    n
}

//! The HTTP client of a `tcp://` engine: one per engine for the life of the process, keeping
//! its connections open between calls (bounded, closed when idle) with `TCP_NODELAY`, and
//! trusting only the configured CA.
//!
//! Bollard's own TCP clients open a connection (and a TLS handshake, reading the client key
//! from disk) for every call and leave Nagle's algorithm on, so a small request written in two
//! segments waits for the engine's delayed acknowledgement: about 40 ms per call on loopback,
//! a dozen calls per job. Upgraded connections (attach) leave the pool as hyper upgrades them.

use crate::config::engines::{EngineConfig, EngineHost, EngineTls};
use crate::limits;
use bollard::{BollardRequest, Docker};
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use std::sync::Arc;
use tokio_rustls::rustls;

/// Why a client could not be made: which file, and what was wrong with it.
fn unusable(path: &std::path::Path, what: &str) -> String {
    format!("{}: {what}", path.display())
}

fn connector() -> HttpConnector {
    let mut http = HttpConnector::new();
    http.set_nodelay(true);
    http.enforce_http(false);
    http.set_connect_timeout(Some(limits::ENGINE_CONNECT_TIMEOUT));
    http
}

/// The mutual-TLS client configuration of an engine: its CA the only root, the client
/// certificate and key read once.
pub fn tls_config(tls: &EngineTls) -> Result<rustls::ClientConfig, String> {
    use rustls::pki_types::{CertificateDer, PrivateKeyDer, pem::PemObject};
    let read = |p: &std::path::Path| std::fs::read(p).map_err(|e| unusable(p, &e.to_string()));
    let mut roots = rustls::RootCertStore::empty();
    let ca = read(&tls.ca)?;
    for cert in CertificateDer::pem_slice_iter(&ca) {
        let cert = cert.map_err(|e| unusable(&tls.ca, &format!("not a PEM certificate: {e}")))?;
        roots
            .add(cert)
            .map_err(|e| unusable(&tls.ca, &format!("not a usable CA certificate: {e}")))?;
    }
    if roots.is_empty() {
        return Err(unusable(&tls.ca, "holds no certificate"));
    }
    let chain = read(&tls.cert)?;
    let certs = CertificateDer::pem_slice_iter(&chain)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| unusable(&tls.cert, &format!("not a PEM certificate: {e}")))?;
    if certs.is_empty() {
        return Err(unusable(&tls.cert, "holds no certificate"));
    }
    let key = PrivateKeyDer::from_pem_slice(&read(&tls.key)?)
        .map_err(|e| unusable(&tls.key, &format!("not a PEM private key: {e}")))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_root_certificates(roots)
        .with_client_auth_cert(certs, key)
        .map_err(|e| unusable(&tls.key, &format!("does not go with the certificate: {e}")))
}

/// The client of one `[[engines]]` entry, on the client's own API version (negotiated by the
/// caller): its socket, TCP with mutual TLS, or plain TCP where the configuration allowed it.
pub fn client(e: &EngineConfig) -> Result<Docker, String> {
    let version = bollard::API_DEFAULT_VERSION;
    match (&e.host, &e.tls) {
        (EngineHost::Unix(path), _) => Docker::connect_with_socket(
            &path.to_string_lossy(),
            limits::ENGINE_CALL_TIMEOUT_SECS,
            version,
        )
        .map_err(|err| err.to_string()),
        (EngineHost::Tcp { host, port }, Some(t)) => tls(&format!("{host}:{port}"), t, version),
        (EngineHost::Tcp { host, port }, None) => plain(&format!("{host}:{port}"), version),
    }
}

/// A client of engine `addr` (`host:port`) over mutual TLS.
pub fn tls(
    addr: &str,
    tls: &EngineTls,
    version: &bollard::ClientVersion,
) -> Result<Docker, String> {
    let config = tls_config(tls)?;
    let https = HttpsConnector::from((connector(), config));
    pooled(https, format!("https://{addr}"), version)
}

/// A client of engine `addr` (`host:port`) over plain HTTP (loopback only, by configuration).
pub fn plain(addr: &str, version: &bollard::ClientVersion) -> Result<Docker, String> {
    pooled(connector(), format!("http://{addr}"), version)
}

/// A client keeping up to [`limits::ENGINE_IDLE_CONNECTIONS`] connections open between calls,
/// each closed after [`limits::ENGINE_IDLE_CONNECTION_TIMEOUT`] unused.
fn pooled<C>(connector: C, addr: String, version: &bollard::ClientVersion) -> Result<Docker, String>
where
    C: hyper_util::client::legacy::connect::Connect + Clone + Send + Sync + 'static,
{
    let client = Arc::new(
        Client::builder(TokioExecutor::new())
            .pool_idle_timeout(limits::ENGINE_IDLE_CONNECTION_TIMEOUT)
            .pool_max_idle_per_host(limits::ENGINE_IDLE_CONNECTIONS)
            .build(connector),
    );
    Docker::connect_with_custom_transport(
        move |req: BollardRequest| {
            let client = client.clone();
            async move {
                client
                    .request(req)
                    .await
                    .map_err(bollard::errors::Error::from)
            }
        },
        Some(addr),
        limits::ENGINE_CALL_TIMEOUT_SECS,
        version,
    )
    .map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tls_in(dir: &std::path::Path) -> EngineTls {
        EngineTls {
            ca: dir.join("ca.pem"),
            cert: dir.join("cert.pem"),
            key: dir.join("key.pem"),
        }
    }

    #[test]
    fn a_missing_or_empty_file_is_refused_naming_it() {
        let dir = tempfile::tempdir().unwrap();
        let tls = tls_in(dir.path());
        let e = tls_config(&tls).unwrap_err();
        assert!(e.starts_with(&tls.ca.display().to_string()), "{e}");
        std::fs::write(&tls.ca, "not a certificate\n").unwrap();
        let e = tls_config(&tls).unwrap_err();
        assert_eq!(e, format!("{}: holds no certificate", tls.ca.display()));
    }
}

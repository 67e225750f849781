//! The engine's API version on a local socket, from `GET /_ping` (as the docker CLI asks it).

use crate::limits;

/// The API version to speak to the engine on a local socket: the lower of the engine's (the
/// `Api-Version` header of `GET /_ping`, as the docker CLI reads it) and this client's.
pub(super) async fn api_version(socket: &str) -> Result<bollard::ClientVersion, String> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::UnixStream::connect(socket)
        .await
        .map_err(|e| e.to_string())?;
    stream
        .write_all(b"GET /_ping HTTP/1.1\r\nHost: docker\r\nConnection: close\r\n\r\n")
        .await
        .map_err(|e| e.to_string())?;
    let mut head = Vec::new();
    let mut buf = [0u8; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
        let n = stream.read(&mut buf).await.map_err(|e| e.to_string())?;
        if n == 0 {
            break;
        }
        head.extend_from_slice(&buf[..n]);
        if head.len() > limits::DOCKER_PING_HEAD_BYTES {
            return Err(format!(
                "the engine's /_ping answer has more than {} bytes of headers",
                limits::DOCKER_PING_HEAD_BYTES
            ));
        }
    }
    let text = String::from_utf8_lossy(&head);
    let mut lines = text.split("\r\n");
    let status = lines.next().unwrap_or_default();
    if !status.starts_with("HTTP/1.1 200") && !status.starts_with("HTTP/1.0 200") {
        return Err(format!("GET /_ping answered {status:?}"));
    }
    let server = lines
        .filter_map(|l| l.split_once(':'))
        .find(|(k, _)| k.trim().eq_ignore_ascii_case("api-version"))
        .and_then(|(_, v)| {
            let (major, minor) = v.trim().split_once('.')?;
            Some(bollard::ClientVersion {
                major_version: major.parse().ok()?,
                minor_version: minor.parse().ok()?,
            })
        })
        .ok_or_else(|| "GET /_ping carried no usable Api-Version header".to_string())?;
    let client = bollard::API_DEFAULT_VERSION;
    Ok(
        if (server.major_version, server.minor_version)
            < (client.major_version, client.minor_version)
        {
            server
        } else {
            *client
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// Serves one canned answer on a fresh socket; returns the socket's path.
    async fn serve(answer: Vec<u8>) -> (tempfile::TempDir, String) {
        let d = tempfile::tempdir().unwrap();
        let path = d.path().join("docker.sock");
        let listener = tokio::net::UnixListener::bind(&path).unwrap();
        tokio::spawn(async move {
            let (mut s, _) = listener.accept().await.unwrap();
            let mut req = [0u8; 512];
            let n = s.read(&mut req).await.unwrap();
            assert!(req[..n].starts_with(b"GET /_ping HTTP/1.1\r\n"));
            let _ = s.write_all(&answer).await;
        });
        let p = path.to_str().unwrap().to_string();
        (d, p)
    }

    #[tokio::test]
    async fn the_lower_of_the_engines_and_the_clients_version_is_spoken() {
        let (_d, p) = serve(
            b"HTTP/1.1 200 OK\r\nApi-Version: 1.41\r\nDocker-Experimental: false\r\n\r\nOK"
                .to_vec(),
        )
        .await;
        let v = api_version(&p).await.unwrap();
        assert_eq!((v.major_version, v.minor_version), (1, 41));
        // A newer engine than the client: the client's own version.
        let (_d, p) = serve(b"HTTP/1.1 200 OK\r\napi-version:  1.999 \r\n\r\n".to_vec()).await;
        let v = api_version(&p).await.unwrap();
        let c = bollard::API_DEFAULT_VERSION;
        assert_eq!(
            (v.major_version, v.minor_version),
            (c.major_version, c.minor_version)
        );
    }

    #[tokio::test]
    async fn a_bad_or_missing_answer_is_an_error_that_says_what() {
        let (_d, p) = serve(b"HTTP/1.1 500 Internal Server Error\r\n\r\n".to_vec()).await;
        assert!(api_version(&p).await.unwrap_err().contains("500"));
        let (_d, p) = serve(b"HTTP/1.1 200 OK\r\nServer: x\r\n\r\nOK".to_vec()).await;
        assert!(api_version(&p).await.unwrap_err().contains("Api-Version"));
        let (_d, p) = serve(b"HTTP/1.1 200 OK\r\nApi-Version: one.two\r\n\r\n".to_vec()).await;
        assert!(api_version(&p).await.unwrap_err().contains("Api-Version"));
        let mut huge = b"HTTP/1.1 200 OK\r\n".to_vec();
        huge.extend(std::iter::repeat_n(
            b'x',
            limits::DOCKER_PING_HEAD_BYTES + 10,
        ));
        let (_d, p) = serve(huge).await;
        assert!(
            api_version(&p)
                .await
                .unwrap_err()
                .contains("bytes of headers")
        );
        let err = api_version("/nonexistent/docker.sock").await.unwrap_err();
        assert!(err.contains("No such file"), "{err}");
    }
}

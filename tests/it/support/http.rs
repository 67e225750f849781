//! A minimal HTTP/1.1 client for the API tests (one request per connection), so the tests speak
//! real HTTP over loopback without pulling in a client library.

use serde_json::Value;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

/// Sends one request; returns (status, body bytes). `None` when the connection failed or broke.
pub fn request(
    addr: &str,
    method: &str,
    path: &str,
    token: Option<&str>,
    body: &[u8],
) -> Option<(u16, Vec<u8>)> {
    let auth = token.map(|t| format!("Bearer {t}"));
    let headers: Vec<(&str, &str)> = auth
        .as_deref()
        .map(|a| vec![("Authorization", a)])
        .unwrap_or_default();
    exchange(addr, method, path, &headers, body).map(|(status, _, body)| (status, body))
}

/// A response's header fields, names lowercased, in order.
pub type Headers = Vec<(String, String)>;

/// Sends one request with `headers`; returns (status, the response's headers with lowercase
/// names, body bytes).
pub fn exchange(
    addr: &str,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> Option<(u16, Headers, Vec<u8>)> {
    let mut s = TcpStream::connect(addr).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(120))).ok()?;
    let mut head = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nContent-Length: {}\r\n",
        body.len()
    );
    // JSON unless the caller names another type (the web page's forms).
    if !headers
        .iter()
        .any(|(k, _)| k.eq_ignore_ascii_case("content-type"))
    {
        head.push_str("Content-Type: application/json\r\n");
    }
    for (k, v) in headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head.push_str("\r\n");
    s.write_all(head.as_bytes()).ok()?;
    // The server may answer (413) before reading a large body; ignore write errors then.
    let _ = s.write_all(body);
    let mut raw = Vec::new();
    let _ = s.read_to_end(&mut raw);
    let split = raw.windows(4).position(|w| w == b"\r\n\r\n")?;
    let head = String::from_utf8_lossy(&raw[..split]).to_string();
    let status: u16 = head.split(' ').nth(1)?.parse().ok()?;
    let fields: Vec<(String, String)> = head
        .lines()
        .skip(1)
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    let mut body = raw[split + 4..].to_vec();
    if fields
        .iter()
        .any(|(k, v)| k == "transfer-encoding" && v.eq_ignore_ascii_case("chunked"))
    {
        body = dechunk(&body);
    }
    Some((status, fields, body))
}

fn dechunk(mut b: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    while let Some(eol) = b.windows(2).position(|w| w == b"\r\n") {
        let size =
            usize::from_str_radix(String::from_utf8_lossy(&b[..eol]).trim(), 16).unwrap_or(0);
        if size == 0 {
            break;
        }
        out.extend_from_slice(&b[eol + 2..eol + 2 + size]);
        b = &b[eol + 2 + size + 2..];
    }
    out
}

/// POST /api/v1/<method> with a JSON value; returns (status, JSON).
pub fn call(addr: &str, token: Option<&str>, method: &str, body: &Value) -> (u16, Value) {
    let (status, v) = call_raw(addr, token, method, body.to_string().as_bytes());
    if status == 200 {
        super::schema::keep_example(method, body, &v);
    }
    (status, v)
}

pub fn call_raw(addr: &str, token: Option<&str>, method: &str, body: &[u8]) -> (u16, Value) {
    let (status, bytes) = request(addr, "POST", &format!("/api/v1/{method}"), token, body)
        .unwrap_or_else(|| panic!("{method}: no HTTP response"));
    let v = serde_json::from_slice(&bytes).unwrap_or_else(|e| {
        panic!(
            "{method}: non-JSON response ({e}): {}",
            String::from_utf8_lossy(&bytes)
        )
    });
    super::schema::check_reply(method, status, &v);
    (status, v)
}

/// The body of a raw HTTP/1.1 response with `Transfer-Encoding: chunked`, as far as its chunks
/// arrived whole (the headers are skipped).
pub fn chunked_body(raw: &[u8]) -> String {
    let text = String::from_utf8_lossy(raw);
    let Some(start) = text.find("\r\n\r\n") else {
        return String::new();
    };
    let mut rest = &raw[start + 4..];
    let mut body = Vec::new();
    while let Some(eol) = rest.windows(2).position(|w| w == b"\r\n") {
        let size = std::str::from_utf8(&rest[..eol])
            .ok()
            .and_then(|s| usize::from_str_radix(s.trim(), 16).ok());
        let Some(size) = size else { break };
        if size == 0 || rest.len() < eol + 2 + size {
            break;
        }
        body.extend_from_slice(&rest[eol + 2..eol + 2 + size]);
        rest = &rest[(eol + 4 + size).min(rest.len())..];
    }
    String::from_utf8_lossy(&body).into_owned()
}

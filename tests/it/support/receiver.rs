//! A real HTTP receiver on loopback for webhook tests: it records every request (headers and
//! body) and answers each by a script: accept, fail with 500, hang, redirect, or close in the
//! middle of its answer.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// How the receiver answers one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Answer {
    Ok,
    Fail500,
    /// Reads the request and says nothing for this long.
    Hang(Duration),
    Redirect,
    /// Sends a 200 head promising 100 bytes, 5 of them, and closes.
    CloseMidBody,
}

/// One request as received.
#[derive(Debug, Clone)]
pub struct Received {
    pub path: String,
    pub headers: BTreeMap<String, String>,
    pub body: Vec<u8>,
    pub answered: Answer,
}

impl Received {
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body).unwrap()
    }

    pub fn header(&self, name: &str) -> &str {
        self.headers.get(name).map(String::as_str).unwrap_or("")
    }
}

pub struct Receiver {
    pub port: u16,
    seen: Arc<Mutex<Vec<Received>>>,
}

impl Receiver {
    /// Answers requests in `script`'s order, then `then` for every one after.
    pub fn start(script: Vec<Answer>, then: Answer) -> Receiver {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        let seen: Arc<Mutex<Vec<Received>>> = Arc::default();
        let script = Arc::new(Mutex::new(
            script
                .into_iter()
                .collect::<std::collections::VecDeque<_>>(),
        ));
        let s = seen.clone();
        std::thread::spawn(move || {
            for c in l.incoming() {
                let Ok(c) = c else { continue };
                let (s, script) = (s.clone(), script.clone());
                std::thread::spawn(move || {
                    let _ = serve(c, &s, &script, then);
                });
            }
        });
        Receiver { port, seen }
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }

    pub fn seen(&self) -> Vec<Received> {
        self.seen.lock().unwrap().clone()
    }

    /// The requests it accepted (answered 2xx).
    pub fn accepted(&self) -> Vec<Received> {
        self.seen()
            .into_iter()
            .filter(|r| r.answered == Answer::Ok)
            .collect()
    }
}

fn serve(
    c: TcpStream,
    seen: &Mutex<Vec<Received>>,
    script: &Mutex<std::collections::VecDeque<Answer>>,
    then: Answer,
) -> std::io::Result<()> {
    c.set_read_timeout(Some(Duration::from_secs(30)))?;
    let mut r = BufReader::new(c.try_clone()?);
    // A sender killed before its request was whole (the kill -9 loop's daemon) sent no
    // request: nothing is recorded for a connection that ends before its headers do.
    let cut = || std::io::Error::from(std::io::ErrorKind::UnexpectedEof);
    let mut line = String::new();
    if r.read_line(&mut line)? == 0 {
        return Err(cut());
    }
    let path = line.split(' ').nth(1).unwrap_or("").to_string();
    let mut headers = BTreeMap::new();
    loop {
        let mut h = String::new();
        if r.read_line(&mut h)? == 0 {
            return Err(cut());
        }
        let h = h.trim_end();
        if h.is_empty() {
            break;
        }
        if let Some((k, v)) = h.split_once(':') {
            headers.insert(k.trim().to_ascii_lowercase(), v.trim().to_string());
        }
    }
    let n: usize = headers
        .get("content-length")
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    let mut body = vec![0; n];
    r.read_exact(&mut body)?;
    let answer = script.lock().unwrap().pop_front().unwrap_or(then);
    seen.lock().unwrap().push(Received {
        path,
        headers,
        body,
        answered: answer,
    });
    let mut c = c;
    match answer {
        Answer::Ok => c.write_all(
            b"HTTP/1.1 204 No Content\r\nConnection: close\r\n\r\n",
        )?,
        Answer::Fail500 => c.write_all(
            b"HTTP/1.1 500 Internal Server Error\r\nContent-Length: 9\r\nConnection: close\r\n\r\nboom boom",
        )?,
        Answer::Hang(d) => std::thread::sleep(d),
        Answer::Redirect => c.write_all(
            b"HTTP/1.1 302 Found\r\nLocation: http://127.0.0.1:1/elsewhere\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
        )?,
        Answer::CloseMidBody => c.write_all(
            b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\nConnection: close\r\n\r\nhello",
        )?,
    }
    let _ = c.shutdown(std::net::Shutdown::Both);
    Ok(())
}

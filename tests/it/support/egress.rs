//! What the dependency tests need of this machine's registries, learned at run time and never
//! written down: a recording `CONNECT` proxy on loopback that forwards every tunnel and notes
//! its `host:port`. Running a tool of the host (cargo, pip) through it with its own
//! configuration tells which destinations that tool reaches for a lockfile: exactly what an
//! `[egress] allow` must list for the same fetch in the sandbox.

use std::collections::BTreeSet;
use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Mutex};

/// A recording proxy; every destination tunnelled through it so far.
pub struct Recorder {
    pub port: u16,
    seen: Arc<Mutex<BTreeSet<String>>>,
}

impl Recorder {
    pub fn start() -> Recorder {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let seen: Arc<Mutex<BTreeSet<String>>> = Arc::default();
        let noted = seen.clone();
        std::thread::spawn(move || {
            for client in listener.incoming().flatten() {
                let noted = noted.clone();
                std::thread::spawn(move || tunnel(client, &noted));
            }
        });
        Recorder { port, seen }
    }

    /// `http://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// Every `host:port` tunnelled so far.
    pub fn seen(&self) -> Vec<String> {
        self.seen.lock().unwrap().iter().cloned().collect()
    }

    /// The `[egress]` table allowing what was seen.
    pub fn egress_toml(&self) -> String {
        let list: Vec<String> = self.seen().iter().map(|h| format!("{h:?}")).collect();
        assert!(
            !list.is_empty(),
            "the host's tool reached no registry through the recorder"
        );
        format!("[egress]\nallow = [{}]\n", list.join(", "))
    }
}

fn tunnel(client: TcpStream, seen: &Mutex<BTreeSet<String>>) {
    let mut reader = BufReader::new(client.try_clone().unwrap());
    let mut first = String::new();
    if reader.read_line(&mut first).is_err() {
        return;
    }
    loop {
        let mut l = String::new();
        if reader.read_line(&mut l).unwrap_or(0) == 0 || l == "\r\n" || l == "\n" {
            break;
        }
    }
    let mut parts = first.split_whitespace();
    let (method, target) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
    let mut client = client;
    if method != "CONNECT" {
        let _ = client.write_all(b"HTTP/1.1 405 Method Not Allowed\r\nconnection: close\r\n\r\n");
        return;
    }
    let Ok(upstream) = TcpStream::connect(target) else {
        let _ = client.write_all(b"HTTP/1.1 502 Bad Gateway\r\nconnection: close\r\n\r\n");
        return;
    };
    seen.lock().unwrap().insert(target.to_ascii_lowercase());
    let _ = client.write_all(b"HTTP/1.1 200 Connection Established\r\n\r\n");
    let (mut c2, mut u2) = (client.try_clone().unwrap(), upstream.try_clone().unwrap());
    let mut c = client;
    let mut u = upstream;
    let a = std::thread::spawn(move || {
        let _ = std::io::copy(&mut c2, &mut u2);
        let _ = u2.shutdown(std::net::Shutdown::Write);
    });
    let _ = std::io::copy(&mut u, &mut c);
    let _ = c.shutdown(std::net::Shutdown::Write);
    let _ = a.join();
}

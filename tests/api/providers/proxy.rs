//! A TCP proxy in front of a stand-in that resets connections as scripted: for a request to
//! the withdrawal path whose scripted fault is [`Fault::ResetBefore`], it reads the request and
//! closes the connection with nothing forwarded; for [`Fault::ResetAfterAccepting`], it
//! forwards the request, lets the stand-in answer (and so make the withdrawal), and closes
//! the connection without passing the answer on. Everything else is piped through.

use std::{
    io::{Read, Write},
    net::{Shutdown, TcpListener, TcpStream},
    time::Duration,
};

use super::model::{Fault, Shared};

pub(crate) struct Proxy {
    url: String,
}

impl Proxy {
    /// A proxy to `upstream` (`http://host:port`) for requests to `withdraw_path`.
    pub(crate) fn start(upstream: &str, account: Shared, withdraw_path: &'static str) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").expect("listener");
        let url = format!("http://{}", listener.local_addr().expect("address"));
        let upstream = upstream
            .strip_prefix("http://")
            .expect("an http upstream")
            .to_owned();
        std::thread::spawn(move || {
            for client in listener.incoming() {
                let Ok(client) = client else { continue };
                let (upstream, account) = (upstream.clone(), account.clone());
                std::thread::spawn(move || serve(client, &upstream, &account, withdraw_path));
            }
        });
        Proxy { url }
    }

    pub(crate) fn url(&self) -> String {
        self.url.clone()
    }
}

/// Reads one whole request (head and `Content-Length` body); `None` when the client left.
fn read_request(stream: &mut TcpStream) -> Option<Vec<u8>> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&buf[..end]).to_ascii_lowercase();
            let length: usize = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .and_then(|v| v.trim().parse().ok())
                .unwrap_or(0);
            if buf.len() >= end + 4 + length {
                return Some(buf);
            }
        }
        match stream.read(&mut chunk) {
            Ok(0) | Err(_) => return None,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
}

fn serve(mut client: TcpStream, upstream: &str, account: &Shared, withdraw_path: &str) {
    let Some(request) = read_request(&mut client) else {
        return;
    };
    let first_line = String::from_utf8_lossy(&request[..request.len().min(200)]).into_owned();
    let to_withdraw = first_line
        .split_whitespace()
        .nth(1)
        .is_some_and(|target| target.split('?').next() == Some(withdraw_path));
    let reset = if to_withdraw {
        let mut account = account.lock();
        match account.script.front() {
            Some(Fault::ResetBefore) => {
                account.script.pop_front();
                // Counted as a request the exchange never saw whole.
                Some(false)
            }
            // Left in the script: the stand-in makes the withdrawal on reading it.
            Some(Fault::ResetAfterAccepting) => Some(true),
            _ => None,
        }
    } else {
        None
    };
    if reset == Some(false) {
        client.shutdown(Shutdown::Both).ok();
        return;
    }
    let Ok(mut server) = TcpStream::connect(upstream) else {
        return;
    };
    server.set_read_timeout(Some(Duration::from_secs(30))).ok();
    if server.write_all(&request).is_err() {
        return;
    }
    let mut answer = Vec::new();
    let mut chunk = [0u8; 8192];
    loop {
        match server.read(&mut chunk) {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                answer.extend_from_slice(&chunk[..n]);
                if reset == Some(true) {
                    // The withdrawal is made: the answer never reaches the client.
                    client.shutdown(Shutdown::Both).ok();
                    return;
                }
                if complete(&answer) {
                    break;
                }
            }
        }
    }
    client.write_all(&answer).ok();
    client.shutdown(Shutdown::Both).ok();
}

/// Whether a response with a `Content-Length` has all arrived.
fn complete(answer: &[u8]) -> bool {
    let Some(end) = answer.windows(4).position(|w| w == b"\r\n\r\n") else {
        return false;
    };
    let head = String::from_utf8_lossy(&answer[..end]).to_ascii_lowercase();
    head.lines()
        .find_map(|l| l.strip_prefix("content-length:"))
        .and_then(|v| v.trim().parse::<usize>().ok())
        .is_some_and(|length| answer.len() >= end + 4 + length)
}

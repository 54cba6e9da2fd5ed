//! A real HTTP/1.1 server on 127.0.0.1 that serves server-sent events piece by piece,
//! can cut the connection part-way, and reports when the client closes it.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio::sync::mpsc;

/// What one connection is answered with.
#[derive(Clone, Debug)]
pub(crate) struct Reply {
    pub(crate) status: u16,
    /// Each written (and flushed) separately, `gap` apart.
    pub(crate) pieces: Vec<String>,
    pub(crate) gap: Duration,
    /// Close after the pieces (a cut); otherwise wait for the client to close.
    pub(crate) close: bool,
}

impl Reply {
    pub(crate) fn events(pieces: Vec<String>) -> Self {
        Self {
            status: 200,
            pieces,
            gap: Duration::from_millis(2),
            close: true,
        }
    }
}

/// The server: the replies, one per connection in order (the last repeats), the
/// request bodies it received, and a message per connection the client closed early.
pub(crate) struct SseServer {
    pub(crate) url: String,
    pub(crate) bodies: Arc<Mutex<Vec<Value>>>,
    pub(crate) closed: mpsc::UnboundedReceiver<()>,
}

/// One `data:` event.
pub(crate) fn data(v: &Value) -> String {
    format!("data: {v}\n\n")
}

/// A named event (Anthropic's framing).
pub(crate) fn named(name: &str, v: &Value) -> String {
    format!("event: {name}\ndata: {v}\n\n")
}

pub(crate) async fn start(replies: Vec<Reply>) -> SseServer {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let bodies = Arc::new(Mutex::new(Vec::new()));
    let (tx, closed) = mpsc::unbounded_channel();
    let seen = bodies.clone();
    tokio::spawn(async move {
        let mut n = 0;
        loop {
            let Ok((mut sock, _)) = listener.accept().await else {
                return;
            };
            let reply = replies[n.min(replies.len() - 1)].clone();
            n += 1;
            let (seen, tx) = (seen.clone(), tx.clone());
            tokio::spawn(async move {
                let body = read_request(&mut sock).await;
                seen.lock()
                    .unwrap()
                    .push(serde_json::from_slice(&body).unwrap_or(Value::Null));
                let head = format!(
                    "HTTP/1.1 {} X\r\ncontent-type: text/event-stream\r\ncache-control: no-cache\r\nconnection: close\r\n\r\n",
                    reply.status
                );
                if sock.write_all(head.as_bytes()).await.is_err() {
                    return;
                }
                for piece in &reply.pieces {
                    tokio::time::sleep(reply.gap).await;
                    if sock.write_all(piece.as_bytes()).await.is_err()
                        || sock.flush().await.is_err()
                    {
                        let _ = tx.send(());
                        return;
                    }
                }
                if reply.close {
                    return;
                }
                // Wait for the client to close its side.
                let mut buf = [0u8; 64];
                loop {
                    match sock.read(&mut buf).await {
                        Ok(0) | Err(_) => {
                            let _ = tx.send(());
                            return;
                        }
                        Ok(_) => {}
                    }
                }
            });
        }
    });
    SseServer {
        url,
        bodies,
        closed,
    }
}

/// Reads the request head and its `content-length` body.
async fn read_request(sock: &mut tokio::net::TcpStream) -> Vec<u8> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 8192];
    loop {
        let n = sock.read(&mut chunk).await.unwrap_or(0);
        if n == 0 {
            return Vec::new();
        }
        buf.extend_from_slice(&chunk[..n]);
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&buf[..end]).to_ascii_lowercase();
            let len: usize = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .map_or(0, |v| v.trim().parse().unwrap());
            let start = end + 4;
            while buf.len() < start + len {
                let n = sock.read(&mut chunk).await.unwrap_or(0);
                if n == 0 {
                    break;
                }
                buf.extend_from_slice(&chunk[..n]);
            }
            return buf[start..(start + len).min(buf.len())].to_vec();
        }
    }
}

//! Test servers: a wiremock server answering POSTs to one path, and one wiremock cannot
//! play, that cuts its response body short.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use wiremock::matchers::{method, path as path_is};
use wiremock::{Mock, MockServer, ResponseTemplate};

/// A wiremock server on 127.0.0.1 that answers every `POST` to `path` with `template`
/// (and anything else with 404).
pub(crate) async fn mock_post(path: &str, template: ResponseTemplate) -> MockServer {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path_is(path))
        .respond_with(template)
        .mount(&server)
        .await;
    server
}

/// A server on 127.0.0.1 that reads each request whole, then answers 200 with a
/// `Content-Length` of 500 but only the first bytes of a JSON body, and closes the
/// connection. Returns its base URL and a count of the requests it answered.
pub(crate) async fn truncating_server() -> (String, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let count = Arc::new(AtomicUsize::new(0));
    let seen = count.clone();
    tokio::spawn(async move {
        // Bounded: a test makes at most a handful of requests.
        for _ in 0..16 {
            let Ok((mut sock, _)) = listener.accept().await else {
                return;
            };
            read_request(&mut sock).await;
            seen.fetch_add(1, Ordering::SeqCst);
            let head = "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 500\r\nconnection: close\r\n\r\n";
            let _ = sock.write_all(head.as_bytes()).await;
            let _ = sock
                .write_all(br#"{"choices": [{"message": {"role": "assis"#)
                .await;
            let _ = sock.shutdown().await;
        }
    });
    (format!("http://{addr}"), count)
}

/// Reads one request from `sock`: its head, and a body of its `Content-Length`.
pub(crate) async fn read_request(sock: &mut tokio::net::TcpStream) {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 8192];
    loop {
        let Ok(n) = sock.read(&mut chunk).await else {
            return;
        };
        if n == 0 {
            return;
        }
        buf.extend_from_slice(&chunk[..n]);
        if let Some(end) = find(&buf, b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&buf[..end]).to_ascii_lowercase();
            let len = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .and_then(|v| v.trim().parse::<usize>().ok())
                .unwrap_or(0);
            if buf.len() >= end + 4 + len {
                return;
            }
        }
    }
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

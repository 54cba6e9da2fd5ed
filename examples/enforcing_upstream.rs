//! A fake Anthropic provider on 127.0.0.1 that enforces preserved thinking as the
//! provider's binding models do: each thinking block it emits is signed over the request
//! it answers, and a later request whose history changed before a block is refused with
//! the provider's 400 (`context_management` is checked and reported too). The upstream
//! of the thinking-model tests, for scripts and by hand:
//!
//! ```sh
//! cargo run --example enforcing_upstream -- 127.0.0.1:9300
//! ANTHROPIC_BASE_URL=http://127.0.0.1:9300 ANTHROPIC_API_KEY=unused llm-context serve
//! ```
//!
//! It answers every request by calling the first tool declared (with a signed thinking
//! block first when thinking is on), or with text when none is. The rules it enforces are
//! in `tests/it/support/enforcing.rs`, which the integration tests start in-process.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

#[allow(dead_code)]
#[path = "../tests/it/support/enforcing.rs"]
mod enforcing;

#[tokio::main]
async fn main() -> std::io::Result<()> {
    let addr: SocketAddr = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "127.0.0.1:9300".to_owned())
        .parse()
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))?;
    let listener = tokio::net::TcpListener::bind(addr).await?;
    let seen = Arc::new(Mutex::new(enforcing::Seen::default()));
    eprintln!("enforcing upstream on http://{addr}");
    axum::serve(listener, enforcing::router(seen)).await
}

//! A fake Anthropic provider on 127.0.0.1 that enforces preserved thinking as the
//! provider's binding models do: each thinking block it emits is signed over the request
//! it answers, and a later request whose history changed before a block is refused with
//! the provider's 400 (`context_management` is checked and reported too). The upstream
//! of the thinking-model tests, for scripts and by hand:
//!
//! ```sh
//! cargo run --example enforcing_upstream -- 127.0.0.1:9300 [--rounds 3]
//! ANTHROPIC_BASE_URL=http://127.0.0.1:9300 ANTHROPIC_API_KEY=unused llm-context serve
//! ```
//!
//! It answers every request by calling a tool (`Bash` with `echo step n` when declared,
//! else the first; with a signed thinking block first when thinking is on), or with text
//! when none is declared or, with `--rounds N`, once the request carries N tool results.
//! `GET /seen` says how many requests it answered and what it refused. The rules it enforces are
//! in `tests/it/support/enforcing.rs`, which the integration tests start in-process.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

#[allow(dead_code)]
#[path = "../tests/it/support/enforcing.rs"]
mod enforcing;

#[tokio::main]
async fn main() -> std::io::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let invalid = |e: String| std::io::Error::new(std::io::ErrorKind::InvalidInput, e);
    // `[ADDR] [--rounds N]`: with `--rounds`, the loop ends (a text answer) once a
    // request carries N tool results, so a real agent's run finishes.
    let mut addr = "127.0.0.1:9300".to_owned();
    let mut rounds = None;
    let mut rest = args.iter();
    while let Some(arg) = rest.next() {
        match arg.as_str() {
            "--rounds" => {
                let n = rest
                    .next()
                    .ok_or_else(|| invalid("--rounds takes N".into()))?;
                rounds = Some(n.parse().map_err(|e| invalid(format!("--rounds: {e}")))?);
            }
            other => other.clone_into(&mut addr),
        }
    }
    let addr: SocketAddr = addr.parse().map_err(|e| invalid(format!("{addr}: {e}")))?;
    let listener = tokio::net::TcpListener::bind(addr).await?;
    let seen = Arc::new(Mutex::new(enforcing::Seen::default()));
    eprintln!("enforcing upstream on http://{}", listener.local_addr()?);
    axum::serve(listener, enforcing::router_ending_after(seen, rounds)).await
}

//! `llm-context serve` as a child process: started, ready, stopped.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// `llm-context serve` (the binary `exe`) over the OpenAI-compatible `upstream`, with
/// `args`, listening on `port` of loopback (or of every address); once it answers
/// `/healthz`, its child and base URL.
pub(crate) async fn spawn(exe: &str, upstream: &str, args: &[&str], port: u16) -> (Child, String) {
    let mut child = Command::new(exe)
        .arg("serve")
        .args(args)
        .env_remove("ANTHROPIC_API_KEY")
        .env("OPENAI_BASE_URL", format!("{upstream}/v1"))
        .env("OPENAI_API_KEY", "sk-upstream")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let url = format!("http://127.0.0.1:{port}");
    for _ in 0..200 {
        if reqwest::get(format!("{url}/healthz")).await.is_ok() {
            return (child, url);
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    let _ = child.kill();
    let _ = child.wait();
    panic!("the server did not start");
}

pub(crate) fn terminate(child: &Child) {
    let status = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
}

/// Waits for the child to exit, at most `limit`.
pub(crate) async fn exited(child: &mut Child, limit: Duration) -> std::process::ExitStatus {
    let start = Instant::now();
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        assert!(
            start.elapsed() < limit,
            "the server did not exit within {limit:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

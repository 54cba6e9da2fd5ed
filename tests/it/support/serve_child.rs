//! `llm-context serve` as a child process: started, ready, stopped.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// `llm-context serve` (the binary `exe`) over the OpenAI-compatible `upstream`, with
/// `args`, listening on `port` of loopback (or of every address); once it answers
/// `/healthz`, its child and base URL.
pub(crate) async fn spawn(exe: &str, upstream: &str, args: &[&str], port: u16) -> (Child, String) {
    // To a file, not a pipe nobody reads: what the server said is shown if it fails.
    let log = tempfile::NamedTempFile::new().unwrap();
    let mut child = Command::new(exe)
        .arg("serve")
        .args(args)
        .env_remove("ANTHROPIC_API_KEY")
        .env("OPENAI_BASE_URL", format!("{upstream}/v1"))
        .env("OPENAI_API_KEY", "sk-upstream")
        .stdout(Stdio::null())
        .stderr(log.reopen().unwrap())
        .spawn()
        .unwrap();
    let url = format!("http://127.0.0.1:{port}");
    // Generous: on two cores under the whole suite a start can take seconds.
    let deadline = Instant::now() + Duration::from_secs(20);
    while Instant::now() < deadline {
        if reqwest::get(format!("{url}/healthz")).await.is_ok() {
            return (child, url);
        }
        if child.try_wait().unwrap().is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    let _ = child.kill();
    let status = child.wait().unwrap();
    let said = std::fs::read_to_string(log.path()).unwrap_or_default();
    panic!("the server did not start ({status}); it said:\n{said}");
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

//! Running the command-line tool as a child process, and feeding it its standard input.

use std::io::Write;
use std::process::{Child, Command, Output, Stdio};

/// The provider variables a test's environment may hold and the tool would read.
const PROVIDER_VARS: [&str; 7] = [
    "OPENAI_API_KEY",
    "OPENAI_BASE_URL",
    "OPENAI_ORG_ID",
    "OPENAI_PROJECT_ID",
    "ANTHROPIC_API_KEY",
    "ANTHROPIC_BASE_URL",
    "ANTHROPIC_AUTH_TOKEN",
];

/// Runs `exe` (the tool's binary, `env!("CARGO_BIN_EXE_llm-context")`) with `args`,
/// `stdin` as its input, and of the provider variables only those in `env`.
pub(crate) async fn run(
    exe: &'static str,
    args: Vec<String>,
    env: Vec<(&'static str, String)>,
    stdin: String,
) -> Output {
    tokio::task::spawn_blocking(move || {
        let mut cmd = Command::new(exe);
        cmd.args(&args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        for var in PROVIDER_VARS {
            cmd.env_remove(var);
        }
        for (k, v) in env {
            cmd.env(k, v);
        }
        let mut child = cmd.spawn().unwrap();
        feed(&mut child, stdin.as_bytes());
        child.wait_with_output().unwrap()
    })
    .await
    .unwrap()
}

/// Writes `input` to the child's standard input and closes it. A command that fails on
/// its arguments exits without reading its input, and the write then meets a closed
/// pipe: that is the command's answer, for the test to check, not a failure here.
pub(crate) fn feed(child: &mut Child, input: &[u8]) {
    let mut pipe = child.stdin.take().expect("stdin is piped");
    match pipe.write_all(input) {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => {}
        written => written.expect("writing the child's input"),
    }
}

//! The `llm-context` command-line contract (arguments, output, exit codes), through the
//! real binary.

// Only `feed` is used here.
#[allow(dead_code)]
use std::process::{Command, Output, Stdio};

use serde_json::{Value, json};

const BIN: &str = env!("CARGO_BIN_EXE_llm-context");
const FIXTURE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/incident.json");

fn run(args: &[&str], stdin: Option<&str>) -> Output {
    let mut child = Command::new(BIN)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the binary runs");
    crate::support::child::feed(&mut child, stdin.unwrap_or("").as_bytes());
    child.wait_with_output().unwrap()
}

fn temp_file(name: &str, contents: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("llm-context-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(name);
    std::fs::write(&path, contents).unwrap();
    path
}

use crate::support::stdout_json;

/// Asserts exit 0 and returns stdout as JSON.
fn ok_json(out: &Output) -> Value {
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout_json(out)
}

fn keys(v: &Value) -> Vec<&str> {
    let mut k: Vec<&str> = v.as_object().unwrap().keys().map(String::as_str).collect();
    k.sort_unstable();
    k
}

#[test]
fn json_output_has_the_contract_shape() {
    let policy = temp_file(
        "tight.json",
        r#"{"max_tokens": 3000, "reserve_tokens": 500}"#,
    );
    let out = run(
        &[
            "prepare",
            "--policy",
            policy.to_str().unwrap(),
            "--json",
            FIXTURE,
        ],
        None,
    );
    let v = ok_json(&out);
    assert_eq!(keys(&v), ["report", "request"]);
    let report = &v["report"];
    assert_eq!(
        keys(report),
        [
            "after_tokens",
            "before_tokens",
            "clear_moved",
            "cleared_observations",
            "cleared_results",
            "cut_moved",
            "executor",
            "offloaded_results",
            "prompt_allowance",
            "removed_messages"
        ]
    );
    assert_eq!(report["prompt_allowance"], 2_500);
    // A Chat Completions body on an OpenAI model: the stack's own steps.
    assert_eq!(report["executor"], "local");
    // One run has no previous request: pruning at all moves the start of the history.
    assert_eq!(report["cut_moved"], true);
    assert_eq!(report["clear_moved"], report["cleared_results"] != 0);
    // The count's name before 0.1.0 is written too, for the scripts that read it.
    assert_eq!(report["cleared_observations"], report["cleared_results"]);
    assert!(report["after_tokens"].as_u64().unwrap() <= 2_500);
    assert!(report["removed_messages"].as_u64().unwrap() > 0);
    // The prepared request is an OpenAI body again, with what was not touched intact.
    let input: Value = serde_json::from_str(&std::fs::read_to_string(FIXTURE).unwrap()).unwrap();
    let request = &v["request"];
    assert_eq!(request["model"], input["model"]);
    let tools = request["tools"].as_array().unwrap();
    assert_eq!(
        tools[..tools.len() - 1],
        input["tools"].as_array().unwrap()[..]
    );
    assert_eq!(request["temperature"], input["temperature"]);
    assert_eq!(
        request["messages"][0], input["messages"][0],
        "system message kept"
    );
    let sent = request["messages"].as_array().unwrap();
    let all = input["messages"].as_array().unwrap();
    assert_eq!(sent.last(), all.last());
    assert_eq!(
        report["removed_messages"].as_u64().unwrap() as usize,
        all.len() - sent.len()
    );
}

#[test]
fn a_request_that_fits_comes_back_unchanged() {
    let out = run(&["prepare", "--json", FIXTURE], None);
    assert_eq!(out.status.code(), Some(0));
    let v = stdout_json(&out);
    let mut input: Value =
        serde_json::from_str(&std::fs::read_to_string(FIXTURE).unwrap()).unwrap();
    // The request declares tools, so the stack's read tool follows them (in every request
    // of a session, so the tools a provider caches first never toggle); nothing else
    // changes.
    let tools = v["request"]["tools"].as_array().unwrap();
    assert_eq!(
        tools.last().unwrap()["function"]["name"],
        "read_context_artifact"
    );
    input["tools"]
        .as_array_mut()
        .unwrap()
        .push(tools.last().unwrap().clone());
    assert_eq!(v["request"], input);
    assert_eq!(v["report"]["removed_messages"], 0);
    let (before, after) = (
        v["report"]["before_tokens"].as_u64().unwrap(),
        v["report"]["after_tokens"].as_u64().unwrap(),
    );
    assert!(after > before && after < before + 100, "{before} {after}");
}

#[test]
fn stdin_and_toml_policies_work() {
    let policy = temp_file(
        "p.toml",
        "max_tokens = 3000\nreserve_tokens = 500\nclear_before_prune = true\n",
    );
    let body = std::fs::read_to_string(FIXTURE).unwrap();
    let out = run(
        &[
            "prepare",
            "--json",
            "--policy",
            policy.to_str().unwrap(),
            "-",
        ],
        Some(&body),
    );
    let v = ok_json(&out);
    assert!(v["report"]["cleared_observations"].as_u64().unwrap() > 0);
    // No argument reads stdin too.
    let out = run(&["prepare", "--json"], Some(&body));
    assert_eq!(out.status.code(), Some(0));
}

#[test]
fn context_limit_exits_3_with_the_error_object() {
    let body = json!({"model": "m", "messages": [{"role": "user", "content": "w".repeat(40_000)}]});
    let out = run(
        &["prepare", "--json", "--window", "4000"],
        Some(&body.to_string()),
    );
    assert_eq!(out.status.code(), Some(3));
    let v = stdout_json(&out);
    assert_eq!(keys(&v), ["allowance", "error", "message", "needed_tokens"]);
    assert_eq!(v["error"], "context_limit");
    assert_eq!(v["allowance"], 4_000 - 2_048);
    assert_eq!(v["needed_tokens"], 4 + 10_000);
    assert!(
        v["message"]
            .as_str()
            .unwrap()
            .contains("current turn 10004")
    );
    // The human form says the same, also with exit 3.
    let out = run(&["prepare", "--window", "4000"], Some(&body.to_string()));
    assert_eq!(out.status.code(), Some(3));
    assert!(String::from_utf8_lossy(&out.stdout).contains("context limit"));
}

fn assert_bad_input(out: &Output, mentions: &str) {
    assert_eq!(out.status.code(), Some(2));
    assert!(out.stdout.is_empty(), "nothing on stdout");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.trim_end().lines().count(), 1, "one line: {err}");
    assert!(
        err.contains(mentions),
        "{err:?} should mention {mentions:?}"
    );
}

#[test]
fn bad_input_exits_2_with_one_line() {
    assert_bad_input(
        &run(&["prepare", "--json"], Some("{not json")),
        "not valid JSON",
    );
    assert_bad_input(
        &run(&["prepare", "--json"], Some(r#"{"model": "m"}"#)),
        "messages",
    );
    assert_bad_input(
        &run(
            &["prepare"],
            Some(r#"{"model": "m", "messages": [{"role": "wizard"}]}"#),
        ),
        "messages[0].role",
    );
    let policy = temp_file("bad.toml", "max_tokenz = 5\n");
    assert_bad_input(
        &run(
            &["prepare", "--policy", policy.to_str().unwrap()],
            Some("{}"),
        ),
        "max_tokenz",
    );
    let policy = temp_file("bad.json", r#"{"preserve_recent": 0}"#);
    assert_bad_input(
        &run(
            &["prepare", "--policy", policy.to_str().unwrap()],
            Some("{}"),
        ),
        "preserve_recent",
    );
    assert_bad_input(
        &run(&["prepare", "--window", "100"], Some("{}")),
        "context_window",
    );
    assert_bad_input(
        &run(&["prepare", "/nonexistent/request.json"], None),
        "cannot read",
    );
}

#[test]
fn human_report_draws_the_window() {
    let out = run(&["prepare", "--window", "4000", FIXTURE], None);
    assert_eq!(out.status.code(), Some(0));
    let text = String::from_utf8(out.stdout).unwrap();
    let bar = text
        .lines()
        .find(|l| l.trim_start().starts_with('['))
        .expect("a window bar");
    assert!(bar.contains('=') && bar.contains('R'), "{bar}");
    assert!(text.contains("allowance 1,952"), "{text}");
    assert!(text.contains("removed "), "{text}");
}

#[test]
fn without_window_the_picture_uses_the_models_window() {
    // The fixture's model is in the built-in catalog: the layer plans for its window, and
    // the picture must draw that window, not the 32,000 fallback.
    let out = run(&["prepare", FIXTURE], None);
    assert_eq!(out.status.code(), Some(0));
    let text = String::from_utf8(out.stdout).unwrap();
    let window = llm_context::Catalog::builtin()
        .context_window("gpt-5.4")
        .expect("gpt-5.4 is in the catalog");
    let allowance = window - llm_context::ContextPolicy::default().reserve_tokens;
    let thousands = |n: usize| {
        let s = n.to_string();
        let mut out = String::new();
        for (i, c) in s.chars().enumerate() {
            if i > 0 && (s.len() - i).is_multiple_of(3) {
                out.push(',');
            }
            out.push(c);
        }
        out
    };
    let line = format!(
        "window {} tokens = allowance {}",
        thousands(window),
        thousands(allowance)
    );
    assert!(text.contains(&line), "{line}\n{text}");
    let bar = text
        .lines()
        .find(|l| l.trim_start().starts_with('['))
        .expect("a window bar");
    assert!(
        bar.trim().len() <= 70,
        "the bar is the picture's width: {bar}"
    );
}

#[test]
fn large_results_are_offloaded_and_reported() {
    let body = json!({
        "model": "m",
        "messages": [
            {"role": "user", "content": "read it"},
            {"role": "assistant", "content": null, "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "fetch", "arguments": "{}"}}]},
            {"role": "tool", "tool_call_id": "c1", "content": "z".repeat(20_000),
             "observation": true, "x_meta": {"host": "db-1"}}
        ]
    });
    let out = run(&["prepare", "--json"], Some(&body.to_string()));
    let v = ok_json(&out);
    assert_eq!(v["report"]["offloaded_results"], 1);
    // The offloaded result keeps its own fields around the preview.
    let result = &v["request"]["messages"][2];
    assert_eq!(result["observation"], true);
    assert_eq!(result["x_meta"], body["messages"][2]["x_meta"]);
    assert_eq!(result["tool_call_id"], "c1");
    let preview: Value =
        serde_json::from_str(v["request"]["messages"][2]["content"].as_str().unwrap()).unwrap();
    assert_eq!(preview["original_chars"], 20_000);
    assert_eq!(preview["preview"].as_str().unwrap().len(), 6_000);
    // The read tool is offered in the OpenAI form.
    assert_eq!(
        v["request"]["tools"][0]["function"]["name"],
        "read_context_artifact"
    );
    // The other messages came back as they were sent.
    assert_eq!(v["request"]["messages"][1], body["messages"][1]);
}

#[test]
fn a_reader_that_goes_away_ends_the_command_quietly() {
    // `llm-context prepare --json … | head -c 10`: the pipe closes before the output is
    // written. `println!` panicked here (exit 101, a panic message on stderr).
    let mut child = Command::new(BIN)
        .args(["prepare", "--json", FIXTURE])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    drop(child.stdout.take()); // the reader is gone before the child writes
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "stderr: {stderr}");
    assert!(
        stderr.is_empty(),
        "a broken pipe is not an error to report: {stderr}"
    );
}

#[test]
fn a_failed_write_is_one_line_and_exit_1() {
    let full = match std::fs::OpenOptions::new().write(true).open("/dev/full") {
        Ok(f) => f,
        Err(e) => panic!("this test needs /dev/full (Linux): {e}"),
    };
    let out = Command::new(BIN)
        .args(["prepare", "--json", FIXTURE])
        .stdin(Stdio::null())
        .stdout(full)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "stderr: {stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(
        stderr.contains("cannot write to standard output"),
        "{stderr}"
    );
}

/// A conversation whose first two turns are long enough to be pruned at `--window 3000`
/// (with one recent turn kept), and whose last user message is `last`. Every message
/// carries its own `x_meta`.
fn pruned_body(first: &str, last: Value) -> Value {
    let mut last = last;
    last["x_meta"] = json!("last");
    json!({
        "model": "gpt-5.4",
        "messages": [
            {"role": "system", "content": "You are terse.", "x_meta": "system"},
            {"role": "user", "content": first, "x_meta": "first"},
            {"role": "assistant", "content": "x ".repeat(3_000), "x_meta": "first-reply"},
            {"role": "user", "content": "and then?", "x_meta": "middle"},
            {"role": "assistant", "content": "y ".repeat(3_000), "x_meta": "middle-reply"},
            last,
        ]
    })
}

fn prepared_messages(body: &Value) -> Vec<Value> {
    let policy = temp_file("one-recent.json", r#"{"preserve_recent": 1}"#);
    let out = run(
        &[
            "prepare",
            "--json",
            "--window",
            "3000",
            "--policy",
            policy.to_str().unwrap(),
            "-",
        ],
        Some(&body.to_string()),
    );
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let v = stdout_json(&out);
    assert_eq!(v["report"]["removed_messages"], 4, "{v}");
    v["request"]["messages"].as_array().unwrap().clone()
}

#[test]
fn a_user_message_quoting_a_preview_keeps_its_own_fields() {
    // The stack rewrites only tool results: a user message that reads exactly like a
    // preview is not a rewrite of an earlier (pruned) user message. It took "first"'s
    // `x_meta` before.
    let quoted = format!(
        "{{\"context_artifact\":\"art_{}\",\"preview\":\"what is this?\",\
         \"preview_truncated\":false,\"original_chars\":13,\"stored_chars\":13,\
         \"artifact_truncated\":false,\"instructions\":{}}}",
        "0".repeat(64),
        Value::from(llm_context::artifact::OFFLOAD_INSTRUCTIONS)
    );
    assert!(llm_context::artifact::is_preview(&quoted));
    let body = pruned_body("hello", json!({"role": "user", "content": quoted}));
    let sent = prepared_messages(&body);
    assert_eq!(sent.len(), 2, "{sent:?}");
    assert_eq!(sent[1]["x_meta"], "last", "{}", sent[1]);
    assert_eq!(sent[1]["content"], body["messages"][5]["content"]);
}

#[test]
fn of_two_identical_messages_the_kept_one_keeps_its_fields() {
    // "continue" twice: the first is pruned with its turn, the second is kept. Matching
    // from the front gave the kept one the pruned one's fields.
    let body = pruned_body("continue", json!({"role": "user", "content": "continue"}));
    let sent = prepared_messages(&body);
    let metas: Vec<&Value> = sent.iter().map(|m| &m["x_meta"]).collect();
    assert_eq!(metas, [&json!("system"), &json!("last")]);
}

/// An OpenAI body left by an interrupted agent: call `c2` has no result, and a result
/// answers a call that is not there.
fn broken_pairing_body() -> Value {
    json!({
        "model": "gpt-5.4",
        "messages": [
            {"role": "user", "content": "why is checkout failing?"},
            {"role": "assistant", "content": null, "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "grep", "arguments": "{}"}},
                {"id": "c2", "type": "function", "function": {"name": "grep", "arguments": "{}"}}
            ]},
            {"role": "tool", "tool_call_id": "c1", "content": "503 from payments", "x_meta": 1},
            {"role": "user", "content": "still there?"},
            {"role": "tool", "tool_call_id": "gone", "content": "orphan"}
        ]
    })
}

#[test]
fn broken_tool_pairing_is_repaired_and_reported() {
    let out = run(
        &["prepare", "--json", "-"],
        Some(&broken_pairing_body().to_string()),
    );
    let v = ok_json(&out);
    assert_eq!(v["report"]["repaired"], 2, "{}", v["report"]);
    let sent = v["request"]["messages"].as_array().unwrap();
    let shape: Vec<(&str, &str)> = sent
        .iter()
        .map(|m| {
            (
                m["role"].as_str().unwrap(),
                m["tool_call_id"].as_str().unwrap_or(""),
            )
        })
        .collect();
    assert_eq!(
        shape,
        [
            ("user", ""),
            ("assistant", ""),
            ("tool", "c1"),
            ("tool", "c2"),
            ("user", "")
        ]
    );
    assert_eq!(
        sent[2]["x_meta"], 1,
        "the real result is written as it came"
    );
    assert!(
        sent[3]["content"]
            .as_str()
            .unwrap()
            .starts_with("No result was recorded")
    );
}

#[test]
fn broken_tool_pairing_is_refused_when_repair_is_off() {
    let policy = temp_file("no-repair.toml", "repair_pairing = false\n");
    let out = run(
        &[
            "prepare",
            "--json",
            "--policy",
            policy.to_str().unwrap(),
            "-",
        ],
        Some(&broken_pairing_body().to_string()),
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(stderr.contains("`c2`"), "{stderr}");
    assert!(out.stdout.is_empty());
}

#[test]
fn a_body_that_is_not_utf8_is_bad_input_naming_the_byte() {
    // Latin-1 `é` (0xe9) where UTF-8 was expected, from a file and from stdin.
    let mut body = br#"{"model": "m", "messages": [{"role": "user", "content": "caf"#.to_vec();
    let at = body.len();
    body.extend_from_slice(b"\xe9\"}]}");
    let dir = std::env::temp_dir().join(format!("llm-context-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("latin1.json");
    std::fs::write(&path, &body).unwrap();
    let from_file = run(&["prepare", "--json", path.to_str().unwrap()], None);
    assert_bad_input(
        &from_file,
        &format!("is not UTF-8 (byte {at} is not valid)"),
    );
    let mut child = Command::new(BIN)
        .args(["prepare", "--json"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    crate::support::child::feed(&mut child, &body);
    let from_stdin = child.wait_with_output().unwrap();
    assert_bad_input(&from_stdin, "cannot read stdin: it is not UTF-8");
    std::fs::remove_file(&path).unwrap();
}

#[test]
fn an_input_over_the_size_limit_is_refused_before_it_is_read() {
    // A sparse file of 256 MiB + 1 byte: refused from its size, in one line, exit 2.
    let path = temp_file("huge.json", "");
    std::fs::OpenOptions::new()
        .write(true)
        .open(&path)
        .unwrap()
        .set_len(256 * 1024 * 1024 + 1)
        .unwrap();
    let out = run(&["prepare", "--json", path.to_str().unwrap()], None);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(stderr.contains("256 MiB limit"), "{stderr}");
    std::fs::remove_file(&path).unwrap();
}

/// The peak resident memory of `llm-context prepare --json` on `body`, in bytes: read from
/// `/proc` while the child is blocked writing its output to a pipe nobody reads yet, which
/// is after it has read, parsed and prepared everything.
fn prepare_peak(body: &str) -> u64 {
    use std::io::{Read, Write};
    let path = temp_file(&format!("peak-{}.json", body.len()), body);
    let mut child = Command::new(BIN)
        .args(["prepare", "--json", "--window", "1000000000"])
        .arg(&path)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let status = format!("/proc/{}/status", child.id());
    let hwm = || -> Option<u64> {
        let text = std::fs::read_to_string(&status).ok()?;
        let line = text.lines().find(|l| l.starts_with("VmHWM:"))?;
        Some(line.split_whitespace().nth(1)?.parse::<u64>().ok()? * 1024)
    };
    // Blocked on a full pipe: its state is sleeping and its output has begun.
    let mut stdout = child.stdout.take().unwrap();
    let mut first = [0u8; 1];
    stdout.read_exact(&mut first).unwrap();
    std::thread::sleep(std::time::Duration::from_millis(300));
    let peak = hwm().expect("the child is still running, blocked on its output");
    let mut rest = Vec::new();
    stdout.read_to_end(&mut rest).unwrap();
    assert!(child.wait().unwrap().success());
    std::io::sink().write_all(&rest).unwrap();
    std::fs::remove_file(&path).unwrap();
    peak
}

#[test]
fn memory_stays_within_a_few_times_the_input() {
    // Before: the body was held as text, as a JSON tree, as the model and as a second tree
    // of every message, then written as one string: 46× the input for tiny messages and
    // 5.6× for tool-heavy ones.
    let mut messages = vec![json!({"role": "system", "content": "You are an SRE agent."})];
    for i in 0..6_000 {
        let id = format!("call_{i}");
        let line = format!(
            "{{\"ts\":\"2026-11-30T12:{:02}:00Z\",\"msg\":\"réessai — 接続 {i}\"}}\n",
            i % 60
        );
        messages.push(json!({"role": "user", "content": format!("check host {i}")}));
        messages.push(json!({"role": "assistant", "content": null, "tool_calls": [
            {"id": id, "type": "function", "function": {"name": "logs", "arguments": "{\"lines\":40}"}}]}));
        messages.push(json!({"role": "tool", "tool_call_id": id, "content": line.repeat(if i % 8 == 0 { 120 } else { 25 })}));
        messages.push(json!({"role": "assistant", "content": "The retries are still failing."}));
    }
    let tool_heavy = json!({"model": "gpt-5.4", "messages": messages}).to_string();
    // The two shapes that cost most per input byte. One-line messages: 72 bytes of
    // `Message` and a 32-byte chunk each, beside a ~36-byte message of input (5.6× before
    // the `Message` shrank from 128 bytes).
    let tiny: Vec<Value> = (0..400_000)
        .map(|i| json!({"role": if i % 2 == 0 { "user" } else { "assistant" }, "content": format!("m{i}")}))
        .collect();
    let tiny = json!({"model": "gpt-5.4", "messages": tiny}).to_string();
    // Tool rounds whose arguments are a small object: 632 bytes of `Value` tree each
    // while arguments were a `Value` (5.6×).
    let mut rounds = vec![json!({"role": "user", "content": "Fix the build."})];
    for i in 0..150_000 {
        let id = format!("call_{i:06}");
        rounds.push(json!({"role": "assistant", "content": null, "tool_calls": [
            {"id": id, "type": "function", "function": {"name": "read_file",
             "arguments": json!({"path": format!("f{i}.rs")}).to_string()}}]}));
        rounds.push(json!({"role": "tool", "tool_call_id": id, "content": format!("ok {i}")}));
    }
    let rounds = json!({"model": "gpt-5.4", "messages": rounds}).to_string();
    // The process itself: a one-message body peaks at about 19 MB in a debug build.
    let constant = 24 << 20;
    for (what, body) in [
        ("tool-heavy", &tool_heavy),
        ("one-line messages", &tiny),
        ("tool rounds", &rounds),
    ] {
        let peak = prepare_peak(body);
        assert!(
            peak <= 4 * body.len() as u64 + constant,
            "{what}: {peak} bytes at peak for {} bytes in",
            body.len()
        );
    }
}

#[test]
fn results_past_the_artifact_bound_are_cleared_and_said_to_be_not_kept() {
    // Three 20,000-character results, 40,000 bytes of artifacts allowed: the oldest go as
    // stubs naming no artifact, and the report says so.
    let mut messages = vec![json!({"role": "user", "content": "read them"})];
    for i in 0..3 {
        let id = format!("c{i}");
        messages.push(json!({"role": "assistant", "content": null, "tool_calls": [
            {"id": id, "type": "function", "function": {"name": "fetch", "arguments": "{}"}}]}));
        messages.push(json!({"role": "tool", "tool_call_id": id,
            "content": format!("{i}").repeat(20_000)}));
    }
    let body = json!({"model": "m", "messages": messages}).to_string();
    let policy = temp_file(
        "artifact-bound.toml",
        "max_tokens = 1000000\nmax_artifact_bytes = 40000\n",
    );
    let out = run(
        &["prepare", "--policy", policy.to_str().unwrap()],
        Some(&body),
    );
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("not kept: 1 of the cleared results"),
        "{text}"
    );
    let out = run(
        &["prepare", "--policy", policy.to_str().unwrap(), "--json"],
        Some(&body),
    );
    let v = ok_json(&out);
    assert_eq!(v["report"]["offloaded_results"], 2);
    assert_eq!(v["report"]["cleared_observations"], 1);
    let stub: Value =
        serde_json::from_str(v["request"]["messages"][2]["content"].as_str().unwrap()).unwrap();
    assert_eq!(stub["context_cleared"], true);
    assert!(stub.get("context_artifact").is_none());
}

#[test]
fn audio_and_file_parts_are_read_and_written_as_they_came() {
    let audio = json!({"type": "input_audio",
                       "input_audio": {"data": "UklGRiQAAABXQVZFZm10IBAAAAABAAEAQB8AAEAfAAABAAgAZGF0YQAAAAA=", "format": "wav"}});
    let file = json!({"type": "file",
                      "file": {"filename": "a.pdf", "file_data": "data:application/pdf;base64,JVBERi0xLjQK"}});
    let body = json!({"model": "gpt-4o-audio-preview", "messages": [
        {"role": "user", "content": [{"type": "text", "text": "What is said, and in the PDF?"},
                                     audio, file]}]});
    let v = ok_json(&run(&["prepare", "--json"], Some(&body.to_string())));
    assert_eq!(v["request"]["messages"], body["messages"]);
    // Counted in the estimate: the same message without the two parts is smaller.
    let text_only = json!({"model": "gpt-4o-audio-preview", "messages": [
        {"role": "user", "content": [{"type": "text", "text": "What is said, and in the PDF?"}]}]});
    let smaller = ok_json(&run(&["prepare", "--json"], Some(&text_only.to_string())));
    let (with, without) = (
        v["report"]["before_tokens"].as_u64().unwrap(),
        smaller["report"]["before_tokens"].as_u64().unwrap(),
    );
    assert!(with > without + 30, "{with} {without}");
}

#[cfg(feature = "serve")]
#[test]
fn prepare_reads_and_writes_a_responses_body() {
    let long: String = (1..=3_000).map(|i| format!("{i}\n")).collect();
    let body = json!({"model": "gpt-5.5-codex", "instructions": "Be brief.", "store": false,
        "input": [
            {"type": "message", "role": "user", "content": "Läuft der Build?"},
            {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "gAAA"},
            {"type": "function_call", "call_id": "c1", "name": "exec_command",
             "arguments": "{\"cmd\":\"seq 1 3000\"}"},
            {"type": "function_call_output", "call_id": "c1", "output": long}],
        "tools": [{"type": "function", "name": "exec_command", "description": "Runs.",
                   "strict": false, "parameters": {"type": "object", "properties": {}}}]})
    .to_string();
    let policy = temp_file("offload.toml", "tool_result_max_chars = 2000\n");
    let out = run(
        &["prepare", "--json", "--policy", policy.to_str().unwrap()],
        Some(&body),
    );
    let v = ok_json(&out);
    assert_eq!(v["report"]["offloaded_results"], 1);
    let sent = &v["request"];
    let sent_in: &Vec<Value> = sent["input"].as_array().unwrap();
    let input: Value = serde_json::from_str(&body).unwrap();
    // Every item as it came but the offloaded output, which keeps its item.
    for i in 0..3 {
        assert_eq!(sent_in[i], input["input"][i], "item {i}");
    }
    assert_eq!(sent_in[3]["call_id"], "c1");
    assert!(
        sent_in[3]["output"]
            .as_str()
            .unwrap()
            .contains("context_artifact")
    );
    assert_eq!(sent["instructions"], "Be brief.");
    assert_eq!(sent["store"], false);
    // A Responses body that is not one is bad input, naming where.
    let out = run(
        &["prepare", "--json"],
        Some(r#"{"model": "m", "input": [{"type": "function_call", "name": "x"}]}"#),
    );
    assert_bad_input(&out, "input[0].call_id");
}

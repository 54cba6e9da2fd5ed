//! The `llm-context simulate` contract (arguments, output, exit codes), through the real
//! binary.

use std::process::{Command, Output};

use serde_json::Value;

const BIN: &str = env!("CARGO_BIN_EXE_llm-context");
const TRANSCRIPT: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/fixtures/agent_transcript.json"
);

fn simulate(args: &[&str]) -> Output {
    Command::new(BIN)
        .arg("simulate")
        .args(args)
        .output()
        .expect("the binary runs")
}

/// Asserts exit 0 and returns stdout as JSON.
fn ok_json(args: &[&str]) -> Value {
    let out = simulate(&[args, &["--json"]].concat());
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "stdout is not JSON ({e}): {}",
            String::from_utf8_lossy(&out.stdout)
        )
    })
}

/// Asserts exit 2, nothing on stdout, and a message on stderr that contains every one of
/// `words`; returns the message.
fn bad_flag(args: &[&str], words: &[&str]) -> String {
    let out = simulate(args);
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
    assert!(out.stdout.is_empty(), "{args:?} printed to stdout");
    for word in words {
        assert!(
            stderr.contains(word),
            "{args:?}: {word:?} not in {stderr:?}"
        );
    }
    stderr
}

/// [`bad_flag`], in one line (the command's own errors; clap's name the flag with a
/// usage line after it).
fn bad_input(args: &[&str], words: &[&str]) {
    let stderr = bad_flag(args, words);
    assert_eq!(stderr.trim_end().lines().count(), 1, "one line: {stderr}");
}

fn keys(v: &Value) -> Vec<&str> {
    let mut k: Vec<&str> = v.as_object().unwrap().keys().map(String::as_str).collect();
    k.sort_unstable();
    k
}

/// The policies' names, in order.
fn names(v: &Value) -> Vec<&str> {
    v["policies"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["name"].as_str().unwrap())
        .collect()
}

/// The policy named `name`.
fn policy<'a>(v: &'a Value, name: &str) -> &'a Value {
    v["policies"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == name)
        .unwrap_or_else(|| panic!("no policy {name} in {v}"))
}

fn temp_file(name: &str, contents: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("llm-context-simulate-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(name);
    std::fs::write(&path, contents).unwrap();
    path
}

#[test]
fn json_output_has_the_contract_shape() {
    let v = ok_json(&["--turns", "3"]);
    assert_eq!(keys(&v), ["calls", "model", "policies", "turns"]);
    assert_eq!(v["model"], "claude-sonnet-4-6");
    assert_eq!(v["calls"], "per-turn");
    assert_eq!(v["turns"], 3);
    let names = names(&v);
    assert_eq!(names, ["minimal", "low_water_0.6", "no_breakpoints"]);
    for p in v["policies"].as_array().unwrap() {
        assert_eq!(
            keys(p),
            [
                "cache_read_share",
                "cache_read_tokens",
                "cache_write_tokens",
                "context_limit_errors",
                "cost_usd",
                "cut_moves",
                "input_tokens",
                "messages_lost",
                "name",
            ]
        );
        assert!(p["cost_usd"].as_f64().unwrap() > 0.0);
        assert!(p["input_tokens"].as_u64().unwrap() > 0);
    }
}

#[test]
fn the_builtin_comparison_shows_what_low_water_and_caching_are_worth() {
    let v = ok_json(&["--turns", "20"]);
    let minimal = policy(&v, "minimal");
    let low_water = policy(&v, "low_water_0.6");
    let uncached = policy(&v, "no_breakpoints");
    // 20 turns outgrow 100,000 tokens: both prune, the low-water one moves its cut less.
    assert!(minimal["cut_moves"].as_u64().unwrap() > 0);
    assert!(
        low_water["cut_moves"].as_u64().unwrap() < minimal["cut_moves"].as_u64().unwrap(),
        "{v}"
    );
    // Without breakpoints nothing is read, and every policy with them costs less.
    assert_eq!(uncached["cache_read_share"].as_f64(), Some(0.0));
    assert_eq!(uncached["cache_read_tokens"], 0);
    assert!(minimal["cache_read_share"].as_f64().unwrap() > 0.0);
    let cost = |p: &Value| p["cost_usd"].as_f64().unwrap();
    assert!(cost(uncached) > cost(minimal), "{v}");
    assert!(cost(uncached) > cost(low_water), "{v}");
    // The same prompts as minimal, only not cached.
    assert_eq!(uncached["input_tokens"], minimal["input_tokens"]);
    assert_eq!(uncached["messages_lost"], minimal["messages_lost"]);
}

#[test]
fn calls_per_round_send_more_than_per_turn() {
    let turn = ok_json(&["--turns", "6"]);
    let round = ok_json(&["--turns", "6", "--calls", "per-round"]);
    assert_eq!(round["calls"], "per-round");
    for name in ["minimal", "low_water_0.6", "no_breakpoints"] {
        let tokens = |v: &Value| policy(v, name)["input_tokens"].as_u64().unwrap();
        assert!(tokens(&round) > tokens(&turn), "{name}: {round} vs {turn}");
    }
}

#[test]
fn the_seed_decides_the_conversation() {
    let run = |seed: &str| simulate(&["--turns", "5", "--seed", seed, "--json"]).stdout;
    let one = run("11");
    assert!(!one.is_empty());
    assert_eq!(one, run("11"), "the same seed gives the same bytes");
    assert_ne!(one, run("12"));
}

#[test]
fn a_transcript_is_replayed() {
    let turn = ok_json(&["--transcript", TRANSCRIPT]);
    let round = ok_json(&["--transcript", TRANSCRIPT, "--calls", "per-round"]);
    // Three user turns in the fixture.
    assert_eq!(turn["turns"], 3);
    let minimal_turn = policy(&turn, "minimal");
    let minimal_round = policy(&round, "minimal");
    // Per round: 6 calls (before each assistant message) against 3; more prompt tokens,
    // and the later ones read the ~3,000-token system prompt written by the first.
    assert!(
        minimal_round["input_tokens"].as_u64().unwrap()
            > minimal_turn["input_tokens"].as_u64().unwrap()
    );
    assert!(minimal_round["cache_read_tokens"].as_u64().unwrap() > 3_000);
    // A small transcript: nothing is pruned.
    assert_eq!(minimal_round["messages_lost"], 0);
    assert_eq!(minimal_round["cut_moves"], 0);
}

#[test]
fn policy_files_are_named_by_their_stem() {
    let json = temp_file(
        "tight.json",
        r#"{"max_tokens": 40000, "reserve_tokens": 1000}"#,
    );
    let toml = temp_file("roomy.toml", "max_tokens = 200000\n");
    let v = ok_json(&[
        "--turns",
        "12",
        "--policy",
        json.to_str().unwrap(),
        "--policy",
        toml.to_str().unwrap(),
    ]);
    let names = names(&v);
    assert_eq!(names, ["tight", "roomy"]);
    // A 40,000-token ceiling loses messages a 200,000 one keeps.
    assert!(policy(&v, "tight")["messages_lost"].as_u64().unwrap() > 0);
    assert_eq!(policy(&v, "roomy")["messages_lost"], 0);
}

#[test]
fn openai_models_use_the_openai_cache() {
    let v = ok_json(&["--turns", "3", "--model", "gpt-5.4"]);
    assert_eq!(v["model"], "gpt-5.4");
    // Automatic caching: breakpoints or not, the same prefix is read.
    assert_eq!(
        policy(&v, "minimal")["cache_read_tokens"],
        policy(&v, "no_breakpoints")["cache_read_tokens"]
    );
    assert!(policy(&v, "minimal")["cache_read_tokens"].as_u64().unwrap() > 0);
}

#[test]
fn the_table_has_a_row_per_policy() {
    let out = simulate(&["--turns", "2"]);
    assert_eq!(out.status.code(), Some(0));
    let text = String::from_utf8(out.stdout).unwrap();
    for name in ["minimal", "low_water_0.6", "no_breakpoints"] {
        assert_eq!(
            text.lines().filter(|l| l.starts_with(name)).count(),
            1,
            "{text}"
        );
    }
}

#[test]
fn bad_input_exits_2_naming_the_problem() {
    bad_input(&["--model", "gpt-nonexistent"], &["gpt-nonexistent"]);
    bad_input(
        &["--policy", "/nonexistent/p.json"],
        &["/nonexistent/p.json"],
    );
    bad_input(
        &["--transcript", "/nonexistent/t.json"],
        &["/nonexistent/t.json"],
    );
    bad_flag(&["--calls", "sometimes"], &["--calls", "sometimes"]);
    let broken = temp_file("broken.json", "{\"max_tokens\": ");
    bad_input(&["--policy", broken.to_str().unwrap()], &["broken.json"]);
    let impossible = temp_file(
        "impossible.json",
        r#"{"max_tokens": 1000, "reserve_tokens": 5000}"#,
    );
    bad_input(
        &["--policy", impossible.to_str().unwrap()],
        &["impossible.json", "reserve_tokens"],
    );
    let not_a_body = temp_file("not_a_body.json", "[1, 2]");
    bad_input(&["--transcript", not_a_body.to_str().unwrap()], &[]);
    bad_flag(&["--transcript", TRANSCRIPT, "--turns", "5"], &["--turns"]);
}

#[test]
fn conversations_at_once_with_and_without_session_ids() {
    let named = ok_json(&["--turns", "15", "--conversations", "2"]);
    let unnamed = ok_json(&["--turns", "15", "--conversations", "2", "--no-session-ids"]);
    let one = ok_json(&["--turns", "15"]);
    assert_eq!(named["conversations"], 2);
    assert!(named.get("session_ids").is_none());
    assert_eq!(unnamed["session_ids"], false);
    // The contract's keys stay exactly these for one conversation.
    assert!(one.get("conversations").is_none());
    // The stack tells the conversations apart by their heads: the same figures.
    assert_eq!(named["policies"], unnamed["policies"]);
    // Two conversations cost more than one of them.
    let cost = |v: &Value| v["policies"][0]["cost_usd"].as_f64().unwrap();
    assert!(cost(&named) > cost(&one));
    bad_flag(&["--conversations", "0"], &["--conversations"]);
    bad_flag(
        &["--conversations", "2", "--transcript", TRANSCRIPT],
        &["--transcript"],
    );
}

#[test]
fn the_policies_readme_compares_are_valid_and_named_by_their_files() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/policies");
    let mut files: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path().display().to_string())
        .collect();
    files.sort();
    assert!(files.len() >= 6, "{files:?}");
    let mut args = vec!["--turns", "10"];
    for f in &files {
        args.extend(["--policy", f.as_str()]);
    }
    let v = ok_json(&args);
    let names = names(&v);
    assert!(names.contains(&"low_water_60k") && names.contains(&"tiny_lw50"));
    assert_eq!(names.len(), files.len());
}

#[test]
fn executors_run_side_by_side_and_a_delegated_run_is_billed_as_the_provider_clears() {
    let v = ok_json(&[
        "--turns",
        "30",
        "--calls",
        "per-round",
        "--model",
        "claude-fable-5-1",
        "--executor",
        "local,delegate",
        "--executor",
        "auto",
    ]);
    let names = names(&v);
    assert_eq!(names.len(), 9);
    assert_eq!(
        names[..3],
        ["minimal/local", "minimal/delegate", "minimal/auto"]
    );
    let local = policy(&v, "minimal/local");
    let delegate = policy(&v, "minimal/delegate");
    // The stack clears and prunes locally; the provider clears the delegated run's
    // results, so fewer messages are lost and fewer tokens are sent.
    assert_eq!(local["provider_cleared"], 0);
    assert!(
        delegate["provider_cleared"].as_u64().unwrap() > 0,
        "{delegate}"
    );
    assert!(delegate["messages_lost"].as_u64() < local["messages_lost"].as_u64());
    assert!(delegate["input_tokens"].as_u64() < local["input_tokens"].as_u64());
    // No thinking in the generated conversation: `auto` is the stack's own steps.
    assert_eq!(policy(&v, "minimal/auto")["cost_usd"], local["cost_usd"]);
    // Without --executor the contract's keys are unchanged.
    let plain = ok_json(&["--turns", "3"]);
    assert!(plain["policies"][0].get("provider_cleared").is_none());
    bad_flag(&["--executor", "remote"], &["--executor", "remote"]);
}

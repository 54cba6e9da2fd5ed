//! The ledger through `serve`: a 50-request Claude Code-shaped session against an upstream
//! that bills each request differently. The ledger's totals are the sums of the report
//! headers and of the upstream's usage; a request the stack edits is modelled, one that
//! went up unchanged is the provider's own usage.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use llm_context::ContextPolicy;
use llm_context::serve::Proxy;
use serde_json::{Value, json};
use wiremock::matchers::{method, path};
use wiremock::{Mock, MockServer, Request, Respond, ResponseTemplate};

use crate::support::proxy::{anthropic, json_of, metrics_text, serving};

/// Bills request `n` with `n`-dependent usage, so that no two rows are alike.
struct Billing(Arc<AtomicU64>);

impl Respond for Billing {
    fn respond(&self, request: &Request) -> ResponseTemplate {
        let n = self.0.fetch_add(1, Ordering::SeqCst);
        let prompt = request.body.len() as u64 / 4;
        let (read, written) = (prompt * (n % 3) / 4, prompt / 10);
        let usage = json!({
            "input_tokens": prompt - read - written,
            "cache_read_input_tokens": read,
            "cache_creation_input_tokens": written,
            "cache_creation": {"ephemeral_5m_input_tokens": written - n % 2, "ephemeral_1h_input_tokens": n % 2},
            "output_tokens": 20 + n,
        });
        let streamed = request.body.windows(13).any(|w| w == b"\"stream\":true");
        if streamed {
            let events = [
                json!({"type": "message_start", "message": {"id": "m", "type": "message", "role": "assistant", "model": "claude-sonnet-4-6", "content": [], "stop_reason": null, "usage": {"input_tokens": usage["input_tokens"], "cache_read_input_tokens": read, "cache_creation_input_tokens": written, "cache_creation": usage["cache_creation"], "output_tokens": 1}}}),
                json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
                json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "ok"}}),
                json!({"type": "content_block_stop", "index": 0}),
                json!({"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 20 + n}}),
                json!({"type": "message_stop"}),
            ];
            let body: String = events
                .iter()
                .map(|e| format!("event: {}\ndata: {e}\n\n", e["type"].as_str().unwrap()))
                .collect();
            return ResponseTemplate::new(200).set_body_raw(body, "text/event-stream");
        }
        ResponseTemplate::new(200).set_body_json(json!({
            "id": format!("msg_{n}"), "type": "message", "role": "assistant",
            "model": "claude-sonnet-4-6", "stop_reason": "end_turn",
            "content": [{"type": "text", "text": "ok"}], "usage": usage,
        }))
    }
}

async fn upstream() -> MockServer {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/v1/messages"))
        .respond_with(Billing(Arc::new(AtomicU64::new(0))))
        .mount(&server)
        .await;
    server
}

/// Round `r`: the assistant's call and its (large, growing) result.
fn round(r: usize) -> [Value; 2] {
    let id = format!("toolu_{r:03}");
    [
        json!({"role": "assistant", "content": [{"type": "tool_use", "id": id, "name": "Bash", "input": {"command": format!("cargo test {r}")}}]}),
        json!({"role": "user", "content": [{"type": "tool_result", "tool_use_id": id,
            "content": format!("test {r} … ok\n").repeat(200 + 10 * r)}]}),
    ]
}

/// The body Claude Code sends: its marker on the newest block.
fn body(messages: &[Value], stream: bool) -> String {
    let mut messages = messages.to_vec();
    if let Some(b) = messages
        .last_mut()
        .and_then(|m| m["content"].as_array_mut())
        .and_then(|b| b.last_mut())
    {
        b["cache_control"] = json!({"type": "ephemeral"});
    }
    json!({"model": "claude-sonnet-4-6", "max_tokens": 1024, "stream": stream, "messages": messages,
        "system": [{"type": "text", "text": "You are Claude Code. ".repeat(300), "cache_control": {"type": "ephemeral"}}],
        "tools": [{"name": "Bash", "description": "Runs a command.", "input_schema": {"type": "object"}}]})
    .to_string()
}

/// `policy` in front of `upstream`, served: its base URL.
async fn proxy(policy: ContextPolicy, upstream: &MockServer) -> String {
    let proxy = Proxy::builder()
        .policy(policy)
        .anthropic(anthropic(&upstream.uri()))
        .build()
        .unwrap();
    serving(proxy).await
}

fn header(answer: &reqwest::Response, name: &str) -> u64 {
    answer.headers()[name].to_str().unwrap().parse().unwrap()
}

#[tokio::test]
async fn the_ledgers_totals_are_the_sums_of_the_report_headers_and_of_the_upstreams_usage() {
    let upstream = upstream().await;
    // A window that the session outgrows half-way: old results are cleared from then on.
    let policy = ContextPolicy::default()
        .with_max_context_tokens(60_000)
        .with_reserve_tokens(4_000);
    let url = proxy(policy, &upstream).await;
    let client = reqwest::Client::new();
    let mut messages = vec![json!({"role": "user", "content": "Fix the failing tests."})];
    let (mut before, mut after, mut edited) = (0, 0, 0);
    for r in 0..50 {
        messages.extend(round(r));
        let answer = client
            .post(format!("{url}/v1/messages"))
            .header("anthropic-version", "2023-06-01")
            .header("x-llm-context-session", "fix-tests")
            .header("content-type", "application/json")
            .body(body(&messages, r % 10 == 9))
            .send()
            .await
            .unwrap();
        assert_eq!(answer.status(), 200);
        before += header(&answer, "x-llm-context-before-tokens");
        after += header(&answer, "x-llm-context-after-tokens");
        edited += header(&answer, "x-llm-context-cleared")
            + header(&answer, "x-llm-context-removed-messages");
        answer.bytes().await.unwrap();
    }
    assert!(edited > 0, "the window never forced an edit");

    // What the upstream billed, summed from what it answered.
    let (mut uncached, mut read, mut w5, mut w1, mut output) = (0, 0, 0, 0, 0);
    for (n, request) in upstream
        .received_requests()
        .await
        .unwrap()
        .iter()
        .enumerate()
    {
        let n = n as u64;
        let prompt = request.body.len() as u64 / 4;
        let (r, w) = (prompt * (n % 3) / 4, prompt / 10);
        uncached += prompt - r - w;
        read += r;
        w5 += w - n % 2;
        w1 += n % 2;
        output += 20 + n;
    }

    let overview = json_of(
        reqwest::get(format!("{url}/llm-context/ledger/sessions"))
            .await
            .unwrap(),
    )
    .await;
    let session = &overview["sessions"][0];
    assert_eq!(session["session"], "fix-tests");
    let totals = &session["totals"];
    assert_eq!(totals["requests"], 50);
    assert_eq!(totals["client_tokens"], before);
    assert_eq!(totals["sent_tokens"], after);
    let actual = &totals["actual"];
    assert_eq!(
        [
            &actual["uncached"],
            &actual["cache_read"],
            &actual["cache_write_5m"],
            &actual["cache_write_1h"],
            &actual["output"]
        ],
        [uncached, read, w5, w1, output]
            .map(|n| json!(n))
            .each_ref()
    );
    // Sonnet's prices: the actual cost is the buckets at them.
    let usd = (uncached as f64 * 3.0
        + read as f64 * 0.3
        + w5 as f64 * 3.75
        + w1 as f64 * 6.0
        + output as f64 * 15.0)
        / 1e6;
    let ledger_usd = totals["actual_usd"].as_f64().unwrap();
    assert!((ledger_usd - usd).abs() < 1e-9, "{ledger_usd} != {usd}");
    // The tenant's totals are the session's (it is the only one).
    assert_eq!(overview["tenants"][0]["totals"], *totals);

    // Row by row: the stack adds its read tool, so even the unedited head is modelled
    // (the first with nothing cached before it); the rest replayed.
    let one = json_of(
        reqwest::get(format!("{url}/llm-context/ledger/sessions/fix-tests"))
            .await
            .unwrap(),
    )
    .await;
    let rows = one["requests"].as_array().unwrap();
    assert_eq!(rows.len(), 50);
    assert_eq!(
        rows[0]["provenance"], "modelled: no history for the session",
        "{}",
        rows[0]
    );
    assert_eq!(rows[1]["provenance"], "modelled", "{}", rows[1]);
    let last = &rows[49];
    assert_ne!(last["provenance"], "observed");
    let prompt = |b: &Value| {
        ["uncached", "cache_read", "cache_write_5m", "cache_write_1h"]
            .iter()
            .map(|k| b[k].as_u64().unwrap())
            .sum::<u64>()
    };
    assert!(prompt(&last["passthrough"]) > prompt(&last["actual"]));
    // Streamed requests are billed by their final usage too.
    assert_eq!(rows[9]["actual"]["output"], 29);
    // An unknown session is 404, in JSON.
    let missing = reqwest::get(format!("{url}/llm-context/ledger/sessions/nope"))
        .await
        .unwrap();
    assert_eq!(missing.status(), 404);
    assert!(
        json_of(missing).await["error"]["message"]
            .as_str()
            .unwrap()
            .contains("nope")
    );
    let metrics = metrics_text(&url).await;
    assert!(
        metrics.contains("llm_context_ledger_write_failures_total 0"),
        "{metrics}"
    );
}

#[tokio::test]
async fn a_session_the_stack_leaves_alone_is_the_providers_own_usage() {
    let upstream = upstream().await;
    let policy = ContextPolicy::default().with_executor(llm_context::Executor::Off);
    let url = proxy(policy, &upstream).await;
    let mut messages = vec![json!({"role": "user", "content": "Fix the failing tests."})];
    for r in 0..3 {
        messages.extend(round(r));
        let answer = reqwest::Client::new()
            .post(format!("{url}/v1/messages"))
            .header("anthropic-version", "2023-06-01")
            .header("x-llm-context-session", "alone")
            .body(body(&messages, false))
            .send()
            .await
            .unwrap();
        assert_eq!(answer.status(), 200);
    }
    let one = json_of(
        reqwest::get(format!("{url}/llm-context/ledger/sessions/alone"))
            .await
            .unwrap(),
    )
    .await;
    for row in one["requests"].as_array().unwrap() {
        assert_eq!(row["provenance"], "observed", "{row}");
        assert_eq!(row["actual"], row["passthrough"]);
        assert_eq!(row["saving_usd"], 0.0);
    }
    assert_eq!(one["totals"]["provenance"], "observed");
    assert_eq!(one["costlier_than_passthrough"], false);
}

#[tokio::test]
async fn the_page_and_the_json_are_for_the_metrics_keys_bearer_and_a_long_session_is_shown_by_its_hash()
 {
    let upstream = upstream().await;
    let proxy = Proxy::builder()
        .anthropic(anthropic(&upstream.uri()))
        .metrics_key(llm_context::serve::key_digest("metrics-secret"))
        .build()
        .unwrap();
    let url = serving(proxy).await;
    let long = "s".repeat(100_000);
    let answer = reqwest::Client::new()
        .post(format!("{url}/v1/messages"))
        .header("anthropic-version", "2023-06-01")
        .header("x-llm-context-session", &long)
        .body(body(
            &[json!({"role": "user", "content": "<b>hi</b>"})],
            false,
        ))
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), 200);
    let client = reqwest::Client::new();
    for path in ["/ui", "/llm-context/ledger/sessions"] {
        let refused = client.get(format!("{url}{path}")).send().await.unwrap();
        assert_eq!(refused.status(), 403, "{path}");
    }
    let get = |path: String| {
        client
            .get(format!("{url}{path}"))
            .bearer_auth("metrics-secret")
            .send()
    };
    let overview = json_of(get("/llm-context/ledger/sessions".into()).await.unwrap()).await;
    let shown = overview["sessions"][0]["session"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(shown.starts_with("sha256:") && shown.len() == 71, "{shown}");
    let page = get("/ui".into()).await.unwrap();
    assert_eq!(page.status(), 200);
    assert_eq!(page.headers()["content-type"], "text/html; charset=utf-8");
    let page = page.text().await.unwrap();
    assert!(page.contains(&format!("data-session=\"{shown}\"")));
    assert!(!page.contains(&long[..1_000]));
    // The session's page, by the hash (a 100 KB id is longer than a URI may be).
    let one = get(format!("/ui/sessions/{shown}")).await.unwrap();
    assert_eq!(one.status(), 200);
    let text = one.text().await.unwrap();
    assert_eq!(text.matches("<tr class=\"request\">").count(), 1);
    let missing = get("/ui/sessions/%3Cscript%3E".into()).await.unwrap();
    assert_eq!(missing.status(), 404);
    let text = missing.text().await.unwrap();
    assert!(
        text.contains("&lt;script&gt;") && !text.contains("<script>"),
        "{text}"
    );
}

/// Bills every prompt token as a cache write: a provider whose cache the stack's edits
/// keep missing.
struct AllWrites;

impl Respond for AllWrites {
    fn respond(&self, request: &Request) -> ResponseTemplate {
        let prompt = request.body.len() as u64 / 4;
        ResponseTemplate::new(200).set_body_json(json!({
            "id": "msg", "type": "message", "role": "assistant", "model": "claude-sonnet-4-6",
            "stop_reason": "end_turn", "content": [{"type": "text", "text": "ok"}],
            "usage": {"input_tokens": 0, "cache_creation_input_tokens": prompt,
                      "cache_read_input_tokens": 0, "output_tokens": 10}}))
    }
}

#[tokio::test]
async fn a_guarded_session_costlier_than_pass_through_is_edited_only_where_the_window_forces() {
    let upstream = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/v1/messages"))
        .respond_with(AllWrites)
        .mount(&upstream)
        .await;
    let policy = ContextPolicy::default()
        .with_tool_result_max_chars(2_000)
        .with_guard(llm_context::Guard::PassThrough);
    let url = proxy(policy, &upstream).await;
    let mut messages = vec![json!({"role": "user", "content": "Fix the failing tests."})];
    let mut held = None;
    for r in 0..12 {
        messages.extend(round(r));
        let answer = reqwest::Client::new()
            .post(format!("{url}/v1/messages"))
            .header("anthropic-version", "2023-06-01")
            .header("x-llm-context-session", "guarded")
            .body(body(&messages, false))
            .send()
            .await
            .unwrap();
        assert_eq!(answer.status(), 200);
        let guard = answer.headers().get("x-llm-context-guard").cloned();
        let offloaded = header(&answer, "x-llm-context-offloaded");
        answer.bytes().await.unwrap();
        match (&held, guard) {
            // Edited (its results offloaded) until the ledger finds it costlier.
            (None, None) => assert!(offloaded > 0, "round {r}"),
            (None, Some(value)) => {
                assert_eq!(value, "held");
                assert_eq!(offloaded, 0, "round {r}");
                held = Some(r);
            }
            (Some(_), _) => {}
        }
        // The row of each answer is in before the next request is prepared.
        reqwest::get(format!("{url}/llm-context/ledger/sessions"))
            .await
            .unwrap();
    }
    let held = held.expect("the guard never held");
    assert!(held >= 1, "guarded before the ledger saw an edit");
    // From then on the upstream got the results whole, as the client sent them.
    let last = upstream.received_requests().await.unwrap().pop().unwrap();
    let sent: Value = serde_json::from_slice(&last.body).unwrap();
    let result = &sent["messages"][2]["content"][0]["content"];
    assert_eq!(result, &round(0)[1]["content"][0]["content"]);
    let one = json_of(
        reqwest::get(format!("{url}/llm-context/ledger/sessions/guarded"))
            .await
            .unwrap(),
    )
    .await;
    let rows = one["requests"].as_array().unwrap();
    assert_eq!(rows[held]["edits"]["guard_held"], true);
    assert_eq!(rows[0]["edits"]["guard_held"], false);
}

#[tokio::test]
async fn two_replicas_on_one_redis_write_one_ledger() {
    let upstream = upstream().await;
    let stores = crate::support::redis::stores(
        "two_replicas_on_one_redis_write_one_ledger",
        llm_context::redis::RedisOptions::default(),
    )
    .await;
    let replica = |stores: llm_context::redis::RedisStores| {
        Proxy::builder()
            .anthropic(anthropic(&upstream.uri()))
            .redis(stores)
            .build()
            .unwrap()
    };
    let urls = [
        serving(replica(stores.clone())).await,
        serving(replica(stores)).await,
    ];
    let mut messages = vec![json!({"role": "user", "content": "Fix the failing tests."})];
    for r in 0..6 {
        messages.extend(round(r));
        let answer = reqwest::Client::new()
            .post(format!("{}/v1/messages", urls[r % 2]))
            .header("anthropic-version", "2023-06-01")
            .header("x-llm-context-session", "shared")
            .body(body(&messages, false))
            .send()
            .await
            .unwrap();
        assert_eq!(answer.status(), 200);
    }
    // Each replica's view holds all six, in the order they were answered.
    let views = [
        json_of(
            reqwest::get(format!("{}/llm-context/ledger/sessions/shared", urls[0]))
                .await
                .unwrap(),
        )
        .await,
        json_of(
            reqwest::get(format!("{}/llm-context/ledger/sessions/shared", urls[1]))
                .await
                .unwrap(),
        )
        .await,
    ];
    for view in &views {
        assert_eq!(view["totals"]["requests"], 6, "{view}");
        assert!(view["scope"].as_str().unwrap().contains("every replica"));
    }
    assert_eq!(views[0]["totals"], views[1]["totals"]);
    let client_tokens: Vec<&Value> = views[0]["requests"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| &r["client_tokens"])
        .collect();
    assert!(
        client_tokens
            .windows(2)
            .all(|w| w[0].as_u64() < w[1].as_u64()),
        "{client_tokens:?}"
    );
}

/// An OpenAI upstream that bills each request's prompt at the crate's estimate of what it
/// received (so the provider's count and the proxy's agree, as calibration would make
/// them) and `OUTPUT_TOKENS_PER_CALL` of output, no cache: only the pass-through is
/// modelled here, the actual figures do not matter.
struct Estimating;

impl Respond for Estimating {
    fn respond(&self, request: &Request) -> ResponseTemplate {
        use llm_context_layers::tokens::{estimate_message_tokens, estimate_tool_tokens};
        let text = std::str::from_utf8(&request.body).unwrap();
        let (req, _) = llm_context::wire::chat_completions::body::request_from_str(text).unwrap();
        let prompt = estimate_message_tokens(&req.messages) + estimate_tool_tokens(&req.tools);
        let output = llm_context::simulate::OUTPUT_TOKENS_PER_CALL;
        ResponseTemplate::new(200).set_body_json(json!({
            "id": "c", "object": "chat.completion", "created": 1, "model": "gpt-5.4",
            "choices": [{"index": 0, "finish_reason": "stop",
                         "message": {"role": "assistant", "content": "ok"}}],
            "usage": {"prompt_tokens": prompt, "completion_tokens": output,
                      "total_tokens": prompt as u64 + output}}))
    }
}

#[tokio::test]
async fn the_modelled_pass_through_agrees_with_simulate_on_the_same_conversation() {
    use llm_context::simulate::{Calls, Candidate, Conversation, Simulation};
    let conversation = Conversation::generate(8, 11);
    let calls = conversation.calls(Calls::PerTurn);
    // What simulate says the conversation costs sent as it is (nothing edited: off).
    let unchanged = ContextPolicy::default()
        .with_executor(llm_context::Executor::Off)
        .with_max_context_tokens(1_000_000);
    let simulated = Simulation::new("gpt-5.4")
        .run(&conversation, &Candidate::new("pass-through", unchanged))
        .await
        .unwrap();
    assert_eq!(simulated.calls, calls.len());

    // The same calls through serve, under a window the transcript outgrows: edited, so
    // every pass-through figure is modelled, not observed.
    let upstream = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/v1/chat/completions"))
        .respond_with(Estimating)
        .mount(&upstream)
        .await;
    let largest = calls.last().unwrap().0;
    let full =
        llm_context_layers::tokens::estimate_message_tokens(&conversation.messages()[..largest]);
    let policy = ContextPolicy::default()
        .with_max_context_tokens(full * 6 / 10)
        .with_reserve_tokens(1_000);
    let proxy = Proxy::builder()
        .policy(policy)
        .openai(crate::support::proxy::openai(&upstream.uri()))
        .build()
        .unwrap();
    let url = serving(proxy).await;
    let mut removed = 0;
    for &(end, _) in &calls {
        let req = llm_context::ChatRequest::new("gpt-5.4", conversation.messages()[..end].to_vec())
            .with_tools(conversation.tools().to_vec());
        let body =
            llm_context::wire::chat_completions::body::body_from_request(&req, &Default::default());
        let answer = reqwest::Client::new()
            .post(format!("{url}/v1/chat/completions"))
            .header("x-llm-context-session", "simulated")
            .header("content-type", "application/json")
            .body(body.to_string())
            .send()
            .await
            .unwrap();
        assert_eq!(answer.status(), 200);
        removed += ["removed-messages", "cleared", "offloaded"]
            .iter()
            .map(|h| header(&answer, &format!("x-llm-context-{h}")))
            .sum::<u64>();
    }
    assert!(removed > 0, "the stack never edited");
    let one = json_of(
        reqwest::get(format!("{url}/llm-context/ledger/sessions/simulated"))
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(
        one["totals"]["provenance"],
        "modelled: no history for the session"
    );
    let modelled = one["totals"]["passthrough_usd"].as_f64().unwrap();
    let off = (modelled - simulated.cost_usd).abs() / simulated.cost_usd;
    let said = format!(
        "ledger {modelled} vs simulate {} ({:.2}% apart)",
        simulated.cost_usd,
        off * 100.0
    );
    assert!(off < 0.05, "{said}");
    eprintln!("pass-through: {said}");
}

//! What a memo hit costs through the whole stack: `ContextPolicyLayer`, then `MemoLayer`,
//! then `MockModel`, for transcripts of 10, 50 and 200 messages, with the in-memory store
//! and (when `REDIS_URL` is set) with Redis on loopback. `prepare_only` is the same stack
//! without the memo, answering from a fixed reply, so the memo's own share is the
//! difference.
//!
//! ```sh
//! cargo bench --bench memo
//! REDIS_URL=redis://127.0.0.1:6379/ cargo bench --bench memo
//! ```

use std::sync::Arc;

use divan::Bencher;
use llm_context::memo::{LocalMemoStore, MemoKey, MemoLayer, MemoStore};
use llm_context::mock::MockModel;
use llm_context::{
    BoxError, ChatRequest, ChatResponse, ContextPolicy, ContextPolicyLayer, Message, PrefixContext,
    Scope, ToolCall, ToolSpec,
};
use serde_json::json;
use tokio::runtime::Runtime;
use tower::{Service, ServiceBuilder, ServiceExt};

const SIZES: [usize; 3] = [10, 50, 200];

fn main() {
    divan::main();
}

/// A realistic agent transcript: user turns, tool calls and their results, ~300 chars each.
fn transcript(messages: usize) -> ChatRequest {
    let mut out = Vec::with_capacity(messages);
    let mut i = 0;
    while out.len() < messages {
        match out.len() % 4 {
            0 => out.push(Message::user(format!(
                "Question {i}: what changed in the deployment? {}",
                "context ".repeat(30)
            ))),
            1 => out.push(Message::assistant_tool_calls(
                "",
                vec![ToolCall::new(
                    format!("call_{i}"),
                    "search",
                    json!({"query": format!("deployment change {i}"), "limit": 5}),
                )],
            )),
            2 => out.push(Message::tool_result(
                format!("call_{i}"),
                "search",
                format!("result {i}: {}", "log line ".repeat(30)),
            )),
            _ => {
                out.push(Message::assistant(format!(
                    "Answer {i}: {}",
                    "finding ".repeat(30)
                )));
                i += 1;
            }
        }
    }
    ChatRequest::new("gpt-5.4", out)
        .with_prefix(Arc::new(PrefixContext::new("You are a careful SRE assistant.")))
        .with_tools(vec![ToolSpec::new(
            "search",
            "Search the deployment logs.",
            json!({"type": "object", "properties": {"query": {"type": "string"}, "limit": {"type": "integer"}}}),
        )])
        .with_scope(Scope::org("acme"))
        .with_session("bench")
        .with_temperature(0.0)
}

fn policy() -> ContextPolicyLayer {
    // A window the transcripts fit: a hit is measured, not pruning.
    ContextPolicyLayer::new(ContextPolicy::default().with_max_context_tokens(200_000)).unwrap()
}

fn memo_stack(
    store: Arc<dyn MemoStore>,
) -> impl Service<ChatRequest, Response = ChatResponse, Error = BoxError> + Clone {
    ServiceBuilder::new()
        .layer(policy())
        .layer(MemoLayer::new(store))
        .service(MockModel::echo())
}

fn runtime() -> Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// Runs `request` once so that it is in the memo, then measures hits.
fn bench_hits(bencher: Bencher<'_, '_>, rt: &Runtime, store: Arc<dyn MemoStore>, n: usize) {
    let model = memo_stack(store);
    let request = transcript(n);
    rt.block_on(model.clone().oneshot(request.clone())).unwrap();
    bencher
        .with_inputs(|| (model.clone(), request.clone()))
        .bench_local_values(|(model, request)| {
            let reply = rt.block_on(model.oneshot(request)).unwrap();
            assert!(reply.report.memo_hit);
            reply
        });
}

#[divan::bench(args = SIZES)]
fn hit_in_memory(bencher: Bencher<'_, '_>, n: usize) {
    let rt = runtime();
    bench_hits(bencher, &rt, Arc::new(LocalMemoStore::default()), n);
}

#[cfg(feature = "redis")]
#[divan::bench(args = SIZES)]
fn hit_redis_loopback(bencher: Bencher<'_, '_>, n: usize) {
    let Ok(url) = std::env::var("REDIS_URL") else {
        eprintln!("hit_redis_loopback: REDIS_URL is not set; start a redis-server and set it");
        return;
    };
    let rt = runtime();
    let stores = rt
        .block_on(llm_context::redis::RedisStores::connect_with(
            &url,
            llm_context::redis::RedisOptions::default().with_key_prefix("bench-memo"),
        ))
        .expect("REDIS_URL is reachable");
    bench_hits(bencher, &rt, Arc::new(stores.memo), n);
}

#[divan::bench(args = SIZES)]
fn prepare_only(bencher: Bencher<'_, '_>, n: usize) {
    let rt = runtime();
    let reply = ChatResponse::new(Message::assistant("fixed"));
    let model = ServiceBuilder::new()
        .layer(policy())
        .service(tower::service_fn(move |_: ChatRequest| {
            let reply = reply.clone();
            async move { Ok::<_, BoxError>(reply) }
        }));
    let request = transcript(n);
    bencher
        .with_inputs(|| (model.clone(), request.clone()))
        .bench_local_values(|(model, request)| rt.block_on(model.oneshot(request)).unwrap());
}

#[divan::bench(args = SIZES)]
fn key_only(bencher: Bencher<'_, '_>, n: usize) {
    let request = transcript(n);
    bencher.bench_local(|| MemoKey::for_request(divan::black_box(&request)));
}

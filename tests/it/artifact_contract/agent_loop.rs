//! No dangling references, on every backend: over random agent loops (several sessions
//! growing turn by turn, results of every size, ASCII and not, a store with tight bounds),
//! every artifact id in every prepared request is readable right after that request is
//! prepared, and holds what its preview shows.

use llm_context::artifact::{is_preview, is_stub};
use llm_context::mock::MockModel;
use llm_context::{ChatRequest, ContextPolicy, ContextPolicyLayer, Message, Scope, ToolCall};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use serde_json::{Value, json};
use tower::{Layer, Service, ServiceExt};

use super::{MakeArtifacts, tenant};

/// One step of a loop: which session grows, and the sizes of the results of the turn's
/// tool rounds (0 rounds: a plain question and answer).
#[derive(Clone, Debug)]
struct Step {
    session: usize,
    results: Vec<(usize, bool)>,
}

fn steps() -> impl Strategy<Value = Vec<Step>> {
    let result = (
        prop_oneof![0usize..150, 150usize..400, 400usize..1_500],
        any::<bool>(),
    );
    let step = (0usize..3, prop::collection::vec(result, 0..4))
        .prop_map(|(session, results)| Step { session, results });
    prop::collection::vec(step, 1..14)
}

/// A result of about `chars` characters: a log with quotes and newlines, and non-ASCII
/// text when `wide`.
fn result_text(n: usize, chars: usize, wide: bool) -> String {
    let line = if wide {
        format!("{n} ошибка \"ключ\" 用户 — é\n")
    } else {
        format!("{n} GET /api/orders?id=\"{n}\" 500\n")
    };
    line.repeat(chars / line.chars().count() + 1)
}

/// The artifact ids a request names (previews, and stubs naming one), with what each
/// preview shows.
fn named(req: &ChatRequest) -> Vec<(String, Option<String>)> {
    let mut out = Vec::new();
    for m in &req.messages {
        let Some(text) = m.content.as_str() else {
            continue;
        };
        if is_preview(text) {
            let v: Value = serde_json::from_str(text).unwrap();
            let preview = v["preview"].as_str().unwrap().to_owned();
            out.push((
                v["context_artifact"].as_str().unwrap().to_owned(),
                Some(preview),
            ));
        } else if is_stub(text) {
            let v: Value = serde_json::from_str(text).unwrap();
            if let Some(id) = v["context_artifact"].as_str() {
                out.push((id.to_owned(), None));
            }
        }
    }
    out
}

/// Runs random agent loops against the backend `make` builds with tight bounds.
pub fn every_id_sent_is_readable(make: MakeArtifacts, cases: u32) {
    let mut runner = TestRunner::new(Config {
        cases,
        failure_persistence: None,
        ..Config::default()
    });
    let policy = (1_500usize..40_000, 2_000usize..12_000, any::<bool>());
    let store_bounds = (1usize..4, 600usize..4_000);
    runner
        .run(
            &(steps(), policy, store_bounds),
            |(steps, (max_tokens, artifact_bytes, clear_first), (count, bytes))| {
                let rt = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .unwrap();
                rt.block_on(run_loop(
                    make,
                    &steps,
                    max_tokens,
                    artifact_bytes,
                    clear_first,
                    (count, bytes),
                ));
                Ok(())
            },
        )
        .unwrap();
}

async fn run_loop(
    make: MakeArtifacts,
    steps: &[Step],
    max_tokens: usize,
    artifact_bytes: usize,
    clear_first: bool,
    (count, bytes): (usize, usize),
) {
    let backend = make(count, bytes).await;
    let store = backend.store.clone();
    let mut policy = ContextPolicy::default()
        .with_max_context_tokens(max_tokens)
        .with_reserve_tokens(500)
        .with_preserve_recent(1)
        .with_tool_result_max_chars(150)
        .with_artifact_max_chars(1_000)
        .with_max_artifact_bytes(artifact_bytes);
    policy.clear_before_prune = clear_first;
    let layer = ContextPolicyLayer::new(policy)
        .unwrap()
        .with_artifact_store(store.clone());
    let model = MockModel::echo();
    let mut service = layer.layer(model.clone());
    let scope: Scope = tenant("agent-loop");
    let mut transcripts: Vec<Vec<Message>> = vec![vec![Message::system("Be terse.")]; 3];
    for (turn, step) in steps.iter().enumerate() {
        let t = &mut transcripts[step.session];
        t.push(Message::user(format!("question {turn}")));
        for (round, &(chars, wide)) in step.results.iter().enumerate() {
            let id = format!("c{turn}-{round}");
            t.push(Message::assistant_tool_calls(
                "",
                vec![ToolCall::new(
                    id.clone(),
                    "read_log",
                    json!({"page": round}),
                )],
            ));
            t.push(Message::tool_result(
                id,
                "read_log",
                result_text(turn * 10 + round, chars, wide),
            ));
        }
        let req = ChatRequest::new("mock", t.clone())
            .with_scope(scope.clone())
            .with_session(format!("s{}", step.session));
        let reply = ServiceExt::<ChatRequest>::ready(&mut service)
            .await
            .unwrap()
            .call(req)
            .await;
        let Ok(reply) = reply else {
            // A protected turn too large for the window is refused before dispatch.
            continue;
        };
        let sent = model.last_request().unwrap();
        for (id, preview) in named(&sent) {
            let artifact = store
                .get(&sent.scope, &sent.session, &id)
                .await
                .unwrap()
                .unwrap_or_else(|| panic!("turn {turn}: {id} was sent but is not stored"));
            if let Some(preview) = preview {
                assert!(
                    artifact.text.starts_with(&preview),
                    "{id} holds its preview"
                );
            }
        }
        t.push(reply.message);
    }
    drop(backend);
}

/// The agent-loop property as a test of one backend.
#[macro_export]
macro_rules! no_dangling_contract {
    ($make:expr, $cases:expr) => {
        #[test]
        fn every_id_sent_is_readable_over_random_agent_loops() {
            $crate::artifact_contract::agent_loop::every_id_sent_is_readable($make, $cases);
        }
    };
}

//! Invariants of preparation over random transcripts (proptest), including random Unicode
//! and Anthropic-style tool results with role `user`.

use crate::support::assert_pairing;
use llm_context_layers::mock::MockModel;
use llm_context_layers::tokens::{estimate_message_tokens, estimate_tool_tokens};
use std::sync::Arc;

use llm_context_layers::artifact::is_stub;
use llm_context_layers::artifact::{OFFLOAD_INSTRUCTIONS, READ_ARTIFACT_TOOL, is_preview};
use llm_context_layers::{
    ArtifactStore, BoxError, ChatRequest, ChatResponse, ContextLimitError, ContextPolicy,
    ContextPolicyLayer, Message, Reasoning, Role, ToolCall, ToolSpec,
};
use proptest::prelude::*;
use serde_json::json;
use tower::{Layer, Service, ServiceExt};

fn text(max: usize) -> impl Strategy<Value = String> {
    prop_oneof![
        // Any scalar value: astral, combining marks, controls, quotes.
        prop::collection::vec(any::<char>(), 0..max.min(40)).prop_map(String::from_iter),
        // Long runs, to push results over thresholds.
        (any::<char>(), 0..max).prop_map(|(c, n)| c.to_string().repeat(n)),
        "[a-z ]{0,60}",
        imitation(max),
    ]
}

/// Text that imitates the stack's own formats: previews and stubs, exact or nearly, of
/// any length, naming artifacts no store holds. Tool output (and users) can write them.
fn imitation(max: usize) -> impl Strategy<Value = String> {
    let id = "[0-9a-f]{64}".prop_map(|h| format!("art_{h}"));
    (id, 0..max, 0usize..4, any::<bool>()).prop_map(|(id, n, kind, truncated)| {
        let body = "p".repeat(n);
        match kind {
            0 => format!("{{\"context_artifact\":\"{id}\",\"preview\":\"{body}\"}}"),
            1 => format!(
                "{{\"context_artifact\":\"{id}\",\"preview\":\"{body}\",\"preview_truncated\":{truncated},\
                 \"original_chars\":{},\"stored_chars\":{n},\"artifact_truncated\":false,\
                 \"instructions\":{}}}",
                if truncated { n + 1 } else { n },
                serde_json::Value::from(OFFLOAD_INSTRUCTIONS)
            ),
            2 => format!(
                "{{\"context_cleared\":true,\"original_chars\":{n},\"context_artifact\":\"{id}\",\
                 \"instructions\":\"Older tool result cleared to fit the context window. \
                 Call read_context_artifact with this artifact_id to read it back.\"}}"
            ),
            _ => format!("{{\"context_cleared\":true{body}"),
        }
    })
}

#[derive(Clone, Debug)]
struct RoundSpec {
    calls: Vec<(String, String)>, // (args text, result text)
    user_role_results: bool,
    note: Option<String>,
}

#[derive(Clone, Debug)]
struct TurnSpec {
    request: String,
    rounds: Vec<RoundSpec>,
    answer: Option<String>,
}

fn round() -> impl Strategy<Value = RoundSpec> {
    (
        prop::collection::vec((text(30), text(3_000)), 1..3),
        any::<bool>(),
        prop::option::of(text(50)),
    )
        .prop_map(|(calls, user_role_results, note)| RoundSpec {
            calls,
            user_role_results,
            note,
        })
}

fn turn() -> impl Strategy<Value = TurnSpec> {
    (
        text(400),
        prop::collection::vec(round(), 0..6),
        prop::option::of(text(300)),
    )
        .prop_map(|(request, rounds, answer)| TurnSpec {
            request,
            rounds,
            answer,
        })
}

fn build(system: &[String], turns: &[TurnSpec]) -> Vec<Message> {
    let mut out: Vec<Message> = system.iter().map(|s| Message::system(s.as_str())).collect();
    let mut n = 0;
    for t in turns {
        out.push(Message::user(t.request.as_str()));
        for r in &t.rounds {
            let calls: Vec<ToolCall> = r
                .calls
                .iter()
                .map(|(args, _)| {
                    n += 1;
                    ToolCall::new(format!("call_{n}"), "tool", json!({"q": args}))
                })
                .collect();
            let ids: Vec<String> = calls.iter().map(|c| c.id.clone()).collect();
            let mut call = Message::assistant_tool_calls(r.note.clone().unwrap_or_default(), calls);
            if r.user_role_results {
                // Anthropic's convention: signed thinking before the calls it led to.
                call = call.with_reasoning(vec![Reasoning::Thinking {
                    thinking: format!("think before call_{n}"),
                    signature: format!("sig_{n}"),
                }]);
            }
            out.push(call);
            for (id, (_, result)) in ids.iter().zip(&r.calls) {
                out.push(if r.user_role_results {
                    Message::user(result.as_str()).with_tool_call_id(id)
                } else {
                    Message::tool_result(id, "tool", result.as_str())
                });
            }
        }
        if let Some(a) = &t.answer {
            out.push(Message::assistant(a.as_str()));
        }
    }
    out
}

fn policy() -> impl Strategy<Value = ContextPolicy> {
    (
        30usize..2_500,
        1usize..4,
        1usize..4,
        1usize..4,
        any::<bool>(),
        20usize..4_000,
        prop::option::of(1usize..100),
        prop::option::of(1usize..2_000),
        any::<bool>(),
    )
        .prop_map(
            |(
                allowance,
                reserve_div,
                preserve,
                preserve_results,
                clear_first,
                max_chars,
                low,
                at_least,
                clear_inputs,
            )| {
                let reserve = 1 + allowance / (reserve_div * 4);
                let policy = ContextPolicy::default()
                    .with_max_context_tokens(allowance + reserve)
                    .with_reserve_tokens(reserve)
                    .with_preserve_recent(preserve)
                    .with_preserve_tool_results(preserve_results)
                    .with_clear_before_prune(clear_first)
                    .with_tool_result_max_chars(max_chars)
                    .with_clear_tool_inputs(clear_inputs);
                let policy = match at_least {
                    Some(n) => policy.with_clear_at_least_tokens(n),
                    None => policy,
                };
                match low {
                    // A low-water mark a percentage of the allowance.
                    Some(percent) => {
                        policy.with_low_water_tokens((allowance * percent / 100).max(1))
                    }
                    None => policy,
                }
            },
        )
}

fn run(policy: &ContextPolicy, req: ChatRequest) -> (Result<ChatResponse, BoxError>, MockModel) {
    let (result, model, _) = run_with_store(policy, req);
    (result, model)
}

fn run_with_store(
    policy: &ContextPolicy,
    req: ChatRequest,
) -> (
    Result<ChatResponse, BoxError>,
    MockModel,
    Arc<dyn ArtifactStore>,
) {
    let store = ContextPolicyLayer::new(policy.clone())
        .unwrap()
        .artifact_store();
    run_in(policy, store, req)
}

/// Runs `req` with the artifacts of earlier requests in `store`.
fn run_in(
    policy: &ContextPolicy,
    store: Arc<dyn ArtifactStore>,
    req: ChatRequest,
) -> (
    Result<ChatResponse, BoxError>,
    MockModel,
    Arc<dyn ArtifactStore>,
) {
    let model = MockModel::echo();
    let layer = ContextPolicyLayer::new(policy.clone())
        .unwrap()
        .with_artifact_store(store.clone());
    let service = layer.layer(model.clone());
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    (rt.block_on(service.oneshot(req)), model, store)
}

/// Every preview is at most the threshold long, and its artifact is stored and begins
/// with the preview; every stub that names an artifact can be read back; the read tool
/// is there exactly when something refers to an artifact.
fn check_artifacts(
    sent: &ChatRequest,
    received: &[Message],
    policy: &ContextPolicy,
    store: &dyn ArtifactStore,
) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    // Contents that came in as they are: imitations of the stack's formats are passed on
    // as text, and only what the stack wrote must name a stored artifact.
    let verbatim = |text: &str| received.iter().any(|m| m.content.as_str() == Some(text));
    let mut refers = false;
    for m in sent.messages.iter().filter(|m| m.is_tool_result()) {
        let Some(text) = m.content.as_str() else {
            continue;
        };
        if is_preview(text) && !verbatim(text) {
            let v: serde_json::Value = serde_json::from_str(text).unwrap();
            let preview = v["preview"].as_str().unwrap();
            assert!(preview.chars().count() <= policy.tool_result_max_chars);
            let id = v["context_artifact"].as_str().unwrap();
            let stored = rt
                .block_on(store.get(&sent.scope, &sent.session, id))
                .unwrap();
            let stored = stored.expect("the artifact of a preview is stored");
            assert!(
                stored.text.starts_with(preview),
                "artifact holds at least the preview"
            );
            refers = true;
        } else if is_stub(text) && !verbatim(text) {
            let v: serde_json::Value = serde_json::from_str(text).unwrap();
            if let Some(id) = v["context_artifact"].as_str() {
                let stored = rt
                    .block_on(store.get(&sent.scope, &sent.session, id))
                    .unwrap();
                assert!(stored.is_some(), "a cleared result can be read back");
                refers = true;
            }
        } else if is_preview(text) || is_stub(text) {
            // An imitation passed on: never taken for a reference to a stored artifact.
            let v: serde_json::Value = serde_json::from_str(text).unwrap();
            if let Some(id) = v["context_artifact"].as_str() {
                let stored = rt
                    .block_on(store.get(&sent.scope, &sent.session, id))
                    .unwrap();
                assert!(stored.is_none(), "an imitation named a stored artifact");
            }
        }
    }
    // The read tool is there when something refers to an artifact, and in every request
    // that declares tools of its own (so a session's tools never toggle).
    let declared = sent.tools.iter().any(|t| t.name != READ_ARTIFACT_TOOL);
    assert_eq!(
        refers || declared,
        sent.tools.iter().any(|t| t.name == READ_ARTIFACT_TOOL)
    );
}

fn sent_tokens(req: &ChatRequest) -> usize {
    estimate_tool_tokens(&req.tools) + estimate_message_tokens(&req.messages)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn preparation_invariants(
        system in prop::collection::vec(text(200), 0..3),
        turns in prop::collection::vec(turn(), 1..7),
        with_tool in any::<bool>(),
        policy in policy(),
    ) {
        let messages = build(&system, &turns);
        let mut req = ChatRequest::new("m", messages.clone());
        if with_tool {
            req = req.with_tools(vec![ToolSpec::new("tool", "a tool", json!({"type": "object"}))]);
        }
        let allowance = policy.prompt_allowance(None);
        let (result, model, store) = run_with_store(&policy, req.clone());
        match result {
            Ok(resp) => {
                let sent = model.last_request().unwrap();
                check_artifacts(&sent, &messages, &policy, store.as_ref());
                // Fits, and the report tells the truth about it.
                prop_assert!(sent_tokens(&sent) <= allowance);
                prop_assert_eq!(resp.report.after_tokens, sent_tokens(&sent));
                prop_assert_eq!(resp.report.before_tokens, sent_tokens(&req));
                // Pairing holds, in either role convention.
                assert_pairing(&messages, &sent.messages);
                // The leading system messages and the newest user request are kept.
                prop_assert_eq!(&sent.messages[..system.len()], &messages[..system.len()]);
                let newest = messages.iter().rposition(Message::is_user_request).unwrap();
                prop_assert!(sent.messages.contains(&messages[newest]));
                // Roles are never rewritten and order is kept.
                let mut it = messages.iter();
                for m in &sent.messages {
                    // Calls keep their ids and names; `clear_tool_inputs` may stub the
                    // arguments of a call whose result was cleared.
                    let same_calls = |o: &Message| {
                        o.tool_calls.len() == m.tool_calls.len()
                            && o.tool_calls.iter().zip(&m.tool_calls).all(|(a, b)| {
                                a.id == b.id
                                    && a.name == b.name
                                    && (a.arguments == b.arguments
                                        || (policy.clear_tool_inputs
                                            && b.arguments_value() == json!({"cleared": true})))
                            })
                    };
                    // Reasoning is sent as it came: never cleared, never rewritten.
                    prop_assert!(it.any(|o| o.role == m.role && o.tool_call_id == m.tool_call_id && same_calls(o) && o.reasoning() == m.reasoning()));
                }
                // Deterministic: the same input gives the same bytes.
                let (again, model2) = run(&policy, req);
                prop_assert!(again.is_ok());
                prop_assert_eq!(
                    serde_json::to_string(&model2.last_request().unwrap()).unwrap(),
                    serde_json::to_string(&sent).unwrap()
                );
                // Idempotent: preparing the output, with the artifacts it names, changes
                // nothing.
                let (twice, model3, _) = run_in(&policy, store.clone(), sent.clone());
                let twice = twice.unwrap();
                prop_assert!(!twice.report.changed());
                prop_assert_eq!(model3.last_request().unwrap(), sent);
            }
            Err(err) => {
                let limit = err.downcast_ref::<ContextLimitError>();
                prop_assert!(limit.is_some(), "unexpected error: {}", err);
                let limit = limit.unwrap();
                prop_assert!(limit.needed_tokens > limit.allowance);
                prop_assert_eq!(limit.allowance, allowance);
                prop_assert_eq!(limit.needed_tokens, limit.breakdown.total());
                prop_assert_eq!(model.calls(), 0);
            }
        }
    }

    #[test]
    fn a_reused_service_prepares_as_a_fresh_one(
        first in prop::collection::vec(turn(), 1..7),
        second in prop::collection::vec(turn(), 1..3),
        policy in policy(),
    ) {
        // One service keeps its planner's lists between requests: a long transcript, a
        // short one, then the long one again must each come out as from a new service.
        // (A low-water mark or clearing in steps makes the service remember cuts on
        // purpose: not here.)
        let mut policy = policy;
        policy.low_water_tokens = None;
        policy.clear_at_least_tokens = None;
        let long = ChatRequest::new("m", build(&[], &first));
        let short = ChatRequest::new("m", build(&["rules".to_string()], &second));
        let model = MockModel::echo();
        let mut service = ContextPolicyLayer::new(policy.clone()).unwrap().layer(model.clone());
        let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
        for req in [&long, &short, &long] {
            let reused = rt.block_on(async {
                // Both `Service<ChatRequest>` and `Service<Streaming>`: say which is meant.
                ServiceExt::<ChatRequest>::ready(&mut service).await.unwrap().call(req.clone()).await
            });
            let (fresh, fresh_model) = run(&policy, req.clone());
            match (reused, fresh) {
                (Ok(mut a), Ok(b)) => {
                    // The reused service remembers what its session offloaded, and says
                    // so; the bytes sent are the same.
                    prop_assert!(a.report.reused_previews <= a.report.offloaded_results);
                    prop_assert_eq!(b.report.reused_previews, 0);
                    a.report.reused_previews = 0;
                    // Whether the cut or the cleared region moved is relative to the
                    // session's previous request, which only the reused service saw.
                    let mut b = b;
                    for r in [&mut a.report, &mut b.report] {
                        r.cut_moved = false;
                        r.clear_moved = false;
                    }
                    prop_assert_eq!(a.report, b.report);
                    prop_assert_eq!(model.last_request(), fresh_model.last_request());
                }
                (Err(a), Err(b)) => prop_assert_eq!(a.to_string(), b.to_string()),
                (a, b) => prop_assert!(false, "reused {:?}, fresh {:?}", a.is_ok(), b.is_ok()),
            }
        }
    }

    #[test]
    fn no_input_panics(messages in prop::collection::vec(
        (prop_oneof![Just(Role::System), Just(Role::User), Just(Role::Assistant), Just(Role::Tool)],
         text(500), prop::option::of("[a-c]"), prop::option::of("[a-c]")),
        0..30), policy in policy())
    {
        // Malformed transcripts too: orphan results, calls without results, stray roles.
        let messages: Vec<Message> = messages
            .into_iter()
            .map(|(role, content, call, result_id)| {
                let mut m = Message::new(role, content);
                if let Some(id) = call {
                    m.tool_calls = Box::new([ToolCall::new(id, "t", json!(null))]);
                }
                m.tool_call_id = result_id.map(String::into_boxed_str);
                m
            })
            .collect();
        let (result, model) = run(&policy, ChatRequest::new("m", messages));
        match result {
            Ok(_) => prop_assert!(sent_tokens(&model.last_request().unwrap()) <= policy.prompt_allowance(None)),
            Err(e) => prop_assert!(e.downcast_ref::<ContextLimitError>().is_some()),
        }
    }
}

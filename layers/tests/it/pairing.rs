//! Broken tool pairing is repaired before planning and reported, or refused when the
//! policy says so; nothing else is moved or rewritten.

use std::collections::BTreeSet;

use llm_context_layers::fit::PruneLayer;
use llm_context_layers::fit::pairing::NO_RESULT_RECORDED;
use llm_context_layers::mock::MockModel;
use llm_context_layers::{
    ChatRequest, ContextPolicy, ContextPolicyLayer, Message, PairingError, Role, ToolCall,
};
use proptest::prelude::*;
use serde_json::json;
use tower::{Layer, ServiceExt};

/// Strictly paired, as providers require: each call answered by exactly one result in the
/// run of results right after it, and every result answering such a call.
fn assert_strictly_paired(messages: &[Message]) {
    let mut open: Vec<&str> = Vec::new();
    let mut in_run = false;
    for m in messages {
        if m.is_tool_result() {
            let id = m.tool_call_id.as_deref().expect("a result names its call");
            assert!(in_run, "result {id} follows no tool-call message");
            let at = open.iter().position(|c| *c == id);
            assert!(at.is_some(), "result {id} answers no open call");
            open.remove(at.unwrap());
        } else {
            assert!(open.is_empty(), "calls {open:?} have no result");
            open = m.tool_calls.iter().map(|c| c.id.as_str()).collect();
            in_run = m.has_tool_calls();
        }
    }
    assert!(open.is_empty(), "calls {open:?} have no result");
}

fn call(id: &str) -> ToolCall {
    ToolCall::new(id, "grep", json!({"pattern": "error"}))
}

fn result(id: &str, text: &str) -> Message {
    Message::tool_result(id, "grep", text)
}

/// The transcript an interrupted agent leaves: a call with no result, a result of a call
/// the history no longer has, and a result sent twice.
fn broken() -> Vec<Message> {
    vec![
        Message::system("You are an SRE agent."),
        Message::user("why is checkout failing?"),
        Message::assistant_tool_calls("", vec![call("c1"), call("c2")]),
        result("c1", "503 from payments"),
        // c2 never answered: the process died here.
        Message::user("still there?"),
        result("gone", "a result whose call was edited away"),
        Message::assistant_tool_calls("", vec![call("c3")]),
        result("c3", "payments pod restarting"),
        result("c3", "payments pod restarting"),
        Message::assistant("The payments pod is restarting."),
    ]
}

async fn prepare(
    policy: ContextPolicy,
    messages: Vec<Message>,
) -> (Result<usize, String>, MockModel) {
    let model = MockModel::echo();
    let stack = ContextPolicyLayer::new(policy)
        .unwrap()
        .layer(model.clone());
    let reply = stack.oneshot(ChatRequest::new("gpt-5.4", messages)).await;
    (
        reply
            .map(|r| r.report.repaired)
            .map_err(|e| match e.downcast_ref::<PairingError>() {
                Some(p) => format!("pairing: {p}"),
                None => format!("other: {e}"),
            }),
        model,
    )
}

#[tokio::test]
async fn an_interrupted_transcript_is_repaired_and_reported() {
    let input = broken();
    let (repaired, model) = prepare(ContextPolicy::default(), input.clone()).await;
    assert_eq!(repaired, Ok(3), "one result added, two dropped");
    let sent = model.last_request().unwrap().messages;
    assert_strictly_paired(&sent);
    // Exactly the input, less the two strays, plus a result for c2 after c1's.
    let mut expected = input.clone();
    expected.remove(8); // the second c3 result
    expected.remove(5); // the result of a call that is gone
    expected.insert(4, result("c2", NO_RESULT_RECORDED));
    assert_eq!(sent, expected);
}

#[tokio::test]
async fn the_report_counts_the_request_as_received() {
    let input = broken();
    let model = MockModel::echo();
    let stack = ContextPolicyLayer::new(ContextPolicy::default())
        .unwrap()
        .layer(model.clone());
    let reply = stack
        .oneshot(ChatRequest::new("gpt-5.4", input.clone()))
        .await
        .unwrap();
    let received = llm_context_layers::tokens::estimate_message_tokens(&input);
    let sent = llm_context_layers::tokens::estimate_message_tokens(
        &model.last_request().unwrap().messages,
    );
    assert_eq!(reply.report.before_tokens, received);
    assert_eq!(reply.report.after_tokens, sent);
    assert!(reply.report.changed());
}

#[tokio::test]
async fn with_repair_off_a_broken_request_is_refused_before_dispatch() {
    let policy = ContextPolicy::default().with_repair_pairing(false);
    let (outcome, model) = prepare(policy.clone(), broken()).await;
    let err = outcome.unwrap_err();
    assert!(err.starts_with("pairing: "), "{err}");
    assert!(err.contains("`c2`"), "names the call: {err}");
    assert_eq!(model.calls(), 0, "nothing was sent");
    // A transcript that pairs up goes through untouched.
    let fine = crate::support::tool_turn("t", 3, 100);
    let (outcome, model) = prepare(policy, fine.clone()).await;
    assert_eq!(outcome, Ok(0));
    assert_eq!(model.last_request().unwrap().messages, fine);
}

#[test]
fn repair_pairing_round_trips_through_policy_files() {
    let policy = ContextPolicy::from_json(r#"{"repair_pairing": false}"#).unwrap();
    assert!(!policy.repair_pairing);
    assert!(ContextPolicy::default().repair_pairing);
    let toml = policy.to_toml().unwrap();
    assert_eq!(ContextPolicy::from_toml(&toml).unwrap(), policy);
}

#[tokio::test]
async fn the_standalone_prune_layer_repairs_too() {
    let model = MockModel::echo();
    let prune = PruneLayer::new(ContextPolicy::default())
        .unwrap()
        .layer(model.clone());
    let reply = prune
        .oneshot(ChatRequest::new("gpt-5.4", broken()))
        .await
        .unwrap();
    assert_eq!(reply.report.repaired, 3);
    assert_strictly_paired(&model.last_request().unwrap().messages);
}

/// A paired agent transcript: `turns` of (user, rounds of calls and results, answer),
/// results in either role convention.
fn paired(turns: &[(usize, bool)]) -> Vec<Message> {
    let mut out = vec![Message::system("s")];
    let mut n = 0;
    for (t, &(rounds, user_role)) in turns.iter().enumerate() {
        out.push(Message::user(format!("task {t}")));
        for _ in 0..rounds {
            let ids = [format!("call_{n}"), format!("call_{}", n + 1)];
            n += 2;
            out.push(Message::assistant_tool_calls(
                "",
                ids.iter().map(|id| call(id)).collect(),
            ));
            for id in &ids {
                out.push(if user_role {
                    Message::user(format!("output of {id}")).with_tool_call_id(id)
                } else {
                    result(id, &format!("output of {id}"))
                });
            }
        }
        out.push(Message::assistant(format!("done {t}")));
    }
    out
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn any_breakage_is_repaired_and_counted(
        turns in prop::collection::vec((0usize..4, any::<bool>()), 1..6),
        deletions in prop::collection::vec(any::<prop::sample::Index>(), 0..4),
        strays in prop::collection::vec((any::<prop::sample::Index>(), any::<bool>()), 0..4),
        tight in any::<bool>(),
    ) {
        let input = paired(&turns);
        let mut broken = input;
        // Delete some results: each leaves its call unanswered.
        let mut deleted = BTreeSet::new();
        for d in &deletions {
            let results: Vec<usize> = (0..broken.len()).filter(|&i| broken[i].is_tool_result()).collect();
            if results.is_empty() {
                break;
            }
            let i = results[d.index(results.len())];
            deleted.insert(broken[i].tool_call_id.clone().unwrap());
            broken.remove(i);
        }
        // Insert results that answer no call, anywhere after the system message.
        for (k, (at, user_role)) in strays.iter().enumerate() {
            let id = format!("stray_{k}");
            let m = if *user_role {
                Message::user("stray").with_tool_call_id(&id)
            } else {
                result(&id, "stray")
            };
            broken.insert(1 + at.index(broken.len()), m);
        }
        let policy = if tight {
            ContextPolicy::default().with_max_context_tokens(120).with_reserve_tokens(20).with_preserve_recent(1)
        } else {
            ContextPolicy::default()
        };
        let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
        let (outcome, model) = rt.block_on(prepare(policy, broken.clone()));
        match outcome {
            Ok(repaired) => {
                prop_assert_eq!(repaired, deleted.len() + strays.len());
                let sent = model.last_request().unwrap().messages;
                assert_strictly_paired(&sent);
                // Nothing but the repair changed: the sent messages that are not synthetic
                // results come from the broken input, in order, with roles kept.
                let mut originals = broken.iter();
                for m in sent.iter().filter(|m| m.content.as_str() != Some(NO_RESULT_RECORDED)) {
                    prop_assert!(originals.any(|o| o.role == m.role && o.tool_call_id == m.tool_call_id && o.tool_calls == m.tool_calls));
                }
                // Every synthetic result answers a deleted call, in role `tool`.
                for m in sent.iter().filter(|m| m.content.as_str() == Some(NO_RESULT_RECORDED)) {
                    prop_assert_eq!(m.role, Role::Tool);
                    prop_assert!(deleted.contains(m.tool_call_id.as_deref().unwrap()));
                }
            }
            Err(e) => prop_assert!(e.contains("context limit"), "{}", e),
        }
    }
}

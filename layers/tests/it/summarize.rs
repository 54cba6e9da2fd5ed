//! The summarize layer and the explicit compaction: fold points, placement, the
//! summarizer's validation and fallback, the cache, and what summaries must not lose.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use llm_context_layers::artifact::{
    ArtifactLimits, ArtifactReader, LocalArtifactStore, READ_ARTIFACT_TOOL,
};
use llm_context_layers::mock::{MockModel, MockReply};
use llm_context_layers::summarize::{
    MAX_SUMMARY_ATTEMPTS, SummarizeConfig, SummarizeLayer, SummaryBlock, fold_points, fold_start,
    is_summary_message, is_summary_request, plan_fold,
};
use llm_context_layers::tokens::{estimate_message_tokens, estimate_tool_tokens};
use llm_context_layers::{ArtifactStore, ChatRequest, Message, PrefixContext, Scope, ToolCall};
use serde_json::json;
use tower::{Layer, Service, ServiceExt};

fn summary(narrative: &str) -> String {
    json!({"goals": ["keep the service up"], "decisions": [], "open": [], "facts": [],
           "narrative": narrative})
    .to_string()
}

/// The inner model: answers summary requests with `summarize`, anything else with "ok".
fn model(summarize: impl Fn(&ChatRequest) -> MockReply + Send + Sync + 'static) -> MockModel {
    MockModel::from_fn(move |req| {
        if is_summary_request(req) {
            summarize(req)
        } else {
            MockReply::text("ok")
        }
    })
}

fn summary_calls(model: &MockModel) -> usize {
    model
        .requests()
        .iter()
        .filter(|r| is_summary_request(r))
        .count()
}

fn call(ids: &[&str]) -> Message {
    Message::assistant_tool_calls(
        "",
        ids.iter()
            .map(|id| ToolCall::new(*id, "read_log", json!({"id": id})))
            .collect(),
    )
}

/// A tool-heavy transcript with every shape that makes cutting hard: parallel calls,
/// results sent with role `user`, a call the user interrupted (never answered), and a
/// result that arrives after the next user request.
fn tool_heavy() -> Vec<Message> {
    vec![
        Message::system("rules"),
        Message::user("t0: why 500s?"),
        call(&["a1", "a2"]),
        Message::tool_result("a1", "read_log", "GET /api/orders 500"),
        Message::tool_result("a2", "read_log", "GET /api/cart 200"),
        call(&["b1"]),
        Message::user("deploy 4f2a9c1 at 12:00").with_tool_call_id("b1"),
        Message::assistant("t0: the deploy"),
        Message::user("t1: roll back?"),
        call(&["c1"]),
        Message::tool_result("c1", "read_log", "rolled back"),
        Message::assistant("t1: done"),
        Message::user("t2: check again"),
        call(&["d1"]),
        Message::user("t3: hurry up"),
        Message::tool_result("d1", "read_log", "all 200"),
        Message::assistant("t3: all good"),
        Message::user("t4: and the cart?"),
        call(&["e1"]),
        Message::tool_result("e1", "read_log", "cart fine"),
        call(&["e2", "e3"]),
        Message::tool_result("e2", "read_log", "x"),
        Message::tool_result("e3", "read_log", "y"),
        Message::assistant("t4: fine"),
        Message::user("t5: thanks"),
        call(&["f1"]), // the user moved on before it was answered
        Message::user("t6: one more thing"),
        Message::assistant("t6: sure"),
        Message::user("t7: bye"),
    ]
}

/// Whether cutting `messages` at `b` is allowed, by brute force over every call/result
/// pair: the definition, independent of the linear planner.
fn allowed_by_definition(messages: &[Message], start: usize, b: usize) -> bool {
    if b <= start || b >= messages.len() || !messages[b].is_user_request() {
        return false;
    }
    for (i, m) in messages.iter().enumerate().skip(start) {
        for c in &m.tool_calls {
            let results: Vec<usize> = (start..messages.len())
                .filter(|&j| {
                    messages[j].is_tool_result()
                        && messages[j].tool_call_id.as_deref() == Some(&c.id)
                })
                .collect();
            if i < b && results.is_empty() {
                return false; // an unanswered call would be folded
            }
            if results.iter().any(|&j| (j < b) != (i < b)) {
                return false; // a call and a result on two sides of the cut
            }
        }
    }
    true
}

/// Every call in `part` has all its results (as found in `all`) in `part`, and every
/// result in `part` has its call there: nothing on two sides of a cut.
fn assert_whole_pairs(all: &[Message], part: &[Message], context: &str) {
    let results_in = |msgs: &[Message], id: &str| {
        msgs.iter()
            .filter(|m| m.tool_call_id.as_deref() == Some(id))
            .count()
    };
    for m in part {
        for c in &m.tool_calls {
            assert_eq!(
                results_in(part, &c.id),
                results_in(all, &c.id),
                "{} split: {context}",
                c.id
            );
        }
        if let Some(id) = &m.tool_call_id {
            assert!(
                part.iter()
                    .any(|c| c.tool_calls.iter().any(|c| *c.id == **id)),
                "result {id} without its call: {context}"
            );
        }
    }
}

#[test]
fn fold_points_are_exactly_the_cuts_the_definition_allows() {
    let full = tool_heavy();
    for len in 0..=full.len() {
        let messages = &full[..len];
        let start = fold_start(messages);
        let expected: Vec<usize> = (0..=len)
            .filter(|&b| allowed_by_definition(messages, start, b))
            .collect();
        assert_eq!(fold_points(messages, start), expected, "prefix of {len}");
    }
    // Past the interrupted call f1 (index 25) nothing may be folded.
    assert_eq!(fold_points(&full, 1), vec![8, 12, 17, 24]);
}

#[tokio::test(flavor = "current_thread")]
async fn every_fold_keeps_pairing_and_the_newest_messages_verbatim() {
    let full = tool_heavy();
    let inner = model(|_| MockReply::text(summary("folded")));
    let mut folds = 0;
    for len in 0..=full.len() {
        let messages = full[..len].to_vec();
        for keep_last in 0..=len + 1 {
            let layer =
                SummarizeLayer::new(SummarizeConfig::new(1_000_000).with_keep_last(keep_last))
                    .unwrap();
            let service = layer.layer(inner.clone());
            let request = ChatRequest::new("m", messages.clone());
            let (sent, report) = service.compact(request).await.unwrap();
            let planned = plan_fold(&messages, keep_last);
            let Some(fold) = planned else {
                assert_eq!(sent.messages, messages, "len {len} keep_last {keep_last}");
                // No fold, by the definition rather than the planner: no cut after the
                // head that the definition allows leaves `keep_last` messages.
                let start = fold_start(&messages);
                assert!(
                    (start + 1..=len)
                        .filter(|&b| allowed_by_definition(&messages, start, b))
                        .all(|b| len - b < keep_last),
                    "a fold was possible: len {len} keep_last {keep_last}"
                );
                continue;
            };
            folds += 1;
            let context = format!("len {len} keep_last {keep_last} fold {fold:?}");
            assert!(messages[fold.end].is_user_request(), "{context}");
            assert!(len - fold.end >= keep_last, "{context}");
            // The latest allowed cut: nothing later would still keep `keep_last`.
            assert!(
                fold_points(&messages, fold.start)
                    .iter()
                    .all(|&p| p <= fold.end || len - p < keep_last),
                "{context}"
            );
            assert_eq!(report.folded_messages, fold.len(), "{context}");
            // head, summary, then the rest exactly as it was.
            assert_eq!(
                sent.messages[..fold.start],
                messages[..fold.start],
                "{context}"
            );
            assert!(is_summary_message(&sent.messages[fold.start]), "{context}");
            assert_eq!(
                sent.messages[fold.start + 1..],
                messages[fold.end..],
                "{context}"
            );
            assert_whole_pairs(&messages, &sent.messages[fold.start + 1..], &context);
            assert_whole_pairs(&messages, &messages[fold.clone()], &context);
            assert!(
                messages[fold.clone()]
                    .iter()
                    .flat_map(|m| &m.tool_calls)
                    .all(|c| {
                        messages[fold.clone()]
                            .iter()
                            .any(|m| m.tool_call_id.as_deref() == Some(&c.id))
                    }),
                "an unanswered call was folded: {context}"
            );
        }
    }
    assert!(folds > 100, "the sweep folded only {folds} times");
}

/// A transcript of `turns` question-and-answer turns, ~48 tokens each.
fn chat(turns: usize) -> Vec<Message> {
    let mut out = vec![Message::system("You are an SRE agent.")];
    for t in 0..turns {
        out.push(Message::user(format!(
            "question {t}: {}",
            "why is it slow? ".repeat(7)
        )));
        out.push(Message::assistant(format!(
            "answer {t}: see /var/log/app-{t}.log"
        )));
    }
    out
}

#[tokio::test(flavor = "current_thread")]
async fn an_agent_resending_its_transcript_pays_for_one_summary_in_ten_turns() {
    let inner = model(|_| MockReply::text(summary("the early questions")));
    // Threshold 700 tokens; after the fold the request is far below it.
    let layer = SummarizeLayer::new(SummarizeConfig::new(1_000).with_keep_last(4)).unwrap();
    let mut stack = layer.layer(inner.clone());
    let mut transcript = vec![Message::system("You are an SRE agent.")];
    let mut sent: Vec<ChatRequest> = Vec::new();
    let mut first_fold = None;
    for turn in 0..40 {
        transcript.push(Message::user(format!(
            "question {turn}: {}",
            "why is it slow? ".repeat(7)
        )));
        let reply = ServiceExt::<ChatRequest>::ready(&mut stack)
            .await
            .unwrap()
            .call(ChatRequest::new("m", transcript.clone()))
            .await
            .unwrap();
        transcript.push(reply.message);
        sent.push(inner.last_request().unwrap());
        if first_fold.is_none() && reply.report.folded_messages > 0 {
            first_fold = Some(turn);
            assert_eq!(reply.report.summary_calls, 1);
        }
        if let Some(first) = first_fold
            && turn == first + 10
        {
            break;
        }
    }
    let first = first_fold.expect("the transcript never crossed the threshold");
    assert!(
        first > 5,
        "folded too early to test anything (turn {first})"
    );
    assert_eq!(
        summary_calls(&inner),
        1,
        "one summary for the ten turns after the fold"
    );
    // After the fold every request repeats the previous one byte for byte, then adds.
    for pair in sent[first..].windows(2) {
        let (before, after) = (&pair[0], &pair[1]);
        let before_bytes = serde_json::to_string(&before.messages).unwrap();
        let after_bytes = serde_json::to_string(&after.messages[..before.messages.len()]).unwrap();
        assert_eq!(before_bytes, after_bytes);
        assert!(is_summary_message(&after.messages[1]));
    }
}

#[tokio::test(flavor = "current_thread")]
async fn a_request_carrying_its_own_block_is_folded_into_one_block() {
    let inner = model(|_| MockReply::text(summary("folded")));
    let service = SummarizeLayer::new(SummarizeConfig::new(1_000_000).with_keep_last(2))
        .unwrap()
        .layer(inner.clone());
    let (sent, first) = service
        .compact(ChatRequest::new("m", chat(20)))
        .await
        .unwrap();
    assert_eq!(first.folded_messages, 38);
    // The agent keeps the composed request and sends it on with two more turns.
    let mut again = sent;
    again.messages.extend(chat(22).into_iter().skip(41));
    assert_eq!(again.messages.len(), 8);
    let (resent, second) = service.compact(again.clone()).await.unwrap();
    assert_eq!(second.folded_messages, 4);
    // The old block leaves the head; the new one carries everything folded so far.
    assert_eq!(resent.messages[0], again.messages[0]);
    let block = SummaryBlock::from_message(&resent.messages[1]).expect("the block is second");
    assert_eq!(block.folded_messages, 42);
    assert_eq!(resent.messages[2..], again.messages[6..]);
    assert_eq!(
        resent
            .messages
            .iter()
            .filter(|m| is_summary_message(m))
            .count(),
        1
    );
    // The report prices the request as sent.
    assert_eq!(
        second.after_tokens,
        estimate_message_tokens(&resent.messages) + estimate_tool_tokens(&resent.tools)
    );
    assert_eq!(
        second.before_tokens,
        estimate_message_tokens(&again.messages) + estimate_tool_tokens(&again.tools)
    );
}

#[tokio::test(flavor = "current_thread")]
async fn a_request_under_the_threshold_goes_untouched() {
    let inner = model(|_| MockReply::text(summary("never")));
    let layer = SummarizeLayer::new(SummarizeConfig::new(100_000)).unwrap();
    let request = ChatRequest::new("m", chat(10));
    let reply = layer
        .layer(inner.clone())
        .oneshot(request.clone())
        .await
        .unwrap();
    // Untouched but for the session: the request named none, so it is given the one its
    // head implies, which the layers inside use too.
    let expected = request.clone().with_session(request.inferred_session());
    assert_eq!(inner.last_request().unwrap(), expected);
    assert_eq!(
        (reply.report.folded_messages, summary_calls(&inner)),
        (0, 0)
    );
}

#[tokio::test(flavor = "current_thread")]
async fn the_block_sits_right_after_the_prefix_and_names_its_artifact() {
    let inner = model(|_| MockReply::text(summary("folded")));
    let store = Arc::new(LocalArtifactStore::default());
    let layer = SummarizeLayer::new(SummarizeConfig::new(1_000).with_keep_last(2))
        .unwrap()
        .with_artifact_store(store.clone());
    let mut messages = vec![Message::system("tenant rules")];
    messages.extend(chat(20).into_iter().skip(1));
    let prefix = Arc::new(PrefixContext::new("You are an SRE agent."));
    let request = ChatRequest::new("m", messages.clone())
        .with_prefix(prefix.clone())
        .with_scope(Scope::org("acme"))
        .with_session("s1");
    layer.layer(inner.clone()).oneshot(request).await.unwrap();
    let sent = inner.last_request().unwrap();
    assert_eq!(sent.prefix, Some(prefix));
    assert_eq!(sent.messages[0], messages[0]);
    let block = SummaryBlock::from_message(&sent.messages[1]).expect("the block is second");
    assert_eq!(sent.messages[2..], messages[messages.len() - 2..]);
    assert_eq!(block.artifacts.len(), 1);
    assert!(sent.tools.iter().any(|t| t.name == READ_ARTIFACT_TOOL));
    assert!(
        store
            .get(&Scope::org("acme"), "s1", &block.artifacts[0])
            .await
            .unwrap()
            .is_some()
    );
}

#[tokio::test(flavor = "current_thread")]
async fn identifiers_are_kept_without_the_model_and_the_span_is_pageable() {
    // The model's summary has no facts at all.
    let inner = model(|_| {
        MockReply::text(
            json!({"goals": [], "decisions": [], "open": [], "facts": [],
                   "narrative": "Looked at logs."})
            .to_string(),
        )
    });
    let store = Arc::new(LocalArtifactStore::default());
    let layer = SummarizeLayer::new(SummarizeConfig::new(1_000_000).with_keep_last(1))
        .unwrap()
        .with_artifact_store(store.clone());
    let messages = vec![
        Message::user("ENG-4412: checkout fails"),
        Message::assistant_tool_calls(
            "",
            vec![ToolCall::new(
                "c1",
                "fetch",
                json!({"url": "https://api.example.com/v1/orders"}),
            )],
        ),
        Message::tool_result(
            "c1",
            "fetch",
            format!("p99 1200 ms, see /var/log/orders.log {}", "x".repeat(9_000)),
        ),
        Message::assistant("Slow database; commit 4f2a9c1 added a full scan."),
        Message::user("fix it"),
    ];
    let (sent, _) = layer
        .layer(inner)
        .compact(ChatRequest::new("m", messages.clone()).with_session("s1"))
        .await
        .unwrap();
    let block = SummaryBlock::from_message(&sent.messages[0]).unwrap();
    for fact in [
        "ENG-4412",
        "https://api.example.com/v1/orders",
        "1200 ms",
        "/var/log/orders.log",
        "4f2a9c1",
    ] {
        assert!(
            block.facts.iter().any(|f| f == fact),
            "{fact} not in {:?}",
            block.facts
        );
    }
    // Page through the artifact as the model would, 5,000 characters at a time.
    let reader = ArtifactReader::new(store);
    let mut text = String::new();
    let mut offset = json!(0);
    while !offset.is_null() {
        let page = reader
            .read(
                &Scope::default(),
                "s1",
                &json!({"artifact_id": block.artifacts[0], "offset": offset, "max_chars": 5_000}),
            )
            .await;
        text.push_str(page["text"].as_str().expect("a page"));
        offset = page["next_offset"].clone();
    }
    let folded: Vec<Message> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(folded, messages[..4]);
}

#[tokio::test(flavor = "current_thread")]
async fn an_empty_summary_folds_nothing_and_is_not_cached() {
    let inner = model(|_| {
        MockReply::text(
            json!({"goals": [], "decisions": [" "], "open": [], "facts": [], "narrative": ""})
                .to_string(),
        )
    });
    let layer = SummarizeLayer::new(SummarizeConfig::new(1_000).with_keep_last(4)).unwrap();
    let request = ChatRequest::new("m", chat(20));
    for round in 1..=2 {
        let reply = layer
            .layer(inner.clone())
            .oneshot(request.clone())
            .await
            .unwrap();
        assert_eq!(reply.report.folded_messages, 0);
        let expected = request.clone().with_session(request.inferred_session());
        assert_eq!(
            inner.last_request().unwrap(),
            expected,
            "history kept whole"
        );
        assert_eq!(summary_calls(&inner), round, "asked again next time");
    }
}

#[tokio::test(flavor = "current_thread")]
async fn a_failing_summarizer_folds_a_bounded_fallback_once() {
    let inner = model(|_| MockReply::Error("overloaded".into()));
    // A small window, with room for the summary's facts beside the fallback.
    let config = SummarizeConfig::new(1_000)
        .with_keep_last(4)
        .with_fallback_chars(600, 2_000)
        .with_max_summary_share(0.6);
    let layer = SummarizeLayer::new(config).unwrap();
    let request = ChatRequest::new("m", chat(20));
    let reply = layer
        .layer(inner.clone())
        .oneshot(request.clone())
        .await
        .unwrap();
    assert_eq!(reply.report.summary_calls, 1, "an error is not retried");
    assert!(reply.report.folded_messages > 0);
    let block = SummaryBlock::from_message(&inner.last_request().unwrap().messages[1]).unwrap();
    assert!(block.fallback.starts_with("["), "{}", block.fallback);
    assert!(block.fallback.contains("question 0"));
    assert!(block.fallback.chars().count() <= 600);
    assert!(block.facts.iter().any(|f| f == "/var/log/app-0.log"));
    // The fallback fold is cached like a summary: the same request costs nothing more.
    layer.layer(inner.clone()).oneshot(request).await.unwrap();
    assert_eq!(summary_calls(&inner), 1);
}

#[tokio::test(flavor = "current_thread")]
async fn invalid_answers_are_asked_again_twice_then_fall_back() {
    let inner = model(|_| MockReply::text("Sure! Here is the summary: the user wants speed."));
    let layer = SummarizeLayer::new(SummarizeConfig::new(1_000).with_keep_last(4)).unwrap();
    let reply = layer
        .layer(inner.clone())
        .oneshot(ChatRequest::new("m", chat(20)))
        .await
        .unwrap();
    assert_eq!(MAX_SUMMARY_ATTEMPTS, 3);
    assert_eq!(reply.report.summary_calls, 3);
    let asks: Vec<ChatRequest> = inner
        .requests()
        .into_iter()
        .filter(is_summary_request)
        .collect();
    assert_eq!(asks.len(), 3);
    // Each retry carries the invalid answer and what was wrong with it.
    assert_eq!(asks[1].messages.len(), 4);
    assert!(
        asks[1].messages[3]
            .text()
            .contains("not valid: it is not one JSON object")
    );
    assert_eq!(asks[2].messages.len(), 6);
    let block = SummaryBlock::from_message(&inner.last_request().unwrap().messages[1]).unwrap();
    assert!(!block.fallback.is_empty() && block.narrative.is_empty());
}

#[tokio::test(flavor = "current_thread")]
async fn one_invalid_answer_then_a_valid_one_is_a_summary() {
    let answers = Arc::new(AtomicUsize::new(0));
    let inner = model(move |_| {
        if answers.fetch_add(1, Ordering::SeqCst) == 0 {
            MockReply::text(r#"{"goals": "not a list"}"#)
        } else {
            MockReply::text(format!("```json\n{}\n```", summary("second try")))
        }
    });
    let layer = SummarizeLayer::new(SummarizeConfig::new(1_000).with_keep_last(4)).unwrap();
    let reply = layer
        .layer(inner.clone())
        .oneshot(ChatRequest::new("m", chat(20)))
        .await
        .unwrap();
    assert_eq!(reply.report.summary_calls, 2);
    let block = SummaryBlock::from_message(&inner.last_request().unwrap().messages[1]).unwrap();
    assert_eq!(
        (block.narrative.as_str(), block.fallback.as_str()),
        ("second try", "")
    );
}

#[tokio::test(flavor = "current_thread")]
async fn inner_errors_and_readiness_pass_through() {
    use tokio_test::{assert_pending, assert_ready_ok};
    let layer = SummarizeLayer::new(SummarizeConfig::new(1_000_000)).unwrap();
    let (mut service, mut handle) =
        tower_test::mock::spawn_layer::<ChatRequest, llm_context_layers::ChatResponse, _>(layer);
    handle.allow(0);
    assert_pending!(service.poll_ready());
    handle.allow(1);
    assert_ready_ok!(service.poll_ready());
    let future = service.call(ChatRequest::new("m", chat(2)));
    let (_, send) = handle.next_request().await.unwrap();
    send.send_error("provider down");
    let err = future.await.unwrap_err();
    assert_eq!(err.to_string(), "provider down");
}

#[tokio::test(flavor = "current_thread")]
async fn outside_the_policy_layer_the_model_can_read_what_was_folded() {
    use llm_context_layers::{ContextPolicy, ContextPolicyLayer};
    // Asked anything after a fold, the model first reads the folded span, then quotes it.
    let inner = MockModel::from_fn(|req| {
        if is_summary_request(req) {
            return MockReply::text(summary("early questions"));
        }
        if let Some(page) = req.messages.last().filter(|m| m.is_tool_result()) {
            let text = page.text();
            let found = text.contains("question 0");
            return MockReply::text(format!("read the fold: {found}"));
        }
        match req.messages.iter().find_map(SummaryBlock::from_message) {
            Some(block) => MockReply::tool_calls([ToolCall::new(
                "r1",
                READ_ARTIFACT_TOOL,
                json!({"artifact_id": block.artifacts[0], "max_chars": 2_000}),
            )]),
            None => MockReply::text("no summary"),
        }
    });
    let policy = ContextPolicyLayer::new(ContextPolicy::default().with_max_context_tokens(100_000))
        .unwrap()
        .with_auto_resolve();
    let summarize = SummarizeLayer::new(SummarizeConfig::new(1_000).with_keep_last(4))
        .unwrap()
        .with_artifact_store(policy.artifact_store());
    let stack = tower::ServiceBuilder::new()
        .layer(summarize)
        .layer(policy)
        .service(inner.clone());
    let reply = stack
        .oneshot(ChatRequest::new("m", chat(20)))
        .await
        .unwrap();
    assert_eq!(reply.message.text(), "read the fold: true");
    assert_eq!(reply.report.resolved_messages.len(), 2);
    assert!(reply.report.folded_messages > 0);
}

#[tokio::test(flavor = "current_thread")]
async fn folding_for_hundreds_of_turns_keeps_the_block_bounded_and_every_fold_readable() {
    let inner = model(|_| MockReply::text(summary("the story so far")));
    let store = Arc::new(LocalArtifactStore::new(
        ArtifactLimits::default().with_per_session(1_000),
    ));
    let config = SummarizeConfig::new(1_000)
        .with_keep_last(2)
        .with_max_artifacts(3);
    let layer = SummarizeLayer::new(config)
        .unwrap()
        .with_artifact_store(store.clone());
    let mut stack = layer.layer(inner.clone());
    let mut transcript = vec![Message::system("You are an SRE agent.")];
    let mut largest = 0;
    for turn in 0..300 {
        transcript.push(Message::user(format!(
            "question {turn} mark{turn}x: {}",
            "why is it slow? ".repeat(7)
        )));
        let request = ChatRequest::new("m", transcript.clone()).with_scope(Scope::org("acme"));
        let reply = ServiceExt::<ChatRequest>::ready(&mut stack)
            .await
            .unwrap()
            .call(request)
            .await
            .unwrap();
        transcript.push(reply.message);
        let sent = inner.last_request().unwrap();
        if let Some(block) = SummaryBlock::from_message(&sent.messages[1]) {
            assert!(
                block.artifacts.len() <= 3,
                "turn {turn}: {:?}",
                block.artifacts
            );
            largest = largest.max(estimate_message_tokens(&sent.messages[1..2]));
        }
    }
    // A quarter of the 1,000-token window, whatever the number of folds.
    assert!(largest <= 250, "a block of {largest} tokens");
    let sent = inner.last_request().unwrap();
    let block = SummaryBlock::from_message(&sent.messages[1]).unwrap();
    let folds = summary_calls(&inner);
    assert!(folds > 10, "only {folds} folds");
    // Walk the archive chain as the model would, with read_context_artifact, in the
    // session the stack inferred for these requests (they name none).
    let reader = ArtifactReader::new(store);
    let read = |id: String| {
        let reader = reader.clone();
        let session = sent.session.clone();
        async move {
            let page = reader
                .read(
                    &Scope::org("acme"),
                    &session,
                    &json!({"artifact_id": id, "max_chars": 20_000}),
                )
                .await;
            assert!(page.get("error").is_none(), "{page}");
            page["text"].as_str().unwrap().to_owned()
        }
    };
    let mut ids: Vec<String> = Vec::new();
    let mut next = block.archive.clone();
    while let Some(id) = next {
        let archive: serde_json::Value = serde_json::from_str(&read(id).await).unwrap();
        let listed = archive["artifacts"].as_array().unwrap().iter();
        ids.splice(0..0, listed.map(|v| v.as_str().unwrap().to_owned()));
        next = archive["earlier"].as_str().map(str::to_owned);
    }
    ids.extend(block.artifacts.iter().cloned());
    assert_eq!(ids.len(), folds, "one span per fold, all reachable");
    let mut folded = String::new();
    for id in ids {
        folded.push_str(&read(id).await);
    }
    // Every question is in a fold or still verbatim in the last request.
    let verbatim = serde_json::to_string(&sent.messages).unwrap();
    for turn in 0..300 {
        let mark = format!("mark{turn}x");
        assert!(
            folded.contains(&mark) || verbatim.contains(&mark),
            "question {turn} is lost"
        );
    }
}

#[tokio::test(flavor = "current_thread")]
async fn a_fold_whose_block_cannot_fit_is_refused_and_the_history_kept() {
    // The request carries a 5,000-token summary (written under a larger window); the
    // summarizer fails, so the fold could only add to it.
    let mut huge = SummaryBlock::default();
    huge.narrative = "x".repeat(20_000);
    huge.folded_messages = 40;
    let mut messages = vec![Message::system("You are an SRE agent."), huge.to_message()];
    messages.extend(chat(60).into_iter().skip(1));
    let request = ChatRequest::new("m", messages);
    let inner = model(|_| MockReply::Error("overloaded".into()));
    // A 10,000-token window: due at 7,000, a block may take 2,500.
    let config = SummarizeConfig::new(10_000).with_keep_last(4);
    assert!(request.estimate_tokens() >= 7_000);
    let reply = SummarizeLayer::new(config)
        .unwrap()
        .layer(inner.clone())
        .oneshot(request.clone())
        .await
        .unwrap();
    assert_eq!(reply.report.summary_calls, 1);
    assert_eq!(reply.report.folded_messages, 0, "the fold was applied");
    let sent = inner.last_request().unwrap();
    assert_eq!(sent.messages, request.messages, "history kept whole");
}

#[tokio::test(flavor = "current_thread")]
async fn the_folds_a_summary_names_stay_readable_past_the_policys_artifact_count() {
    use llm_context_layers::{ContextPolicy, ContextPolicyLayer};
    // The request names more offloaded results (40) than the store keeps besides them
    // (`max_artifacts`, 32): the store evicts what the request does not name, so the
    // summary's folded spans must be among what it names.
    let inner = model(|_| MockReply::text(summary("early questions")));
    let policy =
        ContextPolicyLayer::new(ContextPolicy::default().with_max_context_tokens(1_000_000))
            .unwrap();
    let store = policy.artifact_store();
    let summarize = SummarizeLayer::new(SummarizeConfig::new(150_000).with_keep_last(81))
        .unwrap()
        .with_artifact_store(store.clone());
    let mut stack = tower::ServiceBuilder::new()
        .layer(summarize)
        .layer(policy)
        .service(inner.clone());
    let mut transcript = vec![Message::system("You are an SRE agent.")];
    for t in 0..200 {
        transcript.push(Message::user(format!(
            "question {t}: {}",
            "why? ".repeat(400)
        )));
        transcript.push(Message::assistant(format!("answer {t}")));
    }
    transcript.push(Message::user("now read the logs"));
    for i in 0..40 {
        let id = format!("c{i}");
        transcript.push(Message::assistant_tool_calls(
            "",
            vec![ToolCall::new(id.clone(), "read_log", json!({"page": i}))],
        ));
        transcript.push(Message::tool_result(
            id,
            "read_log",
            format!("{i} ").repeat(3_100),
        ));
    }
    let request = ChatRequest::new("m", transcript).with_scope(Scope::org("acme"));
    let reply = ServiceExt::<ChatRequest>::ready(&mut stack)
        .await
        .unwrap()
        .call(request)
        .await
        .unwrap();
    assert!(reply.report.folded_messages > 0, "{:?}", reply.report);
    assert_eq!(reply.report.offloaded_results, 40);
    let sent = inner.last_request().unwrap();
    let block = sent
        .messages
        .iter()
        .find_map(SummaryBlock::from_message)
        .unwrap();
    assert!(!block.artifacts.is_empty());
    for id in block.artifacts.iter().chain(&block.archive) {
        // The request named no session: its artifacts are under the inferred one.
        let artifact = store
            .get(&Scope::org("acme"), &sent.session, id)
            .await
            .unwrap();
        assert!(
            artifact.is_some(),
            "the fold {id} the summary names was evicted"
        );
    }
}

//! Cache-aware pruning through `ContextPolicyLayer`: the cut stays where it was while the
//! rest fits, so each request's history starts with the previous request's, and it is
//! remembered per tenant and session only.

use std::sync::Arc;

use llm_context_layers::mock::MockModel;
use llm_context_layers::{
    BoxError, ChatRequest, ChatResponse, ContextLimitError, ContextPolicy, ContextPolicyLayer,
    ContextPolicyService, Cut, CutStore, Cuts, LocalCutStore, Message, Scope,
};
use tower::{Layer, Service, ServiceExt};

type Agent = ContextPolicyService<MockModel>;

fn agent(policy: ContextPolicy) -> (Agent, MockModel, Arc<dyn CutStore>) {
    let model = MockModel::echo();
    let layer = ContextPolicyLayer::new(policy).unwrap();
    let cuts = layer.cut_store();
    (layer.layer(model.clone()), model, cuts)
}

/// allowance 1,200 tokens; a user turn is 82 tokens and the echo's answer about 88.
fn policy() -> ContextPolicy {
    ContextPolicy::default()
        .with_max_context_tokens(1_300)
        .with_reserve_tokens(100)
}

fn question(turn: usize) -> Message {
    Message::user(format!("question {turn}: {}", "why? ".repeat(60)))
}

/// An agent with cache-aware pruning whose cuts go to `store`.
fn agent_with_store(store: Arc<LocalCutStore>) -> (Agent, MockModel) {
    let model = MockModel::echo();
    let agent = ContextPolicyLayer::new(policy().with_low_water_tokens(500))
        .unwrap()
        .with_cut_store(store)
        .layer(model.clone());
    (agent, model)
}

async fn send(agent: &mut Agent, req: ChatRequest) -> Result<ChatResponse, BoxError> {
    ServiceExt::<ChatRequest>::ready(agent)
        .await?
        .call(req)
        .await
}

/// Runs `turns` turns of one conversation; returns each turn's sent request and report.
async fn converse(
    agent: &mut Agent,
    model: &MockModel,
    session: &str,
    turns: usize,
) -> Vec<(ChatRequest, ChatResponse)> {
    let mut history = vec![Message::system("You answer briefly.")];
    let mut out = Vec::new();
    for turn in 0..turns {
        history.push(question(turn));
        let req = ChatRequest::new("mock", history.clone()).with_session(session);
        let reply = send(agent, req).await.unwrap();
        history.push(reply.message.clone());
        out.push((model.last_request().unwrap(), reply));
    }
    out
}

#[tokio::test]
async fn a_kept_cut_makes_each_request_extend_the_previous_one() {
    let (mut agent, model, _) = agent(policy().with_low_water_tokens(500));
    let turns = converse(&mut agent, &model, "s1", 30).await;
    let mut reused = 0;
    let mut moved = 0;
    for pair in turns.windows(2) {
        let ((before, _), (after, reply)) = (&pair[0], &pair[1]);
        assert_eq!(
            reply.report.cut_moved,
            !reply.report.cut_reused && reply.report.pruned_turns > 0,
            "{:?}",
            reply.report
        );
        if reply.report.cut_reused {
            reused += 1;
            // The whole previous request is a prefix of this one: the provider's cache
            // of it is read, not written again.
            assert!(
                after.messages.starts_with(&before.messages),
                "turn {pair:?}"
            );
            assert_eq!(reply.report.removed_messages, 2 * reply.report.pruned_turns);
        } else if reply.report.pruned_turns > 0 {
            moved += 1;
            assert!(reply.report.after_tokens <= 500);
        }
    }
    assert!(reused >= 15, "reused {reused}, moved {moved}");
    assert!(moved <= 6, "reused {reused}, moved {moved}");
    // The system message is never part of what is cut.
    assert!(
        turns
            .iter()
            .all(|(sent, _)| sent.messages[0].text() == "You answer briefly.")
    );
}

#[tokio::test]
async fn without_a_low_water_mark_the_cut_moves_every_turn_and_the_report_says_so() {
    let (mut agent, model, cuts) = agent(policy());
    let turns = converse(&mut agent, &model, "s1", 20).await;
    let full = turns
        .iter()
        .position(|(_, r)| r.report.pruned_turns > 0)
        .unwrap();
    for (i, (_, reply)) in turns.iter().enumerate() {
        // The first request that prunes moves the start of the history too.
        assert_eq!(reply.report.cut_moved, i >= full, "turn {i}");
    }
    for pair in turns[full..].windows(2) {
        assert!(!pair[1].1.report.cut_reused);
        assert!(!pair[1].0.messages.starts_with(&pair[0].0.messages));
    }
    // Remembered for the report, but never kept: the policy prunes the minimum.
    let last = turns.last().unwrap().1.report.history_start;
    let remembered = cuts.get(&Scope::default(), "s1").unwrap().history.unwrap();
    assert_eq!(Some(remembered.position), last);
}

#[tokio::test]
async fn cuts_are_kept_per_tenant_and_session() {
    let (mut agent, model, cuts) = agent(policy().with_low_water_tokens(500));
    let turns = converse(&mut agent, &model, "s1", 12).await;
    let remembered = cuts
        .get(&Scope::default(), "s1")
        .and_then(|c| c.history)
        .expect("a cut is remembered");
    assert_eq!(
        Some(remembered.position),
        turns.last().unwrap().1.report.history_start
    );
    assert!(cuts.get(&Scope::default(), "s2").is_none());
    assert!(cuts.get(&Scope::org(7), "s1").is_none());

    // The conversation's last request, sent again, keeps its cut in its own session
    // only; the same history in another session, or for another tenant, starts from
    // scratch.
    let history = next_request(&turns[..turns.len() - 1]);
    for (session, scope, kept) in [
        ("s2", Scope::default(), false),
        ("s1", Scope::org(7), false),
        ("s1", Scope::default(), true),
    ] {
        let req = ChatRequest::new("mock", history.clone())
            .with_session(session)
            .with_scope(scope);
        let reply = send(&mut agent, req).await.unwrap();
        assert_eq!(reply.report.cut_reused, kept, "{session}");
        assert!(reply.report.pruned_turns > 0);
    }
}

/// The history as the conversation's next request carries it.
fn next_request(turns: &[(ChatRequest, ChatResponse)]) -> Vec<Message> {
    let mut history = vec![Message::system("You answer briefly.")];
    for (i, (_, r)) in turns.iter().enumerate() {
        history.push(question(i));
        history.push(r.message.clone());
    }
    history.push(question(turns.len()));
    history
}

#[tokio::test]
async fn a_cut_whose_neighbours_changed_is_not_reused() {
    let (mut agent, model, _) = agent(policy().with_low_water_tokens(500));
    let turns = converse(&mut agent, &model, "s1", 10).await;
    let (_, reply) = turns.last().unwrap();
    let cut = reply.report.history_start.unwrap();
    assert!(reply.report.pruned_turns > 0);

    // Rebuild the history as received on the last turn, then edit the message just
    // before the cut: the same position no longer names the same cut.
    let mut history = next_request(&turns[..turns.len() - 1]);
    let unedited = send(
        &mut agent,
        ChatRequest::new("mock", history.clone()).with_session("s1"),
    )
    .await
    .unwrap();
    assert!(unedited.report.cut_reused, "{:?}", unedited.report);
    history[cut - 1] = Message::assistant("edited");
    let edited = send(
        &mut agent,
        ChatRequest::new("mock", history).with_session("s1"),
    )
    .await
    .unwrap();
    assert!(!edited.report.cut_reused);
}

#[tokio::test]
async fn a_cut_is_found_where_the_caller_moved_it() {
    let (mut agent, model, _) = agent(policy().with_low_water_tokens(500));
    let turns = converse(&mut agent, &model, "s1", 10).await;
    let cut = turns.last().unwrap().1.report.history_start.unwrap();
    // The caller drops its two oldest messages itself: positions shift, the cut's
    // neighbours are the same.
    let mut history = next_request(&turns[..turns.len() - 1]);
    history.drain(1..3);
    let reply = send(
        &mut agent,
        ChatRequest::new("mock", history).with_session("s1"),
    )
    .await
    .unwrap();
    assert!(reply.report.cut_reused, "{:?}", reply.report);
    assert_eq!(reply.report.history_start, Some(cut - 2));
}

#[tokio::test]
async fn a_remembered_cut_never_reaches_into_protected_turns() {
    let store = Arc::new(LocalCutStore::default());
    let (mut agent, model) = agent_with_store(store.clone());
    let mut history = vec![Message::system("You answer briefly.")];
    for turn in 0..3 {
        history.push(question(turn));
        history.push(Message::assistant(format!("answer {turn}")));
    }
    history.push(question(3));
    // A cut before the newest turn: with `preserve_recent` 2, the two newest turns are
    // never pruned, so it is not kept, and a request that fits is sent whole. One before
    // the oldest prunable turn is kept, though the request would fit whole.
    for (position, kept) in [(history.len() - 1, false), (3, true)] {
        store.put(
            &Scope::default(),
            "s1",
            Cuts {
                history: Cut::at(&history, position),
                rounds: None,
                cleared: None,
                thinking: None,
            },
        );
        let req = ChatRequest::new("mock", history.clone()).with_session("s1");
        let reply = send(&mut agent, req).await.unwrap();
        assert_eq!(reply.report.cut_reused, kept);
        assert_eq!(reply.report.pruned_turns, usize::from(kept));
        let sent = model.last_request().unwrap().messages;
        let expected: Vec<_> = if kept {
            history[..1].iter().chain(&history[3..]).cloned().collect()
        } else {
            history.clone()
        };
        assert_eq!(sent, expected);
    }
}

#[tokio::test]
async fn a_request_that_cannot_fit_remembers_no_cut() {
    let (mut agent, _, cuts) = agent(policy().with_low_water_tokens(500));
    let huge = Message::user("word ".repeat(20_000));
    let req = ChatRequest::new("mock", vec![question(0), Message::assistant("a"), huge])
        .with_session("s1");
    let err = send(&mut agent, req).await.unwrap_err();
    assert!(err.downcast_ref::<ContextLimitError>().is_some());
    assert!(cuts.get(&Scope::default(), "s1").is_none());
}

#[tokio::test]
async fn a_custom_store_receives_the_cuts() {
    let store = Arc::new(LocalCutStore::default());
    let (mut agent, model) = agent_with_store(store.clone());
    converse(&mut agent, &model, "s1", 10).await;
    assert_eq!(store.len(), 1);
}

#[tokio::test]
async fn interleaved_conversations_without_ids_keep_their_own_cuts() {
    /// Two conversations, turn by turn in turn, sent with `ids` or with no session.
    async fn interleave(ids: bool) -> Vec<ChatRequest> {
        let (mut agent, model, cuts) = agent(policy().with_low_water_tokens(500));
        let mut histories = [
            vec![Message::system("You answer briefly.")],
            vec![Message::system("You answer in French.")],
        ];
        let mut sent = Vec::new();
        for turn in 0..20 {
            for (c, history) in histories.iter_mut().enumerate() {
                history.push(question(turn * 2 + c));
                let mut req = ChatRequest::new("mock", history.clone());
                if ids {
                    req = req.with_session(format!("conversation-{c}"));
                }
                let reply = send(&mut agent, req).await.unwrap();
                assert_eq!(reply.report.inferred_session.is_some(), !ids);
                history.push(reply.message);
                let mut request = model.last_request().unwrap();
                request.session.clear();
                sent.push(request);
            }
        }
        // Nothing is ever kept under the default session: each conversation has its own.
        assert!(cuts.get(&Scope::default(), "default").is_none());
        sent
    }
    let with_ids = interleave(true).await;
    let without = interleave(false).await;
    // The same requests are sent, cut for cut: each conversation keeps its own.
    assert_eq!(with_ids, without);
    let kept = without
        .chunks(2)
        .zip(without.chunks(2).skip(1))
        .filter(|(a, b)| b[0].messages.starts_with(&a[0].messages))
        .count();
    assert!(kept >= 10, "{kept}");
}

#[tokio::test]
async fn a_session_is_inferred_from_the_head_not_the_tail() {
    let (mut agent, model, _) = agent(policy());
    let head = vec![Message::system("You answer briefly."), question(0)];
    let mut longer = head.clone();
    longer.extend([Message::assistant("a"), question(1)]);
    let a = send(&mut agent, ChatRequest::new("mock", head.clone())).await;
    let b = send(&mut agent, ChatRequest::new("mock", longer)).await;
    let (a, b) = (a.unwrap().report, b.unwrap().report);
    assert_eq!(a.inferred_session, b.inferred_session);
    assert_eq!(
        model.last_request().unwrap().session,
        ChatRequest::new("mock", head).inferred_session()
    );
    // An explicit session is never replaced.
    let named = ChatRequest::new("mock", vec![question(2)]).with_session("mine");
    let reply = send(&mut agent, named).await.unwrap();
    assert_eq!(reply.report.inferred_session, None);
    assert_eq!(model.last_request().unwrap().session, "mine");
}

/// One user request and `calls` tool rounds of about 80 tokens each: a long tool loop is
/// a single turn, so only its rounds can go. Returns how often the first round sent
/// changed from one call to the next, and the report of each call.
async fn tool_loop(policy: ContextPolicy, calls: usize) -> (usize, Vec<ChatResponse>) {
    let (mut agent, model, _) = agent(policy);
    let mut history = vec![Message::user("Find out why the build fails.")];
    let mut firsts = Vec::new();
    let mut replies = Vec::new();
    for call in 0..calls {
        let id = format!("c{call}");
        let run = llm_context_layers::ToolCall::new(id.clone(), "run", serde_json::json!({}));
        history.push(Message::assistant_tool_calls("", vec![run]));
        history.push(Message::tool_result(
            id,
            "run",
            "error: refused\n".repeat(20),
        ));
        let req = ChatRequest::new("mock", history.clone()).with_session("loop");
        replies.push(send(&mut agent, req).await.unwrap());
        let sent = model.last_request().unwrap().messages;
        firsts.push(sent.get(1).cloned());
    }
    let moves = firsts.windows(2).filter(|w| w[0] != w[1]).count();
    (moves, replies)
}

#[tokio::test]
async fn in_a_long_tool_loop_rounds_are_dropped_in_steps_with_a_low_water_mark() {
    let (minimal, replies) = tool_loop(policy(), 60).await;
    // Without a low-water mark the oldest round goes on nearly every call once full.
    assert!(minimal > 30, "{minimal}");
    assert!(replies.iter().any(|r| r.report.dropped_rounds > 0));
    let (stepped, replies) = tool_loop(policy().with_low_water_tokens(500), 60).await;
    assert!(stepped * 4 < minimal, "{stepped} vs {minimal}");
    for r in &replies {
        assert!(r.report.after_tokens <= 1_200, "{:?}", r.report);
    }
    // A call that only reuses where the rounds stopped says the cut did not move.
    assert!(
        replies
            .iter()
            .any(|r| r.report.dropped_rounds > 0 && !r.report.cut_moved)
    );
}

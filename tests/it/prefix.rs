//! The prefix and the allowance: a 10,000-token prefix with `max_tokens` 12,000 never
//! makes a stack send more than the allowance, when the pruning layer can see the
//! prefix. And what happens when it cannot.

use std::sync::Arc;

use llm_context::mock::MockModel;
use llm_context::prefix::PrefixLayer;
use llm_context::tokens::{estimate_message_tokens, estimate_tool_tokens};
use llm_context::{
    BoxError, ChatRequest, ChatResponse, ContextPolicy, ContextPolicyLayer, Message, PrefixContext,
};
use tower::{Service, ServiceBuilder, ServiceExt};

const ALLOWANCE: usize = 12_000 - 1_000;

fn policy() -> ContextPolicy {
    ContextPolicy::default()
        .with_max_context_tokens(12_000)
        .with_reserve_tokens(1_000)
        .with_preserve_recent(1)
}

/// A prefix of exactly 10,000 estimated tokens: one system message of 4 + 39,984 / 4.
fn big_prefix() -> Arc<PrefixContext> {
    let p = Arc::new(PrefixContext::new("h".repeat(39_984)));
    assert_eq!(p.estimated_tokens(), 10_000);
    p
}

/// What a request costs as sent: prefix, tools, messages.
fn sent_tokens(req: &ChatRequest) -> usize {
    req.prefix.as_ref().map_or(0, |p| p.estimated_tokens())
        + estimate_tool_tokens(&req.tools)
        + estimate_message_tokens(&req.messages)
}

/// Thirty turns of ~100-token questions and answers through `stack`; returns the largest
/// request the model received and how many turns were pruned in all.
async fn converse<S>(mut stack: S, model: &MockModel, with_prefix: bool) -> (usize, usize)
where
    S: Service<ChatRequest, Response = ChatResponse, Error = BoxError>,
{
    let mut messages = Vec::new();
    let mut pruned = 0;
    for turn in 0..30 {
        messages.push(Message::user(format!(
            "question {turn}: {}",
            "q".repeat(360)
        )));
        let mut req = ChatRequest::new("claude-sonnet-4-6", messages.clone());
        if with_prefix {
            req = req.with_prefix(big_prefix());
        }
        let reply = ServiceExt::<ChatRequest>::ready(&mut stack)
            .await
            .unwrap()
            .call(req)
            .await
            .unwrap();
        pruned += reply.report.pruned_turns;
        messages.push(Message::assistant(format!(
            "answer {turn}: {}",
            "a".repeat(360)
        )));
    }
    let largest = model.requests().iter().map(sent_tokens).max().unwrap();
    (largest, pruned)
}

#[tokio::test]
async fn a_prefix_on_the_request_is_counted() {
    let model = MockModel::echo();
    let stack = ServiceBuilder::new()
        .layer(ContextPolicyLayer::new(policy()).unwrap())
        .layer(PrefixLayer::new())
        .service(model.clone());
    let (largest, pruned) = converse(stack, &model, true).await;
    assert!(largest <= ALLOWANCE, "sent {largest} > {ALLOWANCE}");
    assert!(pruned > 0, "the conversation outgrew the 1,000 tokens left");
    // Every request still carried the whole prefix.
    assert!(
        model
            .requests()
            .iter()
            .all(|r| r.prefix.as_deref() == Some(&*big_prefix()))
    );
}

#[tokio::test]
async fn a_prefix_layer_outside_the_policy_is_counted() {
    let model = MockModel::echo();
    let stack = ServiceBuilder::new()
        .layer(PrefixLayer::new().with_prefix(big_prefix()))
        .layer(ContextPolicyLayer::new(policy()).unwrap())
        .service(model.clone());
    let (largest, pruned) = converse(stack, &model, false).await;
    assert!(largest <= ALLOWANCE, "sent {largest} > {ALLOWANCE}");
    assert!(pruned > 0);
}

/// The order of the design (prune, then inject the prefix) with the layers used one by
/// one: the pruning pass runs before the prefix exists, so it budgets the whole 11,000
/// tokens for the conversation and the model receives the prefix on top. The composite
/// `ContextPolicyLayer` must give the planner the prefix it will inject; until it does,
/// this is what a hand-built stack in this order sends.
#[tokio::test]
async fn a_prefix_injected_inside_the_policy_is_not_counted() {
    let model = MockModel::echo();
    let stack = ServiceBuilder::new()
        .layer(ContextPolicyLayer::new(policy()).unwrap())
        .layer(PrefixLayer::new().with_prefix(big_prefix()))
        .service(model.clone());
    let (largest, _) = converse(stack, &model, false).await;
    assert!(largest > ALLOWANCE, "sent at most {largest}");
    // The conversation alone was kept within the allowance, the prefix came on top.
    let tail_max = model
        .requests()
        .iter()
        .map(|r| estimate_message_tokens(&r.messages))
        .max()
        .unwrap();
    assert!(tail_max <= ALLOWANCE && tail_max + 10_000 > ALLOWANCE);
}

/// What the composite must do, built from the pieces: inject the configured prefix
/// before the planner runs, mark breakpoints after it. The allowance holds, and the
/// breakpoints are those of what is sent.
#[tokio::test]
async fn inject_before_planning_and_mark_after() {
    let model = MockModel::echo();
    let prefix = PrefixLayer::new().with_prefix(big_prefix());
    let inject = prefix.clone();
    let stack = ServiceBuilder::new()
        .map_request(move |mut req: ChatRequest| {
            inject.inject(&mut req);
            req
        })
        .layer(ContextPolicyLayer::new(policy()).unwrap())
        .layer(PrefixLayer::new()) // marks only: the request already has its prefix
        .service(model.clone());
    let (largest, pruned) = converse(stack, &model, false).await;
    assert!(largest <= ALLOWANCE, "sent {largest} > {ALLOWANCE}");
    assert!(pruned > 0);
    let last = model.last_request().unwrap();
    assert_eq!(last.prefix.as_deref(), Some(&*big_prefix()));
    // 10,000 prefix tokens pass claude-sonnet-4-6's 2,048 minimum.
    assert!(last.cache.prefix.is_some() && last.cache.history.is_some());
}

//! The prune layer: Pruning whole old turns (and, inside a turn that alone is too long, old tool rounds).

use super::Stages;

super::fitting::fit_layer! {
/// Pruning whole old turns (and, inside a turn that alone is too long, old tool rounds).
///
/// ```
/// use llm_context_layers::fit::PruneLayer;
/// use llm_context_layers::mock::MockModel;
/// use llm_context_layers::{ChatRequest, ContextPolicy, Message};
/// use tower::{Layer, ServiceExt};
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() {
/// let policy = ContextPolicy::default().with_max_context_tokens(300).with_reserve_tokens(100);
/// let mut messages = vec![Message::system("Be brief.")];
/// for i in 0..10 {
///     messages.push(Message::user(format!("question {i} {}", "detail ".repeat(20))));
///     messages.push(Message::assistant(format!("answer {i} {}", "detail ".repeat(20))));
/// }
/// let model = PruneLayer::new(policy).unwrap().layer(MockModel::echo());
/// let reply = model.oneshot(ChatRequest::new("mock", messages)).await.unwrap();
/// assert!(reply.report.pruned_turns > 0);
/// assert!(reply.report.after_tokens <= 200);
/// # }
/// ```
///
/// A turn is a real user request and everything up to the next one, so a tool call and its
/// results always go together, whatever role the provider uses for results; system
/// messages right before a request (an agent's mid-conversation reminders) open the
/// request's turn, so they go with the request they speak to. The system
/// messages before the first turn and the newest `preserve_recent` turns are never
/// pruned. When those still do not fit, the oldest complete tool rounds of the kept turns
/// (an assistant tool-call message with all its results) are dropped, never a user
/// request and never the newest `preserve_recent` rounds. If that is not enough, the call
/// fails with [`ContextLimitError`](crate::ContextLimitError) and the inner service is
/// never called.
    PruneLayer => Prune, Stages::Prune
}

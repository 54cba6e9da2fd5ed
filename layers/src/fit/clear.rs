//! The clear layer: Clearing old tool results in place.

use super::Stages;

super::fitting::fit_layer! {
/// Clearing old tool results in place.
///
/// ```
/// use llm_context_layers::fit::ClearLayer;
/// use llm_context_layers::mock::MockModel;
/// use llm_context_layers::{ChatRequest, ContextPolicy, Message, ToolCall};
/// use serde_json::json;
/// use tower::{Layer, ServiceExt};
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() {
/// let policy = ContextPolicy::default()
///     .with_max_context_tokens(500)
///     .with_reserve_tokens(100)
///     .with_preserve_tool_results(1);
/// let mut messages = vec![Message::user("audit the logs")];
/// for i in 0..3 {
///     let id = format!("c{i}");
///     messages.push(Message::assistant_tool_calls("", vec![ToolCall::new(&id, "read_log", json!({"n": i}))]));
///     messages.push(Message::tool_result(&id, "read_log", "log line ".repeat(100)));
/// }
/// let model = ClearLayer::new(policy).unwrap().layer(MockModel::echo());
/// let reply = model.oneshot(ChatRequest::new("mock", messages)).await.unwrap();
/// assert_eq!(reply.report.cleared_results, 2);
/// assert_eq!(reply.report.removed_messages, 0);
/// # }
/// ```
///
/// A cleared result keeps its role, `tool_call_id` and `name`, so the model still sees what
/// it called and the provider's call/result pairing holds; only the content becomes a
/// small JSON stub saying what was there and, when an artifact store is configured, the id
/// of the artifact that holds it. Used alone, this layer clears what it may until the
/// request fits and never fails; [`ContextPolicyLayer`](crate::ContextPolicyLayer) combines
/// it with pruning and enforces the limit.
    ClearLayer => Clear, Stages::Clear
}

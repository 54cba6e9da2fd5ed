//! The example agent (`examples/agent`) over 2,000 turns: however long it runs, its
//! summary block, its record and its model calls per turn stay bounded, and every turn
//! is answered within its tool rounds. Before summaries were bounded, the block grew by
//! one artifact id per fold until it filled the allowance (about turn 321 at 5,000
//! tokens); the stack then dropped the turn's tool rounds and the model called its tool
//! forever.

#[allow(dead_code, unreachable_pub)]
#[path = "../../examples/agent/run.rs"]
mod agent;

use std::sync::Arc;

use llm_context::artifact::{ArtifactLimits, LocalArtifactStore};
use llm_context::durable::LocalContextStore;

#[tokio::test(flavor = "current_thread")]
async fn two_thousand_turns_run_in_bounded_context_and_calls() {
    const TURNS: usize = 2_000;
    let settings = agent::Settings {
        turns: TURNS,
        ..agent::Settings::default()
    };
    let stores = agent::Stores {
        contexts: Arc::new(LocalContextStore::new()),
        artifacts: Arc::new(LocalArtifactStore::new(
            ArtifactLimits::default().with_per_session(64),
        )),
    };
    let mut lines = 0usize;
    let stats = agent::run(&settings, &stores, &mut |_| lines += 1)
        .await
        .unwrap();
    assert_eq!(stats.turns, TURNS, "the run stopped early: {stats:?}");
    // Each turn takes its three tool rounds and an answer: no round was dropped, so no
    // turn hit the round limit.
    assert_eq!(stats.capped_turns, 0, "{stats:?}");
    // Four calls a turn, plus at most one summary a turn.
    assert!(stats.model_calls <= TURNS * 5, "{stats:?}");
    // A quarter of the 5,000-token window, and at most 8 ids (the default).
    assert!(stats.largest_summary_tokens <= 1_250, "{stats:?}");
    assert!(stats.most_summary_artifacts <= 8, "{stats:?}");
    // The record holds the newest turns only: it does not grow with the run.
    assert!(stats.most_messages <= 40, "{stats:?}");
    assert!(lines > TURNS);
}

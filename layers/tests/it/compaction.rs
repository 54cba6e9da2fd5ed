//! The explicit compaction of durable records: plan → summarize → apply, refusing on
//! version drift and on an empty summary, falling back without writing over earlier
//! fallbacks.

use std::sync::Arc;

use llm_context_layers::artifact::{ArtifactLimits, ArtifactReader, LocalArtifactStore};
use llm_context_layers::durable::{
    CompactError, Compactor, ContextRecord, ContextStore, LocalContextStore,
};
use llm_context_layers::mock::{MockModel, MockReply};
use llm_context_layers::summarize::{SummarizeConfig, SummaryBlock, is_summary_request};
use llm_context_layers::tokens::estimate_message_tokens;
use llm_context_layers::{BoxError, ChatRequest, ChatResponse, Message, Scope, WorkingContext};
use serde_json::json;
use tower::service_fn;

fn summary(narrative: &str) -> MockReply {
    MockReply::text(
        json!({"goals": ["ship"], "decisions": [], "open": [], "facts": [], "narrative": narrative})
            .to_string(),
    )
}

fn record(turns: usize) -> ContextRecord {
    let mut record = ContextRecord::new();
    record.messages.push(Message::system("rules"));
    for t in 0..turns {
        record
            .messages
            .push(Message::user(format!("question {t} about ENG-{t}")));
        record
            .messages
            .push(Message::assistant(format!("answer {t}")));
    }
    record.refresh_estimate();
    record
}

fn compactor() -> Compactor {
    Compactor::new(SummarizeConfig::new(100_000).with_keep_last(4)).unwrap()
}

async fn stored(store: &LocalContextStore, scope: &Scope, turns: usize) -> ContextRecord {
    let mut r = record(turns);
    r.version = store.save(scope, "root", &r).await.unwrap();
    r
}

#[tokio::test]
async fn apply_refuses_a_record_that_changed_since_the_plan() {
    let (store, scope) = (LocalContextStore::new(), Scope::org("acme"));
    let base = stored(&store, &scope, 10).await;
    let compactor = compactor();
    let plan = compactor.plan(&scope, "root", &base).unwrap();
    let mut model = MockModel::scripted([summary("ten turns")]);
    let summarized = compactor
        .summarize(&mut model, "m", &scope, "root", &plan)
        .await;

    // Another writer appends a turn meanwhile.
    let mut newer = base.clone();
    newer.messages.push(Message::user("one more"));
    newer.version = store.save(&scope, "root", &newer).await.unwrap();

    match compactor.apply(&newer, &plan, &summarized) {
        Err(CompactError::VersionDrift {
            planned: 1,
            current: 2,
        }) => {}
        other => panic!("expected a version drift, got {other:?}"),
    }
    // Same version, other content (a local edit not yet saved) is drift too.
    let mut edited = base.clone();
    edited.messages[1] = Message::user("rewritten");
    assert!(matches!(
        compactor.apply(&edited, &plan, &summarized),
        Err(CompactError::VersionDrift { .. })
    ));
    // On the record it was planned on, it applies: head kept, newest turns verbatim.
    let applied = compactor.apply(&base, &plan, &summarized).unwrap();
    assert_eq!(applied.messages[0], base.messages[0]);
    assert_eq!(
        applied.messages[1..],
        base.messages[base.messages.len() - 4..]
    );
    assert_eq!(applied.summary.unwrap().folded_messages, 16);
}

#[tokio::test]
async fn a_commit_during_summarization_makes_compact_refuse() {
    let store = Arc::new(LocalContextStore::new());
    let scope = Scope::org("acme");
    let base = stored(&store, &scope, 10).await;
    // The summarizer is slow: while it works, the agent checkpoints a new turn.
    let (writer_store, writer_scope) = (store.clone(), scope.clone());
    let mut summarizer = service_fn(move |req: ChatRequest| {
        let (store, scope) = (writer_store.clone(), writer_scope.clone());
        async move {
            assert!(is_summary_request(&req));
            let mut current = store.load(&scope, "root").await?.unwrap();
            current
                .messages
                .push(Message::user("a turn that arrived meanwhile"));
            store.save(&scope, "root", &current).await?;
            let reply = json!({"goals": ["x"], "decisions": [], "open": [], "facts": [],
                               "narrative": "n"});
            Ok::<_, BoxError>(ChatResponse::new(Message::assistant(reply.to_string())))
        }
    });
    let err = compactor()
        .compact(store.as_ref(), &scope, "root", &mut summarizer, "m", true)
        .await
        .unwrap_err();
    assert!(
        matches!(
            err,
            CompactError::VersionDrift {
                planned: 1,
                current: 2
            }
        ),
        "{err}"
    );
    assert!(err.to_string().contains("plan again"));
    let now = store.load(&scope, "root").await.unwrap().unwrap();
    assert_eq!(
        now.messages.len(),
        base.messages.len() + 1,
        "nothing folded"
    );
    assert!(now.summary.is_none());
}

#[tokio::test]
async fn an_empty_summary_is_refused_and_the_record_stays() {
    let (store, scope) = (LocalContextStore::new(), Scope::org("acme"));
    let base = stored(&store, &scope, 10).await;
    let mut model = MockModel::scripted([MockReply::text(
        r#"{"goals": [], "decisions": [], "open": [], "facts": [], "narrative": "  "}"#,
    )]);
    let err = compactor()
        .compact(&store, &scope, "root", &mut model, "m", true)
        .await
        .unwrap_err();
    assert!(matches!(err, CompactError::EmptySummary), "{err}");
    assert_eq!(store.load(&scope, "root").await.unwrap().unwrap(), base);
}

#[tokio::test]
async fn fallbacks_are_added_after_earlier_ones_never_over_them() {
    let (store, scope) = (LocalContextStore::new(), Scope::org("acme"));
    stored(&store, &scope, 10).await;
    let compactor = compactor();
    let mut failing = MockModel::scripted([MockReply::Error("overloaded".into())]);
    let first = compactor
        .compact(&store, &scope, "root", &mut failing, "m", true)
        .await
        .unwrap()
        .unwrap();
    assert!(first.fallback);
    let after_first = store.load(&scope, "root").await.unwrap().unwrap();
    let first_fallback = after_first.summary.clone().unwrap().fallback;
    assert!(first_fallback.contains("question 0"));

    // Ten more turns, then a second failed fold (invalid three times this time).
    let mut record = after_first;
    for t in 10..20 {
        record.messages.push(Message::user(format!("question {t}")));
        record
            .messages
            .push(Message::assistant(format!("answer {t}")));
    }
    record.version = store.save(&scope, "root", &record).await.unwrap();
    let mut invalid = MockModel::from_fn(|_| MockReply::text("no JSON today"));
    let second = compactor
        .compact(&store, &scope, "root", &mut invalid, "m", true)
        .await
        .unwrap()
        .unwrap();
    assert_eq!((second.fallback, second.summary_calls), (true, 3));
    let block = store
        .load(&scope, "root")
        .await
        .unwrap()
        .unwrap()
        .summary
        .unwrap();
    assert!(
        block.fallback.starts_with(&first_fallback),
        "the first fallback was written over"
    );
    assert!(block.fallback[first_fallback.len()..].contains("question 10"));
    assert_eq!(
        block.fallback.matches("folded without a summary").count(),
        2
    );
    assert_eq!(block.artifacts.len(), 2);
    // Identifiers of both folds are facts.
    for id in ["ENG-0", "ENG-9"] {
        assert!(
            block.facts.iter().any(|f| f == id),
            "{id} in {:?}",
            block.facts
        );
    }

    // A later successful summary keeps the fallbacks too.
    let mut record = store.load(&scope, "root").await.unwrap().unwrap();
    for t in 20..30 {
        record.messages.push(Message::user(format!("question {t}")));
        record
            .messages
            .push(Message::assistant(format!("answer {t}")));
    }
    record.version = store.save(&scope, "root", &record).await.unwrap();
    let mut good = MockModel::scripted([summary("thirty questions")]);
    compactor
        .compact(&store, &scope, "root", &mut good, "m", true)
        .await
        .unwrap();
    let last = store
        .load(&scope, "root")
        .await
        .unwrap()
        .unwrap()
        .summary
        .unwrap();
    assert_eq!(last.narrative, "thirty questions");
    assert_eq!(last.fallback, block.fallback);
}

#[tokio::test]
async fn only_due_records_compact_unless_asked() {
    let (store, scope) = (LocalContextStore::new(), Scope::org("acme"));
    let base = stored(&store, &scope, 10).await;
    // Due at exactly its estimate, with room for a summary in so small a window.
    let tight = Compactor::new(
        SummarizeConfig::new(base.token_estimate)
            .with_keep_last(4)
            .with_compact_at(1.0)
            .with_max_summary_share(0.9),
    )
    .unwrap();
    let roomy = compactor();
    let mut model = MockModel::scripted([summary("a"), summary("b")]);
    assert!(!roomy.is_due(&base) && tight.is_due(&base));
    assert_eq!(
        roomy
            .compact(&store, &scope, "root", &mut model, "m", false)
            .await
            .unwrap(),
        None
    );
    assert_eq!(model.calls(), 0);
    let report = tight
        .compact(&store, &scope, "root", &mut model, "m", false)
        .await
        .unwrap()
        .unwrap();
    assert_eq!((report.version, report.folded_messages), (2, 16));
    assert!(report.after_tokens < report.before_tokens);
    // Missing records and records with nothing to fold are not errors.
    assert_eq!(
        tight
            .compact(&store, &scope, "nope", &mut model, "m", true)
            .await
            .unwrap(),
        None
    );
}

#[tokio::test]
async fn a_replanned_fold_reuses_the_cached_summary() {
    let (store, scope) = (LocalContextStore::new(), Scope::org("acme"));
    let base = stored(&store, &scope, 10).await;
    let compactor = compactor();
    let mut model = MockModel::scripted([summary("once")]);
    let plan = compactor.plan(&scope, "root", &base).unwrap();
    let first = compactor
        .summarize(&mut model, "m", &scope, "root", &plan)
        .await;
    // A drifted apply is planned again on the same span: no second summary.
    let again = compactor.plan(&scope, "root", &base).unwrap();
    let second = compactor
        .summarize(&mut model, "m", &scope, "root", &again)
        .await;
    assert_eq!((first.calls, second.calls, model.calls()), (1, 0, 1));
    assert_eq!(first.block, second.block);
}

#[test]
fn a_compacted_record_round_trips_through_a_working_context() {
    let mut record = record(3);
    let mut block = SummaryBlock::default();
    block.narrative = "earlier".into();
    block.folded_messages = 12;
    record.summary = Some(block.clone());
    record.refresh_estimate();
    let ctx: WorkingContext = record.to_working();
    // The summary is sent right after the leading system messages.
    assert_eq!(SummaryBlock::from_message(&ctx.messages()[1]), Some(block));
    let back = ContextRecord::from_working(&ctx);
    assert_eq!(back, record);
    let request = record.to_request("m");
    assert_eq!(request.messages, ctx.messages());
}

/// Every folded-span artifact a summary block reaches, through `read_context_artifact`
/// as the model would read them: the block's own ids, then each archive in the chain.
/// Returns the span texts, oldest first, and the archives walked.
async fn reachable_spans(
    reader: &ArtifactReader,
    scope: &Scope,
    session: &str,
    block: &SummaryBlock,
) -> (Vec<String>, usize) {
    let read = |id: String| async move {
        let page = reader
            .read(
                scope,
                session,
                &json!({"artifact_id": id, "max_chars": 20_000}),
            )
            .await;
        assert!(page.get("error").is_none(), "{id} is not readable: {page}");
        assert!(page["next_offset"].is_null(), "{id} is longer than a page");
        page["text"].as_str().unwrap().to_owned()
    };
    let mut ids: Vec<String> = Vec::new();
    let mut next = block.archive.clone();
    let mut archives = 0;
    while let Some(id) = next {
        let archive: serde_json::Value = serde_json::from_str(&read(id).await).unwrap();
        assert_eq!(archive["context_summary_archive"], true, "{archive}");
        let listed: Vec<String> = archive["artifacts"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_str().unwrap().to_owned())
            .collect();
        ids.splice(0..0, listed); // an earlier archive lists earlier folds
        next = archive["earlier"].as_str().map(str::to_owned);
        archives += 1;
    }
    ids.extend(block.artifacts.iter().cloned());
    let mut texts = Vec::new();
    for id in ids {
        texts.push(read(id).await);
    }
    (texts, archives)
}

#[tokio::test]
async fn a_record_folded_a_hundred_times_stays_bounded_and_loses_nothing() {
    let (store, scope) = (LocalContextStore::new(), Scope::org("acme"));
    let artifacts = Arc::new(LocalArtifactStore::new(
        ArtifactLimits::default().with_per_session(1_000),
    ));
    let compactor = Compactor::new(
        SummarizeConfig::new(100_000)
            .with_keep_last(2)
            .with_max_artifacts(4),
    )
    .unwrap()
    .with_artifact_store(artifacts.clone());
    let mut model = MockModel::from_fn(|_| summary("folded"));
    let mut record = ContextRecord::new();
    record.messages.push(Message::system("rules"));
    let mut sizes = Vec::new();
    const TURNS: usize = 100;
    for t in 0..TURNS {
        record
            .messages
            .push(Message::user(format!("question {t} mark{t}x")));
        record
            .messages
            .push(Message::assistant(format!("answer {t}")));
        record.version = store.save(&scope, "root", &record).await.unwrap();
        compactor
            .compact(&store, &scope, "root", &mut model, "m", true)
            .await
            .unwrap();
        record = store.load(&scope, "root").await.unwrap().unwrap();
        if let Some(block) = &record.summary {
            assert!(
                block.artifacts.len() <= 4,
                "turn {t}: the block names {} artifacts",
                block.artifacts.len()
            );
            sizes.push(estimate_message_tokens(&[block.to_message()]));
        }
    }
    let block = record.summary.clone().unwrap();
    assert_eq!(block.folded_messages, 2 * (TURNS - 1));
    // The block is as large after 99 folds as after 10: ids do not pile up in it.
    assert!(
        sizes[98] <= sizes[9] + 20,
        "{} tokens after 10 folds, {} after 99",
        sizes[9],
        sizes[98]
    );
    // Every fold is reachable from the block, in order, and holds its turn.
    let reader = ArtifactReader::new(artifacts);
    let (spans, archives) = reachable_spans(&reader, &scope, "root", &block).await;
    assert_eq!(spans.len(), TURNS - 1, "one span artifact per fold");
    assert!(archives >= 2, "{archives} archives for {} folds", TURNS - 1);
    for (t, span) in spans.iter().enumerate() {
        assert!(span.contains(&format!("mark{t}x")), "fold {t}: {span}");
    }
    let kept = record
        .messages
        .iter()
        .any(|m| m.text().contains(&format!("mark{}x", TURNS - 1)));
    assert!(kept, "the newest turn is still verbatim");
}

#[tokio::test]
async fn a_summary_over_its_budget_is_asked_again_shorter() {
    let (store, scope) = (LocalContextStore::new(), Scope::org("acme"));
    stored(&store, &scope, 10).await;
    // A 10,000-token window: the block may take 2,500 tokens.
    let compactor = Compactor::new(SummarizeConfig::new(10_000).with_keep_last(4)).unwrap();
    let mut model = MockModel::scripted([summary(&"long ".repeat(8_000)), summary("short")]);
    let report = compactor
        .compact(&store, &scope, "root", &mut model, "m", true)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(report.summary_calls, 2, "the long answer was not accepted");
    let retry = model.last_request().unwrap();
    let asked = retry.messages.last().unwrap().text().into_owned();
    assert!(asked.contains("must fit in"), "{asked}");
    let record = store.load(&scope, "root").await.unwrap().unwrap();
    assert_eq!(record.summary.unwrap().narrative, "short");
}

#[tokio::test]
async fn a_block_that_cannot_fit_is_refused_and_the_record_stays() {
    let (store, scope) = (LocalContextStore::new(), Scope::org("acme"));
    // A record whose summary is already 5,000 tokens (written under a larger window).
    let mut record = record(10);
    let mut block = SummaryBlock::default();
    block.narrative = "x".repeat(20_000);
    block.folded_messages = 40;
    record.summary = Some(block);
    record.refresh_estimate();
    record.version = store.save(&scope, "root", &record).await.unwrap();
    // The summarizer fails, so the fold would keep the previous summary and add to it.
    let mut model = MockModel::from_fn(|_| MockReply::Error("overloaded".into()));
    let compactor = Compactor::new(SummarizeConfig::new(10_000).with_keep_last(4)).unwrap();
    let err = compactor
        .compact(&store, &scope, "root", &mut model, "m", true)
        .await
        .unwrap_err();
    match err {
        CompactError::SummaryTooLarge { tokens, budget } => {
            assert_eq!(budget, 2_500);
            assert!(tokens > 5_000, "{tokens}");
        }
        other => panic!("expected SummaryTooLarge, got {other}"),
    }
    assert_eq!(store.load(&scope, "root").await.unwrap().unwrap(), record);
}

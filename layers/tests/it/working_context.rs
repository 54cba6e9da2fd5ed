//! The `WorkingContext` specification, example by example, through the public API.
//!
//! Every expected value is the specification's own figure; where it describes a failure
//! mode of a dynamic-language design, a test shows this crate cannot reach it.

use std::collections::HashSet;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::Arc;

use llm_context_layers::tokens::{ApproxTokenCounter, TokenCounter, estimate_message_tokens};
use llm_context_layers::working::{
    AllOf, AnyOf, ContextSelection, LastNTurns, MergeMode, Not, RoleFilter, Since, Tagged,
};
use llm_context_layers::{
    FrozenContext, Message, MutationJournal, PrefixContext, Role, Scope, SharedContext, ToolCall,
    Usage, WorkingContext,
};
use proptest::prelude::*;
use serde_json::{Value, json};

fn texts(ctx: &WorkingContext) -> Vec<String> {
    ctx.messages()
        .iter()
        .map(|m| m.text().into_owned())
        .collect()
}

fn hash_of<T: Hash>(value: &T) -> u64 {
    let mut h = DefaultHasher::new();
    value.hash(&mut h);
    h.finish()
}

/// System, then three user/assistant turns: the page's slicing transcript.
fn house_rules() -> WorkingContext {
    let mut ctx = WorkingContext::new();
    ctx.append(Message::system("House rules."));
    for i in 0..3 {
        ctx.extend([
            Message::user(format!("q{i}")),
            Message::assistant(format!("a{i}")),
        ]);
    }
    ctx
}

fn cert_transcript() -> Vec<Message> {
    vec![
        Message::user("check the cert"),
        Message::assistant_tool_calls(
            "",
            vec![ToolCall::new(
                "c1",
                "openssl",
                json!({"host": "example.com", "port": 443}),
            )],
        ),
        Message::tool_result("c1", "openssl", "notAfter=2026-08-01"),
    ]
}

// --- The problem it solves -----------------------------------------------------------

#[test]
fn a_cached_prefix_costs_a_seventh_over_thirty_turns() {
    // claude-sonnet-4-6, $ per Mtok: input 3.00, output 15.00, cache read 0.30; priced
    // by the library's catalog.
    let cost = |u: Usage| llm_context_layers::catalog::cost("claude-sonnet-4-6", &u).unwrap();
    let round4 = |x: f64| (x * 10_000.0).round() / 10_000.0;
    let fresh = Usage::new(20_000, 200, 0, 0);
    let cached = Usage::new(0, 200, 20_000, 0);
    assert_eq!(round4(cost(fresh) * 30.0), 1.89);
    assert_eq!(round4(cost(cached) * 30.0), 0.27);

    // What earns the cached price: thirty turns that never touch the prefix, so every
    // request carries the same prefix and the same cache key.
    let prefix = Arc::new(PrefixContext::new("grounding ".repeat(8_000)));
    let mut ctx = WorkingContext::new().with_prefix(prefix.clone());
    let key = prefix.stable_hash();
    for turn in 0..30 {
        ctx.append(Message::user(format!("turn {turn}")));
        let request = ctx.to_request("claude-sonnet-4-6");
        assert!(Arc::ptr_eq(request.prefix.as_ref().unwrap(), &prefix));
        assert_eq!(request.prefix.unwrap().stable_hash(), key);
    }
}

// --- The smallest thing that works ----------------------------------------------------

#[tokio::test]
async fn the_smallest_thing_that_works() {
    let mut ctx = WorkingContext::new()
        .with_prefix(PrefixContext::new("You are a careful research assistant."));
    ctx.append(Message::user("What changed in the pricing table?"));
    ctx.note("ticket", "ENG-4412");

    assert_eq!(ctx.size(), 1);
    let roles: Vec<Role> = ctx.assembled().iter().map(|m| m.role).collect();
    assert_eq!(roles, [Role::System, Role::User]);
    assert_eq!(ctx.get("ticket").and_then(Value::as_str), Some("ENG-4412"));
    assert_eq!(ctx.tokens().await.unwrap(), 25);
}

// --- The prefix is a separate type ----------------------------------------------------

#[test]
fn the_prefix_renders_first_and_stays_frozen() {
    let prefix = Arc::new(
        PrefixContext::new("You are a careful research assistant.").with_grounding(vec![
            Message::system("Q3 pricing: input $3/Mtok, output $15/Mtok."),
        ]),
    );
    let mut ctx = WorkingContext::new().with_prefix(prefix.clone());
    ctx.append(Message::user("What is the output price?"));

    let lines: Vec<String> = ctx
        .assembled()
        .iter()
        .map(|m| format!("{} | {}", m.role, m.text()))
        .collect();
    assert_eq!(
        lines,
        [
            "system | You are a careful research assistant.",
            "system | Q3 pricing: input $3/Mtok, output $15/Mtok.",
            "user | What is the output price?",
        ]
    );

    // Every mutator, and the prefix is the one it started as (the Python page's
    // `FrozenInstanceError` is a compile error here: `PrefixContext` has no setters).
    let before = (*prefix).clone();
    ctx.extend([Message::assistant("$15/Mtok")])
        .note("k", 1)
        .update_scratchpad([("j", 2)])
        .clear_messages();
    ctx.messages_mut().push(Message::user("again"));
    assert!(Arc::ptr_eq(ctx.prefix(), &prefix));
    assert_eq!(**ctx.prefix(), before);

    // Structural equality: two prefixes built alike are one cache key.
    let twin = PrefixContext::new("You are a careful research assistant.").with_grounding(vec![
        Message::system("Q3 pricing: input $3/Mtok, output $15/Mtok."),
    ]);
    assert_eq!(twin, *prefix);
    assert_eq!(hash_of(&twin), hash_of(&*prefix));
    assert_eq!(twin.stable_hash(), prefix.stable_hash());
}

// --- Composition ----------------------------------------------------------------------

#[test]
fn fork_gives_an_independent_copy() {
    let mut parent = WorkingContext::new();
    parent.append(Message::user("Summarise the incident."));
    parent.note("owner", "sre");

    let mut child = parent.fork();
    child.append(Message::assistant("Root cause: expired cert."));
    child.note("owner", "me");

    assert_eq!(
        (parent.size(), parent.get("owner")),
        (1, Some(&json!("sre")))
    );
    assert_eq!((child.size(), child.get("owner")), (2, Some(&json!("me"))));
    assert!(Arc::ptr_eq(parent.prefix(), child.prefix()));
}

#[test]
fn merge_fans_in() {
    let hit = Message::tool_result("c1", "lookup", "cert expired 2026-08-01");
    let a = WorkingContext::new().with_messages([hit.clone()]);
    let b = WorkingContext::new().with_messages([hit]);

    let mut union = WorkingContext::new();
    union
        .merge(&a, MergeMode::Union)
        .merge(&b, MergeMode::Union);
    assert_eq!(union.messages().len(), 1);

    let mut concat = WorkingContext::new();
    concat
        .merge(&a, MergeMode::Concat)
        .merge(&b, MergeMode::Concat);
    assert_eq!(concat.messages().len(), 2);
}

#[test]
fn union_fan_in_of_real_tool_calls_works_and_keeps_distinct_arguments() {
    // The Python page: "TypeError: unhashable type: 'dict' on every real fan-in".
    // `Message` is `Hash` with JSON arguments inside, so that line cannot fail here.
    let call = |port: u16| {
        Message::assistant_tool_calls(
            "",
            vec![ToolCall::new(
                "c1",
                "openssl",
                json!({"host": "example.com", "port": port}),
            )],
        )
    };
    let a = WorkingContext::new().with_messages([call(443)]);
    let b = WorkingContext::new().with_messages([call(443), call(8443)]);
    let mut union = WorkingContext::new();
    union
        .merge(&a, MergeMode::Union)
        .merge(&b, MergeMode::Union);
    // Same call id, different arguments: both survive.
    assert_eq!(union.messages(), [call(443), call(8443)]);
}

#[test]
fn slice_narrows_the_tail() {
    let ctx = house_rules();
    assert_eq!(
        texts(&ctx.slice(&LastNTurns(1))),
        ["House rules.", "q2", "a2"]
    );
    assert_eq!(
        ctx.slice(&Not(RoleFilter::new([Role::Tool])))
            .messages()
            .len(),
        7
    );
}

#[test]
fn the_built_in_scopes_keep_what_the_table_says() {
    let mut ctx = house_rules();
    ctx.append(Message::tool_result("c1", "lookup", "hit"));
    // 0 sys, 1 q0, 2 a0, 3 q1, 4 a1, 5 q2, 6 a2, 7 tool
    let kept = |scope: &dyn ContextSelection| -> Vec<usize> {
        scope
            .surviving_indices(ctx.messages())
            .into_iter()
            .collect()
    };
    assert_eq!(kept(&LastNTurns(1)), [0, 5, 6, 7]);
    assert_eq!(
        kept(&RoleFilter::new([Role::User, Role::Tool])),
        [1, 3, 5, 7]
    );
    assert_eq!(kept(&Tagged::new("lookup")), [7]);
    assert_eq!(kept(&Since(6)), [6, 7]);
    assert_eq!(
        kept(&AllOf((Since(3), RoleFilter::new([Role::User])))),
        [3, 5]
    );
    assert_eq!(
        kept(&AnyOf((Since(7), RoleFilter::new([Role::System])))),
        [0, 7]
    );
    assert_eq!(kept(&Not(Since(2))), [0, 1]);
}

#[test]
fn scopes_are_hashable_serialisable_values() {
    let a = AllOf((LastNTurns(2), Not(RoleFilter::new([Role::System]))));
    let b = a.clone();
    assert_eq!(a, b);
    assert_eq!(hash_of(&a), hash_of(&b));
    let back: AllOf<(LastNTurns, Not<RoleFilter>)> =
        serde_json::from_str(&serde_json::to_string(&a).unwrap()).unwrap();
    assert_eq!(back, a);
    let cache: HashSet<_> = [a, b, back].into_iter().collect();
    assert_eq!(cache.len(), 1);
}

// --- The journal axis -----------------------------------------------------------------

#[test]
fn the_journal_ships_only_what_is_new() {
    let mut ctx = WorkingContext::new();
    ctx.journal_mut()
        .record(json!({"kind": "row_written", "id": 1, "agent_id": "enricher-a"}));
    ctx.journal_mut()
        .record(json!({"kind": "row_written", "id": 2, "agent_id": "enricher-a"}));

    assert_eq!(
        (ctx.journal().has_uncommitted(), ctx.journal().size()),
        (true, 2)
    );
    assert_eq!(ctx.journal().diff().len(), 2);

    ctx.journal_mut().mark_committed();
    assert!(!ctx.journal().has_uncommitted());

    ctx.journal_mut()
        .record(json!({"kind": "row_written", "id": 3, "agent_id": "enricher-a"}));
    assert_eq!(ctx.journal().diff().len(), 1);
    assert_eq!(ctx.journal().view().len(), 3);

    let seeded: MutationJournal<Value> =
        MutationJournal::from_snapshot([json!({"kind": "restored"})]);
    assert!(!seeded.has_uncommitted());
}

#[test]
fn the_journal_is_generic_over_the_projects_mutations() {
    #[derive(Clone, Debug, PartialEq)]
    enum Mutation {
        RowWritten { id: u32, agent_id: &'static str },
    }
    let mut parent: WorkingContext<Mutation> = WorkingContext::default();
    let mut child = parent.fork();
    child.journal_mut().record(Mutation::RowWritten {
        id: 1,
        agent_id: "enricher-a",
    });
    parent.merge(&child, MergeMode::Union);
    parent.merge(&WorkingContext::default(), MergeMode::Union);
    assert_eq!(
        parent.journal().view(),
        [Mutation::RowWritten {
            id: 1,
            agent_id: "enricher-a"
        }]
    );
}

// --- Snapshots and diffs --------------------------------------------------------------

#[test]
fn a_snapshot_with_a_nested_value_is_hashable_and_round_trips() {
    let mut ctx = WorkingContext::new();
    ctx.append(Message::user("hello"));
    ctx.note("plan", json!({"steps": ["a", "b"]}));

    let snap = ctx.freeze();
    assert_eq!(hash_of(&snap), hash_of(&ctx.freeze()));
    let text = serde_json::to_string(&snap).unwrap();
    assert_eq!(serde_json::from_str::<FrozenContext>(&text).unwrap(), snap);
    assert_eq!(snap.clone(), snap);

    ctx.append(Message::assistant("hi"));
    assert_eq!((snap.messages().len(), ctx.messages().len()), (1, 2));
}

#[test]
fn a_snapshot_does_not_alias_the_live_scratchpad() {
    let mut ctx = WorkingContext::new();
    ctx.note("plan", json!({"steps": ["a"]}));
    ctx.journal_mut().record(json!({"kind": "planned"}));
    let snap = ctx.freeze();
    // The live context is still live...
    ctx.get_mut("plan").unwrap()["steps"]
        .as_array_mut()
        .unwrap()
        .push(json!("b"));
    ctx.journal_mut().record(json!({"kind": "extended"}));
    // ...and the snapshot did not follow it, on either axis. (In Python, a custom leaf
    // object and the journal entries were shared with the live context; here a
    // snapshot owns every value it holds.)
    assert_eq!(snap.get("plan"), Some(&json!({"steps": ["a"]})));
    assert_eq!(snap.journal(), [json!({"kind": "planned"})]);

    // Rehydrating gives a plain, writable context again.
    let mut live = snap.clone().thaw();
    let steps = live.get("plan").unwrap()["steps"].clone();
    live.note("plan", json!({"steps": steps, "done": true}));
    assert_eq!(
        live.get("plan"),
        Some(&json!({"steps": ["a"], "done": true}))
    );
    assert_eq!(snap.get("plan"), Some(&json!({"steps": ["a"]})));
}

#[test]
fn snapshots_differing_only_in_a_value_share_a_bucket_not_an_identity() {
    let mut a = WorkingContext::new();
    a.note("stage", "plan");
    let mut b = WorkingContext::new();
    b.note("stage", "act");
    let (a, b) = (a.freeze(), b.freeze());
    assert_eq!(hash_of(&a), hash_of(&b));
    assert_ne!(a, b);
}

#[test]
fn diff_is_a_value() {
    let mut before = WorkingContext::new();
    before.append(Message::user("q1")).note("stage", "plan");
    let mut after = before.fork();
    after.append(Message::assistant("a1")).note("stage", "act");

    let d = after.diff(&before);
    assert_eq!(
        (d.messages_added().len(), d.messages_removed().len()),
        (1, 0)
    );
    assert_eq!(
        d.scratchpad_changes().iter().collect::<Vec<_>>(),
        [(&"stage".to_owned(), &json!("act"))]
    );
    assert!(!d.prefix_changed());

    // Python: a later update_scratchpad retroactively changed a diff already taken.
    after.update_scratchpad([("stage", "tampered")]);
    assert_eq!(d.scratchpad_changes()["stage"], json!("act"));
}

// --- Token counting -------------------------------------------------------------------

#[tokio::test]
async fn every_counter_agrees_on_the_seed_figures() {
    let transcript = cert_transcript();
    assert_eq!(estimate_message_tokens(&transcript), 37);
    assert_eq!(
        ApproxTokenCounter
            .count_messages(&transcript)
            .await
            .unwrap(),
        37
    );
    let ctx = WorkingContext::new().with_messages(transcript.clone());
    assert_eq!(ctx.tokens().await.unwrap(), 37);

    // An empty transcript is free; a tool call with empty content is not.
    assert_eq!(WorkingContext::new().tokens().await.unwrap(), 0);
    let call_only = WorkingContext::new().with_messages([transcript[1].clone()]);
    assert_eq!(call_only.tokens().await.unwrap(), 19);
}

#[tokio::test]
async fn tokens_count_the_prefix_too() {
    let ctx = WorkingContext::new()
        .with_prefix(PrefixContext::new("You are a careful research assistant."))
        .with_messages([Message::user("What changed in the pricing table?")]);
    let prefix_only = WorkingContext::new()
        .with_prefix(PrefixContext::new("You are a careful research assistant."));
    let tail_only =
        WorkingContext::new().with_messages([Message::user("What changed in the pricing table?")]);
    assert_eq!(
        ctx.tokens().await.unwrap(),
        prefix_only.tokens().await.unwrap() + tail_only.tokens().await.unwrap()
    );
    assert_eq!(ctx.tokens().await.unwrap(), 25);
}

// --- Scope and tenant isolation -------------------------------------------------------

#[test]
fn requests_carry_the_tenant_scope() {
    assert_eq!(Scope::org(1).key(), "org1:domNone");
    let base = WorkingContext::new().with_messages([Message::user("what is the number?")]);
    let one = base
        .fork()
        .with_scope(Scope::org(1))
        .to_request("fake-model");
    let other = base
        .fork()
        .with_scope(Scope::org(999))
        .to_request("fake-model");
    assert_eq!(one.messages, other.messages);
    assert_ne!(one.scope.key(), other.scope.key());
}

// --- Concurrency ----------------------------------------------------------------------

#[tokio::test]
async fn the_shared_board_keeps_each_sequence_whole() {
    let board = SharedContext::new(WorkingContext::new());
    let worker = |name: &'static str| {
        let board = board.clone();
        async move {
            board
                .apply_locked_async(|ctx| {
                    Box::pin(async move {
                        ctx.append(Message::assistant(format!("{name}: starting")));
                        tokio::task::yield_now().await;
                        ctx.append(Message::assistant(format!("{name}: done")));
                    })
                })
                .await
        }
    };
    tokio::join!(worker("a"), worker("b"), worker("c"));
    let ctx = board.try_into_inner().unwrap();
    assert_eq!(
        texts(&ctx),
        [
            "a: starting",
            "a: done",
            "b: starting",
            "b: done",
            "c: starting",
            "c: done"
        ]
    );
}

// --- What bites people ----------------------------------------------------------------

#[test]
fn a_positional_scope_refuses_matches_and_composes_in_index_space() {
    let ctx = house_rules();
    assert!(LastNTurns(2).matches(&ctx.messages()[1], 1).is_err());
    assert!(
        AllOf((LastNTurns(2), RoleFilter::new([Role::User])))
            .matches(&ctx.messages()[1], 1)
            .is_err()
    );

    assert_eq!(
        texts(&ctx.slice(&LastNTurns(2))),
        ["House rules.", "q1", "a1", "q2", "a2"]
    );
    let inside = AllOf((LastNTurns(2), Not(RoleFilter::new([Role::System]))));
    assert_eq!(texts(&ctx.slice(&inside)), ["q1", "a1", "q2", "a2"]);
}

#[test]
fn the_window_survives_every_combinator_on_six_messages() {
    // Python measured 2 / 6 / 0 here: the window evaporated inside AllOf and Not.
    let mut ctx = WorkingContext::new();
    for i in 0..3 {
        ctx.extend([
            Message::user(format!("q{i}")),
            Message::assistant(format!("a{i}")),
        ]);
    }
    let window = ctx.slice(&LastNTurns(2)).size();
    let users_in_window = ctx
        .slice(&AllOf((LastNTurns(2), RoleFilter::new([Role::User]))))
        .size();
    let outside = ctx.slice(&Not(LastNTurns(2))).size();
    assert_eq!((window, users_in_window, outside), (4, 2, 2));
}

#[test]
fn fork_then_concat_merge_duplicates_the_shared_history() {
    let mut parent = WorkingContext::new();
    parent.append(Message::user("Summarise the incident."));
    let mut child = parent.fork();
    child.append(Message::assistant("Root cause: expired cert."));

    let mut concat = parent.clone();
    concat.merge(&child, MergeMode::Concat);
    assert_eq!(concat.size(), 3);
    assert_eq!(concat.messages()[0], concat.messages()[1]);

    parent.merge(&child, MergeMode::Union);
    assert_eq!(parent.size(), 2);
    assert_eq!(
        texts(&parent),
        ["Summarise the incident.", "Root cause: expired cert."]
    );
}

#[test]
fn a_narrowed_request_goes_into_the_stack() {
    let ctx = house_rules()
        .with_prefix(PrefixContext::new("You are terse."))
        .with_scope(Scope::org("acme"))
        .with_session("ticket-4412");
    let request = ctx.slice(&LastNTurns(1)).to_request("gpt-5.4");
    assert_eq!(
        request.prefix.as_deref(),
        Some(&PrefixContext::new("You are terse."))
    );
    let tail: Vec<String> = request
        .messages
        .iter()
        .map(|m| m.text().into_owned())
        .collect();
    assert_eq!(tail, ["House rules.", "q2", "a2"]);
    assert_eq!(request.scope, Scope::org("acme"));
    assert_eq!(request.session, "ticket-4412");
}

// --- Invariants over any transcript ---------------------------------------------------

fn arb_message() -> impl Strategy<Value = Message> {
    let text = "[a-c]{0,3}";
    prop_oneof![
        text.prop_map(Message::system),
        text.prop_map(Message::user),
        text.prop_map(Message::assistant),
        text.prop_map(|t| Message::tool_result("c1", "lookup", t)),
        text.prop_map(|t| Message::user(t).with_tool_call_id("c2")),
    ]
}

fn arb_transcript() -> impl Strategy<Value = Vec<Message>> {
    prop::collection::vec(arb_message(), 0..24)
}

proptest! {
    #[test]
    fn a_scope_and_its_negation_partition_the_tail(messages in arb_transcript(), n in 0usize..5) {
        let ctx = WorkingContext::new().with_messages(messages.clone());
        let kept = ctx.slice(&LastNTurns(n)).size();
        let dropped = ctx.slice(&Not(LastNTurns(n))).size();
        prop_assert_eq!(kept + dropped, messages.len());
        // Every system message survives any window.
        let systems = messages.iter().filter(|m| m.role == Role::System).count();
        prop_assert_eq!(
            ctx.slice(&AllOf((LastNTurns(n), RoleFilter::new([Role::System])))).size(),
            systems
        );
    }

    #[test]
    fn combinators_are_set_operations(messages in arb_transcript(), n in 0usize..5, since in 0usize..24) {
        let a = LastNTurns(n).surviving_indices(&messages);
        let b = Since(since).surviving_indices(&messages);
        let all = AllOf((LastNTurns(n), Since(since))).surviving_indices(&messages);
        let any = AnyOf((LastNTurns(n), Since(since))).surviving_indices(&messages);
        prop_assert_eq!(all, a.intersection(&b).copied().collect());
        prop_assert_eq!(any, a.union(&b).copied().collect());
    }

    #[test]
    fn a_wider_window_never_keeps_less(messages in arb_transcript(), n in 0usize..5) {
        let narrow = LastNTurns(n).surviving_indices(&messages);
        let wide = LastNTurns(n + 1).surviving_indices(&messages);
        prop_assert!(narrow.is_subset(&wide));
    }

    #[test]
    fn equal_snapshots_hash_equally_and_diff_to_nothing(messages in arb_transcript(), key in "[a-c]{1,2}") {
        let mut ctx = WorkingContext::new().with_messages(messages);
        ctx.note(key, json!({"nested": [1, 2]}));
        let (a, b) = (ctx.freeze(), ctx.fork().freeze());
        prop_assert_eq!(&a, &b);
        prop_assert_eq!(hash_of(&a), hash_of(&b));
        prop_assert_eq!(a.stable_hash(), b.stable_hash());
        prop_assert!(a.diff(&b).is_empty());
        prop_assert!(ctx.diff(&ctx.fork()).is_empty());
    }

    #[test]
    fn union_merge_is_idempotent(left in arb_transcript(), right in arb_transcript()) {
        let mut ctx = WorkingContext::new().with_messages(left);
        let other = WorkingContext::new().with_messages(right);
        ctx.merge(&other, MergeMode::Union);
        let once = ctx.freeze();
        ctx.merge(&other, MergeMode::Union);
        prop_assert_eq!(ctx.freeze(), once);
    }

    #[test]
    fn a_diff_replays_a_forked_child(base in arb_transcript(), added in arb_transcript()) {
        let parent = WorkingContext::new().with_messages(base);
        let mut child = parent.fork();
        child.extend(added.clone());
        let d = child.diff(&parent);
        prop_assert_eq!(d.messages_added(), added.as_slice());
        prop_assert!(d.messages_removed().is_empty());
    }
}

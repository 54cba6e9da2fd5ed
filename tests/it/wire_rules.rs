//! The checks the client tests rely on can fail: the closed request schemas refuse
//! unknown keys, the rule checkers catch each rule, and the response fixtures validate.

use crate::support::fixture_json;
use crate::support::rules::{anthropic_request, openai_request, openai_response};
use crate::support::schema::{Root, assert_valid, errors, validator};
use serde_json::json;

const OPENAI: &str = "openai-chat-completions.schema.json";
const ANTHROPIC: &str = "anthropic-messages.schema.json";

#[test]
fn openai_requests_are_validated_closed() {
    let v = validator(OPENAI, Root::Request);
    let ok = json!({
        "model": "gpt-5.4", "temperature": 0.2, "prompt_cache_key": "k",
        "messages": [{"role": "system", "content": "s"}, {"role": "user", "content": "hi"}],
        "tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object", "anything": 1}}}]
    });
    assert_valid(&v, &ok, "a valid body");
    let mut unknown_top = ok.clone();
    unknown_top["temprature"] = json!(0.2);
    assert!(
        !errors(&v, &unknown_top).is_empty(),
        "an unknown top-level key passes"
    );
    let mut unknown_in_message = ok.clone();
    unknown_in_message["messages"][1]["cache_control"] = json!({"type": "ephemeral"});
    assert!(
        !errors(&v, &unknown_in_message).is_empty(),
        "an unknown message key passes"
    );
    let mut name_on_tool = ok;
    name_on_tool["messages"] = json!([
        {"role": "assistant", "tool_calls": [{"id": "c", "type": "function", "function": {"name": "f", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "c", "content": "x", "name": "f"}
    ]);
    assert!(
        !errors(&v, &name_on_tool).is_empty(),
        "`name` on a tool message passes"
    );
}

#[test]
fn anthropic_requests_are_validated_closed() {
    let v = validator(ANTHROPIC, Root::Request);
    let ok = json!({
        "model": "claude-sonnet-4-6", "max_tokens": 10,
        "system": [{"type": "text", "text": "s", "cache_control": {"type": "ephemeral", "ttl": "1h"}}],
        "metadata": {"user_id": "u"},
        "tools": [{"name": "f", "input_schema": {"type": "object", "x-anything": true}}],
        "messages": [
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": [{"type": "tool_use", "id": "t", "name": "f", "input": {"free": {"form": 1}}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t", "content": "ok"}]}
        ]
    });
    assert_valid(&v, &ok, "a valid body");
    let mut unknown = ok.clone();
    unknown["messages"][2]["content"][0]["name"] = json!("f");
    assert!(
        !errors(&v, &unknown).is_empty(),
        "an unknown block key passes"
    );
    let mut bad_ttl = ok.clone();
    bad_ttl["system"][0]["cache_control"]["ttl"] = json!("2h");
    assert!(!errors(&v, &bad_ttl).is_empty(), "a 2h ttl passes");
    let mut seed = ok;
    seed["seed"] = json!(1);
    assert!(!errors(&v, &seed).is_empty(), "an OpenAI-only key passes");
}

#[test]
fn openai_rules_are_enforced() {
    let call = |id: &str| json!({"id": id, "type": "function", "function": {"name": "f", "arguments": "{}"}});
    let good = json!({"model": "m", "tools": [{"type": "function", "function": {"name": "f"}}], "messages": [
        {"role": "user", "content": "q"},
        {"role": "assistant", "tool_calls": [call("a"), call("b")]},
        {"role": "tool", "tool_call_id": "b", "content": "1"},
        {"role": "tool", "tool_call_id": "a", "content": "2"},
        {"role": "assistant", "content": "done"}
    ]});
    assert_eq!(openai_request(&good), Vec::<String>::new());

    let mut orphan = good.clone();
    orphan["messages"][3]["tool_call_id"] = json!("z");
    assert!(!openai_request(&orphan).is_empty());
    let mut unanswered = good.clone();
    unanswered["messages"].as_array_mut().unwrap().remove(3);
    assert!(!openai_request(&unanswered).is_empty());
    let mut no_content = good;
    no_content["messages"][4] = json!({"role": "assistant"});
    assert!(!openai_request(&no_content).is_empty());
    let choice_without_tools = json!({"model": "m", "tool_choice": "auto", "messages": [{"role": "user", "content": "q"}]});
    assert!(!openai_request(&choice_without_tools).is_empty());
    let bad_name = json!({"model": "m", "tools": [{"type": "function", "function": {"name": "a b"}}], "messages": []});
    assert!(!openai_request(&bad_name).is_empty());
    assert!(
        !openai_response(
            &json!({"usage": {"prompt_tokens": 5, "prompt_tokens_details": {"cached_tokens": 6}}})
        )
        .is_empty()
    );
}

#[test]
fn anthropic_rules_are_enforced() {
    let cc = |ttl: Option<&str>| match ttl {
        Some(t) => json!({"type": "ephemeral", "ttl": t}),
        None => json!({"type": "ephemeral"}),
    };
    let good = json!({"model": "m", "max_tokens": 1,
    "tools": [{"name": "f", "input_schema": {"type": "object"}, "cache_control": cc(Some("1h"))}],
    "system": [{"type": "text", "text": "s", "cache_control": cc(None)}],
    "messages": [
        {"role": "user", "content": "q"},
        {"role": "assistant", "content": [{"type": "text", "text": "let me see"},
            {"type": "tool_use", "id": "a", "name": "f", "input": {}},
            {"type": "tool_use", "id": "b", "name": "f", "input": {}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "a"},
            {"type": "tool_result", "tool_use_id": "b", "cache_control": cc(None)},
            {"type": "text", "text": "and?"}]}
    ]});
    assert_eq!(anthropic_request(&good), Vec::<String>::new());

    let mut late_1h = good.clone();
    late_1h["messages"][2]["content"][1]["cache_control"] = cc(Some("1h"));
    assert!(
        !anthropic_request(&late_1h).is_empty(),
        "1h after 5m passes"
    );
    let mut five = good.clone();
    five["cache_control"] = cc(None);
    five["messages"][0]["content"] =
        json!([{"type": "text", "text": "q", "cache_control": cc(None)}]);
    five["messages"][2]["content"][2]["cache_control"] = cc(None);
    assert!(!anthropic_request(&five).is_empty(), "5 markers pass");
    let mut result_last = good.clone();
    result_last["messages"][2]["content"] = json!([{"type": "tool_result", "tool_use_id": "a"},
        {"type": "text", "text": "and?"}, {"type": "tool_result", "tool_use_id": "b"}]);
    assert!(
        !anthropic_request(&result_last).is_empty(),
        "a result after text passes"
    );
    let mut missing = good.clone();
    missing["messages"][2]["content"]
        .as_array_mut()
        .unwrap()
        .remove(1);
    assert!(
        !anthropic_request(&missing).is_empty(),
        "an unanswered tool_use passes"
    );
    let mut empty_text = good.clone();
    empty_text["messages"][1]["content"][0]["text"] = json!("");
    assert!(
        !anthropic_request(&empty_text).is_empty(),
        "an empty text block passes"
    );
    let mut system_message = good.clone();
    system_message["messages"]
        .as_array_mut()
        .unwrap()
        .insert(0, json!({"role": "system", "content": "s"}));
    assert!(
        !anthropic_request(&system_message).is_empty(),
        "a system message passes"
    );
    let mut twice = good;
    twice["tools"]
        .as_array_mut()
        .unwrap()
        .push(json!({"name": "f", "input_schema": {"type": "object"}}));
    assert!(
        !anthropic_request(&twice).is_empty(),
        "duplicate tool names pass"
    );
}

#[test]
fn response_fixtures_validate() {
    let openai = validator(OPENAI, Root::Response);
    for name in [
        "openai-response-text.json",
        "openai-response-tool-calls.json",
    ] {
        let body = fixture_json(name);
        assert_valid(&openai, &body, name);
        assert_eq!(openai_response(&body), Vec::<String>::new(), "{name}");
    }
    let anthropic = validator(ANTHROPIC, Root::Response);
    for name in [
        "anthropic-response-text.json",
        "anthropic-response-tool-use.json",
    ] {
        assert_valid(&anthropic, &fixture_json(name), name);
    }
    // The published OpenAI schema requires `refusal` and `logprobs`, which compatible
    // servers omit: that is why the client's parser must not (tested in `openai.rs`).
    let mut minimal = fixture_json("openai-response-text.json");
    minimal["choices"][0]
        .as_object_mut()
        .unwrap()
        .remove("logprobs");
    assert!(!errors(&openai, &minimal).is_empty());
}

#[test]
fn schema_copies_are_the_published_files() {
    for (name, root) in [
        (OPENAI, "#/$defs/CreateChatCompletionRequest"),
        (ANTHROPIC, "#/$defs/MessageCreateRequestBody"),
    ] {
        let doc = fixture_json(name);
        assert_eq!(
            doc["$schema"],
            "https://json-schema.org/draft/2020-12/schema"
        );
        assert_eq!(doc["x-roots"]["request"], root);
        assert!(doc["x-source"].is_object(), "{name} lost its provenance");
    }
}

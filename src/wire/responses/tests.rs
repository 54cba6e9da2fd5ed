//! The Responses format's reader and writers on their own: a body sent back unchanged
//! is the caller's bytes, items are grouped into turns as the stack needs them, and
//! what the proxy writes validates against OpenAI's published schema.

use axum::body::Bytes;
use llm_context_layers::stream::StreamEvent;
use llm_context_layers::{ChatResponse, Content, ContentPart, Message, Role, ToolCall, Usage};
use serde_json::{Value, json};

use super::answer::{response, written};
use super::faithful::faithful;
use super::read::request;
use super::serve::Events;
use crate::wire::served::EventWriter;

fn schema(root: &str) -> jsonschema::Validator {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/wire/openai-responses.schema.json"
    );
    let mut doc: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let target = doc["x-roots"][root].as_str().unwrap().to_owned();
    doc["$ref"] = Value::String(target);
    jsonschema::draft202012::new(&doc).unwrap()
}

fn valid(v: &jsonschema::Validator, instance: &Value) {
    let errors: Vec<String> = v.iter_errors(instance).map(|e| e.to_string()).collect();
    assert!(errors.is_empty(), "{errors:?}\n{instance:#}");
}

#[test]
fn a_body_the_stack_left_alone_goes_back_as_its_bytes() {
    for body in [
        // Whitespace, key order, an unknown field, an unknown item, a string input.
        "{ \"input\" : [ {\"type\":\"message\",\"role\":\"user\",\"content\":\"hi\"} ,\n \
         {\"type\":\"future_item\",\"x\":1} ], \"model\":\"gpt-5.5\", \"zz\": {\"a\": [1, 2]} }",
        r#"{"model":"gpt-5.5","input":"Sag hallo. 你好","instructions":"Be brief.","stream":false}"#,
        r#"{"model":"gpt-5.5"}"#,
    ] {
        let bytes = Bytes::from(body);
        let (req, kept) = request(&bytes).unwrap();
        let out = faithful(&req, &kept, false, None).unwrap();
        assert_eq!(std::str::from_utf8(&out).unwrap(), body);
    }
}

#[test]
fn a_streamed_call_and_a_cache_key_are_the_only_additions() {
    let body = r#"{"model":"gpt-5.5","input":"hi","stream":true}"#;
    let (req, kept) = request(&Bytes::from(body)).unwrap();
    let plain = faithful(&req, &kept, false, Some("k1".into())).unwrap();
    assert_eq!(
        std::str::from_utf8(&plain).unwrap(),
        r#"{"model":"gpt-5.5","input":"hi","stream":false,"prompt_cache_key":"k1"}"#
    );
    let streamed = faithful(&req, &kept, true, None).unwrap();
    assert_eq!(std::str::from_utf8(&streamed).unwrap(), body);
}

#[test]
fn calls_in_a_row_are_one_assistant_turn_and_their_outputs_results() {
    let body = json!({"model": "gpt-5.5", "instructions": "sys", "input": [
        {"role": "user", "content": "go"},
        {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "e"},
        {"type": "function_call", "call_id": "a", "name": "run", "arguments": "{\"n\":1}"},
        {"type": "custom_tool_call", "call_id": "b", "name": "apply_patch", "input": "*** Begin"},
        {"type": "function_call_output", "call_id": "a", "output": "one"},
        {"type": "custom_tool_call_output", "call_id": "b",
         "output": [{"type": "input_text", "text": "done"}]},
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "next"}]}]});
    let (req, _) = request(&Bytes::from(body.to_string())).unwrap();
    let roles: Vec<Role> = req.messages.iter().map(|m| m.role).collect();
    assert_eq!(
        roles,
        [
            Role::System,
            Role::User,
            Role::Assistant,
            Role::Tool,
            Role::Tool,
            Role::User
        ]
    );
    let turn = &req.messages[2];
    assert_eq!(turn.tool_calls.len(), 2);
    assert_eq!(turn.tool_calls[1].arguments, "*** Begin");
    // The reasoning is kept whole, in the turn it belongs to.
    let Content::Parts(parts) = &turn.content else {
        panic!("parts")
    };
    assert!(matches!(&parts[0], ContentPart::Opaque { kind, .. } if kind == "reasoning"));
    assert_eq!(req.messages[3].tool_call_id.as_deref(), Some("a"));
    assert_eq!(req.messages[3].name(), Some("run"));
    assert_eq!(req.messages[4].text(), "done");
}

#[test]
fn an_answer_is_read_with_its_reasoning_first_and_its_cached_tokens_apart() {
    let answer = json!({"id": "resp_1", "object": "response", "status": "completed",
        "model": "gpt-5.5", "output": [
            {"type": "reasoning", "id": "rs_9", "summary": [], "encrypted_content": "e9"},
            {"type": "function_call", "id": "fc_1", "call_id": "c1", "name": "run",
             "arguments": "{}", "status": "completed"}],
        "usage": {"input_tokens": 1_000, "input_tokens_details": {"cached_tokens": 800},
                  "output_tokens": 5, "output_tokens_details": {"reasoning_tokens": 3},
                  "total_tokens": 1_005}});
    let r = response(&answer).unwrap();
    assert_eq!(r.usage, Usage::new(200, 5, 800, 0));
    assert_eq!(r.message.tool_calls[0].id, "c1");
    let Content::Parts(parts) = &r.message.content else {
        panic!("parts")
    };
    assert!(matches!(&parts[0], ContentPart::Opaque { json, .. } if json.contains("e9")));
    assert_eq!(r.provider_fields["id"], "resp_1");
}

#[test]
fn what_the_proxy_writes_itself_validates() {
    let message = Message::assistant_tool_calls(
        "Ich lese die Datei. 读取",
        vec![ToolCall::new("call_1", "run", json!({"cmd": "ls"}))],
    );
    // Claude's thinking goes out as reasoning items, which validate too.
    let message = message.with_reasoning(vec![
        llm_context_layers::Reasoning::Thinking {
            thinking: "Erst lesen.".into(),
            signature: "sig".into(),
        },
        llm_context_layers::Reasoning::RedactedThinking { data: "xyz".into() },
    ]);
    let r = ChatResponse::new(message).with_usage(Usage::new(10, 2, 5, 0));
    let whole = written(&r, "gpt-5.5", 1_765_000_000, &Default::default());
    valid(&schema("response"), &whole);
    assert_eq!(whole["output"][0]["type"], "reasoning");
    assert_eq!(whole["output"][1]["type"], "reasoning");
    let mut events = Events::new("gpt-5.5".into(), 1_765_000_000);
    let frames = events.event(&StreamEvent::Done(Box::new(r)));
    let stream = schema("stream-event");
    assert!(frames.len() >= 4);
    for frame in frames {
        let text = std::str::from_utf8(&frame).unwrap();
        let data = text.lines().find_map(|l| l.strip_prefix("data: ")).unwrap();
        valid(&stream, &serde_json::from_str(data).unwrap());
    }
}

#[test]
fn a_stream_is_read_into_the_whole_answer_its_reasoning_included() {
    use super::stream::ResponsesDecoder;
    use crate::client::Reading;
    use crate::sse::Decoder;
    use std::collections::VecDeque;

    let reading = Reading {
        redactor: Default::default(),
        max_response_bytes: 1 << 20,
    };
    let reasoning = json!({"type": "reasoning", "id": "rs_1", "summary": [],
                           "encrypted_content": "e1"});
    let call = json!({"type": "function_call", "id": "fc_1", "call_id": "c1", "name": "run",
                      "arguments": "{\"n\":1}", "status": "completed"});
    let events = [
        json!({"type": "response.output_item.done", "output_index": 0, "item": reasoning}),
        json!({"type": "response.output_item.added", "output_index": 1,
               "item": {"type": "function_call", "id": "fc_1", "call_id": "c1", "name": "run",
                        "arguments": ""}}),
        json!({"type": "response.function_call_arguments.delta", "output_index": 1,
               "delta": "{\"n\":1}"}),
        json!({"type": "response.output_item.done", "output_index": 1, "item": call}),
        // A server that lists no output in its last event.
        json!({"type": "response.completed", "response": {"id": "resp_1", "status": "completed",
               "output": [], "usage": {"input_tokens": 9, "output_tokens": 2}}}),
    ];
    let mut decoder = ResponsesDecoder::default();
    let mut out = VecDeque::new();
    let mut ending = None;
    for e in events {
        let event = eventsource_stream::Event {
            event: e["type"].as_str().unwrap().to_owned(),
            data: e.to_string(),
            ..Default::default()
        };
        ending = decoder
            .decode(&event, &mut out, &reading)
            .unwrap()
            .or(ending);
    }
    let ending = ending.expect("an ending");
    let message = ending.message.expect("the whole answer");
    assert_eq!(message.tool_calls[0].arguments, "{\"n\":1}");
    let Content::Parts(parts) = &message.content else {
        panic!("parts")
    };
    assert!(matches!(&parts[0], ContentPart::Opaque { json, .. } if json.contains("e1")));
    // The deltas were read too: the call's start and its arguments.
    assert!(
        out.iter()
            .any(|e| matches!(e, StreamEvent::ToolCall(d) if d.arguments == "{\"n\":1}"))
    );
    // A flat error event is a typed error.
    let error = eventsource_stream::Event {
        event: "error".into(),
        data: json!({"type": "error", "code": "server_error", "message": "boom"}).to_string(),
        ..Default::default()
    };
    let Err(e) = ResponsesDecoder::default().decode(&error, &mut VecDeque::new(), &reading) else {
        panic!("an error event read as no error");
    };
    assert!(e.to_string().contains("boom"), "{e}");
}

#[test]
fn a_turn_whose_call_inputs_were_edited_keeps_its_items_ids_and_kinds() {
    let body = json!({"model": "gpt-5.5", "input": [
        {"role": "user", "content": "go"},
        {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "e"},
        {"type": "function_call", "id": "fc_1", "call_id": "a", "name": "run",
         "arguments": "{\"cmd\":\"ls\"}", "status": "completed"},
        {"type": "custom_tool_call", "id": "ctc_1", "call_id": "b", "name": "apply_patch",
         "input": "*** Begin Patch"},
        {"type": "function_call_output", "call_id": "a", "output": "x"},
        {"type": "custom_tool_call_output", "call_id": "b", "output": "done"}],
        "tools": [{"type": "function", "name": "run", "description": "", "strict": false,
                   "parameters": {"type": "object"}}]})
    .to_string();
    let (mut req, kept) = request(&Bytes::from(body.clone())).unwrap();
    // What clearing a call's inputs does to the turn.
    let turn = &mut req.messages[1];
    let mut calls = turn.tool_calls.to_vec();
    calls[1] = ToolCall::from_text("b", "apply_patch", "{\"cleared\":true}");
    *turn = Message::assistant_tool_calls(turn.content.clone(), calls)
        .with_reasoning(turn.reasoning().to_vec());
    let out: Value = serde_json::from_slice(&faithful(&req, &kept, false, None).unwrap()).unwrap();
    let sent: Value = serde_json::from_str(&body).unwrap();
    let input = out["input"].as_array().unwrap();
    assert_eq!(input.len(), 6);
    for i in [0, 1, 2, 4, 5] {
        assert_eq!(input[i], sent["input"][i], "item {i}");
    }
    assert_eq!(
        input[3],
        json!({"type": "custom_tool_call", "id": "ctc_1", "call_id": "b",
               "name": "apply_patch", "input": "{\"cleared\":true}"})
    );
}

#[test]
fn without_tools_the_callers_tool_choice_is_left_out() {
    for body in [
        r#"{"model":"gpt-5.5","tool_choice":"required","input":"hi","tools":[{"type":"function","name":"f","description":"","strict":false,"parameters":{"type":"object"}}]}"#,
        r#"{"tool_choice": "required" , "model":"gpt-5.5","input":"hi","tools":[{"type":"function","name":"f","description":"","strict":false,"parameters":{"type":"object"}}]}"#,
    ] {
        let (mut req, kept) = request(&Bytes::from(body)).unwrap();
        // The stack's own summary request: the caller's envelope, no tools.
        req.tools.clear();
        let out = faithful(&req, &kept, false, None).unwrap();
        let out: Value = serde_json::from_slice(&out).expect("valid JSON");
        assert!(out.get("tool_choice").is_none(), "{out}");
        assert_eq!(out["tools"], json!([]));
        assert_eq!(out["model"], "gpt-5.5");
    }
}

#[test]
fn an_answer_sent_back_keeps_its_call_items_ids_kinds_and_order() {
    use super::write::render_message;
    let answer = json!({"id": "resp_1", "status": "completed", "output": [
        {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "e1"},
        {"type": "function_call", "id": "fc_1", "call_id": "a", "name": "run",
         "arguments": "{}", "status": "completed"},
        {"type": "reasoning", "id": "rs_2", "summary": [], "encrypted_content": "e2"},
        {"type": "custom_tool_call", "id": "ctc_1", "call_id": "b", "name": "apply_patch",
         "input": "*** Begin"}]});
    let r = response(&answer).unwrap();
    assert_eq!(r.message.tool_calls.len(), 2);
    let items = render_message(&r.message).unwrap();
    assert_eq!(items, answer["output"].as_array().unwrap().clone());
    // A call the stack took out of the message (a read it answered) is not sent back.
    let m = Message::assistant_tool_calls(
        r.message.content.clone(),
        vec![r.message.tool_calls[1].clone()],
    );
    let items = render_message(&m).unwrap();
    let kinds: Vec<&str> = items.iter().map(|i| i["type"].as_str().unwrap()).collect();
    assert_eq!(kinds, ["reasoning", "reasoning", "custom_tool_call"]);
}

#[test]
fn a_request_written_in_code_gets_breakpoints_where_the_model_takes_them() {
    use llm_context_layers::{CacheHints, CacheTtl, ChatRequest};
    let messages = vec![
        Message::system("Be brief."),
        Message::user("Lies die Datei. 读取"),
        Message::assistant_tool_calls("", vec![ToolCall::new("c1", "read", json!({}))]),
        Message::tool_result("c1", "read", "Inhalt"),
        Message::assistant("Gelesen."),
        Message::user("Und jetzt?"),
    ];
    let mut req = ChatRequest::new("gpt-5.6-terra", messages);
    req.cache = CacheHints::all(CacheTtl::FiveMinutes);
    let unmarked = super::write::rendered(&req, false).unwrap();
    assert!(!unmarked.to_string().contains("prompt_cache_breakpoint"));
    req.cache.on_content_parts = true;
    let body = super::write::rendered(&req, false).unwrap();
    valid(&schema("request"), &body);
    let input = body["input"].as_array().unwrap();
    let marked: Vec<&str> = input
        .iter()
        .filter(|i| i.to_string().contains("prompt_cache_breakpoint"))
        .map(|i| i["type"].as_str().unwrap_or("message"))
        .collect();
    // The result before the answer that ends the stable history, and the newest request.
    assert_eq!(marked, ["function_call_output", "message"]);
    assert_eq!(input.last().unwrap()["content"][0]["text"], "Und jetzt?");
}

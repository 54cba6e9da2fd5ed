//! The body's tests: reading, writing back, and what is kept beside the model.

use serde_json::{Value, json};

use super::residue::{CallKept, Digests, Kept, PartKept};
use super::{
    BodyContext, body_from_request, message_from_wire, message_to_wire, request_from_body,
    request_from_str, write_body,
};
use llm_context_layers::ToolChoice;
use llm_context_layers::{ChatRequest, Content, Message, Role, WireFormat};
#[test]
fn round_trips_every_field() {
    let body = json!({
        "model": "gpt-5.4",
        "temperature": 0.2,
        "stream": false,
        "metadata": {"k": "v"},
        "messages": [
            {"role": "developer", "content": "rules"},
            {"role": "user", "content": [{"type": "text", "text": "look"},
                {"type": "image_url", "image_url": {"url": "data:image/png;base64,AA", "detail": "low"}}]},
            {"role": "assistant", "content": null, "refusal": null,
             "tool_calls": [{"id": "c1", "type": "function",
                "function": {"name": "f", "arguments": "{\"b\": 1, \"a\": 2}"}}]},
            {"role": "tool", "tool_call_id": "c1", "content": "ok"}
        ],
        "tools": [{"type": "function", "function": {"name": "f", "description": "d",
                   "parameters": {"type": "object"}}}]
    });
    let (req, ctx) = request_from_body(&body).unwrap();
    assert_eq!(req.messages[0].role, Role::System);
    assert_eq!(
        req.messages[2].tool_calls[0].arguments_value(),
        json!({"a": 2, "b": 1})
    );
    assert_eq!(req.params.temperature, Some(0.2));
    assert_eq!(body_from_request(&req, &ctx), body);
}

#[test]
fn tool_choice_and_parallel_calls_are_typed_and_written_back_as_they_came() {
    let body = json!({"model": "m", "messages": [{"role": "user", "content": "q"}],
                      "tools": [{"type": "function", "function": {"name": "f"}}],
                      "tool_choice": "required", "parallel_tool_calls": false, "top_k": 5});
    let (req, ctx) = request_from_body(&body).unwrap();
    assert_eq!(req.params.tool_choice, Some(ToolChoice::Required));
    assert_eq!(req.params.parallel_tool_calls, Some(false));
    assert_eq!(req.params.extra_format, Some(WireFormat::ChatCompletions));
    let back = body_from_request(&req, &ctx);
    assert_eq!(back["tool_choice"], "required");
    assert_eq!(back["parallel_tool_calls"], false);
    assert_eq!(back["top_k"], 5);
    // A form only Chat Completions has stays among the fields, as written.
    let allowed = json!({"type": "allowed_tools",
                         "allowed_tools": {"mode": "auto", "tools": [{"type": "function", "function": {"name": "f"}}]}});
    let mut body = body;
    body["tool_choice"] = allowed.clone();
    let (req, ctx) = request_from_body(&body).unwrap();
    assert_eq!(req.params.tool_choice, None);
    assert_eq!(req.params.extra["tool_choice"], allowed);
    assert_eq!(body_from_request(&req, &ctx)["tool_choice"], allowed);
}

#[test]
fn errors_name_the_path() {
    let bad = json!({"model": "m", "messages": [{"role": "user"}, {"role": "wizard"}]});
    let err = request_from_body(&bad).unwrap_err();
    assert_eq!(err.path, "messages[1].role");
    let bad = json!({"model": "m", "messages": [{"role": "tool", "content": "x"}]});
    assert_eq!(
        request_from_body(&bad).unwrap_err().path,
        "messages[0].tool_call_id"
    );
    assert_eq!(request_from_body(&json!([])).unwrap_err().path, "$");
}
/// What `write_body` writes, read back as a value.
fn written(req: &ChatRequest, ctx: &BodyContext) -> Value {
    let mut out = Vec::new();
    write_body(req, ctx, &mut out).unwrap();
    serde_json::from_slice(&out).unwrap()
}

/// A body read from `text` and written back, by both writers, equals `text` as JSON.
fn assert_round_trip(text: &str) {
    let (req, ctx) = request_from_str(text).unwrap();
    let body: Value = serde_json::from_str(text).unwrap();
    assert_eq!(body_from_request(&req, &ctx), body);
    assert_eq!(written(&req, &ctx), body);
}

#[test]
fn every_field_the_model_does_not_represent_comes_back() {
    let body = json!({
        "model": "m",
        "messages": [
            {"role": "developer", "content": "rules", "x_vendor": {"deep": [1, 2.5, null]}},
            {"role": "user", "content": [
                {"type": "text", "text": "look", "cache_control": {"type": "ephemeral"}},
                {"type": "image_url", "image_url": {"url": "https://x/y.png", "detail": null, "x_px": 4}},
                {"type": "image_url", "image_url": {"url": "https://x/z.png", "detail": 3}}
            ], "name": null},
            {"role": "assistant", "content": "", "refusal": null, "audio": {"id": "a1"},
             "tool_calls": [
                {"id": "c1", "function": {"name": "f", "arguments": "{\"b\": 1, \"a\": 2}"}, "index": 0},
                {"id": "c2", "type": "function", "function": {"name": "g", "arguments": {"k": 1}, "strict": true}},
                {"id": "c3", "type": "custom", "function": {"name": "h"}},
                {"id": "c4", "type": "function", "function": {"name": "i", "arguments": "{oops"}}
             ]},
            {"role": "tool", "tool_call_id": "c1", "content": "ok", "observation": true},
            {"role": "tool", "tool_call_id": "c2", "content": null},
            {"role": "tool", "tool_call_id": "c3"},
            {"role": "tool", "tool_call_id": "c4", "content": [], "tool_calls": []},
            {"role": "assistant", "content": [], "tool_calls": [
                {"id": "c5", "type": "function", "function": {"name": "f", "arguments": "{}"}}]},
            {"role": "assistant", "tool_calls": null, "tool_call_id": null}
        ]
    });
    let text = body.to_string();
    assert_round_trip(&text);
    let (req, ctx) = request_from_str(&text).unwrap();
    assert_eq!(req.messages[0].role, Role::System);
    assert_eq!(
        req.messages[2].tool_calls[0].arguments_value(),
        json!({"a": 2, "b": 1})
    );
    assert_eq!(
        req.messages[2].tool_calls[1].arguments_value(),
        json!({"k": 1})
    );
    assert_eq!(
        req.messages[2].tool_calls[3].arguments_value(),
        json!("{oops")
    );
    // Only what the model does not represent is kept: not the content.
    let kept: Vec<usize> = ctx.kept.iter().map(|(i, _)| *i).collect();
    assert_eq!(kept, [0, 1, 2, 3, 4, 5, 6, 7, 8]);
    assert_eq!(
        String::from_utf8_lossy(&ctx.kept(3).unwrap().members.0),
        r#""observation":true"#
    );
}

#[test]
fn a_message_the_model_writes_as_it_came_keeps_nothing() {
    let body = json!({"model": "m", "messages": [
        {"role": "system", "content": "s"},
        {"role": "user", "content": [{"type": "text", "text": "a"},
            {"type": "image_url", "image_url": {"url": "u", "detail": "low"}}]},
        {"role": "assistant", "content": null, "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{\"a\":1}"}}]},
        {"role": "tool", "tool_call_id": "c1", "name": "f", "content": "r"}
    ]});
    let (req, ctx) = request_from_body(&body).unwrap();
    assert!(ctx.kept.is_empty(), "{:?}", ctx.kept);
    assert_eq!(body_from_request(&req, &ctx), body);
}

#[test]
fn fields_in_an_unusual_order_are_read_and_written_back() {
    // Keys in reverse order, the messages before the model, an escaped key and role.
    let text = r#"{"messages": [
            {"x_first": [1, {"b": 2}], "content": "hi", "role": "user"},
            {"tool_calls": [{"function": {"arguments": "{}", "name": "f"}, "type": "function", "id": "c1"}],
             "content": null, "role": "assistant"},
            {"content": "r", "tool_call_id": "c1", "role": "tool", "x_\u00e9": 1},
            {"role": "\u0075ser", "content": "again"}
        ], "temperature": 0, "model": "m"}"#;
    assert_round_trip(text);
    let (req, ctx) = request_from_str(text).unwrap();
    assert_eq!(req.model, "m");
    assert_eq!(req.messages[0].content.as_str(), Some("hi"));
    assert_eq!(req.messages[1].tool_calls[0].name, "f");
    assert_eq!(req.messages[2].tool_call_id.as_deref(), Some("c1"));
    assert_eq!(req.messages[3].role, Role::User);
    assert_eq!(ctx.kept.len(), 2);
}

/// A transcript of `turns` identical turns, each message marked with its own `x_n`.
fn repeated_turns(turns: usize) -> Value {
    let mut messages = vec![json!({"role": "system", "content": "s", "x_n": "system"})];
    for n in 0..turns {
        messages.push(json!({"role": "user", "content": "continue", "x_n": n}));
        messages.push(json!({"role": "assistant", "content": "ok", "x_n": n}));
    }
    json!({"model": "m", "messages": messages})
}

#[test]
fn of_identical_messages_each_kept_one_gets_its_own_fields() {
    let (mut req, ctx) = request_from_body(&repeated_turns(4)).unwrap();
    // What pruning leaves: the head, and the newest two turns.
    req.messages.drain(1..5);
    let sent = body_from_request(&req, &ctx);
    let marks: Vec<&Value> = sent["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| &m["x_n"])
        .collect();
    assert_eq!(
        marks,
        [&json!("system"), &json!(2), &json!(2), &json!(3), &json!(3)]
    );
    // And a message the stack added matches nothing.
    req.messages.push(Message::user("and now?"));
    let sent = written(&req, &ctx);
    assert_eq!(
        sent["messages"][5],
        json!({"role": "user", "content": "and now?"})
    );
    assert_eq!(sent["messages"][4]["x_n"], 3);
}

#[test]
fn a_rewritten_tool_result_keeps_its_fields_and_gets_the_new_content() {
    let body = json!({"model": "m", "messages": [
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": "", "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "logs", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": null, "x_meta": 1},
        {"role": "user", "content": [{"type": "text", "text": "and?", "x_part": 2}]}
    ]});
    let (mut req, ctx) = request_from_body(&body).unwrap();
    let stub = "{\"context_cleared\":true,\"tool\":\"logs\",\"original_chars\":5,\
                \"instructions\":\"Older tool result cleared to fit the context window. \
                Call the tool again if you need it.\"}";
    assert!(llm_context_layers::artifact::is_stub(stub));
    req.messages[2].content = Content::Text(stub.into());
    let sent = written(&req, &ctx);
    assert_eq!(
        sent["messages"][2],
        json!({"role": "tool", "tool_call_id": "c1", "content": stub, "x_meta": 1})
    );
    assert_eq!(sent["messages"][1], body["messages"][1]);
    assert_eq!(sent["messages"][3], body["messages"][3]);
    // A user message is never taken for a rewrite of another.
    req.messages[3].content = Content::Text(stub.into());
    let sent = written(&req, &ctx);
    assert_eq!(
        sent["messages"][3],
        json!({"role": "user", "content": stub})
    );
}

#[test]
fn the_context_holds_no_content() {
    // 2,000 messages of 10 kB each, a tenth with an unknown field.
    let messages: Vec<Value> = (0..2_000)
        .map(|i| {
            let mut m = json!({"role": "user", "content": format!("{i} {}", "é".repeat(5_000))});
            if i % 10 == 0 {
                m["x_trace"] = json!(i);
            }
            m
        })
        .collect();
    let text = json!({"model": "m", "messages": messages}).to_string();
    let (req, ctx) = request_from_str(&text).unwrap();
    let contents: usize = req.messages.iter().map(|m| m.text().len()).sum();
    // What the context owns on the heap, counted from its parts.
    let kept_heap: usize = ctx
        .kept
        .iter()
        .map(|(_, k)| {
            k.members.0.capacity()
                + k.parts.capacity() * size_of::<PartKept>()
                + k.calls.capacity() * size_of::<CallKept>()
        })
        .sum();
    let heap = ctx.digests.capacity() * size_of::<Digests>()
        + ctx.kept.capacity() * size_of::<(usize, Kept)>()
        + kept_heap;
    assert_eq!(ctx.kept.len(), 200);
    assert!(kept_heap <= 200 * 16, "{kept_heap}");
    // 16 bytes of digests a message, and the entries of the 200 with a field.
    assert!(
        heap <= 2_000 * 16 + 200 * (size_of::<(usize, Kept)>() + 16),
        "{heap}"
    );
    assert!(
        heap * 300 < contents,
        "{heap} bytes for {contents} of content"
    );
    assert_eq!(
        written(&req, &ctx),
        serde_json::from_str::<Value>(&text).unwrap()
    );
}

#[test]
fn a_body_with_nothing_beside_the_model_keeps_no_digests() {
    let messages: Vec<Value> = (0..1_000)
        .map(|i| json!({"role": "user", "content": format!("m{i}")}))
        .collect();
    let text = json!({"model": "m", "messages": messages}).to_string();
    let (mut req, ctx) = request_from_str(&text).unwrap();
    assert!(ctx.kept.is_empty());
    assert_eq!(ctx.digests.capacity(), 0);
    assert_eq!(
        written(&req, &ctx),
        serde_json::from_str::<Value>(&text).unwrap()
    );
    // The layers' drops and rewrites are written as they are, still without a match.
    req.messages.drain(..990);
    req.messages[0].content = "rewritten".into();
    let sent = written(&req, &ctx);
    assert_eq!(sent["messages"].as_array().unwrap().len(), 10);
    assert_eq!(
        sent["messages"][0],
        json!({"role": "user", "content": "rewritten"})
    );
    assert_eq!(
        sent["messages"][9],
        json!({"role": "user", "content": "m999"})
    );
}

#[test]
fn reading_a_message_from_a_value_agrees_with_reading_the_text() {
    let body = json!({"model": "m", "messages": [
        {"role": "developer", "content": null, "name": "n"},
        {"role": "user", "content": [{"type": "text", "text": "t"}]},
        {"role": "assistant", "tool_calls": [
            {"id": "c", "function": {"name": "f", "arguments": "{\"x\": [1]}"}}]},
        {"role": "tool", "tool_call_id": "c", "content": "r"}
    ]});
    let (req, _) = request_from_body(&body).unwrap();
    let one_by_one: Vec<Message> = body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| message_from_wire(m).unwrap())
        .collect();
    assert_eq!(req.messages, one_by_one);
    for m in &req.messages {
        assert_eq!(message_from_wire(&message_to_wire(m)).unwrap(), *m);
    }
}

#[test]
fn every_shape_error_names_its_path() {
    let cases = [
        (json!({"model": "m", "messages": 5}), "messages"),
        (
            json!({"model": "m", "messages": {"role": "user"}}),
            "messages",
        ),
        (
            json!({"model": "m", "messages": [{"role": "user"}, "hi"]}),
            "messages[1]",
        ),
        (
            json!({"model": "m", "messages": [{"role": 1}]}),
            "messages[0].role",
        ),
        (
            json!({"model": "m", "messages": [{"role": "user", "content": 5}]}),
            "messages[0].content",
        ),
        (
            json!({"model": "m", "messages": [{"role": "user", "content": [{"type": "audio"}]}]}),
            "messages[0].content[0].type",
        ),
        (
            json!({"model": "m", "messages": [{"role": "user", "content": [{"type": "text"}]}]}),
            "messages[0].content[0].text",
        ),
        (
            json!({"model": "m", "messages": [{"role": "user", "content": [
            {"type": "text", "text": "a"}, {"type": "image_url", "image_url": "u"}]}]}),
            "messages[0].content[1].image_url.url",
        ),
        (
            json!({"model": "m", "messages": [{"role": "user", "name": 3}]}),
            "messages[0].name",
        ),
        (
            json!({"model": "m", "messages": [{"role": "assistant", "tool_calls": {}}]}),
            "messages[0].tool_calls",
        ),
        (
            json!({"model": "m", "messages": [{"role": "assistant", "tool_calls": [{"id": 1}]}]}),
            "messages[0].tool_calls[0].id",
        ),
        (
            json!({"model": "m", "messages": [{"role": "assistant", "tool_calls": [{"id": "c"}]}]}),
            "messages[0].tool_calls[0].function",
        ),
        (
            json!({"model": "m", "messages": [{"role": "assistant", "tool_calls": [
            {"id": "c", "function": {}}]}]}),
            "messages[0].tool_calls[0].function.name",
        ),
        (json!({"messages": []}), "model"),
        (json!({"model": 1, "messages": []}), "model"),
        (json!({"model": "m", "messages": [], "tools": 1}), "tools"),
    ];
    for (body, path) in cases {
        let err = request_from_body(&body).unwrap_err();
        assert_eq!(err.path, path, "{body}: {err}");
        assert!(!err.is_syntax(), "{body}");
    }
    // JSON that breaks off inside a message is a syntax error, of the body.
    let err = request_from_str(r#"{"model": "m", "messages": [{"role": "user", "content": "x}]}"#)
        .unwrap_err();
    assert!(err.is_syntax() && err.path == "$", "{err}");
    let err = request_from_str(r#"{"model": "m", "messages": []} trailing"#).unwrap_err();
    assert!(err.is_syntax(), "{err}");
}

proptest::proptest! {
    /// Any message the model represents, with any unknown fields, in any key order,
    /// comes back equal as JSON from both writers.
    #[test]
    fn random_messages_come_back_equal(
        messages in proptest::collection::vec(message_text(), 0..8),
    ) {
        let text = format!("{{\"model\":\"m\",\"messages\":[{}]}}", messages.join(","));
        let (req, ctx) = request_from_str(&text).unwrap();
        let body: Value = serde_json::from_str(&text).unwrap();
        proptest::prop_assert_eq!(&body_from_request(&req, &ctx), &body);
        proptest::prop_assert_eq!(written(&req, &ctx), body);
    }
}

/// Any JSON value, small.
fn any_json() -> impl proptest::strategy::Strategy<Value = Value> {
    use proptest::prelude::*;
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        (-1e6f64..1e6).prop_map(Value::from),
        "[a-z\"\\\\é\n]{0,6}".prop_map(Value::from),
    ];
    leaf.prop_recursive(2, 8, 3, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..3).prop_map(Value::from),
            proptest::collection::btree_map("[a-z]{1,3}", inner, 0..3)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

/// One message's JSON text: members in a random order, some known fields in forms the
/// model writes otherwise, unknown fields of any value.
fn message_text() -> impl proptest::strategy::Strategy<Value = String> {
    use proptest::prelude::*;
    let role = prop_oneof![
        Just("system"),
        Just("developer"),
        Just("user"),
        Just("assistant")
    ];
    let content = prop_oneof![
        Just(None),
        Just(Some(Value::Null)),
        "[ -~é]{0,12}".prop_map(|t| Some(Value::from(t))),
        proptest::collection::vec(
            (
                "[ -~]{0,6}",
                proptest::option::of(("x_[a-z]{1,3}", any_json()))
            )
                .prop_map(|(t, extra)| {
                    let mut part = json!({"type": "text", "text": t});
                    if let Some((k, v)) = extra {
                        part[k] = v;
                    }
                    part
                }),
            0..3
        )
        .prop_map(|p| Some(Value::from(p))),
    ];
    let args = prop_oneof![
        Just(None),
        any_json().prop_map(|v| Some(Value::from(v.to_string()))),
        any_json().prop_map(|v| Some(Value::from(format!("{v:#}")))),
        any_json().prop_map(Some),
    ];
    let calls = proptest::option::of(proptest::collection::vec(
        ("[a-z0-9]{1,4}", args, any::<bool>()),
        0..3,
    ));
    let extras = proptest::collection::btree_map("x_[a-z]{1,4}|refusal|audio", any_json(), 0..3);
    (
        role,
        content,
        proptest::option::of(proptest::option::of("[a-z]{1,5}")),
        calls,
        extras,
        any::<u64>(),
    )
        .prop_map(|(role, content, name, calls, extras, order)| {
            let mut members: Vec<(String, Value)> = vec![("role".into(), Value::from(role))];
            if let Some(c) = content {
                members.push(("content".into(), c));
            }
            if let Some(n) = name {
                members.push(("name".into(), n.map_or(Value::Null, Value::from)));
            }
            if let Some(calls) = calls {
                let calls: Vec<Value> = calls
                    .into_iter()
                    .map(|(id, args, typed)| {
                        let mut f = json!({"name": "f"});
                        if let Some(a) = args {
                            f["arguments"] = a;
                        }
                        let mut c = json!({"id": id, "function": f});
                        if typed {
                            c["type"] = json!("function");
                        }
                        c
                    })
                    .collect();
                members.push(("tool_calls".into(), Value::from(calls)));
            }
            members.extend(extras);
            // A random order of the members.
            let mut order = order;
            for i in (1..members.len()).rev() {
                members.swap(i, (order % (i as u64 + 1)) as usize);
                order /= i as u64 + 1;
            }
            let members: Vec<String> = members
                .iter()
                .map(|(k, v)| format!("{}: {v}", Value::from(k.as_str())))
                .collect();
            format!("{{{}}}", members.join(", "))
        })
}

//! Compressed request bodies (`Content-Encoding` gzip, deflate, br, zstd) on the managed
//! routes, decoded within the body limit, and passed on as they came on the others; over
//! real HTTP on 127.0.0.1. Each reproduces what agents send: Codex compresses its large
//! bodies with zstd, gateways pass Claude Code's on gzipped.

use std::io::Write;

use crate::support::proxy::{
    anthropic, anthropic_upstream, json_of, openai, openai_stream, openai_upstream, serving,
};
use crate::support::servers::mock_post;
use llm_context::serve::Proxy;
use serde_json::{Value, json};
use wiremock::matchers::{method, path};
use wiremock::{Mock, MockServer, ResponseTemplate};

/// `body` compressed with `coding`, as a client's library does.
fn compress(coding: &str, body: &[u8]) -> Vec<u8> {
    match coding {
        "gzip" => {
            let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
            e.write_all(body).unwrap();
            e.finish().unwrap()
        }
        "deflate" => {
            let mut e = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::fast());
            e.write_all(body).unwrap();
            e.finish().unwrap()
        }
        "br" => {
            let mut out = Vec::new();
            let mut e = brotli::CompressorWriter::new(&mut out, 4096, 5, 22);
            e.write_all(body).unwrap();
            drop(e);
            out
        }
        "zstd" => zstd::stream::encode_all(body, 3).unwrap(),
        other => panic!("no encoder for {other}"),
    }
}

/// `body` posted to `url` with `content-encoding: coding`.
async fn post(url: &str, coding: &str, body: Vec<u8>) -> reqwest::Response {
    reqwest::Client::new()
        .post(url)
        .header("content-type", "application/json")
        .header("content-encoding", coding)
        .body(body)
        .send()
        .await
        .unwrap()
}

fn messages_body() -> Value {
    json!({"model": "claude-sonnet-4-6", "max_tokens": 256, "metadata": {"user_id": "u-7"},
           "messages": [{"role": "user", "content": "Warum schlägt der Build fehl? 为什么"}]})
}

fn chat_body() -> Value {
    json!({"model": "gpt-5.4", "messages": [
        {"role": "user", "content": "Why does the build fail? Ünïcödé"}]})
}

async fn proxy_for(openai_up: &MockServer, anthropic_up: &MockServer, limit: usize) -> String {
    let proxy = Proxy::builder()
        .openai(openai(&openai_up.uri()))
        .anthropic(anthropic(&anthropic_up.uri()))
        .max_body_bytes(limit)
        .build()
        .unwrap();
    serving(proxy).await
}

/// Neither body goes as the client's bytes (the Chat Completions one is streamed and gets
/// `stream_options`), so both are sent uncompressed.
#[tokio::test]
async fn every_encoding_is_decoded_on_both_routes_and_an_edited_body_goes_uncompressed() {
    let stream =
        ResponseTemplate::new(200).set_body_raw(openai_stream().concat(), "text/event-stream");
    let openai_up = mock_post("/v1/chat/completions", stream).await;
    let anthropic_up = anthropic_upstream().await;
    let url = proxy_for(&openai_up, &anthropic_up, 1 << 20).await;
    for (i, coding) in ["gzip", "deflate", "br", "zstd", "gzip, zstd"]
        .into_iter()
        .enumerate()
    {
        let compressed = |body: &Value| {
            coding
                .split(", ")
                .fold(body.to_string().into_bytes(), |b, c| compress(c, &b))
        };
        let r = post(
            &format!("{url}/v1/messages"),
            coding,
            compressed(&messages_body()),
        )
        .await;
        assert_eq!(r.status(), 200, "{coding}: {}", r.text().await.unwrap());
        let mut streamed = chat_body();
        streamed["stream"] = true.into();
        let r = post(
            &format!("{url}/v1/chat/completions"),
            coding,
            compressed(&streamed),
        )
        .await;
        assert_eq!(r.status(), 200, "{coding}: {}", r.text().await.unwrap());
        for (up, want) in [(&anthropic_up, messages_body()), (&openai_up, chat_body())] {
            let got = &up.received_requests().await.unwrap()[i];
            assert!(got.headers.get("content-encoding").is_none(), "{coding}");
            assert_eq!(
                got.headers.get("content-length").unwrap(),
                &got.body.len().to_string()
            );
            let sent: Value = serde_json::from_slice(&got.body).unwrap();
            assert_eq!(sent["messages"], want["messages"], "{coding}");
            assert_eq!(sent["model"], want["model"], "{coding}");
        }
        // Neither went as the client's bytes: the usage asked of a stream, and the
        // Messages body's members written in the writer's order.
        let got = &anthropic_up.received_requests().await.unwrap()[i];
        assert_ne!(got.body, messages_body().to_string().into_bytes());
        let got = &openai_up.received_requests().await.unwrap()[i];
        let sent: Value = serde_json::from_slice(&got.body).unwrap();
        assert_eq!(sent["stream_options"]["include_usage"], true, "{sent}");
    }
}

#[tokio::test]
async fn a_decompression_bomb_is_413_before_it_grows_and_nothing_is_sent() {
    let (openai_up, anthropic_up) = (openai_upstream().await, anthropic_upstream().await);
    let url = proxy_for(&openai_up, &anthropic_up, 1 << 20).await;
    // 64 MiB of one JSON string: some 64 KB compressed, far under the 1 MiB limit on the
    // wire, 64 times it decoded.
    let mut bomb =
        br#"{"model":"claude-sonnet-4-6","max_tokens":8,"messages":[{"role":"user","content":""#
            .to_vec();
    bomb.resize(bomb.len() + (64 << 20), b'a');
    bomb.extend_from_slice(br#""}]}"#);
    for coding in ["gzip", "zstd"] {
        let body = compress(coding, &bomb);
        assert!(body.len() < 1 << 20, "{coding}: {}", body.len());
        let r = post(&format!("{url}/v1/messages"), coding, body).await;
        assert_eq!(r.status(), 413, "{coding}");
        let error = json_of(r).await;
        assert_eq!(error["type"], "error", "{error}");
        assert!(
            error["error"]["message"]
                .as_str()
                .unwrap()
                .contains("decoded"),
            "{error}"
        );
    }
    assert!(anthropic_up.received_requests().await.unwrap().is_empty());
}

#[tokio::test]
async fn an_unknown_encoding_is_415_and_a_corrupt_body_400_in_the_routes_shape() {
    let (openai_up, anthropic_up) = (openai_upstream().await, anthropic_upstream().await);
    let url = proxy_for(&openai_up, &anthropic_up, 1 << 20).await;
    let plain = messages_body().to_string().into_bytes();
    let r = post(&format!("{url}/v1/messages"), "compress", plain.clone()).await;
    assert_eq!(r.status(), 415);
    let error = json_of(r).await;
    assert_eq!(error["type"], "error");
    assert!(
        error["error"]["message"]
            .as_str()
            .unwrap()
            .contains("compress")
    );
    let r = post(
        &format!("{url}/v1/chat/completions"),
        "x-snappy",
        plain.clone(),
    )
    .await;
    assert_eq!(r.status(), 415);
    let error = json_of(r).await;
    assert!(
        error["error"]["message"]
            .as_str()
            .unwrap()
            .contains("x-snappy")
    );
    // Claimed gzip, sent plain.
    let r = post(&format!("{url}/v1/messages"), "gzip", plain).await;
    assert_eq!(r.status(), 400);
    assert!(anthropic_up.received_requests().await.unwrap().is_empty());
    assert!(openai_up.received_requests().await.unwrap().is_empty());
}

#[tokio::test]
async fn the_pass_through_forwards_the_compressed_bytes_and_their_header() {
    let openai_up = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/v1/embeddings"))
        .respond_with(ResponseTemplate::new(200).set_body_json(json!({"object": "list"})))
        .mount(&openai_up)
        .await;
    let anthropic_up = anthropic_upstream().await;
    let url = proxy_for(&openai_up, &anthropic_up, 1 << 20).await;
    let body = compress(
        "gzip",
        br#"{"model":"text-embedding-3-small","input":"hi"}"#,
    );
    let r = post(&format!("{url}/v1/embeddings"), "gzip", body.clone()).await;
    assert_eq!(r.status(), 200);
    let got = &openai_up.received_requests().await.unwrap()[0];
    assert_eq!(got.body, body);
    assert_eq!(got.headers["content-encoding"], "gzip");
}

/// A body the stack leaves byte for byte as it came goes upstream as the client's
/// compressed bytes, with the client's `Content-Encoding`.
#[tokio::test]
async fn a_body_the_stack_leaves_as_it_came_goes_as_the_clients_compressed_bytes() {
    let (openai_up, anthropic_up) = (openai_upstream().await, anthropic_upstream().await);
    let url = proxy_for(&openai_up, &anthropic_up, 1 << 20).await;
    // Compact, as the clients write it, so that the proxy's write is the same bytes.
    let plain = serde_json::to_vec(&chat_body()).unwrap();
    for (i, coding) in ["gzip", "br", "gzip, zstd"].into_iter().enumerate() {
        let compressed = coding
            .split(", ")
            .fold(plain.clone(), |b, c| compress(c, &b));
        let r = post(
            &format!("{url}/v1/chat/completions"),
            coding,
            compressed.clone(),
        )
        .await;
        assert_eq!(r.status(), 200, "{coding}: {}", r.text().await.unwrap());
        let got = &openai_up.received_requests().await.unwrap()[i];
        assert_eq!(got.headers["content-encoding"], coding);
        assert_eq!(got.body, compressed, "{coding}");
    }
}

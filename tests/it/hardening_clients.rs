//! The provider clients against hostile servers on 127.0.0.1: a key or a URL password a
//! server echoes back never comes out (in any escaped form), a redirect is never
//! followed (the second server receives nothing), and a response body is read only up
//! to the limit, however its length is declared.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use crate::support::servers::{mock_post, read_request};
use bytes::Bytes;
use llm_context::anthropic::Anthropic;
use llm_context::error::{ProviderError, ProviderErrorKind};
use llm_context::openai::OpenAi;
use llm_context::retry::RetryPolicy;
use llm_context::transport::{HttpRequest, HttpResponse, TransportError};
use llm_context::{ChatRequest, ConfigError, Message};
use serde_json::json;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpListener;
use tower::{ServiceBuilder, ServiceExt};
use wiremock::{Mock, MockServer, ResponseTemplate};

/// Not shaped like an OpenAI or Anthropic key, so only the configured key's redaction
/// can hide it (the `sk-` shape mask cannot help).
const KEY: &str = "lk-local-9f8e7d6c5b4a39281706";
/// The part of [`KEY`] that must never be seen, whatever the prefix became.
const KEY_TAIL: &str = "9f8e7d6c5b4a39281706";
const PASSWORD: &str = "hunter2-basic-secret";
const CHAT: &str = "/v1/chat/completions";
const MESSAGES: &str = "/v1/messages";

fn openai(base: &str) -> OpenAi {
    OpenAi::builder()
        .base_url(format!("{base}/v1"))
        .api_key(KEY)
        .timeout(Duration::from_secs(20))
        .build()
        .unwrap()
}

fn anthropic(base: &str) -> Anthropic {
    Anthropic::builder()
        .base_url(base)
        .api_key(KEY)
        .timeout(Duration::from_secs(20))
        .build()
        .unwrap()
}

fn request(model: &str) -> ChatRequest {
    ChatRequest::new(model, vec![Message::user("hello")])
}

async fn openai_err(client: OpenAi) -> ProviderError {
    client.oneshot(request("gpt-5.4")).await.unwrap_err()
}

async fn anthropic_err(client: Anthropic) -> ProviderError {
    client
        .oneshot(request("claude-sonnet-4-6"))
        .await
        .unwrap_err()
}

/// Everything a caller can print of an error.
fn shown(err: &ProviderError) -> String {
    format!(
        "{err}\n{err:?}\n{}\n{}\n{}\n{}\n{}",
        err.message,
        err.request_id().unwrap_or(""),
        err.raw_body().unwrap_or(""),
        err.error_type().unwrap_or(""),
        err.code().unwrap_or(""),
    )
}

fn assert_hidden(text: &str, secret: &str) {
    assert!(!text.contains(secret), "{secret} shows in:\n{text}");
}

// --- Redaction -------------------------------------------------------------------------

#[tokio::test]
async fn a_key_echoed_in_the_request_id_is_redacted() {
    let server = mock_post(
        CHAT,
        ResponseTemplate::new(401)
            .insert_header("x-request-id", format!("req_{KEY}"))
            .set_body_json(json!({"error": {"message": "no", "type": "auth"}})),
    )
    .await;
    let err = openai_err(openai(&server.uri())).await;
    assert_eq!(err.status, Some(401));
    assert_eq!(err.request_id(), Some("req_[REDACTED]"), "{err:?}");
    assert_hidden(&shown(&err), KEY_TAIL);

    let server = mock_post(
        MESSAGES,
        ResponseTemplate::new(401)
            .insert_header("request-id", KEY)
            .set_body_json(json!({"type": "error", "error": {"type": "authentication_error", "message": "no"}})),
    )
    .await;
    let err = anthropic_err(anthropic(&server.uri())).await;
    assert_eq!(err.request_id(), Some("[REDACTED]"), "{err:?}");
    assert_hidden(&shown(&err), KEY_TAIL);
}

/// `KEY` with some characters written as JSON `\u` escapes, as a server's JSON encoder
/// may write them.
fn escaped_keys() -> Vec<String> {
    let every: String = KEY
        .chars()
        .map(|c| format!("\\u{:04x}", c as u32))
        .collect();
    let upper: String = KEY
        .chars()
        .map(|c| format!("\\u{:04X}", c as u32))
        .collect();
    vec![
        "\\u006ck-local-9f8e7d6c5b4a39281706".to_owned(),
        "lk\\u002dlocal\\u002d9f8e7d6c5b4a39281706".to_owned(),
        every,
        upper,
    ]
}

#[tokio::test]
async fn a_key_escaped_in_a_non_standard_error_body_is_redacted() {
    for escaped in escaped_keys() {
        // Not the `{"error": {...}}` envelope, so the body is kept as it came.
        let body = format!(r#"{{"detail": "invalid key {escaped}", "status": 401}}"#);
        let server = mock_post(
            CHAT,
            ResponseTemplate::new(401).set_body_raw(body, "application/json"),
        )
        .await;
        let err = openai_err(openai(&server.uri())).await;
        let raw = err.raw_body().unwrap_or_default();
        assert!(raw.contains("invalid key [REDACTED]"), "{escaped}: {raw}");
        assert_hidden(&shown(&err), KEY_TAIL);
        assert_hidden(&shown(&err), "9f8e");
    }
}

#[tokio::test]
async fn a_key_escaped_twice_inside_an_error_message_is_redacted() {
    // The message decodes to text that still holds `\u`-escaped key characters (a JSON
    // document inside a JSON string).
    let message = format!("upstream said {{\"key\": \"\\u006c{}\"}}", &KEY[1..]);
    let server = mock_post(
        MESSAGES,
        ResponseTemplate::new(400).set_body_json(json!({"type": "error", "error": {
            "type": "invalid_request_error", "message": message}})),
    )
    .await;
    let err = anthropic_err(anthropic(&server.uri())).await;
    assert!(err.message.contains("[REDACTED]"), "{}", err.message);
    assert_hidden(&shown(&err), KEY_TAIL);
}

#[tokio::test]
async fn a_key_in_a_success_body_that_does_not_parse_is_redacted() {
    // serde's error names the value it could not use.
    let server = mock_post(
        CHAT,
        ResponseTemplate::new(200)
            .set_body_raw(format!(r#"{{"choices": "{KEY}"}}"#), "application/json"),
    )
    .await;
    let err = openai_err(openai(&server.uri())).await;
    assert_eq!(err.kind.as_str(), "invalid_response");
    assert_hidden(&shown(&err), KEY_TAIL);
}

#[tokio::test]
async fn a_password_in_the_base_url_never_shows() {
    // Nothing listens on port 1: the connection error names the URL.
    let base = format!("http://user:{PASSWORD}@127.0.0.1:1");
    let err = openai_err(openai(&base)).await;
    assert_eq!(err.kind.as_str(), "connection", "{err}");
    assert!(err.to_string().contains("user:***@127.0.0.1:1"), "{err}");
    assert_hidden(&shown(&err), PASSWORD);
    assert_hidden(&format!("{:?}", openai(&base)), PASSWORD);

    let err = anthropic_err(anthropic(&base)).await;
    assert_hidden(&shown(&err), PASSWORD);
    assert_hidden(&format!("{:?}", anthropic(&base)), PASSWORD);

    // Percent-encoded in the URL, written plainly or encoded by the server.
    let server = mock_post(
        CHAT,
        ResponseTemplate::new(500).set_body_raw(
            "proxy auth p@ss:w0rd-9999 / p%40ss%3Aw0rd-9999 failed",
            "text/plain",
        ),
    )
    .await;
    let uri = server
        .uri()
        .replace("http://", "http://me:p%40ss%3Aw0rd-9999@");
    let err = openai_err(openai(&uri)).await;
    assert_hidden(&shown(&err), "w0rd-9999");

    // A base URL refused for its query names the URL without its password.
    let bad = OpenAi::builder()
        .base_url(format!("http://user:{PASSWORD}@127.0.0.1:8080/v1?x=1"))
        .api_key(KEY)
        .build()
        .unwrap_err();
    assert!(matches!(bad, ConfigError::InvalidBaseUrl { .. }));
    assert_hidden(&format!("{bad} {bad:?}"), PASSWORD);
    // A builder's own Debug output.
    let builder = OpenAi::builder().base_url(format!("http://user:{PASSWORD}@h/v1"));
    assert_hidden(&format!("{builder:?}"), PASSWORD);
}

#[tokio::test]
async fn a_server_cannot_write_control_characters_or_megabytes_into_an_error() {
    let message = format!(
        "bad\u{1b}[2J\u{1b}]0;pwned\u{7}\r\nline two{}",
        "x".repeat(1 << 20)
    );
    let server = mock_post(
        CHAT,
        ResponseTemplate::new(400)
            .insert_header("x-request-id", "a".repeat(8_000))
            .set_body_json(json!({"error": {"message": message, "type": "t"}})),
    )
    .await;
    let err = openai_err(openai(&server.uri())).await;
    let text = shown(&err);
    assert!(
        !text.contains('\u{1b}') && !text.contains('\r'),
        "{}",
        &text[..200]
    );
    assert!(
        err.message.starts_with("bad\\u{1b}[2J"),
        "{}",
        &err.message[..40]
    );
    assert!(err.message.len() < 4_096, "{} bytes", err.message.len());
    assert!(err.request_id().unwrap().len() < 512);
}

// --- Redirects -------------------------------------------------------------------------

/// A server answering anything with a valid answer of either provider, which must never
/// be asked.
async fn elsewhere() -> MockServer {
    let server = MockServer::start().await;
    Mock::given(wiremock::matchers::any())
        .respond_with(ResponseTemplate::new(200).set_body_raw(
            crate::support::fixture("openai-response-text.json"),
            "application/json",
        ))
        .mount(&server)
        .await;
    server
}

const REDIRECTS: [u16; 5] = [301, 302, 303, 307, 308];

#[tokio::test]
async fn redirects_are_never_followed() {
    let target = elsewhere().await;
    for status in REDIRECTS {
        for provider in ["openai", "anthropic"] {
            let path = if provider == "openai" { CHAT } else { MESSAGES };
            let location = format!("{}{path}", target.uri());
            let origin = mock_post(
                path,
                ResponseTemplate::new(status).insert_header("location", location.as_str()),
            )
            .await;
            // Through a retrying stack: a redirect is not retried either.
            let retry = RetryPolicy::default()
                .with_max_retries(2)
                .with_base_delay(Duration::from_millis(1));
            let err = if provider == "openai" {
                ServiceBuilder::new()
                    .retry(retry)
                    .service(openai(&origin.uri()))
                    .oneshot(request("gpt-5.4"))
                    .await
            } else {
                ServiceBuilder::new()
                    .retry(retry)
                    .service(anthropic(&origin.uri()))
                    .oneshot(request("claude-sonnet-4-6"))
                    .await
            }
            .unwrap_err();
            let what = format!("{provider} {status}");
            assert!(
                target.received_requests().await.unwrap().is_empty(),
                "{what}: the other origin was asked"
            );
            assert_eq!(origin.received_requests().await.unwrap().len(), 1, "{what}");
            assert_eq!(err.kind.as_str(), "redirect", "{what}: {err}");
            assert_eq!(err.status, Some(status), "{what}");
            assert!(!err.is_retryable(), "{what}");
            assert!(err.message.contains(&location), "{what}: {}", err.message);
        }
    }
}

#[tokio::test]
async fn a_redirect_to_a_url_with_the_key_names_it_redacted() {
    let origin = mock_post(
        CHAT,
        ResponseTemplate::new(307).insert_header(
            "location",
            format!("http://127.0.0.1:9/v1/chat/completions?api_key={KEY}"),
        ),
    )
    .await;
    let err = openai_err(openai(&origin.uri())).await;
    assert_eq!(err.kind.as_str(), "redirect");
    assert!(
        err.message.contains("api_key=[REDACTED]"),
        "{}",
        err.message
    );
    assert_hidden(&shown(&err), KEY_TAIL);
}

#[tokio::test]
async fn a_client_of_your_own_that_follows_redirects_has_the_answer_refused() {
    let target = elsewhere().await;
    let origin = mock_post(
        CHAT,
        ResponseTemplate::new(307)
            .insert_header("location", format!("{}{CHAT}", target.uri()).as_str()),
    )
    .await;
    // reqwest's default policy follows up to ten redirects.
    let transport = llm_context::transport::ReqwestTransport::new(reqwest::Client::new());
    let client = OpenAi::builder()
        .base_url(format!("{}/v1", origin.uri()))
        .api_key(KEY)
        .build_with_transport(transport)
        .unwrap();
    let err = openai_err(client).await;
    assert_eq!(err.kind.as_str(), "redirect", "{err}");
    assert!(err.message.contains(&target.uri()), "{}", err.message);
}

// --- Response size ---------------------------------------------------------------------

/// How a streaming server frames its body.
#[derive(Clone, Copy, Debug)]
enum Framing {
    /// An honest `Content-Length`.
    Length,
    /// `Transfer-Encoding: chunked`, no length.
    Chunked,
    /// `Content-Length: 100` and chunked: the length lies (chunked wins, RFC 9112 6.3).
    LyingLength,
    /// No length, no chunking: the body ends when the connection closes.
    UntilClose,
}

const HUGE: u64 = 96 * 1024 * 1024;

/// A server on 127.0.0.1 answering one request with `status` and a body of `HUGE`
/// bytes framed as asked, written in 64 KiB pieces. Returns its base URL and how many
/// body bytes it managed to write before the client hung up.
async fn huge_server(status: u16, framing: Framing) -> (String, Arc<AtomicU64>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let written = Arc::new(AtomicU64::new(0));
    let count = written.clone();
    tokio::spawn(async move {
        let Ok((mut sock, _)) = listener.accept().await else {
            return;
        };
        read_request(&mut sock).await;
        let framing_headers = match framing {
            Framing::Length => format!("content-length: {HUGE}\r\n"),
            Framing::Chunked => "transfer-encoding: chunked\r\n".to_owned(),
            Framing::LyingLength => {
                "content-length: 100\r\ntransfer-encoding: chunked\r\n".to_owned()
            }
            Framing::UntilClose => "connection: close\r\n".to_owned(),
        };
        let head = format!(
            "HTTP/1.1 {status} Whatever\r\ncontent-type: application/json\r\n{framing_headers}\r\n"
        );
        if sock.write_all(head.as_bytes()).await.is_err() {
            return;
        }
        let piece = vec![b'x'; 64 * 1024];
        let chunked = matches!(framing, Framing::Chunked | Framing::LyingLength);
        let mut sent = 0;
        while sent < HUGE {
            let ok = if chunked {
                let mut framed = format!("{:x}\r\n", piece.len()).into_bytes();
                framed.extend_from_slice(&piece);
                framed.extend_from_slice(b"\r\n");
                sock.write_all(&framed).await.is_ok()
            } else {
                sock.write_all(&piece).await.is_ok()
            };
            if !ok {
                return;
            }
            sent += piece.len() as u64;
            count.store(sent, Ordering::SeqCst);
        }
        if chunked {
            let _ = sock.write_all(b"0\r\n\r\n").await;
        }
        let _ = sock.shutdown().await;
    });
    (format!("http://{addr}"), written)
}

/// The default limit (16 MiB) plus, with room to spare, what loopback socket buffers
/// hold (about 10 MiB here): a client that stopped at the limit let the server write no
/// more than this; one that read on took all of `HUGE`.
const STOPPED_BY: u64 = 48 * 1024 * 1024;

#[tokio::test(flavor = "multi_thread")]
async fn an_oversized_body_is_refused_at_the_limit_however_it_is_framed() {
    for framing in [
        Framing::Length,
        Framing::Chunked,
        Framing::LyingLength,
        Framing::UntilClose,
    ] {
        for provider in ["openai", "anthropic"] {
            let (base, written) = huge_server(200, framing).await;
            let err = if provider == "openai" {
                openai_err(openai(&base)).await
            } else {
                anthropic_err(anthropic(&base)).await
            };
            let what = format!("{provider} {framing:?}");
            assert_eq!(err.kind.as_str(), "response_too_large", "{what}: {err}");
            assert!(!err.is_retryable(), "{what}");
            assert!(err.message.contains("16777216"), "{what}: {}", err.message);
            // Let the server notice the hang-up, then see how far it got.
            tokio::time::sleep(Duration::from_millis(200)).await;
            let sent = written.load(Ordering::SeqCst);
            assert!(sent < STOPPED_BY, "{what}: the server wrote {sent} bytes");
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn an_oversized_error_body_is_refused_too() {
    let (base, written) = huge_server(500, Framing::Chunked).await;
    let err = openai_err(openai(&base)).await;
    assert_eq!(err.kind.as_str(), "response_too_large", "{err}");
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(written.load(Ordering::SeqCst) < STOPPED_BY);
}

#[tokio::test]
async fn the_limit_is_a_builder_setting_and_a_body_of_exactly_the_limit_is_read() {
    let openai_body = crate::support::fixture("openai-response-text.json");
    let anthropic_body = crate::support::fixture("anthropic-response-text.json");
    let openai_server = mock_post(
        CHAT,
        ResponseTemplate::new(200).set_body_raw(openai_body.clone(), "application/json"),
    )
    .await;
    let anthropic_server = mock_post(
        MESSAGES,
        ResponseTemplate::new(200).set_body_raw(anthropic_body.clone(), "application/json"),
    )
    .await;
    for (limit, fits) in [(openai_body.len(), true), (openai_body.len() - 1, false)] {
        let client = OpenAi::builder()
            .base_url(format!("{}/v1", openai_server.uri()))
            .api_key(KEY)
            .max_response_bytes(limit)
            .build()
            .unwrap();
        let got = client.oneshot(request("gpt-5.4")).await;
        match got {
            Ok(_) => assert!(fits, "{limit}"),
            Err(e) => {
                assert!(!fits, "{limit}: {e}");
                assert_eq!(e.kind, ProviderErrorKind::ResponseTooLarge);
                assert!(e.message.contains(&limit.to_string()), "{}", e.message);
            }
        }
    }
    for (limit, fits) in [
        (anthropic_body.len(), true),
        (anthropic_body.len() - 1, false),
    ] {
        let client = Anthropic::builder()
            .base_url(anthropic_server.uri())
            .api_key(KEY)
            .max_response_bytes(limit)
            .build()
            .unwrap();
        let got = client.oneshot(request("claude-sonnet-4-6")).await;
        assert_eq!(
            got.err().map(|e| e.kind),
            (!fits).then_some(ProviderErrorKind::ResponseTooLarge),
            "{limit}"
        );
    }
}

#[tokio::test]
async fn a_transport_of_your_own_is_held_to_the_limit_too() {
    let canned = tower::service_fn(|_req: HttpRequest| async {
        Ok::<_, TransportError>(HttpResponse::new(Bytes::from(vec![b' '; 2_000])))
    });
    let client = OpenAi::builder()
        .api_key(KEY)
        .max_response_bytes(1_999)
        .build_with_transport(canned)
        .unwrap();
    let err = client.oneshot(request("gpt-5.4")).await.unwrap_err();
    assert_eq!(err.kind, ProviderErrorKind::ResponseTooLarge, "{err}");
}

#[tokio::test]
async fn the_kinds_are_typed() {
    let target = elsewhere().await;
    let origin = mock_post(
        MESSAGES,
        ResponseTemplate::new(302).insert_header("location", target.uri().as_str()),
    )
    .await;
    let err = anthropic_err(anthropic(&origin.uri())).await;
    assert_eq!(err.kind, ProviderErrorKind::Redirect);
    assert_eq!(err.location(), Some(target.uri().as_str()));
    // A 3xx without a Location says so.
    let origin = mock_post(MESSAGES, ResponseTemplate::new(307)).await;
    let err = anthropic_err(anthropic(&origin.uri())).await;
    assert_eq!(
        (err.kind, err.location()),
        (ProviderErrorKind::Redirect, None)
    );
    assert!(err.message.contains("no Location"), "{}", err.message);
}

// --- Figures from the body -------------------------------------------------------------

#[tokio::test]
async fn usage_figures_at_the_top_of_u64_are_not_a_panic() {
    let server = mock_post(
        MESSAGES,
        ResponseTemplate::new(200).set_body_json(json!({
            "type": "message", "role": "assistant", "model": "claude-sonnet-4-6",
            "content": [{"type": "text", "text": "hi"}], "stop_reason": "end_turn",
            "usage": {"input_tokens": u64::MAX, "output_tokens": u64::MAX,
                      "cache_creation": {"ephemeral_5m_input_tokens": u64::MAX,
                                         "ephemeral_1h_input_tokens": u64::MAX}}
        })),
    )
    .await;
    let reply = anthropic(&server.uri())
        .oneshot(request("claude-sonnet-4-6"))
        .await
        .unwrap();
    // The writes of both TTLs, saturated rather than wrapped around.
    assert_eq!(reply.usage.cache_write_tokens, u64::MAX);
    assert_eq!(reply.usage.cache_write_1h_tokens, u64::MAX);
}

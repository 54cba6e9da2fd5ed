//! The per-character scans of the prepare pass on text shaped like real tool output:
//! `json_string_chars` (sizing a preview as a JSON string) and `truncate_chars` (cutting
//! a preview or an artifact to a number of characters).
//!
//! Real tool output is JSON, logs and source code: it always holds newlines, quotes and
//! backslashes, and often non-ASCII. Four kinds, each cut to a number of characters:
//!
//! - `json`: one line of search hits (`{"title": …}`), non-ASCII phrases, many quotes;
//! - `log`: log lines with newlines, quoted fields and non-ASCII messages;
//! - `code`: source lines with tabs, escaped quotes and backslashes, non-ASCII comments;
//! - `ascii_log`: an access log, ASCII only, with newlines and quotes.
//!
//! `json_string_chars_short` sizes fifteen tool-call argument keys and values (4 to 100
//! bytes), the strings the estimate sizes most often.
//!
//! Sizes: 8,000 characters (a large generated result, just over the default offload
//! threshold of 6,000) and 1,000,000 (the default artifact limit).
//!
//! Run with `cargo bench -p llm-context-layers --bench text_scan`.

use divan::{Bencher, black_box};
use llm_context_layers::tokens::{json_string_chars, truncate_chars};

fn main() {
    divan::main();
}

const KINDS: [&str; 4] = ["json", "log", "code", "ascii_log"];

const SIZES: [usize; 2] = [8_000, 1_000_000];

/// The lines a kind of text cycles through.
fn lines(kind: &str) -> &'static [&'static str] {
    match kind {
        "json" => &[
            r#"{"title": "le cache n'est pas invalidé après la mise à jour", "url": "https://docs.example.test/412", "snippet": "η σύνδεση λήγει μετά από τριάντα δευτερόλεπτα", "score": 0.731}, "#,
            r#"{"title": "the retry budget is exhausted after 3 attempts 🔁", "url": "https://docs.example.test/7", "snippet": "这个函数在并发调用时会死锁 — see \"budget\"", "score": 0.25}, "#,
            r#"{"title": "memory grows by ~40 MiB per hour", "url": "https://docs.example.test/98", "snippet": "C:\\logs\\worker.log rotated", "score": 0.5}, "#,
        ],
        "log" => &[
            "[00017] INFO worker-3: die Konfiguration wird beim Start nicht übernommen\n",
            "[00018] WARN worker-1: request \"GET /api/orders\" took 912 ms (budget 500 ms)\n",
            "[00019] ERROR worker-7: запрос возвращает пустой ответ при большой нагрузке\n",
            "[00020] DEBUG worker-2: tokens ≤ budget ∧ reserve ≥ 2048 ⇒ ok ✅\n",
        ],
        "code" => &[
            "\tlet budget = max_tokens.saturating_sub(reserve_tokens); // line 42\n",
            "\tlog::debug!(\"kept {} of {} messages — {}\", kept, total, \"naïve café\");\n",
            "\tlet path = \"C:\\\\Users\\\\agent\\\\out.txt\";\r\n",
            "    // TODO(ünïcode): テストが時々タイムアウトします\n",
            "    return {\"status\": \"ok\", \"items\": [1, 2], \"note\": \"\\u00e9\"}\n",
        ],
        "ascii_log" => &[
            "127.0.0.1 - - [29/Nov/2026:12:00:00 +0000] \"GET /api/orders/4412 HTTP/1.1\" 500 12 \"-\" \"curl/8.5\"\n",
            "10.0.0.7 - - [29/Nov/2026:12:00:01 +0000] \"POST /api/login HTTP/1.1\" 200 981 \"https://example.test/\" \"Mozilla/5.0\"\n",
        ],
        other => panic!("unknown kind {other}"),
    }
}

/// `chars` characters of `kind`.
fn text(kind: &str, chars: usize) -> String {
    lines(kind)
        .iter()
        .cycle()
        .flat_map(|l| l.chars())
        .take(chars)
        .collect()
}

/// Sizing the whole text as a JSON string (what a preview costs in the estimate).
#[divan::bench(args = KINDS, consts = SIZES)]
fn json_string_chars_of<const N: usize>(bencher: Bencher<'_, '_>, kind: &str) {
    let text = text(kind, N);
    bencher
        .counter(divan::counter::BytesCount::new(text.len()))
        .bench(|| json_string_chars(black_box(&text)));
}

/// Sizing short strings, as the estimate sizes every key and string value of every
/// tool call's arguments: the cost is the call's, not the bytes'.
#[divan::bench]
fn json_string_chars_short(bencher: Bencher<'_, '_>) {
    let strings = [
        "path",
        "src/middleware/context.rs",
        "start_line",
        "pattern",
        "reserve_tokens",
        "query",
        "SELECT id, body FROM events WHERE note LIKE '%é%' LIMIT 20",
        "url",
        "https://docs.example.test/api/42",
        "filter",
        "budget::",
        "キャッシュ",
        "η σύνδεση λήγει μετά από τριάντα δευτερόλεπτα",
        "запрос возвращает пустой ответ при большой нагрузке",
        "{\"kind\": \"escaped JSON in a string argument\", \"ok\": true}",
    ];
    bencher.bench(|| {
        black_box(&strings)
            .iter()
            .map(|s| json_string_chars(s))
            .sum::<usize>()
    });
}

/// Cutting a preview: the first three quarters of the text (6,000 of 8,000 characters,
/// as the default threshold cuts a large generated result).
#[divan::bench(args = KINDS, consts = SIZES)]
fn truncate_chars_preview<const N: usize>(bencher: Bencher<'_, '_>, kind: &str) {
    let text = text(kind, N);
    let max = N / 4 * 3;
    bencher
        .counter(divan::counter::BytesCount::new(text.len()))
        .bench(|| truncate_chars(black_box(&text), black_box(max)).len());
}

/// Cutting an artifact that fits: a limit above the text's characters but under its
/// bytes (1,000,000 against shorter non-ASCII text, as every stored artifact is cut),
/// so the whole text is counted to find that there is nothing to cut.
#[divan::bench(args = KINDS, consts = SIZES)]
fn truncate_chars_fits<const N: usize>(bencher: Bencher<'_, '_>, kind: &str) {
    let text = text(kind, N);
    let max = N + 1;
    bencher
        .counter(divan::counter::BytesCount::new(text.len()))
        .bench(|| truncate_chars(black_box(&text), black_box(max)).len());
}

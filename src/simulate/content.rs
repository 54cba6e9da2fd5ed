//! The text of a generated conversation: the system prompt, the tools, what users ask,
//! what tools return and what the model answers. The same kinds of content as the
//! project's benchmark transcripts (`gen_transcript.py`): multi-line source code, logs,
//! grep output and JSON, with quotes, accents and non-Latin scripts, because those are
//! what real agents send and what the estimate and the stack must handle.

use fastrand::Rng;
use serde_json::{Value, json};

use llm_context_layers::ToolSpec;
use llm_context_layers::tokens::char_count;

const PHRASES: &[&str] = &[
    "the build fails on the release profile",
    "le cache n'est pas invalidé après la mise à jour",
    "die Konfiguration wird beim Start nicht übernommen",
    "η σύνδεση λήγει μετά από τριάντα δευτερόλεπτα",
    "запрос возвращает пустой ответ при большой нагрузке",
    "这个函数在并发调用时会死锁",
    "テストが時々タイムアウトします",
    "الخادم يعيد خطأ عند تحميل الملف",
    "the retry budget is exhausted after 3 attempts 🔁",
    "memory grows by ~40 MiB per hour 📈",
    "naïve café façade coöperate — résumé",
    "tokens ≤ budget ∧ reserve ≥ 2048 ⇒ ok ✅",
];

const USER_OPENERS: &[&str] = &[
    "Can you look into why {p}?",
    "Pouvez-vous vérifier pourquoi {p} ?",
    "Bitte prüfe, warum {p}.",
    "I think {p}. What changed recently?",
    "请帮我查一下为什么{p}。",
    "Quick one: {p} — is that expected? 🤔",
    "Could you fix it so that {p} no longer happens, and add a test?",
];

const ANSWERS: &[&str] = &[
    "I found the cause: {p}. The fix is a one-line change in {f}; tests pass now.",
    "La cause est identifiée : {p}. J'ai ajouté un test de régression dans {f}.",
    "Kurz gesagt: {p}. Details stehen in {f}, Zeile {n}.",
    "原因是：{p}。我修改了 {f} 并补充了测试。",
    "Summary ✅ — {p}. See {f}:{n} for the relevant branch.",
    "I could not reproduce it locally; {p} only shows up under load. Next step: add tracing in {f}.",
];

const THOUGHTS: &[&str] = &[
    "Let me check the relevant files first.",
    "I'll search for the call sites.",
    "Running the focused tests.",
    "Je vais d'abord lire le fichier de configuration.",
    "先看一下日志。",
];

const FILES: &[&str] = &[
    "src/lib.rs",
    "src/budget.rs",
    "src/middleware/context.rs",
    "src/artifacts/store.rs",
    "tests/prune.rs",
    "Cargo.toml",
    "docs/configuration.md",
    "src/main.py",
    "app/settings.yaml",
];

/// The agent's tools, in the order they are sent.
pub(super) const TOOL_NAMES: &[&str] = &[
    "read_file",
    "grep",
    "run_tests",
    "http_get",
    "search_docs",
    "list_dir",
    "sql_query",
];

fn pick<'a>(rng: &mut Rng, items: &[&'a str]) -> &'a str {
    items[rng.usize(..items.len())]
}

pub(super) fn phrase(rng: &mut Rng) -> &'static str {
    pick(rng, PHRASES)
}

pub(super) fn user_request(rng: &mut Rng) -> String {
    pick(rng, USER_OPENERS).replace("{p}", phrase(rng))
}

pub(super) fn thought(rng: &mut Rng) -> &'static str {
    pick(rng, THOUGHTS)
}

/// A final answer: a summary sentence, often followed by the details an agent reports
/// (a few hundred to about 1,500 characters in all).
pub(super) fn answer(rng: &mut Rng) -> String {
    let mut text = pick(rng, ANSWERS)
        .replace("{p}", phrase(rng))
        .replace("{f}", pick(rng, FILES))
        .replace("{n}", &rng.u32(1..900).to_string());
    for _ in 0..rng.usize(0..6) {
        text.push_str("\n- ");
        text.push_str(phrase(rng));
        text.push_str(&format!(" ({}:{})", pick(rng, FILES), rng.u32(1..900)));
        if rng.bool() {
            text.push_str("\n  ```\n");
            let line = rng.usize(1..400);
            text.push_str(&code_line(rng, line));
            text.push_str("\n  ```");
        }
    }
    text
}

pub(super) fn call_id(rng: &mut Rng) -> String {
    let mut id = String::with_capacity(29);
    id.push_str("call_");
    id.extend(std::iter::repeat_with(|| rng.alphanumeric()).take(24));
    id
}

fn code_line(rng: &mut Rng, n: usize) -> String {
    let p = phrase(rng);
    match rng.usize(..7) {
        0 => format!("    let budget = max_tokens.saturating_sub(reserve_tokens); // line {n}"),
        1 => "    if used > budget { return Err(ContextLimitError::new(used, budget)); }".into(),
        2 => format!("fn prune_oldest(groups: &mut VecDeque<Group>) -> usize {{ /* {n} */ }}"),
        3 => format!("    // TODO(ünïcode): handle {p}"),
        4 => format!("    log::debug!(\"kept {{}} of {{}} messages — {p}\", kept, total);"),
        5 => format!("def handler(event):  # {n} {p}"),
        _ => format!(
            "    return {{\"status\": \"ok\", \"items\": [{n}, {}], \"note\": \"{p}\"}}",
            rng.u32(0..10_000)
        ),
    }
}

#[derive(Clone, Copy)]
enum Lines {
    Code,
    Log,
    Grep,
}

/// Lines of one kind until about `target` characters.
fn lines(rng: &mut Rng, target: usize, kind: Lines) -> String {
    let mut out = String::with_capacity(target + 200);
    let mut n = 1;
    while char_count(&out) < target {
        if n > 1 {
            out.push('\n');
        }
        let line = match kind {
            Lines::Code => code_line(rng, n),
            Lines::Log => format!(
                "[{n:05}] {} worker-{}: {}",
                pick(rng, &["INFO", "WARN", "ERROR", "DEBUG"]),
                rng.u32(1..9),
                phrase(rng)
            ),
            Lines::Grep => format!(
                "{}:{}:{}",
                pick(rng, FILES),
                rng.u32(1..900),
                code_line(rng, n)
            ),
        };
        out.push_str(&line);
        n += 1;
    }
    out
}

/// JSON made of `item()`s until about `target` characters, wrapped by `wrap`.
fn json_items(
    rng: &mut Rng,
    target: usize,
    mut item: impl FnMut(&mut Rng) -> Value,
    wrap: impl FnOnce(Vec<Value>) -> Value,
) -> String {
    let mut items = Vec::new();
    let mut size = 0;
    while size < target {
        let v = item(rng);
        size += v.to_string().len();
        items.push(v);
    }
    wrap(items).to_string()
}

/// The size of one tool result, in characters: heavy-tailed, from a few hundred to about
/// 30,000. Most results are small (a grep, a directory listing), one in three or so is
/// a file or a log of several thousand characters, and a few are whole large files: a
/// log-uniform draw over [200, 30,000] (median about 2,450, mean about 5,900).
pub(super) fn result_size(rng: &mut Rng) -> usize {
    const LOW: f64 = 200.0;
    const HIGH: f64 = 30_000.0;
    (LOW * (HIGH / LOW).powf(rng.f64())) as usize
}

/// The arguments of a call to `name`.
pub(super) fn tool_args(rng: &mut Rng, name: &str) -> Value {
    match name {
        "read_file" => json!({"path": pick(rng, FILES), "start_line": rng.u32(1..200)}),
        "grep" => json!({
            "pattern": pick(rng, &["prune", "reserve_tokens", "TODO", "ContextLimit", "キャッシュ"]),
            "path": "src/",
        }),
        "run_tests" => json!({
            "filter": pick(rng, &["prune", "artifacts", "budget::", ""]),
            "release": rng.f64() < 0.3,
        }),
        "http_get" => json!({"url": format!(
            "https://docs.example.test/{}/{}",
            pick(rng, &["guide", "api", "faq"]),
            rng.u32(1..99)
        )}),
        "search_docs" => json!({"query": phrase(rng), "top_k": rng.u32(3..11)}),
        "list_dir" => json!({"path": pick(rng, &["src", "tests", "docs", "."])}),
        _ => json!({"query": format!(
            "SELECT id, body FROM events WHERE note LIKE '%{}%' LIMIT {}",
            pick(rng, &["é", "ü", "漢"]),
            rng.u32(5..51)
        )}),
    }
}

/// What a call to `name` returns, about `target` characters long.
pub(super) fn tool_result(rng: &mut Rng, name: &str, target: usize) -> String {
    match name {
        "read_file" => lines(rng, target, Lines::Code),
        "grep" => lines(rng, target, Lines::Grep),
        "run_tests" => lines(rng, target, Lines::Log),
        "search_docs" | "http_get" => json_items(
            rng,
            target,
            |rng| {
                json!({
                    "title": phrase(rng),
                    "url": format!("https://docs.example.test/{}", rng.u32(1..1000)),
                    "snippet": format!("{} {}", phrase(rng), phrase(rng)),
                    "score": f64::from(rng.u32(0..1000)) / 1000.0,
                })
            },
            |hits| json!({"results": hits}),
        ),
        "list_dir" => json_items(
            rng,
            target,
            |rng| {
                json!({
                    "name": format!(
                        "{}_{}.rs",
                        pick(rng, &["mod", "test", "doc", "données", "文件"]),
                        rng.u32(0..10_000)
                    ),
                    "size": rng.u32(0..1_000_000),
                })
            },
            Value::Array,
        ),
        _ => json_items(
            rng,
            target,
            |rng| json!({"id": rng.u32(1..1_000_000), "body": phrase(rng)}),
            |rows| json!({"row_count": rows.len(), "rows": rows}),
        ),
    }
}

/// The agent's tool definitions.
pub(super) fn tools() -> Vec<ToolSpec> {
    let string = |what: &str| json!({"type": "string", "description": what});
    let schema = |props: Value, required: &[&str]| json!({"type": "object", "properties": props, "required": required});
    vec![
        ToolSpec::new(
            "read_file",
            "Read a file of the repository, from a line on.",
            schema(
                json!({"path": string("Path from the repository root."),
                       "start_line": {"type": "integer", "minimum": 1}}),
                &["path"],
            ),
        ),
        ToolSpec::new(
            "grep",
            "Search the repository for a regular expression.",
            schema(
                json!({"pattern": string("A Rust regex."), "path": string("Where to search.")}),
                &["pattern"],
            ),
        ),
        ToolSpec::new(
            "run_tests",
            "Run the test suite, or the tests whose name matches a filter.",
            schema(
                json!({"filter": string("A test name filter."), "release": {"type": "boolean"}}),
                &[],
            ),
        ),
        ToolSpec::new(
            "http_get",
            "Fetch a documentation page.",
            schema(json!({"url": string("An https URL.")}), &["url"]),
        ),
        ToolSpec::new(
            "search_docs",
            "Search the product documentation.",
            schema(
                json!({"query": string("What to look for."),
                       "top_k": {"type": "integer", "minimum": 1, "maximum": 20}}),
                &["query"],
            ),
        ),
        ToolSpec::new(
            "list_dir",
            "List a directory of the repository.",
            schema(json!({"path": string("A directory.")}), &["path"]),
        ),
        ToolSpec::new(
            "sql_query",
            "Run a read-only SQL query against the events database.",
            schema(
                json!({"query": string("One SELECT statement.")}),
                &["query"],
            ),
        ),
    ]
}

/// The agent's system prompt: about 24,000 characters (about 6,000 estimated tokens), the
/// size of a real coding agent's instructions, tool guide and repository map. The same
/// for every seed: an agent's system prompt does not change with the conversation.
pub(super) fn system_prompt() -> String {
    const TARGET_CHARS: usize = 24_000;
    // A seed of its own, so the prompt is the same whatever the conversation's.
    const SYSTEM_PROMPT_SEED: u64 = 6_000;
    let mut rng = Rng::with_seed(SYSTEM_PROMPT_SEED);
    let mut out = String::from(
        "You are Atlas, a careful software engineering agent working inside a sandboxed \
         repository. Use the tools to inspect files, search code, run tests and fetch \
         documentation before answering. Never invent file contents; quote tool output when \
         it matters. Prefer small, reviewable changes. When a tool result is truncated, page \
         through the stored artifact instead of guessing. Answer in the user's language. \
         Répondez dans la langue de l'utilisateur. 用用户的语言回答。\n",
    );
    let mut section = 1;
    while char_count(&out) < TARGET_CHARS {
        out.push_str(&format!("\n## Rule set {section}\n"));
        for rule in 1..=8 {
            out.push_str(&format!(
                "{section}.{rule}. When {}, check {} first and say so; ",
                phrase(&mut rng),
                pick(&mut rng, FILES)
            ));
            out.push_str(&format!(
                "use `{}` before changing anything, and keep the diff under {} lines.\n",
                pick(&mut rng, TOOL_NAMES),
                rng.u32(20..400)
            ));
        }
        out.push_str("Example:\n```\n");
        out.push_str(&lines(&mut rng, 600, Lines::Code));
        out.push_str("\n```\n");
        section += 1;
    }
    out
}

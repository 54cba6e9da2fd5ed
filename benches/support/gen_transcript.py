#!/usr/bin/env python3
# The project's seeded transcript generator, copied unchanged below these two comment lines from
# the shared benchmark kit (bench/gen_transcript.py); benches/prepare.rs runs it (Python 3 standard library).
"""Seeded generator of realistic agentic chat transcripts (OpenAI-style messages).

    python3 gen_transcript.py --turns 50 --seed 7 --tool-ratio 0.6 --big-result-chars 20000 > case.json

Standard library only; the same arguments always give byte-identical output.

Shape of each message:
  {"role": "system"|"user"|"assistant"|"tool", "content": str|null, ...}
  assistant tool calls: "tool_calls": [{"id": "call_...", "type": "function",
      "function": {"name": "...", "arguments": "<JSON text>"}}]  (arguments is a
      JSON object instead of JSON text with --args-object); content is null unless
      the model also said something.
  tool results: {"role": "tool", "tool_call_id": "call_...", "name": "<tool>",
      "content": "<text or JSON text>", "observation": true?}
  "observation": true marks a result the agent runtime registered as a clearable
  tool observation (ProtoLink marks every tool result when a context policy is
  on; here a fraction --observation-ratio of results carries the mark).

Structure: one system message, then --turns user turns. In each turn the
assistant makes tool-call rounds (another round follows with probability
--tool-ratio, at most --max-rounds), each round holding 1..--parallel calls and
their results, and the turn ends with a plain assistant answer. A fraction
--big-ratio of tool results is large (about --big-result-chars characters,
+-20%); the rest are small to medium. Text mixes ASCII, accented Latin, Greek,
Cyrillic, CJK, Arabic and emoji.

Output: with --format case (default) one JSON object
{"meta": {...}, "messages": [...]} (plus "policy"/"context_window" when given),
(a ProtoLink-style test case); --format messages prints only the list;
--format jsonl prints one message per line.
--messages M stops adding turns once M messages exist and cuts the list to
exactly M (the cut may end inside a turn); with --final-turn-rounds K as well,
there is no cut: after the first M messages' worth of turns, one more turn with
exactly K tool rounds is appended (so the total is a little above M).
"""

from __future__ import annotations

import argparse
import json
import random
import string
import sys
from typing import Any

SYSTEM_PROMPT = (
    "You are Atlas, a careful software engineering agent working inside a sandboxed repository. "
    "Use the tools to inspect files, search code, run tests and fetch documentation before answering. "
    "Never invent file contents; quote tool output when it matters. Prefer small, reviewable changes. "
    "When a tool result is truncated, page through the stored artifact instead of guessing. "
    "Answer in the user's language. Répondez dans la langue de l'utilisateur. 用用户的语言回答。"
)

PHRASES = [
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
]

USER_OPENERS = [
    "Can you look into why {p}?",
    "Pouvez-vous vérifier pourquoi {p} ?",
    "Bitte prüfe, warum {p}.",
    "I think {p}. What changed recently?",
    "请帮我查一下为什么{p}。",
    "Quick one: {p} — is that expected? 🤔",
    "Could you fix it so that {p} no longer happens, and add a test?",
]

ANSWERS = [
    "I found the cause: {p}. The fix is a one-line change in {f}; tests pass now.",
    "La cause est identifiée : {p}. J'ai ajouté un test de régression dans {f}.",
    "Kurz gesagt: {p}. Details stehen in {f}, Zeile {n}.",
    "原因是：{p}。我修改了 {f} 并补充了测试。",
    "Summary ✅ — {p}. See {f}:{n} for the relevant branch.",
    "I could not reproduce it locally; {p} only shows up under load. Next step: add tracing in {f}.",
]

THOUGHTS = [
    "Let me check the relevant files first.",
    "I'll search for the call sites.",
    "Running the focused tests.",
    "Je vais d'abord lire le fichier de configuration.",
    "先看一下日志。",
]

FILES = [
    "src/lib.rs", "src/budget.rs", "src/middleware/context.rs", "src/artifacts/store.rs",
    "tests/prune.rs", "Cargo.toml", "docs/configuration.md", "src/main.py", "app/settings.yaml",
]

TOOLS = ["read_file", "grep", "run_tests", "http_get", "search_docs", "list_dir", "sql_query"]


class Gen:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.rng = random.Random(args.seed)
        self.messages: list[dict[str, Any]] = []

    # ---------------------------------------------------------------- text
    def phrase(self) -> str:
        return self.rng.choice(PHRASES)

    def call_id(self) -> str:
        alphabet = string.ascii_letters + string.digits
        return "call_" + "".join(self.rng.choice(alphabet) for _ in range(24))

    def code_line(self, n: int) -> str:
        r = self.rng
        templates = [
            "    let budget = max_tokens.saturating_sub(reserve_tokens); // line {n}",
            "    if used > budget {{ return Err(ContextLimitError::new(used, budget)); }}",
            "fn prune_oldest(groups: &mut VecDeque<Group>) -> usize {{ /* {n} */ }}",
            "    // TODO(ünïcode): handle {p}",
            "    log::debug!(\"kept {{}} of {{}} messages — {p}\", kept, total);",
            "def handler(event):  # {n} {p}",
            "    return {{\"status\": \"ok\", \"items\": [{n}, {m}], \"note\": \"{p}\"}}",
        ]
        return r.choice(templates).format(n=n, m=r.randint(0, 9999), p=self.phrase())

    def sized_text(self, target: int, kind: str) -> str:
        lines: list[str] = []
        size = 0
        n = 1
        while size < target:
            if kind == "log":
                line = (
                    f"[{n:05d}] {self.rng.choice(['INFO', 'WARN', 'ERROR', 'DEBUG'])} "
                    f"worker-{self.rng.randint(1, 8)}: {self.phrase()}"
                )
            elif kind == "grep":
                line = f"{self.rng.choice(FILES)}:{self.rng.randint(1, 900)}:{self.code_line(n)}"
            else:
                line = self.code_line(n)
            lines.append(line)
            size += len(line) + 1
            n += 1
        text = "\n".join(lines)
        return text[:target] if len(text) > target else text

    # ---------------------------------------------------------------- tools
    def tool_args(self, name: str) -> dict[str, Any]:
        r = self.rng
        if name == "read_file":
            return {"path": r.choice(FILES), "start_line": r.randint(1, 200)}
        if name == "grep":
            return {"pattern": r.choice(["prune", "reserve_tokens", "TODO", "ContextLimit", "キャッシュ"]), "path": "src/"}
        if name == "run_tests":
            return {"filter": r.choice(["prune", "artifacts", "budget::", ""]), "release": r.random() < 0.3}
        if name == "http_get":
            return {"url": f"https://docs.example.test/{r.choice(['guide', 'api', 'faq'])}/{r.randint(1, 99)}"}
        if name == "search_docs":
            return {"query": self.phrase(), "top_k": r.randint(3, 10)}
        if name == "list_dir":
            return {"path": r.choice(["src", "tests", "docs", "."])}
        return {"query": f"SELECT id, body FROM events WHERE note LIKE '%{r.choice(['é', 'ü', '漢'])}%' LIMIT {r.randint(5, 50)}"}

    def tool_result(self, name: str, big: bool) -> str:
        r = self.rng
        if big:
            target = max(1, int(self.args.big_result_chars * r.uniform(0.8, 1.2)))
        else:
            target = r.choice([40, 120, 400, 900, 1800])
        if name in ("read_file",):
            return self.sized_text(target, "code")
        if name == "grep":
            return self.sized_text(target, "grep")
        if name == "run_tests":
            return self.sized_text(target, "log")
        if name in ("search_docs", "http_get"):
            hits = []
            size = 0
            while size < target:
                hit = {"title": self.phrase(), "url": f"https://docs.example.test/{r.randint(1, 999)}",
                       "snippet": self.phrase() + " " + self.phrase(), "score": round(r.random(), 3)}
                hits.append(hit)
                size += len(json.dumps(hit, ensure_ascii=False))
            return json.dumps({"results": hits}, ensure_ascii=False)
        if name == "list_dir":
            entries = []
            size = 0
            while size < target:
                entry = {"name": f"{r.choice(['mod', 'test', 'doc', 'données', '文件'])}_{r.randint(0, 9999)}.rs",
                         "size": r.randint(0, 10**6)}
                entries.append(entry)
                size += len(json.dumps(entry, ensure_ascii=False))
            return json.dumps(entries, ensure_ascii=False)
        rows = []
        size = 0
        while size < target:
            row = {"id": r.randint(1, 10**6), "body": self.phrase()}
            rows.append(row)
            size += len(json.dumps(row, ensure_ascii=False))
        return json.dumps({"rows": rows, "row_count": len(rows)}, ensure_ascii=False)

    # ---------------------------------------------------------------- turns
    def add(self, message: dict[str, Any]) -> None:
        self.messages.append(message)

    def tool_round(self) -> None:
        r = self.rng
        k = r.randint(1, max(1, self.args.parallel))
        calls = []
        for _ in range(k):
            name = r.choice(TOOLS)
            args = self.tool_args(name)
            calls.append(
                {
                    "id": self.call_id(),
                    "type": "function",
                    "function": {
                        "name": name,
                        "arguments": args if self.args.args_object else json.dumps(args, ensure_ascii=False),
                    },
                }
            )
        content = r.choice(THOUGHTS) if r.random() < 0.3 else None
        self.add({"role": "assistant", "content": content, "tool_calls": calls})
        for call in calls:
            big = r.random() < self.args.big_ratio
            message = {
                "role": "tool",
                "tool_call_id": call["id"],
                "name": call["function"]["name"],
                "content": self.tool_result(call["function"]["name"], big),
            }
            if r.random() < self.args.observation_ratio:
                message["observation"] = True
            self.add(message)

    def turn(self, forced_rounds: int | None) -> None:
        r = self.rng
        self.add({"role": "user", "content": r.choice(USER_OPENERS).format(p=self.phrase())})
        rounds = 0
        if forced_rounds is not None:
            for _ in range(forced_rounds):
                self.tool_round()
        else:
            while rounds < self.args.max_rounds and r.random() < self.args.tool_ratio:
                self.tool_round()
                rounds += 1
        self.add(
            {
                "role": "assistant",
                "content": r.choice(ANSWERS).format(p=self.phrase(), f=r.choice(FILES), n=r.randint(1, 900)),
            }
        )

    def run(self) -> list[dict[str, Any]]:
        self.add({"role": "system", "content": SYSTEM_PROMPT})
        limit = self.args.messages
        forced = self.args.final_turn_rounds
        if limit is None:
            for index in range(self.args.turns):
                self.turn(forced if index == self.args.turns - 1 else None)
            return self.messages
        while len(self.messages) < limit:
            self.turn(None)
        if forced is None:
            del self.messages[limit:]
        else:
            self.turn(forced)
        return self.messages


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="Seeded agentic transcript generator")
    p.add_argument("--turns", type=int, default=10, help="user turns (default 10)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--tool-ratio", type=float, default=0.6,
                   help="probability that another tool-call round follows (default 0.6)")
    p.add_argument("--big-result-chars", type=int, default=20_000, help="size of large tool results (default 20000)")
    p.add_argument("--big-ratio", type=float, default=0.15, help="fraction of tool results that are large")
    p.add_argument("--observation-ratio", type=float, default=0.85, help="fraction of tool results marked observation")
    p.add_argument("--max-rounds", type=int, default=6, help="max tool rounds per turn")
    p.add_argument("--parallel", type=int, default=2, help="max parallel tool calls per assistant message")
    p.add_argument("--final-turn-rounds", type=int, default=None,
                   help="force this many tool rounds in the last turn (see --messages)")
    p.add_argument("--messages", type=int, default=None, help="generate until this many messages, cut to exactly it")
    p.add_argument("--args-object", action="store_true", help="tool-call arguments as JSON objects, not JSON text")
    p.add_argument("--format", choices=("case", "messages", "jsonl"), default="case")
    p.add_argument("--policy", help="JSON object stored as the case's policy")
    p.add_argument("--context-window", type=int, default=None)
    args = p.parse_args(argv)
    if not 0 <= args.tool_ratio <= 1 or not 0 <= args.big_ratio <= 1 or not 0 <= args.observation_ratio <= 1:
        p.error("ratios must be within [0, 1]")
    if args.turns < 0 or (args.messages is not None and args.messages < 0) or args.big_result_chars < 1:
        p.error("counts must be non-negative (big-result-chars positive)")
    messages = Gen(args).run()
    if args.format == "jsonl":
        for message in messages:
            sys.stdout.write(json.dumps(message, ensure_ascii=False) + "\n")
        return 0
    if args.format == "messages":
        json.dump(messages, sys.stdout, ensure_ascii=False)
        sys.stdout.write("\n")
        return 0
    meta = {
        "generator": "gen_transcript.py",
        "seed": args.seed,
        "turns": sum(1 for m in messages if m["role"] == "user"),
        "messages": len(messages),
        "tool_results": sum(1 for m in messages if m["role"] == "tool"),
        "observations": sum(1 for m in messages if m.get("observation")),
        "content_chars": sum(len(m.get("content") or "") for m in messages),
        "args": {k: v for k, v in vars(args).items() if k not in ("format", "policy", "context_window")},
    }
    case: dict[str, Any] = {"meta": meta}
    if args.policy:
        case["policy"] = json.loads(args.policy)
    if args.context_window is not None:
        case["context_window"] = args.context_window
    case["messages"] = messages
    json.dump(case, sys.stdout, ensure_ascii=False)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

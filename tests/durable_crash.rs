//! A writer killed with SIGKILL in the middle of a checkpoint leaves the last committed
//! version of the context readable and whole; the example agent killed mid-run leaves a
//! record whose summary names only artifacts the file holds, and resumes.
//!
//! This target has its own harness: the same binary is the test and, when
//! `WRITER_ENV` (or `AGENT_ENV`) names a database, the writer (or agent) process the
//! test kills.

#[allow(dead_code, unreachable_pub)]
#[path = "../examples/agent/run.rs"]
mod agent;

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use llm_context::durable::{ContextRecord, ContextStore};
use llm_context::sqlite::SqliteStore;
use llm_context::{Message, Scope};

const WRITER_ENV: &str = "LLM_CONTEXT_CRASH_WRITER_DB";
const AGENT_ENV: &str = "LLM_CONTEXT_CRASH_AGENT_DB";
/// Messages per record, and characters each: about 6 MB a checkpoint, so that a write
/// takes long enough to be killed in the middle of.
const MESSAGES: usize = 300;
const PAD: usize = 20_000;

fn scope() -> Scope {
    Scope::org("crash-test")
}

/// Every message of the record committed as `version` says so: a torn write would mix
/// versions or lose messages.
fn record_for(version: u64) -> ContextRecord {
    let mut record = ContextRecord::new();
    record.messages = (0..MESSAGES)
        .map(|i| {
            let text = format!("v{version} m{i} {}", "x".repeat(PAD));
            if i % 2 == 0 {
                Message::user(text)
            } else {
                Message::assistant(text)
            }
        })
        .collect();
    record.refresh_estimate();
    record
}

fn assert_whole(record: &ContextRecord) {
    assert_eq!(record.messages.len(), MESSAGES, "a record lost messages");
    for (i, m) in record.messages.iter().enumerate() {
        let expected = format!("v{} m{i} ", record.version);
        assert!(
            m.text().starts_with(&expected) && m.text().len() == expected.len() + PAD,
            "message {i} of version {} is not the one committed with it",
            record.version
        );
    }
}

/// The child: checkpoint forever (bounded), saying before and after each write.
fn writer(path: &str) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let store = SqliteStore::open(path).unwrap();
        let mut version = store
            .load(&scope(), "root")
            .await
            .unwrap()
            .map_or(0, |r| r.version);
        let mut out = std::io::stdout();
        for _ in 0..1_000 {
            let mut record = record_for(version + 1);
            record.version = version;
            writeln!(out, "writing {}", version + 1).unwrap();
            out.flush().unwrap();
            version = store.save(&scope(), "root", &record).await.unwrap();
            writeln!(out, "committed {version}").unwrap();
            out.flush().unwrap();
        }
    });
}

enum Seen {
    Writing(u64),
    Committed(u64),
}

fn kill_mid_write_leaves_the_last_commit() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("crash.db");
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let mut lost_in_flight = 0;
    // Kill at different points of a write: right as it starts, then later into it.
    for (round, delay_ms) in [0u64, 3, 8, 15, 25, 40, 60].into_iter().enumerate() {
        let mut child = Command::new(std::env::current_exe().unwrap())
            .env(WRITER_ENV, &path)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = mpsc::channel();
        let reader = std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                let seen = match line.split_once(' ') {
                    Some(("writing", v)) => Seen::Writing(v.parse().unwrap()),
                    Some(("committed", v)) => Seen::Committed(v.parse().unwrap()),
                    _ => continue,
                };
                if tx.send(seen).is_err() {
                    break;
                }
            }
        });
        // Let one write commit in this round, then kill during the next one.
        let mut committed = 0;
        let mut writing = loop {
            match rx
                .recv_timeout(Duration::from_secs(60))
                .expect("the writer stalled")
            {
                Seen::Committed(v) => committed = v,
                Seen::Writing(v) if committed > 0 => break v,
                Seen::Writing(_) => {}
            }
        };
        std::thread::sleep(Duration::from_millis(delay_ms));
        child.kill().unwrap(); // SIGKILL: no destructor, no flush, no unlock
        child.wait().unwrap();
        for seen in rx.try_iter() {
            match seen {
                Seen::Committed(v) => committed = v,
                Seen::Writing(v) => writing = v,
            }
        }
        reader.join().unwrap();

        let record = rt.block_on(async {
            let store = SqliteStore::open(&path).unwrap();
            store.load(&scope(), "root").await.unwrap().unwrap()
        });
        // The write in flight either committed whole or not at all.
        assert!(
            record.version == writing || record.version == writing - 1,
            "round {round}: found version {}, the writer was writing {writing}",
            record.version
        );
        assert!(
            record.version >= committed,
            "round {round}: a reported commit was lost"
        );
        assert_whole(&record);
        if record.version == writing - 1 {
            lost_in_flight += 1;
        }
    }
    assert!(
        lost_in_flight > 0,
        "no kill landed before its write committed; the test did not test a crash mid-write"
    );
    // The file takes new writes after the crashes.
    rt.block_on(async {
        let store = SqliteStore::open(&path).unwrap();
        let mut record = store.load(&scope(), "root").await.unwrap().unwrap();
        let next = record_for(record.version + 1);
        record.messages = next.messages;
        let v = store.save(&scope(), "root", &record).await.unwrap();
        assert_whole(&store.load(&scope(), "root").await.unwrap().unwrap());
        assert_eq!(v, record.version + 1);
    });
}

/// The agent's stores: records and artifacts in one SQLite file.
fn agent_stores(path: &std::path::Path) -> agent::Stores {
    let store = std::sync::Arc::new(SqliteStore::open(path).unwrap());
    agent::Stores {
        contexts: store.clone(),
        artifacts: store,
    }
}

/// The child: the example agent on the SQLite file, printing its lines, until killed.
fn agent_child(path: &str) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let settings = agent::Settings {
            turns: 100_000,
            ..agent::Settings::default()
        };
        let mut out = std::io::stdout();
        agent::run(
            &settings,
            &agent_stores(std::path::Path::new(path)),
            &mut |line| {
                writeln!(out, "{line}").unwrap();
                out.flush().unwrap();
            },
        )
        .await
        .unwrap();
    });
}

/// Every artifact id the record's summary names, directly or through its archive
/// chain, read back from `store` as the agent's stack reads them (the record's tenant,
/// the context id as the session); returns the text of the folded spans. Panics on an
/// id the store does not hold.
async fn named_artifacts(store: &SqliteStore, record: &ContextRecord) -> (Vec<String>, usize) {
    use llm_context::ArtifactStore;
    let read = |id: String| async move {
        let found = ArtifactStore::get(store, &agent::scope(), agent::CONTEXT_ID, &id)
            .await
            .unwrap();
        found
            .unwrap_or_else(|| panic!("the record names {id}, which the file does not hold"))
            .text
            .to_string()
    };
    let block = record.summary.as_ref().expect("the record was folded");
    let mut spans = Vec::new();
    let mut archives = 0;
    let mut next = block.archive.clone();
    while let Some(id) = next {
        let archive: serde_json::Value = serde_json::from_str(&read(id).await).unwrap();
        for span in archive["artifacts"].as_array().unwrap() {
            spans.push(read(span.as_str().unwrap().to_owned()).await);
        }
        next = archive["earlier"].as_str().map(str::to_owned);
        archives += 1;
    }
    for id in &block.artifacts {
        spans.push(read(id.clone()).await);
    }
    (spans, archives)
}

/// Every turn the record says is done is in a folded span or still in the record.
fn nothing_lost(record: &ContextRecord, spans: &[String]) -> usize {
    let done = record.scratchpad["turns_done"].as_u64().unwrap() as usize;
    let kept = serde_json::to_string(&record.messages).unwrap();
    for turn in 0..done {
        let question = format!("What happened in incident {turn}?");
        assert!(
            kept.contains(&question) || spans.iter().any(|s| s.contains(&question)),
            "turn {turn} of {done} is lost"
        );
    }
    done
}

fn a_killed_agent_resumes_with_every_folded_turn_readable() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("agent.db");
    let mut child = Command::new(std::env::current_exe().unwrap())
        .env(AGENT_ENV, &path)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    // Past turn 40 the summary has archived its oldest folds more than once.
    let stdout = child.stdout.take().unwrap();
    let mut lines = BufReader::new(stdout).lines();
    loop {
        let line = lines
            .next()
            .expect("the agent ended before turn 40")
            .unwrap();
        let turn = line
            .strip_prefix("turn ")
            .and_then(|rest| rest.split(':').next())
            .and_then(|n| n.parse::<usize>().ok());
        if turn.is_some_and(|t| t >= 40) {
            break;
        }
    }
    child.kill().unwrap(); // SIGKILL, mid-run: whatever it was doing
    child.wait().unwrap();

    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let store = SqliteStore::open(&path).unwrap();
        let record = store
            .load(&agent::scope(), agent::CONTEXT_ID)
            .await
            .unwrap()
            .unwrap();
        let (spans, archives) = named_artifacts(&store, &record).await;
        assert!(archives >= 2, "{archives} archives by turn 40");
        let done = nothing_lost(&record, &spans);
        assert!(done >= 40, "only {done} turns committed");

        // Resume in this process, on the same file, for 20 more turns.
        let settings = agent::Settings {
            turns: done + 20,
            ..agent::Settings::default()
        };
        let stats = agent::run(&settings, &agent_stores(&path), &mut |_| {})
            .await
            .unwrap();
        assert_eq!((stats.first_turn, stats.turns), (done, 20));
        let record = store
            .load(&agent::scope(), agent::CONTEXT_ID)
            .await
            .unwrap()
            .unwrap();
        let (spans, _) = named_artifacts(&store, &record).await;
        assert_eq!(nothing_lost(&record, &spans), done + 20);
    });
}

fn main() {
    if let Ok(path) = std::env::var(WRITER_ENV) {
        writer(&path);
        return;
    }
    if let Ok(path) = std::env::var(AGENT_ENV) {
        agent_child(&path);
        return;
    }
    // `cargo test -- FILTER` passes its arguments here: run unless filtered out.
    let filter: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with('-'))
        .collect();
    let tests: [(&str, fn()); 2] = [
        (
            "kill_mid_write_leaves_the_last_commit",
            kill_mid_write_leaves_the_last_commit,
        ),
        (
            "a_killed_agent_resumes_with_every_folded_turn_readable",
            a_killed_agent_resumes_with_every_folded_turn_readable,
        ),
    ];
    let chosen: Vec<_> = tests
        .iter()
        .filter(|(name, _)| filter.is_empty() || filter.iter().any(|f| name.contains(f.as_str())))
        .collect();
    println!("running {} tests", chosen.len());
    for (name, test) in &chosen {
        test();
        println!("test {name} ... ok");
    }
    println!();
    println!("{} passed, 0 failed", chosen.len());
}

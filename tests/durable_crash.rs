//! A writer killed with SIGKILL in the middle of a checkpoint leaves the last committed
//! version of the context readable and whole.
//!
//! This target has its own harness: the same binary is the test and, when
//! `WRITER_ENV` names a database, the writer process the test kills.

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use llm_context::durable::{ContextRecord, ContextStore};
use llm_context::sqlite::SqliteStore;
use llm_context::{Message, Scope};

const WRITER_ENV: &str = "LLM_CONTEXT_CRASH_WRITER_DB";
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

fn main() {
    if let Ok(path) = std::env::var(WRITER_ENV) {
        writer(&path);
        return;
    }
    // `cargo test -- FILTER` passes its arguments here: run unless filtered out.
    let filter: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with('-'))
        .collect();
    let name = "kill_mid_write_leaves_the_last_commit";
    if !filter.is_empty() && !filter.iter().any(|f| name.contains(f.as_str())) {
        println!("0 passed, 0 failed");
        return;
    }
    println!("running 1 test");
    kill_mid_write_leaves_the_last_commit();
    println!("test {name} ... ok");
    println!();
    println!("1 passed, 0 failed");
}

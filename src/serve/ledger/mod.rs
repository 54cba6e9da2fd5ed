//! The ledger: for every managed request through the proxy, what the client sent, what
//! went upstream, what the provider billed, and what the same request passed through
//! unchanged is modelled to have cost; per tenant and per session, with a flag on every
//! session that costs more than pass-through.
//!
//! ```
//! use llm_context::Usage;
//! use llm_context::serve::ledger::{Buckets, Totals};
//!
//! // The raw buckets a cost is computed from, so that anyone can recompute it.
//! let price = llm_context::Catalog::builtin().get("claude-sonnet-4-6").unwrap().price.unwrap();
//! let written = Buckets::of(&Usage::new(0, 0, 0, 1_000_000));
//! let read = Buckets::of(&Usage::new(0, 0, 1_000_000, 0));
//! assert_eq!(written.cost(&price), 3.75);
//! assert_eq!(read.cost(&price), 0.30);
//! assert_eq!(Totals::default().saving_percent(), None);
//! ```
//!
//! * The request's path only hands over what it already has (the client's bytes, the
//!   report, the provider's usage), in a draft written when its answer ends. A worker
//!   thread reads the client's body as the provider's cache sees it (each tool, system
//!   block and content block hashed with everything before it, the client's own
//!   `cache_control` markers kept apart), bills it and appends the [`Row`]. A write the
//!   worker has no room for is dropped, logged and counted in `/metrics`
//!   (`llm_context_ledger_write_failures`): it never fails or delays a request.
//! * **The pass-through cost** is the client's unchanged requests of the session replayed
//!   through the provider's cache model, the one [`simulate`](crate::simulate) bills with
//!   ([`AnthropicCache`](crate::simulate::AnthropicCache): breakpoints, 20-block lookback,
//!   TTLs refreshed on read, the model's minimum; [`OpenAiCache`](crate::simulate::OpenAiCache)
//!   for automatic caching). The model counts in the crate's estimate, the provider in its
//!   tokenizer: the model gives the shares (of the client's prompt, how much would have
//!   been read and written), the provider's usage the scale (the client's prompt is the
//!   billed prompt times the client's estimate over the sent one's), and the output is the
//!   one observed. Where the request and all of its session before it went up exactly as
//!   the client sent them, nothing is modelled ([`Provenance::Observed`]).
//! * **What it cannot know**: whether the provider still held a prefix from before the
//!   ledger saw the session, or from another session or client sharing it
//!   ([`Provenance::ModelledNoHistory`]); in which order it applied two requests of a
//!   session in flight together ([`Provenance::ModelledConcurrent`]); the provider's own
//!   eviction before the TTL. Each row says which applies; each total carries the weakest.
//! * Kept in memory: the newest [`MAX_REQUESTS`] requests and [`MAX_SESSIONS`] sessions
//!   (the least recently used out); each tenant's totals since the ledger began. With a
//!   `LedgerFile` (feature `sqlite`, `--ledger sqlite:PATH`) on disk as well: each row is
//!   written before its answer leaves, and read back at the next start. With Redis, every
//!   replica appends to one stream and reads the others' rows back, so their requests
//!   land in one view.
//! * Read at `GET /llm-context/ledger/sessions` and `/llm-context/ledger/sessions/{id}`,
//!   under the access rule of `/metrics`.

mod book;
mod chain;
#[cfg(feature = "sqlite")]
mod file;
pub(crate) mod http;
mod model;
pub(crate) mod page;
mod row;

use std::collections::HashMap;
use std::sync::mpsc::{Receiver, SyncSender, TrySendError, sync_channel};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant, SystemTime};

use axum::body::Bytes;
use llm_context_layers::catalog::{Catalog, Provider};
use llm_context_layers::{PreparationReport, Usage};

pub use book::{GUARD_WINDOW, MAX_REQUESTS, MAX_SESSIONS, SessionView, TenantView, Totals};
pub(crate) use chain::Shape;
#[cfg(feature = "sqlite")]
pub use file::{LedgerError, LedgerFile};
pub use row::{Buckets, Edits, Provenance, Row};

use book::Book;
use model::{Model, Seen};

/// Where a server's ledger is kept beside memory (`--ledger sqlite:PATH`).
#[cfg(feature = "sqlite")]
pub(crate) type Disk = LedgerFile;
/// Without the `sqlite` feature a ledger is in memory only.
#[cfg(not(feature = "sqlite"))]
pub(crate) type Disk = std::convert::Infallible;
#[cfg(feature = "sqlite")]
type Writer = file::Writer;
#[cfg(not(feature = "sqlite"))]
type Writer = NoWriter;

/// Requests waiting for the worker; past this a write is dropped and counted.
const QUEUE: usize = 4_096;
/// Bodies larger than this are counted, not modelled: the ledger does not hold them.
pub(crate) const MAX_MODELLED_BYTES: usize = 32 << 20;

/// What the ledger reports to `/metrics`.
#[derive(Clone, Debug, Default)]
pub(crate) struct Counters {
    /// Writes dropped (the worker's queue full) or failed.
    pub(crate) write_failures: prometheus_client::metrics::counter::Counter,
    /// Sessions costlier than pass-through now, by tenant.
    pub(crate) costlier: prometheus_client::metrics::family::Family<
        Vec<(&'static str, String)>,
        prometheus_client::metrics::gauge::Gauge,
    >,
}

enum Job {
    Request(Box<Pending>),
    PassedThrough(String),
    Flush(tokio::sync::oneshot::Sender<()>),
}

/// The ledger of one server.
#[derive(Clone, Debug)]
pub(crate) struct Ledger {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    book: Arc<Mutex<Book>>,
    jobs: SyncSender<Job>,
    epoch: Instant,
    in_flight: Mutex<HashMap<(String, String), usize>>,
    counters: Counters,
    /// What the figures cover (in memory since the start, or since a file began).
    scope: String,
    /// Rows go to disk: an answer waits for its row's first write.
    durable: bool,
}

impl Ledger {
    /// A ledger in memory, or on `file`, its worker started.
    pub(crate) fn new(
        catalog: Arc<Catalog>,
        counters: Counters,
        file: Option<Disk>,
        redis: Option<crate::redis::RedisLedgerStream>,
    ) -> Self {
        let (jobs, queue) = sync_channel(QUEUE);
        let (mut book, writer, mut scope) = match file {
            #[cfg(feature = "sqlite")]
            Some(file) => {
                let (book, writer, scope) = file.into_parts();
                (book, Some(writer), scope)
            }
            _ => (Book::default(), None, http::scope()),
        };
        // Shared, the views are the stream's (this replica's rows among them): a file
        // is then this replica's own record, not read into them.
        if redis.is_some() {
            book = Book::default();
            scope = format!(
                "managed requests of every replica on this Redis, its newest {} rows: each \
                 tenant's totals over them; the newest {} sessions and {} requests",
                crate::redis::LEDGER_STREAM_ROWS,
                MAX_SESSIONS,
                MAX_REQUESTS
            );
        }
        let durable = writer.is_some();
        let book = Arc::new(Mutex::new(book));
        let epoch = Instant::now();
        let worker = Worker {
            book: book.clone(),
            catalog,
            model: Model::default(),
            counters: counters.clone(),
            logged: std::collections::HashSet::new(),
            writer,
            shared: None,
            units: chain::Units::default(),
        };
        let spawned = std::thread::Builder::new()
            .name("llm-context-ledger".into())
            .spawn(move || worker.run(queue, redis));
        if let Err(error) = spawned {
            tracing::warn!(event = "ledger_not_started", %error, "the ledger keeps nothing");
        }
        Self {
            inner: Arc::new(Inner {
                book,
                jobs,
                epoch,
                in_flight: Mutex::new(HashMap::new()),
                counters,
                scope,
                durable,
            }),
        }
    }

    /// What the figures cover.
    pub(crate) fn scope(&self) -> &str {
        &self.inner.scope
    }

    /// Starts the draft of a request about to go through the stack.
    pub(crate) fn begin(&self, start: Start) -> Arc<Draft> {
        let key = (start.tenant.clone(), start.session.clone());
        let concurrent = {
            let mut in_flight = lock(&self.inner.in_flight);
            let n = in_flight.entry(key).or_insert(0);
            *n += 1;
            *n > 1
        };
        let body = start.body.filter(|b| b.len() <= MAX_MODELLED_BYTES);
        // What the reader kept is only for a body that is modelled.
        let origin = start.origin.filter(|_| body.is_some());
        Arc::new(Draft {
            ledger: self.clone(),
            pending: Some(Box::new(Pending {
                at: SystemTime::now(),
                since: self.inner.epoch.elapsed(),
                concurrent,
                start: Start {
                    body,
                    origin,
                    ..start
                },
                report: None,
                usage: None,
                status: 0,
                added: Duration::ZERO,
                ack: None,
            })),
            fill: Mutex::new(Fill::default()),
        })
    }

    /// Whether `tenant`'s `session` costs more than pass-through over its newest requests.
    pub(crate) fn costlier(&self, tenant: &str, session: &str) -> bool {
        lock(&self.inner.book).costlier(tenant, session)
    }

    /// Counts a request of `tenant` on a route passed through unmanaged.
    pub(crate) fn passed_through(&self, tenant: &str) {
        self.send(Job::PassedThrough(tenant.to_owned()));
    }

    /// Waits until every row written before the call is in the book (at most a second).
    pub(crate) async fn flush(&self) {
        let (done, wait) = tokio::sync::oneshot::channel();
        if self.send(Job::Flush(done)) {
            let _ = tokio::time::timeout(Duration::from_secs(1), wait).await;
        }
    }

    /// Reads the book.
    pub(crate) fn read<T>(&self, f: impl FnOnce(&Book) -> T) -> T {
        f(&lock(&self.inner.book))
    }

    fn send(&self, job: Job) -> bool {
        match self.inner.jobs.try_send(job) {
            Ok(()) => true,
            // A flush not taken is a read that waits for nothing: not a lost write.
            Err(TrySendError::Full(Job::Flush(_)) | TrySendError::Disconnected(Job::Flush(_))) => {
                false
            }
            Err(TrySendError::Full(_) | TrySendError::Disconnected(_)) => {
                self.inner.counters.write_failures.inc();
                tracing::warn!(
                    event = "ledger_write_dropped",
                    "the ledger's worker is behind or gone: a request is not in the ledger"
                );
                false
            }
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// What the handler knows of a request before the stack runs.
#[derive(Debug)]
pub(crate) struct Start {
    /// It went through the guarded stacks (its session costlier than pass-through).
    pub(crate) guarded: bool,
    pub(crate) tenant: String,
    pub(crate) session: String,
    pub(crate) route: &'static str,
    pub(crate) shape: Shape,
    pub(crate) model: String,
    pub(crate) provider: Provider,
    /// The client's body, as it came.
    pub(crate) body: Option<Bytes>,
    /// What the reader kept of it (a Messages body's layout: its parts are found there,
    /// not by reading the body again).
    pub(crate) origin: Option<llm_context_layers::Origin>,
}

#[derive(Debug)]
struct Pending {
    at: SystemTime,
    since: Duration,
    concurrent: bool,
    start: Start,
    report: Option<PreparationReport>,
    usage: Option<Usage>,
    status: u16,
    added: Duration,
    /// Told once the row is first written (a durable ledger).
    ack: Option<tokio::sync::oneshot::Sender<()>>,
}

#[derive(Debug, Default)]
struct Fill {
    report: Option<PreparationReport>,
    usage: Option<Usage>,
    status: Option<u16>,
    added: Option<Duration>,
}

/// A request on its way: filled in as its answer is, written to the ledger when the last
/// of its holders (the response's head, a stream's body) lets it go.
#[derive(Debug)]
pub(crate) struct Draft {
    ledger: Ledger,
    pending: Option<Box<Pending>>,
    fill: Mutex<Fill>,
}

impl Draft {
    /// The stack's report of the request.
    pub(crate) fn report(&self, report: &PreparationReport) {
        lock(&self.fill).report = Some(report.clone());
    }

    /// The provider's usage for it.
    pub(crate) fn usage(&self, usage: Usage) {
        lock(&self.fill).usage = Some(usage);
    }

    /// Its answer's status, and the time the proxy added to its headers.
    pub(crate) fn answered(&self, status: u16, added: Duration) {
        let mut fill = lock(&self.fill);
        fill.status = Some(status);
        fill.added = Some(added);
    }
}

impl Draft {
    /// Lets the draft go; when this was its last holder and the ledger is durable, the
    /// row is written now and the receiver hears when it is on disk.
    pub(crate) fn finish(self: Arc<Self>) -> Option<tokio::sync::oneshot::Receiver<()>> {
        if !self.ledger.inner.durable {
            return None;
        }
        let mut last = Arc::try_unwrap(self).ok()?;
        let (done, wait) = tokio::sync::oneshot::channel();
        if let Some(pending) = &mut last.pending {
            pending.ack = Some(done);
        }
        drop(last);
        Some(wait)
    }
}

impl Drop for Draft {
    fn drop(&mut self) {
        let Some(mut pending) = self.pending.take() else {
            return;
        };
        let fill = std::mem::take(self.fill.get_mut().unwrap_or_else(PoisonError::into_inner));
        pending.report = fill.report;
        pending.usage = fill.usage;
        pending.status = fill.status.unwrap_or(0);
        pending.added = fill.added.unwrap_or_default();
        let key = (pending.start.tenant.clone(), pending.start.session.clone());
        {
            let mut in_flight = lock(&self.ledger.inner.in_flight);
            if let Some(n) = in_flight.get_mut(&key) {
                *n -= 1;
                if *n == 0 {
                    in_flight.remove(&key);
                }
            }
        }
        self.ledger.send(Job::Request(pending));
    }
}

/// The ledger's thread: models and appends.
struct Worker {
    book: Arc<Mutex<Book>>,
    catalog: Arc<Catalog>,
    model: Model,
    counters: Counters,
    /// Sessions logged as costlier than pass-through (once each).
    logged: std::collections::HashSet<(String, String)>,
    /// The file rows are appended to, if any.
    writer: Option<Writer>,
    /// The stream the replicas share, if any.
    shared: Option<Shared>,
    /// The Messages units' sums seen lately, by their bytes.
    units: chain::Units,
}

/// How long the worker waits on Redis for one append or read.
const SHARE_TIMEOUT: Duration = Duration::from_millis(200);

/// The replicas' stream, read from `last` on, driven from the worker's own runtime.
struct Shared {
    stream: crate::redis::LedgerConnection,
    runtime: tokio::runtime::Runtime,
    last: String,
}

impl Shared {
    /// The stream's connection of the worker's own, on a runtime of its own made (and
    /// dropped) on the worker's thread: a multiplexed connection is served by the runtime
    /// that connected it (see `RedisLedgerStream`), and this one is driven only inside
    /// the worker's `block_on` calls.
    fn open(stream: &crate::redis::RedisLedgerStream) -> Result<Self, String> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| e.to_string())?;
        let stream = {
            let _entered = runtime.enter();
            stream.connect().map_err(|e| e.to_string())?
        };
        // Connected now, within the connect timeout, rather than by the first row,
        // whose wait is short (a row that cannot be shared stays in this replica's
        // views alone).
        let ping = async { tokio::time::timeout(stream.connect_timeout(), stream.ping()).await };
        match runtime.block_on(ping) {
            Ok(Ok(())) => {}
            Ok(Err(error)) => tracing::warn!(event = "ledger_redis_away", %error),
            Err(_) => tracing::warn!(event = "ledger_redis_away", "no answer"),
        }
        Ok(Self {
            stream,
            runtime,
            last: "0".to_owned(),
        })
    }
}

impl Worker {
    fn run(mut self, queue: Receiver<Job>, stream: Option<crate::redis::RedisLedgerStream>) {
        self.shared = stream.and_then(|stream| match Shared::open(&stream) {
            Ok(shared) => Some(shared),
            Err(error) => {
                tracing::warn!(event = "ledger_not_shared", %error);
                None
            }
        });
        self.pull();
        loop {
            // Shared through Redis, the other replicas' rows are read every quarter second.
            let job = match queue.recv_timeout(Duration::from_millis(250)) {
                Ok(job) => job,
                Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
                    self.pull();
                    continue;
                }
                Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => return,
            };
            match job {
                Job::Request(pending) => self.write(*pending),
                Job::PassedThrough(tenant) => {
                    if let Some(writer) = &self.writer
                        && let Err(error) = writer.passed_through(&tenant)
                    {
                        self.failed(&error);
                    }
                    if !self.share("passed", &tenant) {
                        lock(&self.book).passed_through(&tenant, 1);
                    }
                }
                Job::Flush(done) => {
                    self.pull();
                    let _ = done.send(());
                }
            }
        }
    }

    /// Appends `text` to the shared stream; `false`: not shared (no Redis, or it failed,
    /// counted): the caller keeps it in this process's views.
    fn share(&mut self, kind: &str, text: &str) -> bool {
        let Some(shared) = &self.shared else {
            return false;
        };
        let append = shared.stream.append(kind, text);
        match shared
            .runtime
            .block_on(async { tokio::time::timeout(SHARE_TIMEOUT, append).await })
        {
            Ok(Ok(_)) => true,
            Ok(Err(error)) => {
                self.failed(&error);
                false
            }
            Err(_) => {
                self.failed(&"redis did not answer within 200 ms");
                false
            }
        }
    }

    /// Reads the shared stream's new entries (this replica's and the others') into the
    /// views.
    fn pull(&mut self) {
        loop {
            let Some(shared) = &self.shared else {
                return;
            };
            let read = shared.stream.after(&shared.last, 1_000);
            let read = async { tokio::time::timeout(SHARE_TIMEOUT, read).await };
            let entries = match shared.runtime.block_on(read) {
                Ok(Ok(entries)) => entries,
                // Redis away: the views wait for it; nothing is lost from the stream.
                _ => return,
            };
            let Some((last, _, _)) = entries.last() else {
                return;
            };
            let (last, full) = (last.clone(), entries.len() == 1_000);
            for (_, kind, text) in entries {
                match (kind.as_str(), serde_json::from_str::<Row>(&text)) {
                    ("row", Ok(row)) => self.append(row),
                    ("passed", _) => lock(&self.book).passed_through(&text, 1),
                    (_, Err(error)) => tracing::warn!(event = "ledger_row_unread", %error),
                    _ => {}
                }
            }
            if let Some(shared) = &mut self.shared {
                shared.last = last;
            }
            if !full {
                return;
            }
        }
    }

    fn write(&mut self, mut p: Pending) {
        // On disk first, with the provider's figures (what cannot be lost once answered),
        // then the answer may go; the model follows and completes the row.
        let ack = p.ack.take();
        let raw = self.writer.is_some().then(|| self.row(&p, false));
        let on_disk = match (&self.writer, raw) {
            (Some(writer), Some(raw)) => match writer.insert(&raw) {
                Ok(id) => Some(id),
                Err(error) => {
                    self.failed(&error);
                    None
                }
            },
            _ => None,
        };
        if let Some(ack) = ack {
            let _ = ack.send(());
        }
        let row = self.row(&p, true);
        if let (Some(writer), Some(id)) = (&self.writer, on_disk)
            && let Err(error) = writer.update(id, &row)
        {
            self.failed(&error);
        }
        if !self.share("row", &serde_json::to_string(&row).unwrap_or_default()) {
            self.append(row);
        }
    }

    /// Puts `row` in the views, and says when its session turned costlier (or back).
    fn append(&mut self, row: Row) {
        let key = (row.tenant.clone(), row.session.clone());
        let tenant = row.tenant.clone();
        let change = lock(&self.book).append(row);
        let gauge = self
            .counters
            .costlier
            .get_or_create(&vec![("tenant", tenant)]);
        if change.became_costlier {
            gauge.inc();
            if self.logged.insert(key.clone()) {
                tracing::warn!(
                    event = "session_costlier_than_passthrough",
                    tenant = key.0,
                    session = key.1,
                    "over its newest {GUARD_WINDOW} requests this session cost more than \
                     sending them unchanged would have"
                );
            }
        } else if change.stopped_costlier {
            gauge.dec();
        }
    }

    fn failed(&self, error: &dyn std::fmt::Display) {
        self.counters.write_failures.inc();
        tracing::warn!(event = "ledger_write_failed", %error, "the request was served");
    }

    /// The row of `p`: with the pass-through modelled, or (`model` false) the provider's
    /// figures alone, as first written to disk.
    fn row(&mut self, p: &Pending, model: bool) -> Row {
        let start = &p.start;
        let report = p.report.clone().unwrap_or_default();
        let edits = Edits {
            removed_messages: report.removed_messages as u64,
            cleared: report.cleared_results as u64,
            offloaded: report.offloaded_results as u64,
            thinking_dropped: report.thinking_dropped as u64,
            compacted: report.compacted_messages as u64,
            memo_hit: report.memo_hit,
            guard_held: start.guarded,
        };
        let session = if start.session.is_empty() {
            report
                .inferred_session
                .clone()
                .unwrap_or_else(|| "-".to_owned())
        } else {
            start.session.clone()
        };
        let modelled = if model {
            let laid_out = start
                .origin
                .as_ref()
                .and_then(|o| o.get::<crate::wire::messages::faithful::Kept>())
                .filter(|_| start.shape == Shape::Messages);
            let chain = match (start.body.as_deref(), laid_out) {
                (Some(_), Some(kept)) => {
                    chain::messages_blocks(&kept.layout(), &mut self.units).ok()
                }
                (Some(body), None) => chain::blocks(start.shape, body).ok(),
                (None, _) => None,
            };
            let provider_edited = report
                .provider_edits
                .is_some_and(|a| a.cleared_tool_uses + a.dropped_thinking + a.compactions > 0);
            let edited =
                edits.any() || report.before_tokens != report.after_tokens || provider_edited;
            self.model.bill(Seen {
                key: (&start.tenant, &session),
                provider: start.provider,
                cache_min_tokens: self.catalog.cache_min_tokens(&start.model) as u64,
                at: p.since,
                chain,
                client_tokens: report.before_tokens as u64,
                sent_tokens: report.after_tokens as u64,
                usage: p.usage,
                edited,
                no_call: report.memo_hit,
                concurrent: p.concurrent,
            })
        } else {
            model::unmodelled(p.usage, report.memo_hit)
        };
        let price = self.catalog.get(&start.model).and_then(|m| m.price);
        Row {
            at_ms: p
                .at
                .duration_since(SystemTime::UNIX_EPOCH)
                .map_or(0, |d| d.as_millis() as u64),
            tenant: start.tenant.clone(),
            session,
            route: start.route.to_owned(),
            model: start.model.clone(),
            executor: report.executor.map(|e| e.as_str().to_owned()),
            status: p.status,
            client_tokens: report.before_tokens as u64,
            sent_tokens: report.after_tokens as u64,
            actual_usd: price.map(|p| modelled.actual.cost(&p)),
            passthrough_usd: price.map(|p| modelled.passthrough.cost(&p)),
            actual: modelled.actual,
            passthrough: modelled.passthrough,
            provenance: modelled.provenance,
            price,
            edits,
            added_ms: p.added.as_secs_f64() * 1e3,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn start(session: &str) -> Start {
        let body = serde_json::json!({"model": "claude-sonnet-4-6", "messages": [
            {"role": "user", "content": [{"type": "text", "text": "x".repeat(20_000),
             "cache_control": {"type": "ephemeral"}}]}]});
        Start {
            guarded: false,
            tenant: "t".into(),
            session: session.into(),
            route: "/v1/messages",
            shape: Shape::Messages,
            model: "claude-sonnet-4-6".into(),
            provider: Provider::Anthropic,
            body: Some(Bytes::from(body.to_string())),
            origin: None,
        }
    }

    #[tokio::test]
    async fn a_session_that_costs_more_than_pass_through_is_counted_once_and_a_pass_through_route_is_counted()
     {
        let counters = Counters::default();
        let ledger = Ledger::new(Catalog::builtin(), counters.clone(), None, None);
        // The stack sent twice the client's prompt, all of it written to the cache.
        let mut report = PreparationReport::default();
        report.before_tokens = 1_000;
        report.after_tokens = 2_000;
        for _ in 0..2 {
            let draft = ledger.begin(start("s"));
            draft.report(&report);
            draft.usage(Usage::new(0, 10, 0, 2_000));
            draft.answered(200, Duration::from_micros(300));
        }
        ledger.passed_through("t");
        ledger.flush().await;
        let gauge = counters
            .costlier
            .get_or_create(&vec![("tenant", "t".to_owned())])
            .get();
        assert_eq!(gauge, 1);
        let (tenants, sessions) = ledger.read(|b| (b.tenants(), b.sessions()));
        assert_eq!(tenants[0].passed_through, 1);
        assert_eq!(tenants[0].totals.requests, 2);
        assert!(sessions[0].costlier_than_passthrough);
        let rows = ledger.read(|b| b.session("s", Some("t")))[0].1.clone();
        assert_eq!(rows[1].passthrough.prompt(), 1_000);
        assert_eq!(rows[1].actual.prompt(), 2_000);
        assert_eq!(rows[1].added_ms, 0.3);
        assert_eq!(counters.write_failures.get(), 0);
    }

    #[tokio::test]
    async fn two_requests_of_a_session_at_once_are_modelled_as_concurrent() {
        let ledger = Ledger::new(Catalog::builtin(), Counters::default(), None, None);
        let mut report = PreparationReport::default();
        report.before_tokens = 2_000;
        report.after_tokens = 1_000;
        report.cleared_results = 1;
        let first = ledger.begin(start("c"));
        first.report(&report);
        first.usage(Usage::new(1_000, 1, 0, 0));
        drop(first);
        let (a, b) = (ledger.begin(start("c")), ledger.begin(start("c")));
        for d in [&a, &b] {
            d.report(&report);
            d.usage(Usage::new(1_000, 1, 0, 0));
        }
        drop((a, b));
        ledger.flush().await;
        let rows = ledger.read(|b| b.session("c", None))[0].1.clone();
        let provenance: Vec<Provenance> = rows.iter().map(|r| r.provenance).collect();
        assert_eq!(
            provenance,
            [
                Provenance::ModelledNoHistory,
                Provenance::Modelled,
                Provenance::ModelledConcurrent
            ]
        );
        let totals = ledger.read(|b| b.sessions())[0].totals.clone();
        assert_eq!(totals.provenance, Some(Provenance::ModelledConcurrent));
    }
}

/// The writer of a build without SQLite: never made.
#[cfg(not(feature = "sqlite"))]
#[derive(Debug)]
pub(crate) enum NoWriter {}

#[cfg(not(feature = "sqlite"))]
impl NoWriter {
    fn insert(&self, _: &Row) -> Result<i64, std::convert::Infallible> {
        match *self {}
    }
    fn update(&self, _: i64, _: &Row) -> Result<(), std::convert::Infallible> {
        match *self {}
    }
    fn passed_through(&self, _: &str) -> Result<(), std::convert::Infallible> {
        match *self {}
    }
}

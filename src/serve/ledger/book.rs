//! The ledger's rows and the views folded from them: per tenant since the ledger began,
//! per session for the sessions it holds. One append feeds both, so the page, the JSON
//! and the terminal table can never disagree.

use std::collections::{HashMap, VecDeque};

use serde::Serialize;

use super::row::{Buckets, Provenance, Row};

/// The most requests held (the newest; older ones leave the session pages, not the totals).
pub const MAX_REQUESTS: usize = 10_000;
/// The most sessions held (the least recently used leaves).
pub const MAX_SESSIONS: usize = 1_000;
/// How many of a session's newest requests decide whether it costs more than pass-through.
pub const GUARD_WINDOW: usize = 20;

/// Sums over a set of requests.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
#[non_exhaustive]
pub struct Totals {
    /// Requests counted.
    pub requests: u64,
    /// The clients' prompts, in estimated tokens.
    pub client_tokens: u64,
    /// The prompts sent upstream, in estimated tokens.
    pub sent_tokens: u64,
    /// What the provider billed.
    pub actual: Buckets,
    /// What the requests passed through unchanged are modelled to have been billed.
    pub passthrough: Buckets,
    /// The actual cost of the priced requests, in USD.
    pub actual_usd: f64,
    /// Their pass-through cost, in USD.
    pub passthrough_usd: f64,
    /// Requests of a model the catalog has no price for: in the tokens, not in the money.
    pub unpriced: u64,
    /// The weakest provenance among the rows.
    pub provenance: Option<Provenance>,
    /// The first and the newest request's time, in milliseconds since the Unix epoch.
    pub from_ms: u64,
    /// See `from_ms`.
    pub to_ms: u64,
}

impl Totals {
    /// Counts `row` in.
    pub fn add(&mut self, row: &Row) {
        if self.requests == 0 {
            self.from_ms = row.at_ms;
        }
        self.requests += 1;
        self.from_ms = self.from_ms.min(row.at_ms);
        self.to_ms = self.to_ms.max(row.at_ms);
        self.client_tokens += row.client_tokens;
        self.sent_tokens += row.sent_tokens;
        self.actual.add(&row.actual);
        self.passthrough.add(&row.passthrough);
        match (row.actual_usd, row.passthrough_usd) {
            (Some(actual), Some(passthrough)) => {
                self.actual_usd += actual;
                self.passthrough_usd += passthrough;
            }
            _ => self.unpriced += 1,
        }
        self.provenance = self.provenance.max(Some(row.provenance));
    }

    /// Pass-through cost less actual cost, in USD: negative when editing cost more.
    pub fn saving_usd(&self) -> f64 {
        self.passthrough_usd - self.actual_usd
    }

    /// The saving as a share of the pass-through cost, in per cent (`None` at zero cost).
    pub fn saving_percent(&self) -> Option<f64> {
        (self.passthrough_usd > 0.0).then(|| 100.0 * self.saving_usd() / self.passthrough_usd)
    }

    /// Of the prompt tokens billed, the share read from the cache.
    pub fn cache_read_share(&self) -> Option<f64> {
        let prompt = self.actual.prompt();
        (prompt > 0).then(|| self.actual.cache_read as f64 / prompt as f64)
    }

    /// Tokens read from the cache per token written to it.
    pub fn cache_read_write_ratio(&self) -> Option<f64> {
        let written = self.actual.cache_write_5m + self.actual.cache_write_1h;
        (written > 0).then(|| self.actual.cache_read as f64 / written as f64)
    }
}

/// One tenant, since the ledger began.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
#[non_exhaustive]
pub struct TenantView {
    /// The tenant's label.
    pub tenant: String,
    /// Its managed requests.
    pub totals: Totals,
    /// Its requests on the routes passed through unmanaged: counted, not modelled.
    pub passed_through: u64,
}

/// One session.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
#[non_exhaustive]
pub struct SessionView {
    /// The tenant it belongs to.
    pub tenant: String,
    /// The session's id (a long one by its hash).
    pub session: String,
    /// Its requests.
    pub totals: Totals,
    /// Its newest [`GUARD_WINDOW`] priced requests cost more than they would have passed
    /// through, by the provider's usage.
    pub costlier_than_passthrough: bool,
    #[serde(skip)]
    recent: VecDeque<(f64, f64)>,
    #[serde(skip)]
    tick: u64,
}

impl SessionView {
    /// Actual and pass-through cost of the newest [`GUARD_WINDOW`] priced requests.
    pub fn recent_usd(&self) -> (f64, f64) {
        self.recent
            .iter()
            .fold((0.0, 0.0), |(a, p), (ra, rp)| (a + ra, p + rp))
    }
}

/// What a row changed in the views, for the caller to act on.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Change {
    /// The session became costlier than pass-through with this row.
    pub(crate) became_costlier: bool,
    /// It stopped being so.
    pub(crate) stopped_costlier: bool,
}

/// The rows and their views, in memory.
#[derive(Debug, Default)]
pub(crate) struct Book {
    rows: VecDeque<Row>,
    tenants: HashMap<String, TenantView>,
    sessions: HashMap<(String, String), SessionView>,
    tick: u64,
}

impl Book {
    /// Appends `row`.
    pub(crate) fn append(&mut self, row: Row) -> Change {
        self.tick += 1;
        let tenant = self
            .tenants
            .entry(row.tenant.clone())
            .or_insert_with(|| TenantView {
                tenant: row.tenant.clone(),
                ..TenantView::default()
            });
        tenant.totals.add(&row);
        let key = (row.tenant.clone(), row.session.clone());
        if !self.sessions.contains_key(&key) && self.sessions.len() >= MAX_SESSIONS {
            let oldest = self
                .sessions
                .iter()
                .min_by_key(|(_, s)| s.tick)
                .map(|(k, _)| k.clone());
            if let Some(oldest) = oldest {
                self.sessions.remove(&oldest);
            }
        }
        let session = self.sessions.entry(key).or_insert_with(|| SessionView {
            tenant: row.tenant.clone(),
            session: row.session.clone(),
            ..SessionView::default()
        });
        session.tick = self.tick;
        session.totals.add(&row);
        if let (Some(actual), Some(passthrough)) = (row.actual_usd, row.passthrough_usd) {
            session.recent.push_back((actual, passthrough));
            if session.recent.len() > GUARD_WINDOW {
                session.recent.pop_front();
            }
        }
        let (actual, passthrough) = session.recent_usd();
        // A hundredth of a cent of slack: rounding in the scale is not a loss.
        let costlier = actual > passthrough + 1e-6;
        let change = Change {
            became_costlier: costlier && !session.costlier_than_passthrough,
            stopped_costlier: !costlier && session.costlier_than_passthrough,
        };
        session.costlier_than_passthrough = costlier;
        if self.rows.len() >= MAX_REQUESTS {
            self.rows.pop_front();
        }
        self.rows.push_back(row);
        change
    }

    /// Whether `tenant`'s `session` is held and costlier than pass-through.
    pub(crate) fn costlier(&self, tenant: &str, session: &str) -> bool {
        self.sessions
            .get(&(tenant.to_owned(), session.to_owned()))
            .is_some_and(|s| s.costlier_than_passthrough)
    }

    /// Counts `n` requests of `tenant` passed through unmanaged.
    pub(crate) fn passed_through(&mut self, tenant: &str, n: u64) {
        self.tenants
            .entry(tenant.to_owned())
            .or_insert_with(|| TenantView {
                tenant: tenant.to_owned(),
                ..TenantView::default()
            })
            .passed_through += n;
    }

    /// Every tenant, by label.
    pub(crate) fn tenants(&self) -> Vec<TenantView> {
        let mut out: Vec<TenantView> = self.tenants.values().cloned().collect();
        out.sort_by(|a, b| a.tenant.cmp(&b.tenant));
        out
    }

    /// Every session held, the newest first.
    pub(crate) fn sessions(&self) -> Vec<SessionView> {
        let mut out: Vec<SessionView> = self.sessions.values().cloned().collect();
        out.sort_by(|a, b| {
            b.totals
                .to_ms
                .cmp(&a.totals.to_ms)
                .then(b.tick.cmp(&a.tick))
        });
        out
    }

    /// The sessions named `session` (one per tenant that has it), and the rows held of
    /// each, oldest first.
    pub(crate) fn session(
        &self,
        session: &str,
        tenant: Option<&str>,
    ) -> Vec<(SessionView, Vec<Row>)> {
        let mut found: Vec<(SessionView, Vec<Row>)> = self
            .sessions
            .values()
            .filter(|s| s.session == session && tenant.is_none_or(|t| t == s.tenant))
            .map(|s| {
                let rows = self
                    .rows
                    .iter()
                    .filter(|r| r.session == s.session && r.tenant == s.tenant)
                    .cloned()
                    .collect();
                (s.clone(), rows)
            })
            .collect();
        found.sort_by(|a, b| a.0.tenant.cmp(&b.0.tenant));
        found
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::serve::ledger::row::Edits;

    fn row(session: &str, actual: f64, passthrough: f64) -> Row {
        Row {
            at_ms: 1,
            tenant: "t".into(),
            session: session.into(),
            route: "/v1/messages".into(),
            model: "m".into(),
            executor: None,
            status: 200,
            client_tokens: 10,
            sent_tokens: 5,
            actual: Buckets::default(),
            passthrough: Buckets::default(),
            provenance: Provenance::Modelled,
            price: None,
            actual_usd: Some(actual),
            passthrough_usd: Some(passthrough),
            edits: Edits::default(),
            added_ms: 0.1,
        }
    }

    #[test]
    fn a_session_is_flagged_while_its_newest_twenty_cost_more_than_pass_through() {
        let mut book = Book::default();
        // Saving at first: 20 requests at 1.0 instead of 2.0.
        for _ in 0..20 {
            assert_eq!(book.append(row("s", 1.0, 2.0)), Change::default());
        }
        // Then losing 1.5 a request: the window turns after 14 (20 + 14 × -1.5 < 0 …).
        let mut turned = None;
        for i in 0..20 {
            let change = book.append(row("s", 3.0, 1.5));
            if change.became_costlier {
                turned = Some(i);
            }
        }
        // After k losing requests the window holds 20 - k saving 1.0 and k losing 1.5:
        // 20 - k < 1.5 k from k = 9.
        assert_eq!(turned, Some(8));
        assert!(book.sessions()[0].costlier_than_passthrough);
        // Overall: 20 saving 1.0 and 20 losing 1.5.
        assert_eq!(book.sessions()[0].totals.saving_usd(), -10.0);
        // Saving again: the window turns back after 12 (60 - 2j <= 30 + 0.5j).
        let mut back = None;
        for j in 0..20 {
            let change = book.append(row("s", 1.0, 2.0));
            assert!(!change.became_costlier);
            if change.stopped_costlier {
                assert!(back.is_none());
                back = Some(j);
            }
        }
        assert_eq!(back, Some(11));
        assert!(!book.sessions()[0].costlier_than_passthrough);
    }

    #[test]
    fn the_book_holds_the_newest_requests_and_sessions_and_every_tenant_total() {
        let mut book = Book::default();
        for i in 0..MAX_SESSIONS + 5 {
            book.append(row(&format!("s{i}"), 1.0, 1.0));
        }
        for _ in 0..MAX_REQUESTS {
            book.append(row("last", 1.0, 1.0));
        }
        assert_eq!(book.sessions().len(), MAX_SESSIONS);
        assert!(book.session("s0", None).is_empty());
        assert_eq!(book.session("last", None)[0].1.len(), MAX_REQUESTS);
        // The rows of an older session left the ring, its view stays while it is held.
        assert_eq!(
            book.session(&format!("s{}", MAX_SESSIONS + 4), None)[0]
                .1
                .len(),
            0
        );
        let tenants = book.tenants();
        assert_eq!(
            tenants[0].totals.requests as usize,
            MAX_SESSIONS + 5 + MAX_REQUESTS
        );
    }
}

#[cfg(test)]
mod properties {
    use proptest::prelude::*;

    use super::*;
    use crate::serve::ledger::row::Edits;

    fn arb_row() -> impl Strategy<Value = Row> {
        (
            0..3u8,
            0..40u16,
            (
                0..50_000u64,
                0..50_000u64,
                0..5_000u64,
                0..5_000u64,
                0..2_000u64,
            ),
            (0..50_000u64, 0..50_000u64, 0..5_000u64, 0..5_000u64),
            proptest::option::of((0.0..1.0f64, 0.0..1.0f64)),
            0..6u8,
        )
            .prop_map(|(tenant, session, a, p, usd, provenance)| Row {
                at_ms: 1_000 + u64::from(session),
                tenant: format!("t{tenant}"),
                session: format!("s{session}"),
                route: "/v1/messages".into(),
                model: "m".into(),
                executor: None,
                status: 200,
                client_tokens: a.0 + a.1,
                sent_tokens: a.0,
                actual: Buckets {
                    uncached: a.0,
                    cache_read: a.1,
                    cache_write_5m: a.2,
                    cache_write_1h: a.3,
                    output: a.4,
                },
                passthrough: Buckets {
                    uncached: p.0,
                    cache_read: p.1,
                    cache_write_5m: p.2,
                    cache_write_1h: p.3,
                    output: a.4,
                },
                provenance: [
                    Provenance::Observed,
                    Provenance::Modelled,
                    Provenance::ModelledPrefixExpired,
                    Provenance::ModelledNoHistory,
                    Provenance::ModelledConcurrent,
                    Provenance::NotModelled,
                ][usize::from(provenance)],
                price: None,
                actual_usd: usd.map(|u| u.0),
                passthrough_usd: usd.map(|u| u.1),
                edits: Edits::default(),
                added_ms: 0.1,
            })
    }

    proptest! {
        /// Every view is the sum of its rows: each tenant's of all its rows, each session's
        /// of its own, the flag of its newest priced twenty; the weakest provenance wins.
        #[test]
        fn every_total_is_the_sum_of_its_rows(rows in proptest::collection::vec(arb_row(), 1..300)) {
            let mut book = Book::default();
            for row in &rows {
                book.append(row.clone());
            }
            for tenant in book.tenants() {
                let mine: Vec<&Row> = rows.iter().filter(|r| r.tenant == tenant.tenant).collect();
                let t = &tenant.totals;
                prop_assert_eq!(t.requests as usize, mine.len());
                prop_assert_eq!(t.client_tokens, mine.iter().map(|r| r.client_tokens).sum::<u64>());
                prop_assert_eq!(t.actual.cache_read, mine.iter().map(|r| r.actual.cache_read).sum::<u64>());
                prop_assert_eq!(t.passthrough.prompt(), mine.iter().map(|r| r.passthrough.prompt()).sum::<u64>());
                let usd: f64 = mine.iter().filter_map(|r| r.actual_usd).sum();
                prop_assert!((t.actual_usd - usd).abs() < 1e-9);
                prop_assert_eq!(t.unpriced as usize, mine.iter().filter(|r| r.actual_usd.is_none()).count());
                prop_assert_eq!(t.provenance, mine.iter().map(|r| r.provenance).max());
            }
            for s in book.sessions() {
                let mine: Vec<&Row> = rows.iter().filter(|r| r.tenant == s.tenant && r.session == s.session).collect();
                prop_assert_eq!(s.totals.requests as usize, mine.len());
                prop_assert_eq!(s.totals.actual.prompt(), mine.iter().map(|r| r.actual.prompt()).sum::<u64>());
                let priced: Vec<&&Row> = mine.iter().filter(|r| r.actual_usd.is_some()).collect();
                let recent = &priced[priced.len().saturating_sub(GUARD_WINDOW)..];
                let a: f64 = recent.iter().filter_map(|r| r.actual_usd).sum();
                let p: f64 = recent.iter().filter_map(|r| r.passthrough_usd).sum();
                prop_assert_eq!(s.costlier_than_passthrough, a > p + 1e-6);
            }
        }
    }
}

//! Where budget counters live: [`LocalBudgetStore`] in this process; a store shared by
//! replicas implements [`BudgetStore`] with atomic increments and expiring windows.

use std::num::NonZeroUsize;
use std::sync::Mutex;
use std::time::SystemTime;

use async_trait::async_trait;
use lru::LruCache;

use super::limits::{Amounts, BudgetExceeded, Limit, Window, period};
use crate::model::Scope;
use crate::store::StoreError;

/// Whose counters a call adds to: its tenant, and its session for the session limits.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct BudgetKey {
    /// The tenant's scope key ([`Scope::key`]).
    pub scope: String,
    /// The session.
    pub session: String,
}

impl BudgetKey {
    /// The key of a call in `scope` and `session`.
    pub fn new(scope: &Scope, session: &str) -> Self {
        Self {
            scope: scope.key(),
            session: session.to_owned(),
        }
    }
}

/// One counter: a tenant's window (a session's, or a period of an hour, a day or a month).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Counter {
    /// The tenant's scope key.
    pub scope: String,
    /// The window.
    pub window: Window,
    /// The session, for [`Window::Session`]; empty otherwise.
    pub session: String,
    /// Which period of the window (the hour, the day or the month since the epoch; 0 for a
    /// session's).
    pub period: u64,
}

/// What [`BudgetStore::reserve`] added, to be settled once the call's real usage is known.
#[derive(Clone, Debug, PartialEq)]
pub struct Reserved {
    /// The counters added to.
    pub counters: Vec<Counter>,
    /// What was added to each.
    pub amounts: Amounts,
}

/// The counters of budgets. A call is checked and reserved in one step, so calls in
/// flight at once cannot together cross a limit that each alone would not.
#[async_trait]
pub trait BudgetStore: Send + Sync + std::fmt::Debug {
    /// Adds `amounts` to the counters of `limits` for `key` at `now`, unless that would
    /// take one past its limit: then adds nothing and answers which (`Ok(Err(…))`).
    async fn reserve(
        &self,
        key: &BudgetKey,
        limits: &[Limit],
        amounts: Amounts,
        now: SystemTime,
    ) -> Result<Result<Reserved, BudgetExceeded>, StoreError>;

    /// Adds `delta` (what the call used, less what was reserved: negative when it used
    /// less) to the counters `reserved` added to.
    async fn settle(&self, reserved: &Reserved, delta: Amounts) -> Result<(), StoreError>;

    /// What each of `limits` has used for `key` at `now`.
    async fn used(
        &self,
        key: &BudgetKey,
        limits: &[Limit],
        now: SystemTime,
    ) -> Result<Vec<f64>, StoreError>;
}

/// The counters of the windows `limits` name for `key` at `now`, one per window.
pub fn counters(
    key: &BudgetKey,
    limits: &[Limit],
    now: SystemTime,
) -> Vec<(Counter, Option<SystemTime>)> {
    let mut out: Vec<(Counter, Option<SystemTime>)> = Vec::new();
    for limit in limits {
        if out.iter().any(|(c, _)| c.window == limit.window) {
            continue;
        }
        let (index, resets) = period(limit.window, now);
        let session = match limit.window {
            Window::Session => key.session.clone(),
            _ => String::new(),
        };
        let counter = Counter {
            scope: key.scope.clone(),
            window: limit.window,
            session,
            period: index,
        };
        out.push((counter, resets));
    }
    out
}

/// The first of `limits` that `amounts` added to `used` (by window) would cross.
pub fn first_crossed(
    limits: &[Limit],
    windows: &[(Counter, Option<SystemTime>)],
    used: &[Amounts],
    amounts: &Amounts,
) -> Option<BudgetExceeded> {
    limits.iter().find_map(|limit| {
        let w = windows.iter().position(|(c, _)| c.window == limit.window)?;
        let before = used[w].of(limit.kind);
        let requested = amounts.of(limit.kind);
        (before + requested > limit.max).then(|| BudgetExceeded {
            limit: limit.name(),
            used: before,
            requested,
            max: limit.max,
            resets_at: windows[w].1,
        })
    })
}

/// A counter's place: tenant, window and session (empty for a tenant window).
type Slot = (String, Window, String);
/// The counters: each slot's current period and what it has used in it.
type Counters = LruCache<Slot, (u64, Amounts)>;

/// Budget counters in memory, for one process: the least recently used are forgotten
/// past a bound (default 100,000 counters, a few megabytes), and a window's counter is
/// replaced when its next period begins.
pub struct LocalBudgetStore {
    counters: Mutex<Counters>,
}

impl LocalBudgetStore {
    /// The default bound on counters kept.
    pub const DEFAULT_COUNTERS: NonZeroUsize = NonZeroUsize::new(100_000).unwrap();

    /// A store keeping at most `counters` counters.
    pub fn new(counters: NonZeroUsize) -> Self {
        Self {
            counters: Mutex::new(LruCache::new(counters)),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Counters> {
        // Each operation leaves the map consistent: a panic elsewhere does not spoil it.
        self.counters.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Default for LocalBudgetStore {
    fn default() -> Self {
        Self::new(Self::DEFAULT_COUNTERS)
    }
}

impl std::fmt::Debug for LocalBudgetStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LocalBudgetStore")
            .field("counters", &self.lock().len())
            .finish()
    }
}

fn slot(c: &Counter) -> Slot {
    (c.scope.clone(), c.window, c.session.clone())
}

/// The amounts of `c` in `map`: zero when its period is not the one stored.
fn current(map: &mut Counters, c: &Counter) -> Amounts {
    match map.get(&slot(c)) {
        Some((period, amounts)) if *period == c.period => *amounts,
        _ => Amounts::default(),
    }
}

#[async_trait]
impl BudgetStore for LocalBudgetStore {
    async fn reserve(
        &self,
        key: &BudgetKey,
        limits: &[Limit],
        amounts: Amounts,
        now: SystemTime,
    ) -> Result<Result<Reserved, BudgetExceeded>, StoreError> {
        let windows = counters(key, limits, now);
        let mut map = self.lock();
        let used: Vec<Amounts> = windows.iter().map(|(c, _)| current(&mut map, c)).collect();
        if let Some(exceeded) = first_crossed(limits, &windows, &used, &amounts) {
            return Ok(Err(exceeded));
        }
        for ((c, _), before) in windows.iter().zip(&used) {
            map.put(slot(c), (c.period, before.plus(&amounts)));
        }
        Ok(Ok(Reserved {
            counters: windows.into_iter().map(|(c, _)| c).collect(),
            amounts,
        }))
    }

    async fn settle(&self, reserved: &Reserved, delta: Amounts) -> Result<(), StoreError> {
        let mut map = self.lock();
        for c in &reserved.counters {
            // A counter whose period has ended since is left alone: the new one owes
            // nothing for the old one's call.
            if let Some((period, amounts)) = map.get_mut(&slot(c))
                && *period == c.period
            {
                *amounts = amounts.plus(&delta);
            }
        }
        Ok(())
    }

    async fn used(
        &self,
        key: &BudgetKey,
        limits: &[Limit],
        now: SystemTime,
    ) -> Result<Vec<f64>, StoreError> {
        let windows = counters(key, limits, now);
        let mut map = self.lock();
        Ok(limits
            .iter()
            .map(|limit| {
                windows
                    .iter()
                    .find(|(c, _)| c.window == limit.window)
                    .map_or(0.0, |(c, _)| current(&mut map, c).of(limit.kind))
            })
            .collect())
    }
}

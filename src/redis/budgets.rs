//! [`RedisBudgetStore`]: budget counters shared by every replica on one Redis.

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use async_trait::async_trait;
use llm_context_layers::StoreError;
use llm_context_layers::budget::{
    Amounts, BudgetExceeded, BudgetKey, BudgetStore, Counter, Kind, Limit, Reserved, Window,
    counters,
};
use redis_client::Script;
use redis_client::aio::ConnectionManager;

use super::error::store_error;
use super::keys;
use super::options::RedisOptions;

/// Checks every limit and, when none would be crossed, adds the call to every counter, in
/// one atomic step: calls in flight on any number of replicas cannot together overspend.
///
/// KEYS: the counters (hashes of `calls`, `input_tokens`, `output_tokens`, `cost_usd`).
/// ARGV: the number of limits; the four amounts; for each limit its counter's index, its
/// field and its maximum; for each counter the instant (ms since the epoch) it expires.
/// Returns 0, or the 1-based index of the first limit crossed and what it had used.
const RESERVE: &str = r"
local n = tonumber(ARGV[1])
local add = {calls = tonumber(ARGV[2]), input_tokens = tonumber(ARGV[3]),
             output_tokens = tonumber(ARGV[4]), cost_usd = tonumber(ARGV[5])}
local at = 6
for i = 1, n do
  local key = KEYS[tonumber(ARGV[at])]
  local field = ARGV[at + 1]
  local max = tonumber(ARGV[at + 2])
  local used = tonumber(redis.call('HGET', key, field) or '0')
  if used + add[field] > max then
    return {i, tostring(used)}
  end
  at = at + 3
end
for k = 1, #KEYS do
  for field, v in pairs(add) do
    if v ~= 0 then redis.call('HINCRBYFLOAT', KEYS[k], field, v) end
  end
  redis.call('PEXPIREAT', KEYS[k], ARGV[at + k - 1])
end
return {0, ''}
";

/// Adds the deltas to the counters that still exist (one whose window ended is gone, and
/// owes nothing). ARGV: the four deltas.
const SETTLE: &str = r"
local add = {calls = tonumber(ARGV[1]), input_tokens = tonumber(ARGV[2]),
             output_tokens = tonumber(ARGV[3]), cost_usd = tonumber(ARGV[4])}
for k = 1, #KEYS do
  if redis.call('EXISTS', KEYS[k]) == 1 then
    for field, v in pairs(add) do
      if v ~= 0 then redis.call('HINCRBYFLOAT', KEYS[k], field, v) end
    end
  end
end
return 0
";

/// A [`BudgetStore`] on Redis: one hash per counter,
/// `{prefix}:budget:{scope key}:{window}:{period or session}`, expiring when its window
/// ends (a session's [`RedisOptions::artifact_ttl`] after its last call). Reserving checks
/// every limit and adds to every counter in one Lua script; settling adds the difference
/// between what was used and what was reserved.
#[derive(Clone)]
pub struct RedisBudgetStore {
    conn: ConnectionManager,
    options: Arc<RedisOptions>,
    secret: Option<Arc<str>>,
    scripts: Arc<(Script, Script)>,
}

impl std::fmt::Debug for RedisBudgetStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisBudgetStore")
            .field("options", &self.options)
            .finish_non_exhaustive()
    }
}

impl RedisBudgetStore {
    /// A store on an open connection.
    pub fn new(conn: ConnectionManager, options: RedisOptions) -> Self {
        Self::with_secret(conn, Arc::new(options), None)
    }

    pub(crate) fn with_secret(
        conn: ConnectionManager,
        options: Arc<RedisOptions>,
        secret: Option<Arc<str>>,
    ) -> Self {
        Self {
            conn,
            options,
            secret,
            scripts: Arc::new((Script::new(RESERVE), Script::new(SETTLE))),
        }
    }

    fn key(&self, c: &Counter) -> String {
        keys::budget(self.options.key_prefix(), c)
    }

    fn error(&self, what: &str, e: &redis_client::RedisError) -> StoreError {
        store_error(what, e, self.secret.as_deref())
    }
}

fn field(kind: Kind) -> &'static str {
    match kind {
        Kind::Calls => "calls",
        Kind::InputTokens => "input_tokens",
        Kind::OutputTokens => "output_tokens",
        Kind::CostUsd => "cost_usd",
    }
}

fn millis_at(at: SystemTime) -> u64 {
    at.duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

#[async_trait]
impl BudgetStore for RedisBudgetStore {
    async fn reserve(
        &self,
        key: &BudgetKey,
        limits: &[Limit],
        amounts: Amounts,
        now: SystemTime,
    ) -> Result<Result<Reserved, BudgetExceeded>, StoreError> {
        let windows = counters(key, limits, now);
        let mut invocation = self.scripts.0.prepare_invoke();
        for (c, _) in &windows {
            invocation.key(self.key(c));
        }
        invocation
            .arg(limits.len())
            .arg(amounts.calls)
            .arg(amounts.input_tokens)
            .arg(amounts.output_tokens)
            .arg(amounts.cost_usd);
        for limit in limits {
            let index = windows
                .iter()
                .position(|(c, _)| c.window == limit.window)
                .map_or(1, |i| i + 1);
            invocation.arg(index).arg(field(limit.kind)).arg(limit.max);
        }
        for (c, resets) in &windows {
            // A tenant window lives to its end (and a minute, for clocks a little apart);
            // a session's for the artifact TTL after its last call.
            let until = match (c.window, resets) {
                (Window::Session, _) | (_, None) => now + self.options.artifact_ttl(),
                (_, Some(at)) => *at + Duration::from_secs(60),
            };
            invocation.arg(millis_at(until));
        }
        let mut conn = self.conn.clone();
        let (crossed, used): (usize, String) = invocation
            .invoke_async(&mut conn)
            .await
            .map_err(|e| self.error("budget reserve", &e))?;
        if crossed == 0 {
            return Ok(Ok(Reserved {
                counters: windows.into_iter().map(|(c, _)| c).collect(),
                amounts,
            }));
        }
        let limit = limits[crossed - 1];
        let resets_at = windows
            .iter()
            .find(|(c, _)| c.window == limit.window)
            .and_then(|(_, r)| *r);
        Ok(Err(BudgetExceeded::new(
            limit.name(),
            used.parse().unwrap_or(0.0),
            amounts.of(limit.kind),
            limit.max,
            resets_at,
        )))
    }

    async fn settle(&self, reserved: &Reserved, delta: Amounts) -> Result<(), StoreError> {
        let mut invocation = self.scripts.1.prepare_invoke();
        for c in &reserved.counters {
            invocation.key(self.key(c));
        }
        invocation
            .arg(delta.calls)
            .arg(delta.input_tokens)
            .arg(delta.output_tokens)
            .arg(delta.cost_usd);
        let mut conn = self.conn.clone();
        invocation
            .invoke_async::<i64>(&mut conn)
            .await
            .map(drop)
            .map_err(|e| self.error("budget settle", &e))
    }

    async fn used(
        &self,
        key: &BudgetKey,
        limits: &[Limit],
        now: SystemTime,
    ) -> Result<Vec<f64>, StoreError> {
        let windows = counters(key, limits, now);
        let mut out = Vec::with_capacity(limits.len());
        let mut conn = self.conn.clone();
        for limit in limits {
            let Some((c, _)) = windows.iter().find(|(c, _)| c.window == limit.window) else {
                out.push(0.0);
                continue;
            };
            let value: Option<String> = redis_client::cmd("HGET")
                .arg(self.key(c))
                .arg(field(limit.kind))
                .query_async(&mut conn)
                .await
                .map_err(|e| self.error("budget used", &e))?;
            out.push(value.and_then(|v| v.parse().ok()).unwrap_or(0.0));
        }
        Ok(out)
    }
}

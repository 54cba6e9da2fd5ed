//! What a budget limits: calls, input tokens, output tokens and cost, each per session or
//! per tenant per hour, day or month, and the error of a call that would cross one.

use std::fmt;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

/// What a limit counts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Kind {
    /// Provider calls (a memo hit is none).
    Calls,
    /// Prompt tokens, cached or not.
    InputTokens,
    /// Output tokens.
    OutputTokens,
    /// Cost in USD, priced from the catalog.
    CostUsd,
}

/// The window a limit counts in. Tenant windows are calendar periods in UTC and start
/// again at zero when the next one begins; a session's window never ends.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Window {
    /// One session of one tenant, for as long as the counters are kept.
    Session,
    /// A clock hour of one tenant.
    Hour,
    /// A UTC day of one tenant.
    Day,
    /// A UTC calendar month of one tenant.
    Month,
}

/// One limit: at most `max` of `kind` in each `window`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Limit {
    /// What it counts.
    pub kind: Kind,
    /// Where it counts.
    pub window: Window,
    /// The most allowed.
    pub max: f64,
}

impl Limit {
    /// Its name as a budget file writes it: `calls_per_hour`, `cost_usd_per_day`, ….
    pub fn name(&self) -> &'static str {
        use Kind::*;
        use Window::*;
        match (self.kind, self.window) {
            (Calls, Session) => "calls_per_session",
            (Calls, Hour) => "calls_per_hour",
            (Calls, Day) => "calls_per_day",
            (Calls, Month) => "calls_per_month",
            (InputTokens, Session) => "input_tokens_per_session",
            (InputTokens, Hour) => "input_tokens_per_hour",
            (InputTokens, Day) => "input_tokens_per_day",
            (InputTokens, Month) => "input_tokens_per_month",
            (OutputTokens, Session) => "output_tokens_per_session",
            (OutputTokens, Hour) => "output_tokens_per_hour",
            (OutputTokens, Day) => "output_tokens_per_day",
            (OutputTokens, Month) => "output_tokens_per_month",
            (CostUsd, Session) => "cost_usd_per_session",
            (CostUsd, Hour) => "cost_usd_per_hour",
            (CostUsd, Day) => "cost_usd_per_day",
            (CostUsd, Month) => "cost_usd_per_month",
        }
    }
}

/// A budget: any of the sixteen limits, as a budget file (TOML or JSON) names them. A
/// limit left out does not apply; an unknown field is an error, so a misspelt limit is
/// never silently ignored.
///
/// ```
/// use llm_context_layers::budget::Budget;
///
/// let budget: Budget = toml::from_str("calls_per_hour = 1000\ncost_usd_per_day = 50.0").unwrap();
/// assert_eq!(budget.limits().len(), 2);
/// assert!(toml::from_str::<Budget>("calls_per_hours = 1").is_err());
/// ```
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[allow(missing_docs)] // Each field is the limit its name says.
pub struct Budget {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub calls_per_session: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub calls_per_hour: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub calls_per_day: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub calls_per_month: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input_tokens_per_session: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input_tokens_per_hour: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input_tokens_per_day: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input_tokens_per_month: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_tokens_per_session: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_tokens_per_hour: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_tokens_per_day: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_tokens_per_month: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost_usd_per_session: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost_usd_per_hour: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost_usd_per_day: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost_usd_per_month: Option<f64>,
}

impl Budget {
    /// The limits it sets.
    pub fn limits(&self) -> Vec<Limit> {
        use Kind::*;
        use Window::*;
        let n = |v: Option<u64>| v.map(|v| v as f64);
        let all = [
            (Calls, Session, n(self.calls_per_session)),
            (Calls, Hour, n(self.calls_per_hour)),
            (Calls, Day, n(self.calls_per_day)),
            (Calls, Month, n(self.calls_per_month)),
            (InputTokens, Session, n(self.input_tokens_per_session)),
            (InputTokens, Hour, n(self.input_tokens_per_hour)),
            (InputTokens, Day, n(self.input_tokens_per_day)),
            (InputTokens, Month, n(self.input_tokens_per_month)),
            (OutputTokens, Session, n(self.output_tokens_per_session)),
            (OutputTokens, Hour, n(self.output_tokens_per_hour)),
            (OutputTokens, Day, n(self.output_tokens_per_day)),
            (OutputTokens, Month, n(self.output_tokens_per_month)),
            (CostUsd, Session, self.cost_usd_per_session),
            (CostUsd, Hour, self.cost_usd_per_hour),
            (CostUsd, Day, self.cost_usd_per_day),
            (CostUsd, Month, self.cost_usd_per_month),
        ];
        all.into_iter()
            .filter_map(|(kind, window, max)| max.map(|max| Limit { kind, window, max }))
            .collect()
    }

    /// Whether a limit is negative or not a number, which no use could respect.
    pub fn validate(&self) -> Result<(), String> {
        for limit in self.limits() {
            // NaN fails both tests.
            if !limit.max.is_finite() || limit.max < 0.0 {
                return Err(format!("{} must be a number of at least 0", limit.name()));
            }
        }
        Ok(())
    }
}

/// Amounts of each kind: what a call is expected to use, or used.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Amounts {
    /// Calls.
    pub calls: f64,
    /// Prompt tokens.
    pub input_tokens: f64,
    /// Output tokens.
    pub output_tokens: f64,
    /// USD.
    pub cost_usd: f64,
}

impl Amounts {
    /// The amount of `kind`.
    pub fn of(&self, kind: Kind) -> f64 {
        match kind {
            Kind::Calls => self.calls,
            Kind::InputTokens => self.input_tokens,
            Kind::OutputTokens => self.output_tokens,
            Kind::CostUsd => self.cost_usd,
        }
    }

    /// `self - other`, kind by kind.
    #[must_use]
    pub fn minus(&self, other: &Amounts) -> Amounts {
        Amounts {
            calls: self.calls - other.calls,
            input_tokens: self.input_tokens - other.input_tokens,
            output_tokens: self.output_tokens - other.output_tokens,
            cost_usd: self.cost_usd - other.cost_usd,
        }
    }

    /// `self + other`, kind by kind.
    #[must_use]
    pub fn plus(&self, other: &Amounts) -> Amounts {
        Amounts {
            calls: self.calls + other.calls,
            input_tokens: self.input_tokens + other.input_tokens,
            output_tokens: self.output_tokens + other.output_tokens,
            cost_usd: self.cost_usd + other.cost_usd,
        }
    }
}

/// A call that would cross a limit, refused before it was sent.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct BudgetExceeded {
    /// The limit's name (`cost_usd_per_day`, …).
    pub limit: &'static str,
    /// What the window had used before this call (its calls in flight included).
    pub used: f64,
    /// What this call was expected to add: the estimate of its prompt, plus its output
    /// reserve, priced.
    pub requested: f64,
    /// The limit.
    pub max: f64,
    /// When the window starts again at zero; `None` for a session's.
    pub resets_at: Option<SystemTime>,
}

impl BudgetExceeded {
    /// The error of a call that would take `limit` (its name) from `used` past `max` by
    /// adding `requested`; its window resets at `resets_at` (`None`: a session's).
    pub fn new(
        limit: &'static str,
        used: f64,
        requested: f64,
        max: f64,
        resets_at: Option<SystemTime>,
    ) -> Self {
        Self {
            limit,
            used,
            requested,
            max,
            resets_at,
        }
    }
}

impl fmt::Display for BudgetExceeded {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "budget exceeded: {} is {}, {} used, and this call would add {}",
            self.limit, self.max, self.used, self.requested
        )?;
        match self.resets_at {
            Some(at) => write!(f, "; it resets at {}", rfc3339(at)),
            None => f.write_str("; it does not reset (a session's)"),
        }
    }
}

impl std::error::Error for BudgetExceeded {}

/// `at` as `2026-12-02T16:00:00Z`, to the second.
pub fn rfc3339(at: SystemTime) -> String {
    let secs = at.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let (y, m, d) = civil_from_days((secs / 86_400) as i64);
    let s = secs % 86_400;
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        s / 3600,
        s / 60 % 60,
        s % 60
    )
}

/// The period of `window` that `now` is in, and when the next one starts (`None` for a
/// session's, which has one period).
pub(crate) fn period(window: Window, now: SystemTime) -> (u64, Option<SystemTime>) {
    let secs = now.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let at = |s: u64| Some(UNIX_EPOCH + Duration::from_secs(s));
    match window {
        Window::Session => (0, None),
        Window::Hour => (secs / 3600, at((secs / 3600 + 1) * 3600)),
        Window::Day => (secs / 86_400, at((secs / 86_400 + 1) * 86_400)),
        Window::Month => {
            let (y, m, _) = civil_from_days((secs / 86_400) as i64);
            let index = (y * 12 + (m as i64 - 1)) as u64;
            let (ny, nm) = if m == 12 { (y + 1, 1) } else { (y, m + 1) };
            let next = days_from_civil(ny, nm, 1) as u64 * 86_400;
            (index, at(next))
        }
    }
}

// Howard Hinnant's algorithms for the proleptic Gregorian calendar (public domain).
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

fn days_from_civil(y: i64, m: u32, d: u32) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y.rem_euclid(400);
    let m = i64::from(m);
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + i64::from(d) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: &str) -> SystemTime {
        // Only for the dates below: YYYY-MM-DDTHH:MM:SSZ.
        let n = |r: std::ops::Range<usize>| s[r].parse::<u64>().unwrap();
        let days = days_from_civil(n(0..4) as i64, n(5..7) as u32, n(8..10) as u32) as u64;
        UNIX_EPOCH
            + Duration::from_secs(days * 86_400 + n(11..13) * 3600 + n(14..16) * 60 + n(17..19))
    }

    #[test]
    fn periods_end_on_calendar_boundaries_in_utc() {
        let now = at("2026-12-31T23:59:59Z");
        assert_eq!(rfc3339(now), "2026-12-31T23:59:59Z");
        let next = |w| rfc3339(period(w, now).1.unwrap());
        assert_eq!(next(Window::Hour), "2027-01-01T00:00:00Z");
        assert_eq!(next(Window::Day), "2027-01-01T00:00:00Z");
        assert_eq!(next(Window::Month), "2027-01-01T00:00:00Z");
        let leap = at("2028-02-29T12:00:00Z");
        assert_eq!(
            rfc3339(period(Window::Month, leap).1.unwrap()),
            "2028-03-01T00:00:00Z"
        );
        assert_eq!(
            rfc3339(period(Window::Day, leap).1.unwrap()),
            "2028-03-01T00:00:00Z"
        );
        // Two instants of one month share its period, and the next month's differs.
        let (a, _) = period(Window::Month, at("2026-03-01T00:00:00Z"));
        let (b, _) = period(Window::Month, at("2026-03-31T23:59:59Z"));
        let (c, _) = period(Window::Month, at("2026-04-01T00:00:00Z"));
        assert_eq!(a, b);
        assert_eq!(c, a + 1);
        assert_eq!(period(Window::Session, now), (0, None));
    }

    #[test]
    fn every_limit_has_its_own_name() {
        let text = "calls_per_session = 1\ncalls_per_hour = 2\ncalls_per_day = 3\ncalls_per_month = 4\n\
            input_tokens_per_session = 5\ninput_tokens_per_hour = 6\ninput_tokens_per_day = 7\n\
            input_tokens_per_month = 8\noutput_tokens_per_session = 9\noutput_tokens_per_hour = 10\n\
            output_tokens_per_day = 11\noutput_tokens_per_month = 12\ncost_usd_per_session = 13.0\n\
            cost_usd_per_hour = 14.0\ncost_usd_per_day = 15.0\ncost_usd_per_month = 16.0\n";
        let budget: Budget = toml::from_str(text).unwrap();
        let limits = budget.limits();
        assert_eq!(limits.len(), 16);
        for (i, limit) in limits.iter().enumerate() {
            assert_eq!(limit.max, (i + 1) as f64);
            assert!(
                text.contains(&format!("{} = {}", limit.name(), i + 1)),
                "{}",
                limit.name()
            );
        }
        let bad = Budget {
            cost_usd_per_day: Some(-1.0),
            ..Budget::default()
        };
        assert!(bad.validate().unwrap_err().contains("cost_usd_per_day"));
    }
}

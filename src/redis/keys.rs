//! The key layout in Redis: every key names its tenant, and artifact keys their session.
//!
//! ```text
//! {prefix}:memo:{scope key}:{digest hex}        a memoized response (JSON), with a TTL
//! {prefix}:art:{scope key}:{session}:data       hash: artifact id → artifact (JSON)
//! {prefix}:art:{scope key}:{session}:idx        sorted set: artifact id → last use
//! {prefix}:art:{scope key}:{session}:meta       hash: `seq` (use counter), `bytes`
//! ```
//!
//! A scope key has exactly one `:` (its parts are escaped, see `Scope::key`) and the
//! session is escaped the same way here, so no two tenants or sessions share a key
//! whatever their names contain.

use llm_context_layers::Scope;
use llm_context_layers::memo::MemoKey;

pub(crate) fn memo(prefix: &str, key: &MemoKey) -> String {
    format!("{prefix}:memo:{}:{}", key.scope_key(), key.digest_hex())
}

/// The three keys of one session's artifacts: data, index and meta.
pub(crate) fn artifacts(prefix: &str, scope: &Scope, session: &str) -> [String; 3] {
    let base = format!("{prefix}:art:{}:{}", scope.key(), escape(session));
    [
        format!("{base}:data"),
        format!("{base}:idx"),
        format!("{base}:meta"),
    ]
}

/// Percent-encodes `%` and `:`, so an escaped value never contains the separator.
fn escape(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for c in value.chars() {
        match c {
            '%' => out.push_str("%25"),
            ':' => out.push_str("%3A"),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sessions_that_look_alike_get_distinct_keys() {
        let s = Scope::org("a");
        let pairs = [("x:data", "x"), ("x%3A", "x:"), ("", "%")];
        for (one, other) in pairs {
            assert_ne!(artifacts("p", &s, one), artifacts("p", &s, other));
        }
        // A session named like a suffix cannot reach another session's keys.
        let tricky = artifacts("p", &s, "x:idx");
        for k in artifacts("p", &s, "x") {
            assert!(!tricky.contains(&k));
        }
    }

    #[test]
    fn tenants_get_distinct_keys() {
        assert_ne!(
            artifacts("p", &Scope::org(1), "s"),
            artifacts("p", &Scope::org(999), "s")
        );
        assert!(artifacts("p", &Scope::org(1), "s")[0].starts_with("p:art:org1:domNone:s:"));
    }
}

//! The key layout in Redis: every key names its tenant, and artifact keys their session.
//!
//! The memo and the artifacts ([`RedisStores`](super::RedisStores)), under
//! [`RedisOptions::key_prefix`](super::RedisOptions::key_prefix) (default `llm-context`):
//!
//! ```text
//! {prefix}:memo:{scope key}:{digest hex}        a memoized response (JSON), with a TTL
//! {prefix}:flight:{scope key}:{digest hex}      the lock of that response's call in
//!                                               flight: its holder's token, with a lease
//! {prefix}:art:{scope key}:{session}:data       hash: artifact id → artifact (JSON)
//! {prefix}:art:{scope key}:{session}:idx        sorted set: artifact id → last use
//! {prefix}:art:{scope key}:{session}:meta       hash: `seq` (use counter), `bytes`
//! {prefix}:art:{scope key}:{session}:live       set: the ids the session's latest
//!                                               request refers to (never evicted)
//! {prefix}:cut:{scope key}:{session}            where the session's history was last
//!                                               cut (JSON `Cuts`), with a TTL
//! {prefix}:budget:{scope key}:{window}:{period} hash: a budget counter (`calls`,
//!                                               `input_tokens`, `output_tokens`,
//!                                               `cost_usd`), expiring with its window;
//!                                               a session's ends in `session:{session}`
//! ```
//!
//! Durable contexts and memory ([`RedisDurableStore`](super::RedisDurableStore)), under its
//! namespace (default `llmctx`; a different default from the prefix above, kept so that
//! stored data stays where it is):
//!
//! ```text
//! {ns}:ctx:{scope key}:{context id}             hash: `v` version, `r` record (JSON)
//! {ns}:mem:{scope key}:{memory key}             hash: `v` value (JSON), `e` expiry (ms since
//!                                               the epoch, empty: never), expiring then
//! {ns}:memidx:{scope key}                       sorted set, all scores 0: the tenant's
//!                                               memory keys, listed with ZRANGEBYLEX
//! ```
//!
//! A scope key has exactly one `:` (its parts are escaped, see `Scope::key`) and the
//! session is escaped the same way here, so no two tenants or sessions share a key
//! whatever their names contain. A context id or a memory key comes last, so it needs
//! no escaping.

use llm_context_layers::Scope;
use llm_context_layers::memo::MemoKey;

pub(crate) fn memo(prefix: &str, key: &MemoKey) -> String {
    format!("{prefix}:memo:{}:{}", key.scope_key(), key.digest_hex())
}

/// The lock of the call in flight for one memo key.
pub(crate) fn flight(prefix: &str, key: &MemoKey) -> String {
    format!("{prefix}:flight:{}:{}", key.scope_key(), key.digest_hex())
}

/// The four keys of one session's artifacts: data, index, meta and live set, in the
/// order the artifact scripts take them.
pub(crate) fn artifacts(prefix: &str, scope: &Scope, session: &str) -> [String; 4] {
    let base = format!("{prefix}:art:{}:{}", scope.key(), escape(session));
    [
        format!("{base}:data"),
        format!("{base}:idx"),
        format!("{base}:meta"),
        format!("{base}:live"),
    ]
}

/// Where one session's history was last cut.
pub(crate) fn cuts(prefix: &str, scope: &Scope, session: &str) -> String {
    format!("{prefix}:cut:{}:{}", scope.key(), escape(session))
}

/// One budget counter.
pub(crate) fn budget(prefix: &str, c: &llm_context_layers::budget::Counter) -> String {
    use llm_context_layers::budget::Window;
    let scope = &c.scope;
    match c.window {
        Window::Session => format!("{prefix}:budget:{scope}:session:{}", escape(&c.session)),
        Window::Hour => format!("{prefix}:budget:{scope}:hour:{}", c.period),
        Window::Day => format!("{prefix}:budget:{scope}:day:{}", c.period),
        Window::Month => format!("{prefix}:budget:{scope}:month:{}", c.period),
    }
}

/// The hash of one durable context record.
pub(crate) fn context(ns: &str, scope: &Scope, id: &str) -> String {
    format!("{ns}:ctx:{}:{id}", scope.key())
}

/// What every memory entry key of a tenant starts with; the entry is this and its key.
pub(crate) fn memory_prefix(ns: &str, scope: &Scope) -> String {
    format!("{ns}:mem:{}:", scope.key())
}

/// The hash of one memory entry: [`memory_prefix`] followed by `key`.
pub(crate) fn memory(ns: &str, scope: &Scope, key: &str) -> String {
    format!("{ns}:mem:{}:{key}", scope.key())
}

/// The sorted-set index of a tenant's memory keys.
pub(crate) fn memory_index(ns: &str, scope: &Scope) -> String {
    format!("{ns}:memidx:{}", scope.key())
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

    #[test]
    fn a_sessions_keys_share_one_base() {
        assert_eq!(
            artifacts("p", &Scope::org(1), "s"),
            [
                "p:art:org1:domNone:s:data",
                "p:art:org1:domNone:s:idx",
                "p:art:org1:domNone:s:meta",
                "p:art:org1:domNone:s:live",
            ]
        );
    }

    #[test]
    fn durable_keys_keep_their_layout() {
        let s = Scope::org(1);
        assert_eq!(
            context("llmctx", &s, "root"),
            "llmctx:ctx:org1:domNone:root"
        );
        assert_eq!(memory_prefix("llmctx", &s), "llmctx:mem:org1:domNone:");
        assert_eq!(memory_index("llmctx", &s), "llmctx:memidx:org1:domNone");
        // The listing script reads an entry as the prefix and the key it finds in the index.
        assert_eq!(
            memory("llmctx", &s, "user/lang"),
            format!("{}user/lang", memory_prefix("llmctx", &s))
        );
    }
}

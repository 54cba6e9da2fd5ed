//! The memo key: a tenant's scope key and a stable digest of what decides the answer.

use std::fmt;
use std::sync::Arc;

use crate::hash::StableHasher;
use crate::model::ChatRequest;

/// Bump when the digest's inputs change, so old entries are never read with new meaning.
const DOMAIN: &str = "llm-context/memo/v2";

/// Where a memoized response is kept: the request's tenant ([`Scope::key`]) and a
/// 128-bit digest of the prepared request.
///
/// The only constructor takes a whole [`ChatRequest`], and a request always has a scope
/// (the shared scope when none is set), so there is no way to build a key that is not
/// namespaced by a tenant. The scope key is also fed into the digest: a store that kept
/// only the digest would still keep tenants apart.
///
/// ```
/// use llm_context_layers::memo::MemoKey;
/// use llm_context_layers::{ChatRequest, Message, Scope};
///
/// let ask = |scope| ChatRequest::new("m", vec![Message::user("what is the number?")]).with_scope(scope);
/// let one = MemoKey::for_request(&ask(Scope::org(1)));
/// let other = MemoKey::for_request(&ask(Scope::org(999)));
/// assert_eq!(one.scope_key(), "org1:domNone");
/// assert_ne!(one, other);
/// assert_ne!(one.digest(), other.digest());
/// assert_eq!(one, MemoKey::for_request(&ask(Scope::org(1))));
/// ```
///
/// [`Scope::key`]: crate::Scope::key
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct MemoKey {
    scope: Arc<str>,
    digest: u128,
}

impl MemoKey {
    /// The key of a (prepared) request.
    ///
    /// The digest covers the scope key, the model, the prefix, the messages, the tools
    /// and the generation parameters (as canonical JSON with sorted keys, so a
    /// `serde_json` built with `preserve_order` cannot change it). It leaves out what does
    /// not change the answer: the session, the cache hints and the memo hint. It is
    /// XXH3-128, the same on every build and machine, so replicas sharing a store agree.
    ///
    /// It names no upstream: the key of a layer that sends every request to one place.
    /// A store shared by stacks that send to different providers or servers needs
    /// [`MemoKey::for_upstream`].
    pub fn for_request(request: &ChatRequest) -> Self {
        Self::for_upstream(request, "")
    }

    /// The key of a request sent to `upstream` (the provider and its base URL, as
    /// [`MemoLayer::upstream`](crate::memo::MemoLayer::upstream) names it): the same body
    /// sent to two servers is two questions.
    ///
    /// ```
    /// use llm_context_layers::memo::MemoKey;
    /// use llm_context_layers::{ChatRequest, Message};
    ///
    /// let ask = ChatRequest::new("m", vec![Message::user("hi")]);
    /// let openai = MemoKey::for_upstream(&ask, "openai https://api.openai.com/v1");
    /// let other = MemoKey::for_upstream(&ask, "anthropic https://api.anthropic.com");
    /// assert_ne!(openai, other);
    /// assert_eq!(MemoKey::for_request(&ask), MemoKey::for_upstream(&ask, ""));
    /// ```
    pub fn for_upstream(request: &ChatRequest, upstream: &str) -> Self {
        let scope = request.scope.key();
        let mut h = StableHasher::new(DOMAIN);
        h.str(&scope);
        h.str(upstream);
        h.str(&request.model);
        match &request.prefix {
            None => h.u64(0),
            Some(prefix) => {
                h.u64(1);
                prefix.hash_into(&mut h);
            }
        }
        h.messages(&request.messages);
        h.tools(&request.tools);
        // Through serde so that a parameter added later is covered without a change here.
        match serde_json::to_value(&request.params) {
            Ok(params) => h.json(&params),
            // Unreachable for plain data; a distinct marker keeps the key well defined.
            Err(_) => h.str("unserialisable-params"),
        }
        // Not serialized: what of a proxy's pass-through can change the answer.
        for (name, value) in request.params.shaping_headers() {
            h.str(&name.to_ascii_lowercase());
            h.str(value);
        }
        if let Some(query) = &request.params.query {
            h.str("?");
            h.str(query);
        }
        Self {
            scope: Arc::from(scope),
            digest: h.finish(),
        }
    }

    /// The tenant's [`Scope::key`](crate::Scope::key).
    pub fn scope_key(&self) -> &str {
        &self.scope
    }

    /// The 128-bit digest.
    pub fn digest(&self) -> u128 {
        self.digest
    }

    /// The digest as 32 lowercase hex characters.
    pub fn digest_hex(&self) -> String {
        format!("{:032x}", self.digest)
    }
}

impl fmt::Debug for MemoKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "MemoKey({self})")
    }
}

/// `scope-key/digest-hex`: unambiguous, because the digest has a fixed length.
impl fmt::Display for MemoKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{:032x}", self.scope, self.digest)
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::sync::Arc;

    use serde_json::json;

    use super::*;
    use crate::model::{CacheHints, CacheTtl, GenerationParams, MemoHint};
    use crate::{Message, PrefixContext, Scope, ToolSpec};

    fn base() -> ChatRequest {
        ChatRequest::new("m", vec![Message::user("hello")])
            .with_scope(Scope::org("acme"))
            .with_temperature(0.0)
    }

    fn key(r: &ChatRequest) -> MemoKey {
        MemoKey::for_request(r)
    }

    #[test]
    fn every_input_that_changes_the_answer_changes_the_digest() {
        let b = base();
        let mut variants = vec![
            b.clone().with_scope(Scope::org("acme").with_domain("x")),
            b.clone().with_scope(Scope::shared()),
            {
                let mut r = b.clone();
                r.model = "m2".into();
                r
            },
            b.clone().with_prefix(Arc::new(PrefixContext::new("sys"))),
            b.clone().with_prefix(Arc::new(PrefixContext::empty())),
            {
                let mut r = b.clone();
                r.messages.push(Message::assistant("hi"));
                r
            },
            b.clone()
                .with_tools(vec![ToolSpec::new("t", "d", json!({"type": "object"}))]),
            b.clone().with_temperature(0.5),
        ];
        let mut extra = BTreeMap::new();
        extra.insert("reasoning_effort".to_owned(), json!("low"));
        let mut params = b.params.clone();
        params.extra = extra;
        variants.push(b.clone().with_params(params));
        let mut seeded = b.params.clone();
        seeded.seed = Some(7);
        variants.push(b.clone().with_params(seeded));
        // A proxy's pass-through that can change the answer: a beta, a query.
        let mut beta = b.params.clone();
        beta.headers = vec![("anthropic-beta".into(), "context-1m-2025-08-07".into())];
        variants.push(b.clone().with_params(beta));
        let mut query = b.params.clone();
        query.query = Some("beta=true".into());
        variants.push(b.clone().with_params(query));

        let base_key = key(&b);
        let mut seen = std::collections::HashSet::new();
        seen.insert(base_key.digest());
        for v in &variants {
            assert!(seen.insert(key(v).digest()), "collision for {v:?}");
        }
    }

    #[test]
    fn what_does_not_change_the_answer_keeps_the_key() {
        let b = base();
        let mut cached = b.clone().with_session("another-session");
        cached.cache = CacheHints {
            prefix: Some(CacheTtl::OneHour),
            ..CacheHints::default()
        };
        let opted = cached.clone().with_memo(MemoHint::Always);
        assert_eq!(key(&b), key(&cached));
        assert_eq!(key(&b), key(&opted));
        // Headers that name no provider: a request id differs on every call.
        let mut params = b.params.clone();
        params.headers = vec![
            ("x-client-request-id".into(), "req-1".into()),
            ("user-agent".into(), "claude-cli/2.1.0".into()),
        ];
        assert_eq!(key(&b), key(&b.clone().with_params(params)));
    }

    #[test]
    fn object_key_order_does_not_matter() {
        let a = base().with_tools(vec![ToolSpec::new(
            "t",
            "d",
            serde_json::from_str(r#"{"type":"object","properties":{"a":{},"b":{}}}"#).unwrap(),
        )]);
        let b = base().with_tools(vec![ToolSpec::new(
            "t",
            "d",
            serde_json::from_str(r#"{"properties":{"b":{},"a":{}},"type":"object"}"#).unwrap(),
        )]);
        assert_eq!(key(&a), key(&b));
    }

    #[test]
    fn digest_follows_the_documented_scheme() {
        // Replicas on other builds read the same entries: this value must not change
        // without a new DOMAIN version. Recompute by hand from the documented inputs if
        // the hashing scheme is deliberately changed.
        let r = ChatRequest::new("m", vec![Message::user("hello")])
            .with_scope(Scope::org(1))
            .with_params(GenerationParams::default());
        let mut h = StableHasher::new("llm-context/memo/v2");
        h.str("org1:domNone");
        h.str(""); // the upstream: none named
        h.str("m");
        h.u64(0);
        h.messages(&[Message::user("hello")]);
        h.u64(0);
        h.json(&json!({}));
        assert_eq!(key(&r).digest(), h.finish());
        assert_eq!(
            key(&r).to_string(),
            format!("org1:domNone/{}", h.finish_hex())
        );
    }
}

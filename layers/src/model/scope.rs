//! Tenant scope: the key every store, cache entry and artifact is namespaced by.
//!
//! ```
//! use llm_context_layers::Scope;
//!
//! assert_eq!(Scope::org(1).key(), "org1:domNone");
//! assert_eq!(Scope::org("acme").with_domain("billing").key(), "orgacme:dombilling");
//! // Distinct scopes never share a key, whatever their values contain.
//! assert_ne!(Scope::org("a:domb").key(), Scope::org("a").with_domain("b").key());
//! ```

use serde::{Deserialize, Serialize};

/// A tenant: an organisation and an optional domain inside it.
///
/// The default scope (no org, no domain) is the *shared* scope: anything stored under it is
/// visible to every request that also uses the default scope. Multi-tenant deployments
/// set a scope on every request; sharing across tenants then needs an explicit act.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Scope {
    /// The organisation (tenant) id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub org: Option<String>,
    /// A domain inside the organisation (a product, a team, a user).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub domain: Option<String>,
}

impl Scope {
    /// A scope for one organisation.
    pub fn org(org: impl ToString) -> Self {
        Self {
            org: Some(org.to_string()),
            domain: None,
        }
    }

    /// The shared scope (no tenant).
    pub fn shared() -> Self {
        Self::default()
    }

    /// Sets the domain.
    #[must_use]
    pub fn with_domain(mut self, domain: impl ToString) -> Self {
        self.domain = Some(domain.to_string());
        self
    }

    /// A stable, injective key: `org{org}:dom{domain}`, with `None` for an absent part.
    ///
    /// The same on every build and machine. Values are escaped (`%`, `:` and a literal
    /// `None` are percent-encoded), so two different scopes never produce the same key.
    pub fn key(&self) -> String {
        let mut out = String::with_capacity(16);
        out.push_str("org");
        push_part(&mut out, self.org.as_deref());
        out.push_str(":dom");
        push_part(&mut out, self.domain.as_deref());
        out
    }
}

fn push_part(out: &mut String, part: Option<&str>) {
    match part {
        None => out.push_str("None"),
        // Escape the first letter so a literal "None" differs from an absent part.
        Some("None") => out.push_str("%4Eone"),
        Some(value) => {
            for c in value.chars() {
                match c {
                    '%' => out.push_str("%25"),
                    ':' => out.push_str("%3A"),
                    c => out.push(c),
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seed_key() {
        assert_eq!(Scope::org(1).key(), "org1:domNone");
        assert_eq!(Scope::org(999).key(), "org999:domNone");
        assert_eq!(Scope::shared().key(), "orgNone:domNone");
    }

    #[test]
    fn keys_are_injective_on_tricky_values() {
        let scopes = [
            Scope::shared(),
            Scope::org("None"),
            Scope::org("%4Eone"),
            Scope::org("a:domb"),
            Scope::org("a").with_domain("b"),
            Scope::org("a%3A").with_domain("b"),
            Scope::org("").with_domain(""),
        ];
        let keys: std::collections::BTreeSet<_> = scopes.iter().map(Scope::key).collect();
        assert_eq!(keys.len(), scopes.len());
    }
}

//! Tenants: the key spaces of one cluster (docs/TENANTS.md). They live at
//! the bottom of the workspace because clients (naming one), the master's
//! edge (scoping keys) and the state machine (usage per tenant) all need
//! them. A client acts in one tenant, named in the [`TENANT_HEADER`]
//! metadata entry of every call (none: [`DEFAULT_TENANT`]); the master
//! maps the keys of a call into that tenant's space at its edge
//! ([`Tenant::scope`]) and back on the way out ([`Tenant::unscope`]), so
//! the same key in two tenants is two objects. The state machine only
//! counts each tenant's usage ([`tenant_of`]).
//!
//! The stored key of a tenant's object is `NUL name NUL key`; the default
//! tenant's is the key itself, so a cluster that names no tenant stores
//! exactly what it did before tenants existed. Keys a client sends may not
//! contain NUL ([`check_client_key`]): a default-tenant key could otherwise
//! spell another tenant's stored key.

use std::fmt;

/// The gRPC metadata entry naming the tenant a call acts in.
pub const TENANT_HEADER: &str = "x-mooncake-tenant";
/// The tenant of a call that names none; its keys are stored as they are.
pub const DEFAULT_TENANT: &str = "default";
/// Longest tenant name.
pub const TENANT_NAME_MAX_BYTES: usize = 64;
/// What a stored key may add to a client's key: two NULs and a name.
pub const TENANT_SCOPE_MAX_BYTES: usize = TENANT_NAME_MAX_BYTES + 2;

/// Marks a stored key as another tenant's than the default one.
const SCOPE_MARK: char = '\0';

/// One tenant, by a valid name (see [`Tenant::parse`]).
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Tenant(String);

/// A tenant name or a key that cannot be used, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TenantError(pub String);

impl fmt::Display for TenantError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for TenantError {}

impl Default for Tenant {
    fn default() -> Self {
        Tenant(DEFAULT_TENANT.to_string())
    }
}

impl fmt::Display for Tenant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl Tenant {
    /// A tenant by name: 1 to [`TENANT_NAME_MAX_BYTES`] ASCII letters,
    /// digits, `.`, `_` or `-`. An empty name is the default tenant (as
    /// upstream's `tenant_id=""`).
    pub fn parse(name: &str) -> Result<Tenant, TenantError> {
        if name.is_empty() {
            return Ok(Tenant::default());
        }
        if name.len() > TENANT_NAME_MAX_BYTES {
            return Err(TenantError(format!(
                "tenant name is {} bytes; the limit is {TENANT_NAME_MAX_BYTES}",
                name.len()
            )));
        }
        if let Some(c) = name.chars().find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))) {
            return Err(TenantError(format!(
                "tenant name {name:?} contains {c:?}: use ASCII letters, digits, '.', '_' and '-'"
            )));
        }
        Ok(Tenant(name.to_string()))
    }

    /// The tenant's name.
    pub fn name(&self) -> &str {
        &self.0
    }

    /// Whether this is the default tenant.
    pub fn is_default(&self) -> bool {
        self.0 == DEFAULT_TENANT
    }

    /// The prefix of every stored key of this tenant (empty for the default
    /// tenant, whose stored keys are the only ones not starting with NUL).
    fn prefix(&self) -> String {
        match self.is_default() {
            true => String::new(),
            false => format!("{SCOPE_MARK}{}{SCOPE_MARK}", self.0),
        }
    }

    /// The stored key of this tenant's `key`; of a key prefix, the stored
    /// prefix, where a listing of the tenant's keys under it starts.
    pub fn scope(&self, key: &str) -> String {
        match self.is_default() {
            true => key.to_string(),
            false => format!("{}{key}", self.prefix()),
        }
    }

    /// The client's key of a stored key, when the stored key is this
    /// tenant's; `None` when it is another tenant's.
    pub fn unscope<'k>(&self, stored: &'k str) -> Option<&'k str> {
        match self.is_default() {
            true => (!stored.starts_with(SCOPE_MARK)).then_some(stored),
            false => stored.strip_prefix(SCOPE_MARK)?.strip_prefix(self.0.as_str())?.strip_prefix(SCOPE_MARK),
        }
    }

    /// Whether `stored` is a key of this tenant.
    pub fn owns(&self, stored: &str) -> bool {
        self.unscope(stored).is_some()
    }
}

/// The name of the tenant a stored key belongs to.
pub fn tenant_of(stored: &str) -> &str {
    match stored.strip_prefix(SCOPE_MARK).and_then(|rest| rest.split_once(SCOPE_MARK)) {
        Some((name, _)) => name,
        None => DEFAULT_TENANT,
    }
}

/// Refuses a key a client sent that contains NUL (see the module doc).
pub fn check_client_key(key: &str) -> Result<(), TenantError> {
    match key.contains(SCOPE_MARK) {
        true => Err(TenantError(format!("key {key:?} contains a NUL character; keys may not"))),
        false => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_same_key_in_two_tenants_is_two_stored_keys_and_each_is_seen_only_by_its_tenant() {
        let (a, b, default) = (Tenant::parse("team-a").unwrap(), Tenant::parse("b").unwrap(), Tenant::default());
        let (ka, kb, kd) = (a.scope("k"), b.scope("k"), default.scope("k"));
        assert_eq!(kd, "k", "the default tenant stores keys as they are");
        assert!(ka != kb && ka != kd && kb != kd);
        assert_eq!(a.unscope(&ka), Some("k"));
        assert_eq!(a.unscope(&kb), None);
        assert_eq!(a.unscope(&kd), None);
        assert_eq!(default.unscope(&ka), None);
        assert_eq!(default.unscope(&kd), Some("k"));
        assert_eq!((tenant_of(&ka), tenant_of(&kb), tenant_of(&kd)), ("team-a", "b", DEFAULT_TENANT));
        // A tenant whose name is a prefix of another's sees none of its keys.
        let long = Tenant::parse("team-ab").unwrap();
        assert_eq!(a.unscope(&long.scope("k")), None);
        assert!(!a.owns(&long.scope("k")) && long.owns(&long.scope("k")));
    }

    #[test]
    fn a_tenants_keys_under_a_prefix_sort_from_its_scoped_prefix() {
        let a = Tenant::parse("a").unwrap();
        let mut stored = [a.scope("p/1"), a.scope("p/0"), a.scope("q"), Tenant::default().scope("p/2")];
        stored.sort();
        let first = a.scope("p/");
        let from: Vec<&String> =
            stored.iter().skip_while(|k| **k < first).take_while(|k| k.starts_with(&first)).collect();
        assert_eq!(from, [&a.scope("p/0"), &a.scope("p/1")], "{stored:?}");
        assert_eq!(stored.last(), Some(&"p/2".to_string()), "default tenant keys sort after every other tenant's");
    }

    #[test]
    fn bad_names_and_keys_are_refused_with_the_reason() {
        assert_eq!(Tenant::parse("").unwrap(), Tenant::default());
        assert!(Tenant::parse("default").unwrap().is_default());
        assert!(Tenant::parse(&"x".repeat(TENANT_NAME_MAX_BYTES)).is_ok());
        let long = Tenant::parse(&"x".repeat(TENANT_NAME_MAX_BYTES + 1)).unwrap_err();
        assert!(long.0.contains("the limit is 64"), "{long}");
        for bad in ["a b", "a/b", "a\0b", "é"] {
            let e = Tenant::parse(bad).unwrap_err();
            assert!(e.0.contains("use ASCII letters"), "{bad:?}: {e}");
        }
        assert!(check_client_key("fine/key").is_ok());
        assert!(check_client_key("\0a\0k").unwrap_err().0.contains("NUL"));
    }
}

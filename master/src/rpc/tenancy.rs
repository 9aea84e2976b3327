//! Which tenant a call acts in, and its keys in that tenant's space
//! (docs/TENANTS.md). The tenant is named by the call's
//! `x-mooncake-tenant` metadata entry (none: `default`); a client
//! certificate bound to a tenant (mutual TLS) acts in that tenant only. Every
//! key a client sends is checked and scoped here, on the way in, and every
//! key sent back is unscoped, so the services and the state machine deal in
//! stored keys only.

use mooncake_proto::{ErrorCode, Status};
use mooncake_raft_store::state::validate_key;
use mooncake_segment::tenant::{TENANT_HEADER, Tenant, check_client_key};

use crate::rpc::errors::invalid;

/// The tenant a call acts in, and the mapping of its keys.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct KeySpace {
    tenant: Tenant,
}

impl KeySpace {
    /// The key space of `tenant` (tests: calls get theirs from
    /// [`KeySpace::of_request`]).
    #[cfg(test)]
    pub fn of_tenant(tenant: Tenant) -> Self {
        KeySpace { tenant }
    }

    /// The key space `req` acts in: the tenant its metadata names, checked
    /// against the tenant its client certificate is bound to, if any.
    pub fn of_request<T>(req: &tonic::Request<T>) -> Result<Self, Status> {
        let bound = req.peer_certs().and_then(|chain| mooncake_tls::tenant_of_peer(chain.as_slice()));
        Self::decide(req.metadata().get(TENANT_HEADER).map(|v| v.to_str()), bound)
    }

    /// The tenant of a call: `named` is its metadata entry (`Err`: not
    /// text), `bound` the tenant of its certificate.
    fn decide(
        named: Option<Result<&str, tonic::metadata::errors::ToStrError>>,
        bound: Option<String>,
    ) -> Result<Self, Status> {
        let named = match named {
            None => None,
            Some(Err(_)) => {
                return Err(Status::with(
                    ErrorCode::InvalidParams,
                    format!("the {TENANT_HEADER} metadata entry is not text; name the tenant in ASCII"),
                ));
            }
            Some(Ok(name)) => {
                Some(Tenant::parse(name).map_err(|e| Status::with(ErrorCode::InvalidParams, e.to_string()))?)
            }
        };
        let tenant = match (named, bound) {
            (named, None) => named.unwrap_or_default(),
            (named, Some(bound)) => {
                let bound = Tenant::parse(&bound).map_err(|e| {
                    Status::with(
                        ErrorCode::PermissionDenied,
                        format!("this client's certificate names a tenant that cannot be used ({e}); issue it again"),
                    )
                })?;
                match named {
                    Some(named) if named != bound => {
                        return Err(Status::with(
                            ErrorCode::PermissionDenied,
                            format!(
                                "this client's certificate is bound to tenant \"{bound}\"; it cannot act in tenant \
                                 \"{named}\" (name no tenant, or \"{bound}\")"
                            ),
                        ));
                    }
                    _ => bound,
                }
            }
        };
        Ok(KeySpace { tenant })
    }

    pub fn tenant(&self) -> &Tenant {
        &self.tenant
    }

    /// The stored key of a key the client sent, or INVALID_PARAMS saying
    /// what is wrong with it.
    pub fn stored(&self, key: &str) -> Result<String, Status> {
        validate_key(key).map_err(invalid)?;
        check_client_key(key).map_err(|e| Status::with(ErrorCode::InvalidParams, e.to_string()))?;
        Ok(self.tenant.scope(key))
    }

    /// The stored keys of a batch's keys, each with its refusal: a refused
    /// key's stored key is empty (refused again downstream, and answered
    /// with the refusal here).
    pub fn stored_all(&self, keys: &[String]) -> (Vec<String>, Vec<Option<Status>>) {
        keys.iter()
            .map(|k| match self.stored(k) {
                Ok(stored) => (stored, None),
                Err(refusal) => (String::new(), Some(refusal)),
            })
            .unzip()
    }

    /// A stored prefix (or listing bound) of a client's prefix: not a
    /// key, so only NUL is refused.
    pub fn stored_prefix(&self, prefix: &str) -> Result<String, Status> {
        check_client_key(prefix).map_err(|e| Status::with(ErrorCode::InvalidParams, e.to_string()))?;
        Ok(self.tenant.scope(prefix))
    }

    /// The client's key of a stored key, when it is this space's.
    pub fn client_key<'k>(&self, stored: &'k str) -> Option<&'k str> {
        self.tenant.unscope(stored)
    }
}

/// Replaces the status of each refused item of a batch's answers with its
/// refusal ([`KeySpace::stored_all`]).
pub fn with_refusals<R: mooncake_proto::HasStatus>(answers: &mut [R], refusals: Vec<Option<Status>>) {
    for (answer, refusal) in answers.iter_mut().zip(refusals) {
        if let Some(s) = refusal {
            answer.set_status(s);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn code(r: Result<KeySpace, Status>) -> ErrorCode {
        r.map_or_else(|s| s.error_code(), |_| ErrorCode::Ok)
    }

    #[test]
    fn a_call_acts_in_the_tenant_it_names_unless_its_certificate_binds_another() {
        let named = |t: &'static str| Some(Ok(t));
        assert!(KeySpace::decide(None, None).unwrap().tenant().is_default());
        assert_eq!(KeySpace::decide(named("a"), None).unwrap().tenant().name(), "a");
        assert_eq!(KeySpace::decide(None, Some("b".into())).unwrap().tenant().name(), "b", "bound, named none");
        assert_eq!(KeySpace::decide(named("b"), Some("b".into())).unwrap().tenant().name(), "b");
        let crossed = KeySpace::decide(named("a"), Some("b".into())).unwrap_err();
        assert_eq!(crossed.error_code(), ErrorCode::PermissionDenied);
        assert!(crossed.message.contains("bound to tenant \"b\""), "{}", crossed.message);
        assert_eq!(code(KeySpace::decide(named("default"), Some("b".into()))), ErrorCode::PermissionDenied);
        assert_eq!(code(KeySpace::decide(named("a b"), None)), ErrorCode::InvalidParams);
    }

    #[test]
    fn keys_are_checked_and_scoped_and_a_nul_key_is_refused_in_every_tenant() {
        let a = KeySpace::of_tenant(Tenant::parse("a").unwrap());
        let stored = a.stored("k").unwrap();
        assert_eq!(a.client_key(&stored), Some("k"));
        assert_eq!(KeySpace::default().client_key(&stored), None);
        for space in [&a, &KeySpace::default()] {
            assert_eq!(space.stored("\0a\0k").unwrap_err().error_code(), ErrorCode::InvalidParams);
            assert_eq!(space.stored("").unwrap_err().error_code(), ErrorCode::InvalidParams);
        }
        let (keys, refusals) = a.stored_all(&["x".into(), "".into()]);
        assert_eq!(keys, [a.stored("x").unwrap(), String::new()]);
        assert_eq!((refusals[0].is_none(), refusals[1].is_some()), (true, true));
    }

    #[test]
    fn the_state_machine_leaves_room_for_the_longest_tenant_scope() {
        assert_eq!(mooncake_raft_store::state::KEY_SCOPE_MAX_BYTES, mooncake_segment::tenant::TENANT_SCOPE_MAX_BYTES);
        let longest = KeySpace::of_tenant(Tenant::parse(&"t".repeat(64)).unwrap());
        let stored = longest.stored(&"k".repeat(mooncake_raft_store::state::KEY_MAX_BYTES)).unwrap();
        assert!(mooncake_raft_store::state::validate_stored_key(&stored).is_ok());
    }
}

//! The tenant a client certificate is bound to: an organizational unit
//! `mooncake-tenant=NAME` in its subject (docs/SECURITY.md, "Tenants"). A
//! master lets a call made with such a certificate act in tenant NAME only.
//! The binding is only as good as the CA that signed the certificate.

use rustls::pki_types::CertificateDer;

/// What an organizational unit starts with when it binds a tenant.
pub const TENANT_OU_PREFIX: &str = "mooncake-tenant=";

/// Stands for a certificate whose binding cannot be read: no tenant can
/// be named so (it is not a valid tenant name), so its calls are refused
/// rather than let out of a binding it might carry.
const UNREADABLE: &str = "<unreadable certificate subject>";

/// The tenant a DER certificate is bound to, if any. Two bindings in one
/// certificate come back joined with `,`, a name no tenant has.
pub fn tenant_of_certificate(cert: &CertificateDer<'_>) -> Option<String> {
    let Some(units) = crate::der::subject_org_units(cert.as_ref()) else {
        return Some(UNREADABLE.to_string());
    };
    let bound: Vec<&str> = units.iter().filter_map(|u| u.strip_prefix(TENANT_OU_PREFIX)).collect();
    (!bound.is_empty()).then(|| bound.join(","))
}

/// The tenant a TLS peer's certificate (end entity first) is bound to.
pub fn tenant_of_peer(chain: &[CertificateDer<'_>]) -> Option<String> {
    chain.first().and_then(tenant_of_certificate)
}

/// The organizational unit that binds `tenant`, for a certificate's subject.
pub fn tenant_org_unit(tenant: &str) -> String {
    format!("{TENANT_OU_PREFIX}{tenant}")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cert(units: &[&str]) -> CertificateDer<'static> {
        let mut params = rcgen::CertificateParams::new(vec!["localhost".to_owned()]).unwrap();
        params.distinguished_name = rcgen::DistinguishedName::new();
        params.distinguished_name.push(rcgen::DnType::CommonName, "mooncake-client");
        for u in units {
            params.distinguished_name.push(rcgen::DnType::OrganizationalUnitName, *u);
        }
        let key = rcgen::KeyPair::generate().unwrap();
        params.self_signed(&key).unwrap().der().clone()
    }

    #[test]
    fn a_certificate_is_bound_to_the_tenant_its_organizational_unit_names() {
        assert_eq!(tenant_of_certificate(&cert(&[])), None);
        assert_eq!(tenant_of_certificate(&cert(&["ops"])), None, "an ordinary unit binds nothing");
        assert_eq!(tenant_of_certificate(&cert(&[&tenant_org_unit("team-a")])).as_deref(), Some("team-a"));
        assert_eq!(tenant_of_peer(&[cert(&["ops", &tenant_org_unit("b")])]).as_deref(), Some("b"));
        assert_eq!(tenant_of_peer(&[]), None);
    }

    #[test]
    fn an_unreadable_subject_binds_no_usable_tenant() {
        let garbage = CertificateDer::from(b"not a certificate".to_vec());
        assert_eq!(tenant_of_certificate(&garbage).as_deref(), Some(UNREADABLE));
    }
}

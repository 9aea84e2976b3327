//! Just enough DER to read attributes of a certificate's subject: the
//! common name (the role encoding of [`crate::role`]) and the
//! organizational units (the tenant binding of [`crate::tenant`]). Every length is checked; malformed input
//! gives `None`, never a panic (certificates come from peers).

/// DER tags met on the way to the subject.
const TAG_SEQUENCE: u8 = 0x30;
const TAG_SET: u8 = 0x31;
const TAG_OID: u8 = 0x06;
const TAG_INTEGER: u8 = 0x02;
/// `[0] EXPLICIT Version` of a v3 certificate.
const TAG_VERSION: u8 = 0xA0;
/// The attribute type `id-at-commonName` (2.5.4.3), encoded.
const OID_COMMON_NAME: &[u8] = &[0x55, 0x04, 0x03];
/// The attribute type `id-at-organizationalUnitName` (2.5.4.11), encoded.
const OID_ORG_UNIT: &[u8] = &[0x55, 0x04, 0x0B];
/// String types a common name may use: UTF8String, PrintableString,
/// TeletexString (read as Latin-1 is not attempted: only ASCII passes),
/// IA5String.
const STRING_TAGS: [u8; 4] = [0x0C, 0x13, 0x14, 0x16];

/// One TLV: `(tag, contents, rest of the input)`.
fn tlv(input: &[u8]) -> Option<(u8, &[u8], &[u8])> {
    let (&tag, rest) = input.split_first()?;
    let (&first, rest) = rest.split_first()?;
    let (len, rest) = if first < 0x80 {
        (usize::from(first), rest)
    } else {
        // Long form: 1..=4 length bytes (a certificate is far below 4 GiB).
        let count = usize::from(first & 0x7F);
        if count == 0 || count > 4 || rest.len() < count {
            return None;
        }
        let (bytes, rest) = rest.split_at(count);
        (bytes.iter().fold(0usize, |n, b| (n << 8) | usize::from(*b)), rest)
    };
    if rest.len() < len {
        return None;
    }
    let (contents, rest) = rest.split_at(len);
    Some((tag, contents, rest))
}

/// A TLV that must carry `tag`.
fn expect(input: &[u8], tag: u8) -> Option<(&[u8], &[u8])> {
    let (t, contents, rest) = tlv(input)?;
    (t == tag).then_some((contents, rest))
}

/// The first common name of a DER certificate's subject.
pub(crate) fn subject_common_name(cert: &[u8]) -> Option<String> {
    subject_attributes(cert, OID_COMMON_NAME)?.into_iter().next()
}

/// Every organizational unit of a DER certificate's subject, in order.
pub(crate) fn subject_org_units(cert: &[u8]) -> Option<Vec<String>> {
    subject_attributes(cert, OID_ORG_UNIT)
}

/// The values of every `oid` attribute of a DER certificate's subject;
/// `None` when the certificate cannot be read, or one of them is not text.
fn subject_attributes(cert: &[u8], oid: &[u8]) -> Option<Vec<String>> {
    let (certificate, _) = expect(cert, TAG_SEQUENCE)?;
    let (tbs, _) = expect(certificate, TAG_SEQUENCE)?;
    let mut rest = tbs;
    if rest.first() == Some(&TAG_VERSION) {
        rest = tlv(rest)?.2;
    }
    let (_serial, rest) = expect(rest, TAG_INTEGER)?;
    let (_signature, rest) = expect(rest, TAG_SEQUENCE)?;
    let (_issuer, rest) = expect(rest, TAG_SEQUENCE)?;
    let (_validity, rest) = expect(rest, TAG_SEQUENCE)?;
    let (mut subject, _) = expect(rest, TAG_SEQUENCE)?;
    let mut found = Vec::new();
    while !subject.is_empty() {
        let (mut set, next) = expect(subject, TAG_SET)?;
        subject = next;
        while !set.is_empty() {
            let (attribute, next) = expect(set, TAG_SEQUENCE)?;
            set = next;
            let (attribute_oid, value) = expect(attribute, TAG_OID)?;
            if attribute_oid != oid {
                continue;
            }
            let (tag, text, _) = tlv(value)?;
            if !STRING_TAGS.contains(&tag) {
                return None;
            }
            let text = std::str::from_utf8(text).ok()?;
            if tag != 0x0C && !text.is_ascii() {
                return None;
            }
            found.push(text.to_owned());
        }
    }
    Some(found)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cert_with_cn(cn: &str) -> Vec<u8> {
        let mut params = rcgen::CertificateParams::new(vec!["localhost".to_owned()]).unwrap();
        params.distinguished_name = rcgen::DistinguishedName::new();
        params.distinguished_name.push(rcgen::DnType::OrganizationName, "mooncake");
        params.distinguished_name.push(rcgen::DnType::CommonName, cn);
        let key = rcgen::KeyPair::generate().unwrap();
        params.self_signed(&key).unwrap().der().to_vec()
    }

    #[test]
    fn reads_the_common_name_of_a_real_certificate() {
        assert_eq!(subject_common_name(&cert_with_cn("mooncake-master-7")).as_deref(), Some("mooncake-master-7"));
        let long = "x".repeat(200);
        assert_eq!(subject_common_name(&cert_with_cn(&long)).as_deref(), Some(long.as_str()));
    }

    #[test]
    fn garbage_and_every_truncation_give_none() {
        let der = cert_with_cn("mooncake-store");
        for len in 0..der.len() {
            // A truncated certificate may still hold the whole subject; it
            // must never panic, and must not invent another name.
            let got = subject_common_name(&der[..len]);
            assert!(got.is_none() || got.as_deref() == Some("mooncake-store"));
        }
        assert_eq!(subject_common_name(&[0x30, 0x84, 0xFF, 0xFF, 0xFF, 0xFF]), None);
        assert_eq!(subject_common_name(b"not a certificate"), None);
    }
}

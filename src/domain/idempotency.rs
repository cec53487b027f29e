//! `IdempotencyKey` (the `Idempotency-Key` header) and the fingerprint of the request it names.
use sha2::{Digest, Sha256};

/// 1-255 printable ASCII characters (space to `~`), not starting or ending with a space.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IdempotencyKey(String);

/// The longest key accepted.
pub const MAX_KEY_LEN: usize = 255;

impl IdempotencyKey {
    /// The header's value as sent; `Err` says what is wrong with it.
    pub fn parse(raw: &[u8]) -> Result<Self, &'static str> {
        if raw.is_empty() || raw.len() > MAX_KEY_LEN {
            return Err("must be 1-255 characters");
        }
        if !raw.iter().all(|b| (0x20..=0x7e).contains(b)) {
            return Err("must be printable ASCII");
        }
        if raw.first() == Some(&b' ') || raw.last() == Some(&b' ') {
            return Err("must not start or end with a space");
        }
        Ok(Self(String::from_utf8(raw.to_vec()).expect("ASCII")))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// The fingerprint of a request: what it targets (`PUT /plans/integration-file`, …) and its
/// body bytes, as `sha256:<hex>`.
pub fn fingerprint(target: &str, body: &[u8]) -> String {
    let mut hash = Sha256::new();
    hash.update(target.as_bytes());
    hash.update(b"\n");
    hash.update(body);
    let hex: String = hash.finalize().iter().map(|b| format!("{b:02x}")).collect();
    format!("sha256:{hex}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_printable_ascii_of_bounded_length() {
        assert!(IdempotencyKey::parse(b"abc-123 x").is_ok());
        assert!(IdempotencyKey::parse(&[b'k'; 255]).is_ok());
        for bad in [
            &b""[..],
            &[b'k'; 256],
            b"a\tb",
            b"caf\xc3\xa9",
            b" a",
            b"a ",
        ] {
            assert!(IdempotencyKey::parse(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn fingerprints_tell_targets_and_bodies_apart() {
        let a = fingerprint("PUT /plans/integration-file", b"{}");
        assert_eq!(a, fingerprint("PUT /plans/integration-file", b"{}"));
        assert_ne!(a, fingerprint("PUT /plans/configuration-file", b"{}"));
        assert_ne!(a, fingerprint("PUT /plans/integration-file", b"{ }"));
    }
}

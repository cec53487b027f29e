//! `IdempotencyKey` (the `Idempotency-Key` header) and the fingerprint of the request it names.
use hmac::{Hmac, Mac};
use sha2::Sha256;

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
/// body bytes, as `hmac-sha256:<hex>`, keyed with the data dir's secret. It is a trailer of
/// the commit, which readers of either file see in events and history: keyed, it cannot be
/// used to confirm a guessed body offline.
pub fn fingerprint(secret: &[u8], target: &str, body: &[u8]) -> String {
    let mut mac = Hmac::<Sha256>::new_from_slice(secret).expect("HMAC takes any key");
    mac.update(b"planfiles idempotency fingerprint\0");
    mac.update(target.as_bytes());
    mac.update(b"\n");
    mac.update(body);
    let hex: String = mac
        .finalize()
        .into_bytes()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    format!("hmac-sha256:{hex}")
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
    fn fingerprints_tell_targets_bodies_and_secrets_apart() {
        let put = "PUT /plans/integration-file";
        let a = fingerprint(b"secret", put, b"{}");
        assert!(a.starts_with("hmac-sha256:") && a.len() == 12 + 64, "{a}");
        assert_eq!(a, fingerprint(b"secret", put, b"{}"));
        assert_ne!(
            a,
            fingerprint(b"secret", "PUT /plans/configuration-file", b"{}")
        );
        assert_ne!(a, fingerprint(b"secret", put, b"{ }"));
        assert_ne!(a, fingerprint(b"other", put, b"{}"), "keyed");
    }
}

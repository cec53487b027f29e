//! `RequestId`: the caller's `X-Request-Id` when it is safe to echo and to put in a commit.
use std::fmt;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestId(String);

impl RequestId {
    /// Accepts 1-128 characters of `[A-Za-z0-9._:-]`.
    pub fn parse(raw: &str) -> Option<Self> {
        let ok = (1..=128).contains(&raw.len())
            && raw
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"._:-".contains(&b));
        ok.then(|| Self(raw.to_owned()))
    }

    /// A fresh random id (a v4 UUID from the thread's random generator, seeded once by the
    /// OS: no system call per request).
    pub fn generate() -> Self {
        let bytes: [u8; 16] = rand::random();
        let mut text = uuid::Uuid::encode_buffer();
        let uuid = uuid::Builder::from_random_bytes(bytes).into_uuid();
        Self(uuid.hyphenated().encode_lower(&mut text).to_owned())
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for RequestId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_safe_ids_and_refuses_others() {
        assert!(RequestId::parse("abc-123:x.y_z").is_some());
        assert!(RequestId::parse(&"a".repeat(128)).is_some());
        for bad in ["", "a\nb", "a b", "a\u{7f}", "é", &"a".repeat(129)] {
            assert!(RequestId::parse(bad).is_none(), "{bad:?}");
        }
    }

    #[test]
    fn generated_ids_are_valid_and_distinct() {
        let (a, b) = (RequestId::generate(), RequestId::generate());
        assert_ne!(a, b);
        assert!(RequestId::parse(a.as_str()).is_some());
    }
}

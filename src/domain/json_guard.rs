//! A pre-scan of JSON request bodies for what serde_json would silently change or overflow on:
//! nesting deeper than the document limit and integers that do not fit in 64 bits.

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GuardError {
    #[error("nesting deeper than {0} levels")]
    TooDeep(usize),
    #[error("the integer {0} does not fit in 64 bits")]
    IntegerTooLarge(String),
}

/// Scans `body` (which may or may not be valid JSON: syntax is serde_json's job).
/// `max_depth` counts arrays and objects, the outermost one being level 1.
pub fn scan(body: &[u8], max_depth: usize) -> Result<(), GuardError> {
    let mut depth = 0usize;
    let mut i = 0;
    while i < body.len() {
        match body[i] {
            b'"' => i = skip_string(body, i + 1),
            b'{' | b'[' => {
                depth += 1;
                if depth > max_depth {
                    return Err(GuardError::TooDeep(max_depth));
                }
                i += 1;
            }
            b'}' | b']' => {
                depth = depth.saturating_sub(1);
                i += 1;
            }
            b'-' | b'0'..=b'9' => {
                let start = i;
                i += 1;
                while i < body.len()
                    && matches!(body[i], b'0'..=b'9' | b'.' | b'e' | b'E' | b'+' | b'-')
                {
                    i += 1;
                }
                let token = &body[start..i];
                let is_integer = !token.iter().any(|b| matches!(b, b'.' | b'e' | b'E'));
                if is_integer {
                    let text = String::from_utf8_lossy(token);
                    if text.parse::<i64>().is_err() && text.parse::<u64>().is_err() && text != "-" {
                        return Err(GuardError::IntegerTooLarge(text.into_owned()));
                    }
                }
            }
            _ => i += 1,
        }
    }
    Ok(())
}

/// Returns the index just past the closing quote of a string starting at `i`.
fn skip_string(body: &[u8], mut i: usize) -> usize {
    while i < body.len() {
        match body[i] {
            b'\\' => i += 2,
            b'"' => return i + 1,
            _ => i += 1,
        }
    }
    i
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_64_bit_integers_and_floats() {
        let body = br#"{"a": [18446744073709551615, -9223372036854775808, 1e400, 1.5, 0]}"#;
        assert_eq!(scan(body, 10), Ok(()));
    }

    #[test]
    fn refuses_integers_past_64_bits() {
        for n in [
            "18446744073709551616",
            "-9223372036854775809",
            "123456789012345678901234567890",
        ] {
            let body = format!(r#"{{"a": {n}}}"#);
            assert_eq!(
                scan(body.as_bytes(), 10),
                Err(GuardError::IntegerTooLarge(n.into()))
            );
        }
    }

    #[test]
    fn ignores_digits_and_brackets_inside_strings() {
        let body = br#"{"a": "123456789012345678901234567890 [[[[[[ \" {{{{"}"#;
        assert_eq!(scan(body, 2), Ok(()));
    }

    #[test]
    fn depth_limit() {
        let deep = |n: usize| format!("{}{}", "[".repeat(n), "]".repeat(n));
        assert_eq!(scan(deep(5).as_bytes(), 5), Ok(()));
        assert_eq!(scan(deep(6).as_bytes(), 5), Err(GuardError::TooDeep(5)));
        assert_eq!(
            scan(deep(10_000).as_bytes(), 5),
            Err(GuardError::TooDeep(5))
        );
    }
}

//! `Identity`: a commit author or committer, cleaned so it cannot break a commit header.

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity {
    name: String,
    email: String,
}

fn clean(raw: &str) -> String {
    raw.chars()
        .filter(|c| !c.is_control() && *c != '<' && *c != '>')
        .collect::<String>()
        .trim()
        .to_owned()
}

impl Identity {
    /// Builds an identity; `<`, `>` and control characters are removed. Empty parts fall back
    /// to `unknown` / `unknown@<domain>`.
    pub fn new(name: &str, email: &str, domain: &str) -> Self {
        let mut name = clean(name);
        if name.is_empty() {
            name = "unknown".into();
        }
        let mut email = clean(email);
        if email.is_empty() {
            email = format!("unknown@{}", clean(domain));
        }
        Self { name, email }
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn email(&self) -> &str {
        &self.email
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strips_angle_brackets_and_control_characters() {
        let id = Identity::new("Eve <evil>\n", "e@x>\r\nCommitter: y", "acme");
        assert_eq!(id.name(), "Eve evil");
        assert_eq!(id.email(), "e@xCommitter: y");
    }

    #[test]
    fn falls_back_when_empty() {
        let id = Identity::new(" <> ", "", "acme");
        assert_eq!((id.name(), id.email()), ("unknown", "unknown@acme"));
    }
}

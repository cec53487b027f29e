//! `VerifiedTokens`: tokens that passed verification, so a client's next request with the same token skips the signature check.
use super::Principal;
use std::collections::HashMap;
use std::sync::RwLock;

/// How many tokens are remembered; when full, the memory starts over.
const CAPACITY: usize = 10_000;

/// A token's signature and claims cannot change, only the clock can: a remembered token is
/// accepted again while `now <= exp + leeway`, the same rule the full check applies. Tokens
/// that were refused are never remembered.
#[derive(Debug, Default)]
pub struct VerifiedTokens {
    /// By the token's signature (short to hash); the whole token is compared on a hit.
    tokens: RwLock<HashMap<String, Remembered>>,
}

#[derive(Debug)]
struct Remembered {
    token: String,
    principal: Principal,
    exp: u64,
}

fn signature(token: &str) -> &str {
    token.rsplit_once('.').map_or(token, |(_, s)| s)
}

impl VerifiedTokens {
    /// The caller a remembered token proved, if it has not expired at `now`.
    pub fn get(&self, token: &str, now: u64, leeway: u64) -> Option<Principal> {
        let tokens = self.tokens.read().expect("not poisoned");
        let found = tokens.get(signature(token))?;
        (found.token == token && now <= found.exp.saturating_add(leeway))
            .then(|| found.principal.clone())
    }

    /// Remembers a token that has just been verified, with its `exp` in whole seconds.
    pub fn insert(&self, token: &str, principal: Principal, exp: u64) {
        let mut tokens = self.tokens.write().expect("not poisoned");
        if tokens.len() >= CAPACITY {
            tokens.clear();
        }
        let remembered = Remembered {
            token: token.to_owned(),
            principal,
            exp,
        };
        tokens.insert(signature(token).to_owned(), remembered);
    }
}

//! `VerifiedTokens`: tokens that passed verification, so a client's next request with the same token skips the signature check.
use super::Principal;
use foldhash::fast::RandomState;
use std::collections::HashMap;
use std::sync::RwLock;

/// How many tokens are remembered; when full, the memory starts over.
const CAPACITY: usize = 10_000;

/// A token's signature and claims cannot change, only the clock can: a remembered token is
/// accepted again while `now <= exp + leeway`, the same rule the full check applies. Tokens
/// that were refused are never remembered.
#[derive(Debug, Default)]
pub struct VerifiedTokens {
    /// By the token's signature (short to hash); the whole token is compared on a hit. Only
    /// verified tokens are inserted, so a fast hasher is safe from chosen collisions.
    tokens: RwLock<HashMap<Box<[u8]>, Remembered, RandomState>>,
}

#[derive(Debug)]
struct Remembered {
    token: Box<[u8]>,
    principal: Principal,
    exp: u64,
}

fn signature(token: &[u8]) -> &[u8] {
    memchr::memrchr(b'.', token).map_or(token, |dot| &token[dot + 1..])
}

impl VerifiedTokens {
    /// The caller a remembered token proved, if it has not expired at `now`.
    pub fn get(&self, token: &[u8], now: u64, leeway: u64) -> Option<Principal> {
        let tokens = self.tokens.read().expect("not poisoned");
        let found = tokens.get(signature(token))?;
        (*found.token == *token && now <= found.exp.saturating_add(leeway))
            .then(|| found.principal.clone())
    }

    /// Remembers a token that has just been verified, with its `exp` in whole seconds.
    pub fn insert(&self, token: &str, principal: Principal, exp: u64) {
        let mut tokens = self.tokens.write().expect("not poisoned");
        if tokens.len() >= CAPACITY {
            tokens.clear();
        }
        let token = token.as_bytes();
        let remembered = Remembered {
            token: token.into(),
            principal,
            exp,
        };
        tokens.insert(signature(token).into(), remembered);
    }
}

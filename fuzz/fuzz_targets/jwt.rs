//! (c) JWT header and claims parsing: arbitrary tokens never panic and, without the secret,
//! are never accepted.
#![no_main]
use libfuzzer_sys::fuzz_target;
use planfiles::auth::Verifier;
use planfiles::config::AuthConfig;
use std::sync::OnceLock;

fn verifier() -> &'static Verifier {
    static V: OnceLock<Verifier> = OnceLock::new();
    V.get_or_init(|| Verifier::from_config(&AuthConfig { secret: "fuzz-secret-0123456789abcdef".into(), ..AuthConfig::default() }).unwrap())
}

fuzz_target!(|data: &[u8]| {
    let _ = verifier().verify_header(Some(data));
    if let Ok(text) = std::str::from_utf8(data) {
        assert!(verifier().verify(text).is_err(), "a token not signed with the secret was accepted");
    }
});

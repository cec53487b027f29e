//! (b) YAML text: parse, emit, parse again gives the same value; the emit never panics.
#![no_main]
use libfuzzer_sys::fuzz_target;
use planfiles::domain::yaml;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let Ok(map) = yaml::parse_mapping(text) else { return };
    // emit() itself reads its output back and refuses anything that would change.
    if let Ok(emitted) = yaml::emit(&map) {
        let again = yaml::parse_mapping(&emitted).expect("emitted YAML parses");
        assert_eq!(again, map, "round trip changed the value");
    }
});

//! (a) A PUT body, as bytes, through the same parsing the handlers use, into both documents.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(mut body) = planfiles::plans::parse_put_body(data) {
        let _ = body.file_sha();
        if let Ok(content) = body.take("content") {
            let _ = planfiles::domain::IntegrationDoc::from_request(content);
        }
        if let Ok(payload) = body.take("payload") {
            let _ = planfiles::domain::ConfigurationDoc::from_request(payload);
        }
    }
});

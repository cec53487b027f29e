//! What editing the stored text adds to a PUT of JSON content: the same durable writes
//! through storage, once with the content (the stored text edited, then checked) and once
//! with only its whole emission (the write before format-preserving edits), interleaved, for a
//! seed-sized file with comments and for a 1 MiB one.
use planfiles::domain::yaml::splice::{rewrite, rewrite_known, Rewrite};
use planfiles::domain::yaml::{self, Mapping};
use planfiles::domain::{Identity, PlanFile, RequestId, TenantId};
use planfiles::storage::{Change, CommitRequest, Committed, Preconditions, Storage};
use serde_json::{json, Value};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The demo tenant's integration file, with comments.
const SEED: &str = "\
# Cloud accounts of acme.
aws:
  # production
  - account_id: \"123456789012\"   # billing: finance
    regions:
      - us-east-1
      - eu-west-1
    type: aws
  - account_id: \"210987654321\"
    regions:
      - us-west-2
    type: aws
drata:
  user_email: compliance@acme.example  # shared inbox
  workspace: acme-prod
";

/// A file of about 1 MiB in the same shape: many accounts, each with a comment.
fn large() -> String {
    let mut text = String::from("# Cloud accounts.\naws:\n");
    let mut i = 0u64;
    while text.len() < 1 << 20 {
        text.push_str(&format!(
            "  # account {i}\n  - account_id: \"{:012}\"\n    regions:\n      - us-east-1\n      - eu-west-1\n    type: aws\n",
            100_000_000_000 + i
        ));
        i += 1;
    }
    text.push_str("drata:\n  user_email: compliance@acme.example\n  workspace: acme-prod\n");
    text
}

/// The content of `text` with `drata.workspace` set to `workspace` and the middle account's
/// first region to `region`: a changed scalar in the middle and one at the end.
fn variant(text: &str, n: usize) -> Mapping {
    let mut v = Value::Object(yaml::parse_mapping(text).unwrap());
    v["drata"]["workspace"] = json!(format!("acme-{n}"));
    let aws = v["aws"].as_array_mut().unwrap();
    let mid = aws.len() / 2;
    aws[mid]["regions"][0] = json!(["us-east-1", "us-east-2"][n % 2]);
    v.as_object().unwrap().clone()
}

fn p50(mut samples: Vec<Duration>) -> f64 {
    samples.sort();
    samples[samples.len() / 2].as_secs_f64() * 1000.0
}

/// A commit of the integration file: `bytes`, edited from the stored text into `content`
/// when given; true when it changed the file.
fn write(
    storage: &Storage,
    tenant: &TenantId,
    who: &Identity,
    bytes: Vec<u8>,
    content: Option<Arc<planfiles::domain::yaml::Mapping>>,
) -> bool {
    let req = CommitRequest {
        changes: vec![Change {
            file: PlanFile::Integration,
            bytes,
            content,
            preconditions: Preconditions::default(),
        }],
        subject: None,
        restored_from: None,
        idempotency: None,
        dry_run: false,
        author: who.clone(),
        request_id: RequestId::generate(),
        not_after: None,
    };
    match storage.commit(tenant, req).unwrap() {
        Committed::Written(outcome) => outcome.changed(),
        Committed::Replayed(_) => unreachable!("no key"),
    }
}

/// Median milliseconds of (edited, whole emission) writes of `text`'s shape, `n` each.
fn measure(storage: &Storage, name: &str, text: &str, n: usize) -> (f64, f64) {
    let who = Identity::new("Bench", "bench@example.com", "bench");
    let tenants: Vec<TenantId> = ["edit", "emit"]
        .iter()
        .map(|k| TenantId::parse(&format!("splice-{name}-{k}")).unwrap())
        .collect();
    let contents = [variant(text, 0), variant(text, 1)];
    for t in &tenants {
        storage.create_tenant(t, false).unwrap();
        // Both start from the hand-written text.
        write(storage, t, &who, text.as_bytes().to_vec(), None);
    }
    let (mut edited, mut emitted) = (Vec::new(), Vec::new());
    for i in 0..n {
        let content = &contents[i % 2];
        // Each goes first every other time: the first write after a pair may pay for more
        // of the volume's flush.
        let order = if i % 2 == 0 { [0, 1] } else { [1, 0] };
        for k in order {
            let tenant = &tenants[k];
            let started = Instant::now();
            // The handler's part, then storage. A JSON PUT's handler emits the content
            // without verifying it: storage verifies the text it stores, the splice's edit
            // (or that emission, when it falls back). The whole emission's write verifies
            // its emission, as a write before edits did.
            let edit = (k == 0).then(|| Arc::new(content.clone()));
            let bytes = match edit {
                Some(_) => yaml::emit_unverified(content),
                None => yaml::emit(content),
            }
            .unwrap()
            .into_bytes();
            assert!(write(storage, tenant, &who, bytes, edit));
            [&mut edited, &mut emitted][k].push(started.elapsed());
        }
    }
    (p50(edited), p50(emitted))
}

/// Runs the comparison and prints it; returns the targets' rows.
pub fn run(storage: &Storage, quick: bool) -> Vec<(String, String, bool)> {
    let mut rows = Vec::new();
    let big = large();
    for (name, text, n) in [
        ("seed", SEED.to_owned(), if quick { 60 } else { 400 }),
        ("1mib", big, if quick { 6 } else { 30 }),
    ] {
        let (edit, emit) = measure(storage, name, &text, n);
        let ratio = edit / emit;
        // The splice's own CPU (read back included), without the disk's noise.
        let contents = [variant(&text, 0), variant(&text, 1)];
        let mut cpu = Vec::new();
        for i in 0..n {
            let started = Instant::now();
            let made = rewrite(&text, &contents[i % 2]);
            cpu.push(started.elapsed());
            assert!(matches!(made, Rewrite::Edited(_)));
        }
        println!("{name} file: the edit itself p50 {:.3} ms of CPU", p50(cpu));
        // Where an edit's time goes: the same edit with the stored text's content known (as
        // when the last write edited it), one check parse of a text, one whole emission.
        let known = yaml::parse_mapping(&text).unwrap();
        let mut parts = [Vec::new(), Vec::new(), Vec::new()];
        for i in 0..n.min(10) {
            let started = Instant::now();
            let made = rewrite_known(&text, Some(&known), &contents[i % 2]);
            parts[0].push(started.elapsed());
            assert!(matches!(made, Rewrite::Edited(_)));
            let started = Instant::now();
            yaml::parse_client_text(&text).unwrap();
            parts[1].push(started.elapsed());
            let started = Instant::now();
            yaml::emit(&contents[i % 2]).unwrap();
            parts[2].push(started.elapsed());
        }
        let [known_edit, check, emission] = parts.map(p50);
        println!(
            "{name} file: the edit with the content known p50 {known_edit:.3} ms; one check parse {check:.3} ms; one whole emission (its check parse included) {emission:.3} ms"
        );
        println!(
            "{name} file ({} bytes), {n} durable writes each: edited p50 {edit:.3} ms, whole emission p50 {emit:.3} ms ({:+.0}%)",
            text.len(),
            (ratio - 1.0) * 100.0
        );
        if name == "seed" {
            rows.push((
                "PUT of JSON, seed-sized file: edited p50 <= 1.1x whole emission".into(),
                format!("{ratio:.2}x ({edit:.3} vs {emit:.3} ms)"),
                ratio <= 1.1,
            ));
        } else {
            rows.push((
                "PUT of JSON, 1 MiB file: edited vs whole emission (no target)".into(),
                format!("{ratio:.2}x ({edit:.1} vs {emit:.1} ms)"),
                true,
            ));
        }
    }
    rows
}

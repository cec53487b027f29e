//! `planfiles validate`: a plan file checked offline as the service checks it (the built-in rules, then the schemas), for pre-commit hooks and CI jobs.
use super::CliError;
use crate::config::Config;
use crate::domain::PlanFile;
use crate::plans::rules::{self, Refusal};
use crate::validation::{SchemaSet, Violations};
use std::path::PathBuf;

#[derive(Debug, clap::Args)]
#[command(group = clap::ArgGroup::new("file").required(true).multiple(false))]
pub struct ValidateArgs {
    /// An integration file (integrations.yml) to check.
    #[arg(long, group = "file", value_name = "FILE")]
    integration: Option<PathBuf>,
    /// A configuration file (configuration.yml) to check.
    #[arg(long, group = "file", value_name = "FILE")]
    configuration: Option<PathBuf>,
    /// The schemas folder (default: validation.schemas_dir of the config).
    #[arg(long, value_name = "DIR")]
    schemas: Option<PathBuf>,
    /// Print one JSON document instead of one line per violation.
    #[arg(long)]
    json: bool,
}

/// What the file breaks, if anything.
enum Verdict {
    Valid,
    /// Not a file of its kind at all (not UTF-8, not YAML, not a mapping, a bad shape).
    Unreadable(Vec<String>),
    Breaks(Violations),
}

/// Exit 0 when valid; 1 (after printing each violation) when not; 2 for usage or schema
/// errors.
pub fn run(config: &Config, args: ValidateArgs) -> Result<(), CliError> {
    let (path, integration) = match (args.integration, args.configuration) {
        (Some(p), None) => (p, true),
        (None, Some(p)) => (p, false),
        _ => {
            return Err(CliError::Usage(
                "give --integration FILE or --configuration FILE".into(),
            ))
        }
    };
    if let Some(dir) = args.schemas.as_ref().filter(|d| !d.is_dir()) {
        return Err(CliError::Usage(format!(
            "--schemas {}: not a folder",
            dir.display()
        )));
    }
    if let Some(named) = config.validation.required_dir().filter(|d| !d.is_dir()) {
        return Err(CliError::Usage(format!(
            "validation.schemas_dir {}: no such folder (named by the config file)",
            std::path::absolute(named)
                .unwrap_or_else(|_| named.to_owned())
                .display()
        )));
    }
    let dir = args
        .schemas
        .or_else(|| config.validation.dir().map(std::path::Path::to_owned));
    let set =
        SchemaSet::load(dir.as_deref(), config.validation.unknown_integrations).map_err(|e| {
            CliError::Usage(format!(
                "schemas {}: {e}",
                dir.clone().unwrap_or_default().display()
            ))
        })?;
    let bytes =
        std::fs::read(&path).map_err(|e| CliError::Usage(format!("{}: {e}", path.display())))?;
    let verdict = judge(&bytes, integration, &set);
    let name = path.display().to_string();
    let used = used(dir.as_deref(), set.count());
    if args.json {
        let mut out = json(&name, &verdict);
        out["schemas"] = serde_json::json!({
            "count": set.count(),
            "dir": dir.as_deref().map(|d| std::path::absolute(d).unwrap_or_else(|_| d.to_owned())),
        });
        println!("{out}");
    } else {
        match &verdict {
            Verdict::Valid => {}
            Verdict::Unreadable(errors) => {
                for e in errors {
                    println!("{name}: {e}");
                }
            }
            Verdict::Breaks(found) => {
                for v in &found.list {
                    println!(
                        "{name}:{}:{}: {}: {}",
                        v.line.unwrap_or(1),
                        v.column.unwrap_or(1),
                        if v.pointer.is_empty() {
                            "/"
                        } else {
                            &v.pointer
                        },
                        v.message
                    );
                }
                if found.omitted > 0 {
                    println!("{name}: {} more violations not listed", found.omitted);
                }
            }
        }
        // Always a last line: what the file was checked against, and the verdict.
        match &verdict {
            Verdict::Valid => println!("{name}: valid ({used})"),
            Verdict::Unreadable(_) => println!("{name}: not a valid file of its kind ({used})"),
            Verdict::Breaks(found) => println!(
                "{name}: {} violation{} ({used})",
                found.list.len() + found.omitted,
                if found.list.len() + found.omitted == 1 {
                    ""
                } else {
                    "s"
                }
            ),
        }
    }
    match verdict {
        Verdict::Valid => Ok(()),
        Verdict::Unreadable(_) | Verdict::Breaks(_) => Err(CliError::Invalid(name)),
    }
}

fn judge(bytes: &[u8], integration: bool, set: &SchemaSet) -> Verdict {
    let Ok(text) = std::str::from_utf8(bytes) else {
        return Verdict::Unreadable(vec!["the file is not UTF-8 text".into()]);
    };
    let file = if integration {
        PlanFile::Integration
    } else {
        PlanFile::Configuration
    };
    // The rules of a write of this text (a PUT of YAML text, a push), not only those a
    // stored file is read with: what passes here is what the service takes.
    match rules::text(file, text, set) {
        Ok(_) => Verdict::Valid,
        Err(Refusal::Unreadable(why)) => Verdict::Unreadable(vec![why]),
        Err(Refusal::Breaks(found)) => Verdict::Breaks(found),
    }
}

/// What a file was checked against, said in words: a check with no schema says so.
fn used(dir: Option<&std::path::Path>, count: usize) -> String {
    let shown = |d: &std::path::Path| {
        std::path::absolute(d)
            .unwrap_or_else(|_| d.to_owned())
            .display()
            .to_string()
    };
    match (dir, count) {
        (Some(d), 0) if !d.is_dir() => format!(
            "no schemas found: {} does not exist; checked the YAML rules only",
            shown(d)
        ),
        (Some(d), 0) => format!(
            "no schemas found in {}: checked the YAML rules only",
            shown(d)
        ),
        (None, _) => "no schemas configured: checked the YAML rules only".into(),
        (Some(d), n) => format!(
            "checked against {n} schema{} in {}",
            if n == 1 { "" } else { "s" },
            shown(d)
        ),
    }
}

fn json(name: &str, verdict: &Verdict) -> serde_json::Value {
    let (errors, omitted, unreadable) = match verdict {
        Verdict::Valid => (Vec::new(), 0, Vec::new()),
        Verdict::Unreadable(e) => (Vec::new(), 0, e.clone()),
        Verdict::Breaks(found) => (found.list.clone(), found.omitted, Vec::new()),
    };
    serde_json::json!({
        "file": name,
        "valid": matches!(verdict, Verdict::Valid),
        "errors": errors,
        "errors_omitted": omitted,
        "unreadable": unreadable,
    })
}

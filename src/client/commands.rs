//! The client's one-shot commands: `get`, `put`, `commit`, `log`, `diff`, `restore`, each printing text for a person or, with `-o json`, the API's JSON.
use super::{described, short, Client, ClientError};
use crate::domain::PlanFile;
use reqwest::Method;
use serde_json::{json, Value};

/// How a command prints: text for a person, or the API's JSON.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Output {
    Text,
    Json,
}

/// How a write is guarded: the blob id it was read at, or deliberately not (`--force`: the
/// integration file unguarded, the configuration file forced with its last commit).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Guard {
    IfMatch(String),
    Force,
}

/// A write's options besides its files.
#[derive(Debug, Clone, Default)]
pub struct WriteOptions {
    pub dry_run: bool,
    pub message: Option<String>,
}

impl WriteOptions {
    /// `body` with the commit's subject, when one is given.
    fn stamped(&self, mut body: Value) -> Value {
        if let Some(m) = &self.message {
            body["message"] = json!(m);
        }
        body
    }

    fn query(&self) -> &'static str {
        if self.dry_run {
            "?dry_run=true"
        } else {
            ""
        }
    }
}

/// The field a file's document is sent in.
fn field(file: PlanFile) -> &'static str {
    match file {
        PlanFile::Integration => "content",
        PlanFile::Configuration => "payload",
    }
}

fn pretty(v: &Value) -> String {
    serde_json::to_string_pretty(v).expect("JSON values serialize")
}

/// `get`: the stored text (or the API's JSON), at `main` or at `at`.
pub fn get(c: &Client, file: PlanFile, at: Option<&str>, out: Output) -> Result<(), ClientError> {
    match out {
        Output::Text => print!("{}", c.text(file, at)?.text),
        Output::Json => {
            let path = match at {
                Some(at) => format!("/plans/{}?ref={at}", file.part_name()),
                None => format!("/plans/{}", file.part_name()),
            };
            println!("{}", pretty(&c.get(&path)?));
        }
    }
    Ok(())
}

/// The last commit that changed `file`: what `--force` names to force the configuration file.
fn last_commit(c: &Client, file: PlanFile) -> Result<String, ClientError> {
    let page = c.get(&format!("/plans/{}/history?limit=1", file.part_name()))?;
    page["entries"][0]["commit_sha"]
        .as_str()
        .map(str::to_owned)
        .ok_or_else(|| ClientError::NotFound(format!("{} has no history", file.path())))
}

/// `put`: `text` as the file's new version (stored byte for byte).
pub fn put(
    c: &Client,
    file: PlanFile,
    text: &str,
    guard: &Guard,
    options: &WriteOptions,
    out: Output,
) -> Result<Value, ClientError> {
    let mut body = options.stamped(json!({ field(file): text }));
    let if_match = match (guard, file) {
        (Guard::IfMatch(blob), _) => Some(blob.as_str()),
        (Guard::Force, PlanFile::Integration) => None,
        (Guard::Force, PlanFile::Configuration) => {
            body["file_sha"] = json!(last_commit(c, file)?);
            None
        }
    };
    let path = format!("/plans/{}{}", file.part_name(), options.query());
    let answer = c.write(Method::PUT, &path, &body, if_match)?;
    report(&answer, file, options, out);
    Ok(answer)
}

/// What a write's answer says, for a person or as JSON.
fn report(answer: &Value, file: PlanFile, options: &WriteOptions, out: Output) {
    if out == Output::Json {
        println!("{}", pretty(answer));
        return;
    }
    let blob = answer["file_sha"].as_str().or(answer["sha"].as_str());
    match (options.dry_run, answer["commit_sha"].as_str()) {
        (true, _) => println!(
            "dry run: {} would be {} ({} change{} to its content); nothing was written",
            file.path(),
            blob.unwrap_or("?"),
            answer["patch"].as_array().map_or(0, Vec::len),
            if answer["patch"].as_array().map_or(0, Vec::len) == 1 {
                ""
            } else {
                "s"
            }
        ),
        (false, commit) => println!(
            "{} is {} at commit {}",
            file.path(),
            blob.unwrap_or("?"),
            commit.unwrap_or("?")
        ),
    }
}

/// The two files of a `commit`, each with its guard.
#[derive(Debug, Clone, Default)]
pub struct Parts {
    pub integration: Option<(String, Option<String>)>,
    pub configuration: Option<(String, Option<String>)>,
    pub force: bool,
}

/// `commit`: one or both files in one commit (`POST /plans/commits`).
pub fn commit(
    c: &Client,
    parts: &Parts,
    options: &WriteOptions,
    out: Output,
) -> Result<(), ClientError> {
    let mut body = json!({});
    for (file, part) in [
        (PlanFile::Integration, &parts.integration),
        (PlanFile::Configuration, &parts.configuration),
    ] {
        let Some((text, sha)) = part else { continue };
        let mut sent = json!({ field(file): text });
        match (sha, parts.force, file) {
            (Some(sha), _, _) => sent["file_sha"] = json!(sha),
            (None, true, PlanFile::Configuration) => {
                sent["file_sha"] = json!(last_commit(c, file)?)
            }
            (None, true, PlanFile::Integration) => {}
            (None, false, _) => {
                return Err(ClientError::Usage(format!(
                    "{}: give the blob id you read it at (--{}-sha) or --force",
                    file.path(),
                    match file {
                        PlanFile::Integration => "integration",
                        PlanFile::Configuration => "configuration",
                    }
                )))
            }
        }
        body[file.part_name()] = sent;
    }
    body = options.stamped(body);
    let answer = c.write(
        Method::POST,
        &format!("/plans/commits{}", options.query()),
        &body,
        None,
    )?;
    match out {
        Output::Json => println!("{}", pretty(&answer)),
        Output::Text if options.dry_run => println!("dry run: nothing was written"),
        Output::Text => println!("commit {}", answer["commit_sha"].as_str().unwrap_or("?")),
    }
    Ok(())
}

/// `log`: the file's history, newest first.
pub fn log(c: &Client, file: PlanFile, limit: u32, out: Output) -> Result<(), ClientError> {
    let page = c.get(&format!(
        "/plans/{}/history?limit={limit}",
        file.part_name()
    ))?;
    if out == Output::Json {
        println!("{}", pretty(&page));
        return Ok(());
    }
    for e in page["entries"].as_array().into_iter().flatten() {
        println!(
            "{} {} {}",
            short(e["commit_sha"].as_str().unwrap_or("")),
            e["date"].as_str().unwrap_or(""),
            described(e)
        );
    }
    Ok(())
}

/// `diff`: the key-path diff (RFC 6902) between two commits, or the line diff (`text`).
pub fn diff(
    c: &Client,
    file: PlanFile,
    from: &str,
    to: Option<&str>,
    text: bool,
    out: Output,
) -> Result<(), ClientError> {
    let mut path = format!("/plans/{}/diff?from={from}", file.part_name());
    if let Some(to) = to {
        path.push_str(&format!("&to={to}"));
    }
    let answer = c.get(&path)?;
    match (out, text) {
        (Output::Json, _) => println!("{}", pretty(&answer)),
        (Output::Text, true) => print!("{}", answer["text"].as_str().unwrap_or("")),
        (Output::Text, false) => {
            for op in answer["patch"].as_array().into_iter().flatten() {
                let value = match op.get("value") {
                    Some(v) => format!(" {v}"),
                    None => String::new(),
                };
                println!(
                    "{} {}{value}",
                    op["op"].as_str().unwrap_or(""),
                    op["path"].as_str().unwrap_or("")
                );
            }
        }
    }
    Ok(())
}

/// `restore`: the file written back as it was in `commit`, guarded by the blob id read now.
pub fn restore(
    c: &Client,
    file: PlanFile,
    commit: &str,
    options: &WriteOptions,
    out: Output,
) -> Result<(), ClientError> {
    let now = c.text(file, None)?;
    let body = options.stamped(json!({ "commit": commit }));
    let path = format!("/plans/{}/restore{}", file.part_name(), options.query());
    let answer = c.write(Method::POST, &path, &body, Some(&now.blob))?;
    report(&answer, file, options, out);
    Ok(())
}

//! The API's suites in one test binary, a module per area (one link instead of thirty): each starts the real app on port 0 over a temporary copy of `repos-fixture/`, or the real binary as a child process, and checks what users rely on (docs/ARCHITECTURE.md maps each behaviour to its module). The suites that need their own process or privileges are their own binaries: `power_loss` (FUSE, root), `block_crash` (QEMU), `shards` (HAProxy) and `console` (a browser).
#[path = "../common/mod.rs"]
mod common;

mod abuse;
mod auth;
mod bad_input;
mod cli;
mod commits;
mod commits_race;
mod concurrency;
mod docs;
mod durability;
mod events;
mod events_abuse;
mod force;
mod format_preserving;
mod full_disk;
mod git_http;
mod git_isolation;
mod history;
mod housekeeping;
mod idempotency;
mod isolation;
mod json_patch;
mod leaving_shard;
mod move_races;
mod operations;
mod plans;
mod push;
mod rebase;
mod roundtrip;
mod seed;
mod signing;
mod upkeep;
mod validation;
mod yaml_ambiguity;
mod yaml_splice;

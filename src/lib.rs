//! planfiles: per-tenant plan files kept in bare git repositories, served over HTTP.
pub mod domain;
pub mod storage;
pub mod auth;
pub mod config;
pub mod http;
pub mod cli;
pub mod telemetry;

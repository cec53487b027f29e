//! planfiles: per-tenant plan files kept in bare git repositories, served over HTTP.
pub mod auth;
pub mod cli;
pub mod cluster;
pub mod config;
pub mod descriptors;
pub mod domain;
pub mod events;
pub mod gates;
pub mod http;
pub mod metrics;
pub mod signing;
pub mod startup;
pub mod storage;
pub mod telemetry;
pub mod upkeep;
pub mod validation;
pub mod writer;

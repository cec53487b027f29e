//! planfiles: per-tenant plan files kept in bare git repositories, served over HTTP.
pub mod domain;
pub mod storage;

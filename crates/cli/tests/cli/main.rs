//! The `cordon` command's tests, one binary (each module was its own test
//! binary; one link of the dependency graph instead of nine): they drive
//! the real `cordon` binary, as root and as an unprivileged uid, on this
//! host as it is and under a container runtime's seccomp filter.

mod broker;
mod cache;
mod commands;
mod common;
#[path = "../../../backend-linux/tests/common/container_filter.rs"]
mod container_filter;
mod egress;
mod explain;
mod jobs;
mod policy;
mod review;
mod runtimes;
#[cfg(feature = "starlark")]
mod star;
mod stdio;
mod terminal;
mod tier;

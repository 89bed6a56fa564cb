//! `StdioMode::Relay` in this test process: against its own fds 0, 1, 2
//! (`own_stdio`), and 200 relayed children that must leave no thread and
//! no fd behind (`leaks`).
//!
//! One test function on purpose, running the two one after the other:
//! both swap this process's fd 0, 1 and 2 (the harness writes its
//! progress lines to fd 1), and both count this whole process's threads
//! and fds, so nothing else may run in the process meanwhile.

mod leaks;
mod own_stdio;

/// A runtime like `#[tokio::test]`'s (one thread), one per part.
fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

#[test]
fn relay_through_own_stdio_then_two_hundred_children_leak_nothing() {
    runtime().block_on(own_stdio::relay_through_the_hosts_own_stdio());
    runtime().block_on(leaks::two_hundred_relayed_children_leak_no_thread_and_no_fd());
}

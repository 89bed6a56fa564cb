//! Raw syscalls that never touch `errno`: core's, for the processes that
//! run in the host's memory beside a running host thread (the init, the
//! map writer, the idmap helper).

pub(crate) use cordon_core::sys::raw;

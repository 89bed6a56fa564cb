//! The Starlark worker as a stand-alone binary, for hosts that configure an
//! explicit worker path (`WorkerProgram::path`) and for this crate's tests.
//! Applications normally call `dispatch_worker` (re-exported as
//! `cordon_starlark::dispatch_worker`) at the top of their own `main`
//! instead.

fn main() {
    cordon_starlark_worker::dispatch_worker();
    eprintln!(
        "cordon-star-worker: started by a Starlark host (argv[1] = {}), not by hand",
        cordon_starlark_worker::WORKER_ARG
    );
    std::process::exit(2);
}

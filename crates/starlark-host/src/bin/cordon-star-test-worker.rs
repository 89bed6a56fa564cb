//! A Starlark worker that is also the conformance probe child, for this
//! crate's tests (built only with the `probe-child` feature, which the
//! tests turn on): a test admits a `SandboxRunner` with this binary as
//! probe child and then runs its workers with it. The stand-alone worker is
//! `cordon-starlark-worker`'s `cordon-star-worker`.

fn main() {
    cordon_conformance::dispatch_probe_child();
    cordon_starlark::dispatch_worker();
    eprintln!(
        "cordon-star-test-worker: started by a Starlark host (argv[1] = {}), not by hand",
        cordon_starlark::internals::WORKER_ARG
    );
    std::process::exit(2);
}

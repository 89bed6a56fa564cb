//! A Starlark worker that is also the conformance probe child, for this
//! crate's tests (built only with the `probe-child` feature, which the
//! tests turn on): a test admits a `SandboxRunner` with this binary as
//! probe child and then runs its workers with it. The stand-alone worker is
//! `cordon-starlark-worker`'s `cordon-star-worker`.
//!
//! With `--try-reach FILE ADDR DIR` first, it is a hostile worker instead:
//! it tries to read `FILE`, connect to `ADDR` and create a file in `DIR`,
//! and exits with [`REACHED_NOTHING`] plus one bit per attempt that
//! worked, so a test sees from the exit code what a worker started
//! exactly as the host starts it could reach (Starlark itself has no file
//! or socket API to try with).

use std::io::Read;

/// The exit code of a reach attempt where nothing worked; bits 1, 2 and 4
/// are added for a read, a connection and a created file.
const REACHED_NOTHING: i32 = 64;

fn try_reach(file: &str, addr: &str, dir: &str) -> i32 {
    let mut code = REACHED_NOTHING;
    let mut buf = Vec::new();
    if std::fs::File::open(file)
        .and_then(|mut f| f.read_to_end(&mut buf))
        .is_ok()
    {
        code |= 1;
    }
    let connected = addr
        .parse()
        .map(|a| std::net::TcpStream::connect_timeout(&a, std::time::Duration::from_secs(2)));
    if matches!(connected, Ok(Ok(_))) {
        code |= 2;
    }
    let made = std::path::Path::new(dir).join(format!("reached-{}", std::process::id()));
    if std::fs::File::create_new(made).is_ok() {
        code |= 4;
    }
    code
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if let [_, flag, file, addr, dir, ..] = args.as_slice() {
        if flag == "--try-reach" {
            std::process::exit(try_reach(file, addr, dir));
        }
    }
    cordon_conformance::dispatch_probe_child();
    cordon_starlark::dispatch_worker();
    eprintln!(
        "cordon-star-test-worker: started by a Starlark host (argv[1] = {}), not by hand",
        cordon_starlark::internals::WORKER_ARG
    );
    std::process::exit(2);
}

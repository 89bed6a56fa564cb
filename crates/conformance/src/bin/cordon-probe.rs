//! The probe child binary `cordon-conformance` ships, for tests and for
//! third parties certifying a backend (`ProbeExecutable::Path`).

fn main() {
    cordon_conformance::dispatch_probe_child();
    eprintln!("cordon-probe: run by the conformance suite, not by hand");
    std::process::exit(2);
}

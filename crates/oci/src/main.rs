//! The `cordon-runtime` binary: the whole command lives in the library.

fn main() -> std::process::ExitCode {
    cordon_oci::main()
}

//! The `cordon` binary: the whole command lives in the library
//! (`src/lib.rs`).

fn main() -> std::process::ExitCode {
    cordon::main()
}

//! `cordon` under another name, for `cargo xtask conformance` and
//! `cargo xtask bench`: built without the `starlark` feature, it must not
//! replace the user's `target/*/cordon` (which then lacks `cordon star`).
//! Only with the `gate` feature, so plain workspace builds skip it.

fn main() -> std::process::ExitCode {
    cordon::main()
}

//! The Starlark host's layers keep to their dependencies
//! (`docs/decisions/0011-starlark-layers.md`): the protocol and the worker
//! build without an HTTP client or TLS (no reqwest, rustls or ring, on any
//! target), the protocol without the interpreter, and no layer depends on
//! one above it. Read from `cargo tree`, as a reviewer would check it.

use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;

/// The packages `package` depends on for building it (normal edges only:
/// not its tests, not build scripts), on every target.
fn normal_dependencies(package: &str) -> BTreeSet<String> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let out = Command::new(cargo)
        .current_dir(root)
        .args(["tree", "-p", package, "-e", "normal", "--target", "all"])
        .args(["--prefix", "none", "--format", "{p}"])
        .output()
        .expect("cargo tree runs");
    assert!(
        out.status.success(),
        "cargo tree -p {package}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let names: BTreeSet<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .map(str::to_owned)
        .collect();
    assert!(
        names.contains(package),
        "cargo tree's output names the package itself: {names:?}"
    );
    names
}

/// The HTTP client and TLS stack the host's `http` and `provider` modules
/// use, which the layers below it must never pull in.
fn http_or_tls(names: &BTreeSet<String>) -> Vec<&String> {
    names
        .iter()
        .filter(|n| *n == "reqwest" || *n == "ring" || n.starts_with("rustls"))
        .collect()
}

#[test]
fn the_protocol_has_no_interpreter_and_no_http_client() {
    let deps = normal_dependencies("cordon-starlark-protocol");
    assert_eq!(http_or_tls(&deps), Vec::<&String>::new());
    for above in ["starlark", "cordon-starlark-worker", "cordon-starlark"] {
        assert!(!deps.contains(above), "the protocol depends on {above}");
    }
}

#[test]
fn the_worker_has_no_http_client() {
    let deps = normal_dependencies("cordon-starlark-worker");
    assert_eq!(http_or_tls(&deps), Vec::<&String>::new());
    assert!(
        deps.contains("starlark"),
        "control: the worker is the interpreter layer"
    );
    assert!(
        !deps.contains("cordon-starlark"),
        "the worker depends on the host above it"
    );
}

/// Control: the check sees an HTTP client where there is one, so the two
/// tests above cannot pass by reading nothing.
#[test]
fn the_host_has_the_http_client_the_layers_below_it_lack() {
    let deps = normal_dependencies("cordon-starlark");
    assert!(
        !http_or_tls(&deps).is_empty(),
        "the host's tree shows reqwest and rustls: {deps:?}"
    );
    for below in ["cordon-starlark-protocol", "cordon-starlark-worker"] {
        assert!(deps.contains(below), "the host builds on {below}");
    }
}

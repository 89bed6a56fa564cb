//! The generated tables, each rendered from the code it mirrors.

use std::fmt::Write;

use cordon_core::{LimitScope, Limits};

use crate::Table;

// `undocumented` is the harness's; the generator reads only the list.
#[allow(dead_code)]
#[path = "../cordon-bench/keys.rs"]
mod bench_keys;

/// Every table, in the order they are written.
pub fn all() -> Vec<Table> {
    let mut t = vec![
        Table {
            file: "README.md",
            name: "limits",
            text: limits(),
        },
        Table {
            file: "benches/README.md",
            name: "bench-keys",
            text: bench_keys(),
        },
        Table {
            file: "docs/policy-format.md",
            name: "policy-keys",
            text: policy_keys(),
        },
    ];
    #[cfg(target_os = "linux")]
    {
        t.push(Table {
            file: "crates/backend-linux/README.md",
            name: "host-facts",
            text: host_facts(),
        });
        t.push(Table {
            file: "crates/backend-linux/README.md",
            name: "host-pools",
            text: host_pools(),
        });
        t.push(Table {
            file: "crates/backend-linux/README.md",
            name: "default-view",
            text: default_view(),
        });
        t.push(Table {
            file: "docs/probes.md",
            name: "probes",
            text: probes::render(),
        });
    }
    t
}

fn opt<T>(v: Option<T>, f: impl Fn(T) -> String) -> String {
    v.map(f).unwrap_or_else(|| "none".into())
}

fn bytes(b: u64) -> String {
    match b {
        b if b >= 1 << 30 && b % (1 << 30) == 0 => format!("{} GiB", b >> 30),
        b if b >= 1 << 20 && b % (1 << 20) == 0 => format!("{} MiB", b >> 20),
        b if b >= 1 << 10 && b % (1 << 10) == 0 => format!("{} KiB", b >> 10),
        b => format!("{b} B"),
    }
}

fn scope(s: LimitScope) -> &'static str {
    match s {
        LimitScope::PerProcess => "per process",
        LimitScope::Sandbox => "sandbox",
    }
}

/// Core's limits: what `Limits::default()` sets, the runner's default
/// ceilings, the probes' limits, and the scope each must hold at.
fn limits() -> String {
    // Destructured without `..`: a new field fails to compile here until
    // it has a row.
    let rows = |l: &Limits| -> Vec<String> {
        let Limits {
            max_processes,
            memory_bytes,
            open_files,
            cpu_ms,
            file_size_bytes,
            disk_bytes,
            deadline,
            scopes,
        } = l;
        vec![
            opt(*max_processes, |v| v.to_string()),
            opt(*memory_bytes, bytes),
            opt(*open_files, |v| v.to_string()),
            opt(*cpu_ms, |v| format!("{} s", v as f64 / 1000.0)),
            opt(*file_size_bytes, bytes),
            opt(*disk_bytes, bytes),
            opt(*deadline, |d| format!("{} s", d.as_secs_f64())),
            format!(
                "memory {}, CPU {}, processes {}, disk {}",
                scope(scopes.memory),
                scope(scopes.cpu),
                scope(scopes.processes),
                scope(scopes.disk)
            ),
        ]
    };
    let names = [
        "`max_processes`",
        "`memory_bytes`",
        "`open_files`",
        "`cpu_ms`",
        "`file_size_bytes`",
        "`disk_bytes`",
        "`deadline`",
        "`scopes`",
    ];
    let (d, c, p) = (
        rows(&Limits::default()),
        rows(&Limits::default_ceilings()),
        rows(&Limits::probe()),
    );
    let mut s = String::from(
        "| `Limits` field | `Limits::default()` | the runner's ceiling (`Limits::default_ceilings()`) | the probes' (`Limits::probe()`) |\n|---|---|---|---|\n",
    );
    for i in 0..names.len() {
        let _ = writeln!(s, "| {} | {} | {} | {} |", names[i], d[i], c[i], p[i]);
    }
    s
}

fn bench_keys() -> String {
    let mut s = String::from("| key | what |\n|---|---|\n");
    for (keys, what) in bench_keys::KEYS {
        let keys: Vec<String> = keys.iter().map(|k| format!("`{k}`")).collect();
        let _ = writeln!(s, "| {} | {what} |", keys.join(", "));
    }
    s
}

#[cfg(target_os = "linux")]
fn host_facts() -> String {
    let mut s = String::from("| fact | what it says |\n|---|---|\n");
    for (k, what) in cordon_backend_linux::HOST_FACTS {
        let _ = writeln!(s, "| `{k}` | {what} |");
    }
    s
}

/// The backend's inventory of kernel pools shared beyond the sandbox
/// (`HOST_POOLS`), and the calls that take from none (`NO_HOST_POOL`).
#[cfg(target_os = "linux")]
fn host_pools() -> String {
    use cordon_backend_linux::{Held, HOST_POOLS, NO_HOST_POOL};
    let held = |h: Held| match h {
        Held::Runs => "run",
        Held::Refused => "refused (`EPERM`)",
        Held::Unlisted => "unlisted (`ENOSYS`)",
        Held::FlagRefused => "run; refused (`EPERM`) with the flag",
    };
    let mut s = String::from(
        "| pool | calls | tier namespaces | tier landlock, root host | tier landlock, another user | what bounds the sandbox's part | shown by |\n|---|---|---|---|---|---|---|\n",
    );
    for p in HOST_POOLS {
        let calls: Vec<String> = p.syscalls.iter().map(|c| format!("`{c}`")).collect();
        let mut namespaces = held(p.namespaces).to_string();
        if p.egress != p.namespaces {
            let _ = write!(namespaces, "; with `Network::Allow`: {}", held(p.egress));
        }
        if p.own_network != p.egress {
            let _ = write!(
                namespaces,
                "; with `Network::Namespace`: {}",
                held(p.own_network)
            );
        }
        let _ = writeln!(
            s,
            "| {} | {} | {namespaces} | {} | {} | {} | {} |",
            p.pool,
            calls.join(", "),
            held(p.landlock),
            held(p.landlock_caller_uid),
            p.bound,
            p.test
        );
    }
    s.push_str(
        "\nEvery other call a filter lets run takes from no pool shared beyond the sandbox:\n\n",
    );
    for (why, calls) in NO_HOST_POOL {
        let calls: Vec<String> = calls.iter().map(|c| format!("`{c}`")).collect();
        let _ = writeln!(s, "- {why}: {}", calls.join(", "));
    }
    s
}

#[cfg(target_os = "linux")]
mod probes {
    use std::fmt::Write;

    use cordon_conformance::{HostConditions, ProbeRegistry, POSITIVE_CONTROLS};
    use cordon_core::{Availability, Evidence, SandboxBackend};

    /// A backend that claims the egress allowlist or not: only to ask
    /// each probe whom it is required of.
    struct Claims(bool);

    impl SandboxBackend for Claims {
        fn name(&self) -> &str {
            "docs"
        }
        fn availability(&self) -> Availability {
            Availability::Available
        }
        fn claims_egress_allowlist(&self) -> bool {
            self.0
        }
        fn wrap(
            &self,
            _: &mut cordon_core::ChildCommand,
            _: &cordon_core::SandboxPolicy,
        ) -> Result<cordon_core::WrapResources, cordon_core::WrapError> {
            Err(cordon_core::WrapError::new("docs", "never spawns"))
        }
    }

    /// Each condition that adds checks on some hosts, as a host with only
    /// it, and how the table names it.
    fn conditions() -> Vec<(HostConditions, &'static str)> {
        let one = |f: &dyn Fn(&mut HostConditions)| {
            let mut c = HostConditions::default();
            f(&mut c);
            c
        };
        vec![
            (one(&|c| c.as_root = true), "a root host"),
            (one(&|c| c.several_cpus = true), "a host with several CPUs"),
            (
                one(&|c| c.sandbox_memory = true),
                "a backend holding memory sandbox-wide",
            ),
            (
                one(&|c| c.sandbox_cpu = true),
                "a backend holding CPU sandbox-wide",
            ),
            (
                one(&|c| c.sandbox_disk = true),
                "a backend holding disk sandbox-wide",
            ),
            (
                one(&|c| c.addrs = vec!["ADDR".into()]),
                "each of the host's own addresses (ADDR)",
            ),
        ]
    }

    fn evidence(e: Evidence) -> &'static str {
        match e {
            Evidence::Host => "host",
            Evidence::Child => "child",
        }
    }

    pub fn render() -> String {
        let registry = ProbeRegistry::standard();
        let mut s = String::new();
        let _ = writeln!(
            s,
            "Every probe child first runs the positive controls {} (observed by the child); \
             each probe's manifest has them besides the checks below.\n",
            POSITIVE_CONTROLS
                .iter()
                .map(|c| format!("`{c}`"))
                .collect::<Vec<_>>()
                .join(", ")
        );
        for probe in registry.iter() {
            let required = match (
                probe.required_of(&Claims(false)),
                probe.required_of(&Claims(true)),
            ) {
                (true, true) => "every backend",
                (false, true) => "a backend that claims the egress allowlist",
                (true, false) => "a backend that does not claim the egress allowlist",
                (false, false) => "no backend (run on request only)",
            };
            let base = probe.checks(&HostConditions::default());
            let _ = writeln!(
                s,
                "### {} — {}\n\nRequired of {required}. {} checks on every host.\n\n| check | observed by | made on |\n|---|---|---|",
                probe.id(),
                probe.title(),
                base.len()
            );
            for (name, e) in &base {
                let _ = writeln!(s, "| `{name}` | {} | every host |", evidence(*e));
            }
            for (host, label) in conditions() {
                for (name, e) in probe.checks(&host) {
                    if !base.contains_key(&name) {
                        let _ = writeln!(s, "| `{name}` | {} | {label} |", evidence(e));
                    }
                }
            }
            s.push('\n');
        }
        s.truncate(s.trim_end().len());
        s.push('\n');
        s
    }
}

/// The policy file format, key by key (`cordon_core::policy::REFERENCE`).
fn policy_keys() -> String {
    let mut out = String::from("| key | type | example | meaning |\n|---|---|---|---|\n");
    for k in cordon_core::policy::REFERENCE {
        out.push_str(&format!(
            "| `{}` | {} | `{}` | {} |\n",
            k.key,
            k.kind,
            k.example.replace('|', "\\|"),
            k.doc.replace('|', "\\|")
        ));
    }
    out
}

/// The Linux backend's default view: what every sandbox may read (and
/// execute, and write for the devices) without a grant.
#[cfg(target_os = "linux")]
fn default_view() -> String {
    use cordon_backend_linux as b;
    let list = |v: &[&str]| {
        v.iter()
            .map(|p| format!("`{p}`"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let mut out = String::from("| what | rights | paths |\n|---|---|---|\n");
    let rows = [
        (
            "program and library dirs",
            "read, execute",
            list(b::SYSTEM_EXEC_DIRS),
        ),
        ("files", "read", list(b::SYSTEM_READ_FILES)),
        (
            "public configuration, each only when world-readable",
            "read",
            list(b::SYSTEM_PUBLIC_FILES),
        ),
        ("directories", "read", list(b::SYSTEM_READ_DIRS)),
        (
            "`/etc` directories whose names start with",
            "read",
            list(b::SYSTEM_READ_DIR_PREFIXES),
        ),
        ("devices", "read, write, ioctl", list(b::SYSTEM_RW_DEVICES)),
        ("devices", "read", list(b::SYSTEM_READ_DEVICES)),
    ];
    for (what, rights, paths) in rows {
        let _ = writeln!(out, "| {what} | {rights} | {paths} |");
    }
    out
}

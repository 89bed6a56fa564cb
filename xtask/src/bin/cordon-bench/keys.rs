//! The stable keys of `--json`'s `metrics`, with what each measures:
//! the one list (benches/README.md's table is generated from it by
//! `cargo xtask docs`); [`undocumented`] names any metric a run emits
//! that it lacks. A key ending in `_*` stands for the row's median and
//! ratio (`_us`, `_ratio`, …). Keys are only added, never renamed.

/// Each row: the metric keys, and what they measure.
pub const KEYS: &[(&[&str], &str)] = &[
    (
        &["spawn.plain_us"],
        "`std::process::Command` spawn+wait of `/bin/true`",
    ),
    (
        &["spawn.trusted_us", "spawn.trusted_ratio"],
        "`TrustedProcessRunner` (ratio to plain)",
    ),
    (
        &["spawn.sandbox_us", "spawn.sandbox_ratio"],
        "`SandboxRunner`, native backend (ratio to plain)",
    ),
    (
        &["spawn.sandbox_to_trusted", "spawn.sandbox_to_bwrap"],
        "the sandbox row against the trusted row and bwrap",
    ),
    (
        &["spawn.sandbox_egress_us", "spawn.sandbox_egress_ratio", "spawn.egress_to_sandbox"],
        "`SandboxRunner` with an egress allowlist (its own network namespace, the listener passed out, the host's proxy started and stopped), against plain and against the sandbox without network",
    ),
    (
        &["spawn.bwrap_us", "spawn.bwrap_ratio"],
        "`bwrap --ro-bind / / --unshare-all --die-with-parent --new-session`",
    ),
    (
        &["spawn.cli_us", "spawn.cli_ratio", "spawn.cli_to_bwrap"],
        "`cordon run -- /bin/true`, the whole command, cached report",
    ),
    (
        &["spawn.sandbox_explain_us", "spawn.sandbox_explain_ratio", "spawn.explain_to_sandbox"],
        "`SandboxRunner` with `ChildSpec::explain` (the notifying filter and its thread, the audit reader where root may read), against plain and against the sandbox row",
    ),
    (
        &["spawn.cli_explain_us", "spawn.cli_explain_ratio", "spawn.cli_explain_to_cli"],
        "`cordon run --explain -- /bin/true`, the whole command, against plain and against the same without `--explain`",
    ),
    (
        &["spawn.cli_tty_us", "spawn.cli_tty_ratio", "spawn.cli_tty_to_cli"],
        "`cordon run -t -- /bin/true` on a pty (a new pty for the program, the caller's terminal raw and restored), against plain and against the same without `-t`",
    ),
    (
        &["spawn.cli_review_us", "spawn.cli_review_ratio", "spawn.cli_review_to_cli"],
        "`cordon run --rw-review DIR --review discard -- /bin/true` (a layer made, an overlay mounted over DIR, the empty layer listed and removed), against plain and against the same without",
    ),
    (
        &["layers.plain_us", "layers.fork_hook_us", "layers.fork_hook_ratio"],
        "section 1b's baseline, and std's fork alone",
    ),
    (
        &["layers.userns_landlock_seccomp_*", "layers.pid_namespace_*", "layers.ipc_namespace_*", "layers.mount_namespace_*", "layers.seccomp_allowlist_*", "layers.sandbox_limits_*", "layers.uts_namespace_*", "layers.kernel_quotas_*", "layers.all_*"],
        "the Linux backend with its layers added one at a time (`_us`, `_ratio`); `layers.all` adds the uid of its own (a lease from the pool, as root) to `layers.kernel_quotas`",
    ),
    (
        &["layers.tier_landlock_*"],
        "the Linux backend in tier landlock (no namespaces) with every layer, where the host can run it",
    ),
    (
        &["suite.total_us"],
        "the whole conformance suite (P1–P7, and P8 where the backend claims the egress allowlist)",
    ),
    (
        &["scale.c1_latency_us", "scale.c8_latency_us", "scale.c32_latency_us", "scale.c1_peak_rss_mib", "scale.c8_peak_rss_mib", "scale.c32_peak_rss_mib"],
        "sandboxed spawns at concurrency 1, 8, 32",
    ),
    (
        &["starlark.in_process_us"],
        "trivial call in process, cached package",
    ),
    (
        &["starlark.bare_call_us", "starlark.in_process_to_bare"],
        "the same entry point called on a frozen module with the bare `starlark` interpreter (fresh module and evaluator per call, nothing else); the in-process call against it",
    ),
    (
        &["starlark.call_style_*", "starlark.seed_style_*"],
        "a secret read in the entry point (cached) / at the top level (per call)",
    ),
    (
        &["starlark.reexec_*"],
        "re-executing the whole script per call",
    ),
    (
        &["starlark.warm_worker_*", "starlark.cold_worker_*", "starlark.cold_to_sandbox_spawn", "starlark.spare_ready_*"],
        "sandboxed worker: warm call, cold start, cold start against a sandboxed `/bin/true`, load on a spare",
    ),
    (
        &["starlark.pipe_round_trip_us", "starlark.warm_worker_to_pipe"],
        "the floor of a warm call: one byte to `cat` and back over pipes with the same async I/O; the warm call against it",
    ),
    (
        &["stores.sqlite_warm_us", "stores.pg_warm_*"],
        "a warm call in process whose grants and secret come from a SQLite file / from PostgreSQL on 127.0.0.1 (a throwaway cluster; ratio to the SQLite row)",
    ),
    (
        &["broker.get_*", "broker.terminated_to_direct"],
        "an HTTPS GET of 1 KiB on a connection that is up: no proxy, the egress proxy's CONNECT tunnel (ratio to no proxy), the broker terminating it with a header injected and the answer scrubbed (ratio to the tunnel; goal ≤ 1.5)",
    ),
    (
        &["broker.setup_*"],
        "the same with the connection's set-up: connect, CONNECT, the handshake(s), the first GET (the broker's ratio to the tunnel)",
    ),
    (
        &["container.runc_us", "container.cordon_*"],
        "a container's whole life (create, start, the wait for its pid, delete) of a busybox bundle running `/bin/true`: runc, and cordon-runtime (ratio to runc; goal ≤ 1.0)",
    ),
    (
        &["loop.bare_us", "loop.cordon_us", "loop.cordon_ratio"],
        "1 000 000 iterations, bare interpreter and Cordon in process",
    ),
    (
        &[
            "memory.idle_worker_rss_mib",
            "memory.idle_worker_uss_mib",
            "memory.idle_worker_pss_mib",
            "memory.host_per_warm_worker_kib",
        ],
        "an idle worker's RSS, USS (private pages) and PSS (`smaps_rollup`), the host's heap per warm worker",
    ),
];

/// The metrics of `metrics` that no row of [`KEYS`] names.
pub fn undocumented<'a>(metrics: impl IntoIterator<Item = &'a String>) -> Vec<&'a String> {
    metrics
        .into_iter()
        .filter(|m| {
            !KEYS
                .iter()
                .flat_map(|(keys, _)| keys.iter())
                .any(|k| match k.strip_suffix('*') {
                    Some(prefix) => m.starts_with(prefix),
                    None => *m == k,
                })
        })
        .collect()
}

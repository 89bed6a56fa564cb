//! `cordon run --explain` and `--explain-json`: what the sandbox refused,
//! in the CLI's words (the flag that would allow each).

use std::io::Write;

use cordon_core::explain::{escape, escape_bytes, Denial, DenialKind, Explanation, Remedy};
use cordon_core::hostfs::OutputFile;

/// The hint for one denial: the flag that allows it, or why none does.
pub(crate) fn hint(d: &Denial) -> String {
    use std::os::unix::ffi::OsStrExt;
    // What the sandbox named, escaped like the object.
    let path = |p: &std::path::Path| escape_bytes(p.as_os_str().as_bytes());
    match &d.remedy {
        Remedy::GrantReadOnly(p) => format!("grant with --ro {}", path(p)),
        Remedy::GrantReadWrite(p) => format!("grant with --rw {}", path(p)),
        Remedy::AllowHost(h) => format!("allow with --allow-host {}", escape(h)),
        Remedy::AllowRequest(r) => format!("allow with --rule '{}'", escape(r)),
        Remedy::AllowNetwork => {
            "the network is off: allow the hosts it needs with --allow-host HOST".to_string()
        }
        Remedy::RaiseLimit(field) => match field.as_str() {
            "deadline" => "raise it with --timeout".to_string(),
            "file_size_bytes" => "no flag raises it (the per-file limit)".to_string(),
            f => format!("raise it with {}", crate::run::flag_of(f)),
        },
        Remedy::GrantPermission(p) => format!("grant the package {}", escape(p)),
        Remedy::None if d.kind == DenialKind::Network => {
            "no flag allows it: only TCP to --allow-host hosts, through cordon's proxy".to_string()
        }
        Remedy::None => "no flag allows it".to_string(),
    }
}

/// One line per denial (and per source not observable) for stderr.
pub(crate) fn lines(e: &Explanation) -> Vec<String> {
    let mut out = Vec::new();
    for d in &e.denials {
        out.push(match d.kind {
            DenialKind::Limit => format!(
                "cordon: limit {}: {} (x{}) — {}",
                d.object,
                d.access,
                d.count,
                hint(d)
            ),
            _ => format!(
                "cordon: denied {} {} (x{}) — {}",
                d.access,
                d.object,
                d.count,
                hint(d)
            ),
        });
    }
    if e.more > 0 {
        out.push(format!(
            "cordon: and {} more refusals, not kept (the record keeps {} distinct ones)",
            e.more,
            cordon_core::explain::MAX_DISTINCT
        ));
    }
    if e.denials.is_empty() && e.more == 0 {
        out.push("cordon: no denials recorded".to_string());
    }
    for why in &e.unobservable {
        out.push(format!("cordon: not observable: {why}"));
    }
    out
}

/// `Remedy` as JSON, its path or host escaped like the object.
fn remedy(r: &Remedy) -> serde_json::Value {
    use std::os::unix::ffi::OsStrExt;
    let path = |p: &std::path::Path| Some(escape_bytes(p.as_os_str().as_bytes()));
    let (kind, value) = match r {
        Remedy::GrantReadOnly(p) => ("grant_read_only", path(p)),
        Remedy::GrantReadWrite(p) => ("grant_read_write", path(p)),
        Remedy::AllowHost(h) => ("allow_host", Some(escape(h))),
        Remedy::AllowRequest(r) => ("allow_request", Some(escape(r))),
        Remedy::AllowNetwork => ("allow_network", None),
        Remedy::RaiseLimit(f) => ("raise_limit", Some(escape(f))),
        Remedy::GrantPermission(p) => ("grant_permission", Some(escape(p))),
        Remedy::None => ("none", None),
    };
    serde_json::json!({"remedy": kind, "value": value})
}

/// Checks the `--explain-json` path before the program runs (a path the
/// sandbox may shape is refused, see `cordon_core::hostfs::OutputFile`);
/// [`write_json_file`] makes the file once the program has ended.
pub(crate) fn open_json(path: &std::path::Path) -> std::io::Result<OutputFile> {
    OutputFile::create(path)
}

/// Writes the explanation as a new file moved over the name
/// [`open_json`] checked.
pub(crate) fn write_json_file(e: &Explanation, out: OutputFile) -> std::io::Result<()> {
    let mut bytes = Vec::new();
    write_json(e, &mut bytes)?;
    out.commit(&bytes)
}

/// The same as JSON lines: one object per denial (`kind`, `object`,
/// `access`, `count`, `first_seen` in ms after the spawn, `hint`,
/// `remedy`), then `{"kind":"more","count":N}` when some were not kept
/// and `{"kind":"unobservable","why":…}` per source not observable.
pub(crate) fn write_json(e: &Explanation, mut to: impl Write) -> std::io::Result<()> {
    for d in &e.denials {
        let line = serde_json::json!({
            "kind": d.kind.as_str(),
            "object": d.object,
            "access": d.access,
            "count": d.count,
            "first_seen": d.first_seen_ms,
            "hint": hint(d),
            "remedy": remedy(&d.remedy),
        });
        writeln!(to, "{line}")?;
    }
    if e.more > 0 {
        writeln!(
            to,
            "{}",
            serde_json::json!({"kind": "more", "count": e.more})
        )?;
    }
    for why in &e.unobservable {
        writeln!(
            to,
            "{}",
            serde_json::json!({"kind": "unobservable", "why": why})
        )?;
    }
    to.flush()
}

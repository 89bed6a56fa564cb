//! `cordon-docs`: writes the tables of the docs that mirror code (limits
//! and their defaults, host facts, probes and their checks, bench keys)
//! from the code itself, between markers in the Markdown files:
//!
//! ```text
//! <!-- cordon-docs:begin NAME -->
//! ...generated...
//! <!-- cordon-docs:end NAME -->
//! ```
//!
//! `cargo xtask docs` builds and runs it; `--check` writes nothing and
//! exits 1 naming every table whose committed text differs (the tidy test
//! runs it so), `--root DIR` works on another checkout (tests).

mod tables;

use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// One generated table: the file it sits in (relative to the root), its
/// marker name, and its text.
pub struct Table {
    pub file: &'static str,
    pub name: &'static str,
    pub text: String,
}

fn main() -> ExitCode {
    let mut check = false;
    let mut root = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("xtask sits in the workspace root")
        .to_path_buf();
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--check" => check = true,
            "--root" => match args.next() {
                Some(r) => root = PathBuf::from(r),
                None => return usage("--root needs a directory"),
            },
            "-h" | "--help" => {
                println!("usage: cordon-docs [--check] [--root DIR]");
                return ExitCode::SUCCESS;
            }
            other => return usage(&format!("unknown argument `{other}`")),
        }
    }
    let mut stale = Vec::new();
    for table in tables::all() {
        match splice(&root, &table, check) {
            Ok(true) => {}
            Ok(false) => stale.push(format!("{} ({})", table.name, table.file)),
            Err(e) => {
                eprintln!("cordon-docs: {e}");
                return ExitCode::from(2);
            }
        }
    }
    if check && !stale.is_empty() {
        eprintln!(
            "cordon-docs: generated tables differ from the code: {}; run `cargo xtask docs` \
             (never edit them by hand)",
            stale.join(", ")
        );
        return ExitCode::from(1);
    }
    ExitCode::SUCCESS
}

fn usage(why: &str) -> ExitCode {
    eprintln!("cordon-docs: {why}\nusage: cordon-docs [--check] [--root DIR]");
    ExitCode::from(2)
}

/// Puts `table` between its markers. Returns whether the file already had
/// that text; with `check`, writes nothing.
fn splice(root: &Path, table: &Table, check: bool) -> Result<bool, String> {
    let path = root.join(table.file);
    let text = std::fs::read_to_string(&path)
        .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    let begin = format!("<!-- cordon-docs:begin {} -->\n", table.name);
    let end = format!("<!-- cordon-docs:end {} -->", table.name);
    let (Some(b), Some(e)) = (text.find(&begin), text.find(&end)) else {
        return Err(format!(
            "{} has no `{}` … `{}` markers for table `{}`",
            path.display(),
            begin.trim_end(),
            end,
            table.name
        ));
    };
    if e < b {
        return Err(format!(
            "{}: the markers of `{}` are out of order",
            path.display(),
            table.name
        ));
    }
    let start = b + begin.len();
    let mut body = table.text.clone();
    if !body.ends_with('\n') {
        body.push('\n');
    }
    if text[start..e] == body {
        return Ok(true);
    }
    if !check {
        let new = format!("{}{}{}", &text[..start], body, &text[e..]);
        std::fs::write(&path, new).map_err(|e| format!("cannot write {}: {e}", path.display()))?;
        eprintln!("cordon-docs: wrote `{}` in {}", table.name, table.file);
    }
    Ok(false)
}
